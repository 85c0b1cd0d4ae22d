"""How the pages' templates say things: text of an agent's or a tracker's as plain text, times, durations and
what runs used (the filters of :func:`environment`). Escaping for HTML is the templates' (autoescape) and, on the
live page, the browser's ``textContent``."""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from beflow import guardrails
from beflow.web import api
from beflow.web import markdown as rendering

TEMPLATES = Path(__file__).parent / "templates"
#: Characters of one text shown, at most: a huge line is cut, with a note.
MAX_TEXT = 4000
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def environment() -> Environment:
    """The pages' templates, every value escaped, with the filters below."""
    templates = Environment(
        loader=FileSystemLoader(TEMPLATES),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    templates.filters["plain"] = plain
    templates.filters["when"] = when
    templates.filters["seconds"] = seconds
    templates.filters["usage"] = usage_text
    templates.filters["totals"] = totals_text
    templates.filters["query"] = query
    templates.filters["elide"] = elide
    templates.filters["moment"] = moment
    templates.filters["used_line"] = used_line
    templates.filters["newest"] = newest
    templates.filters["markdown"] = markdown
    return templates


def plain(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as plain text for a page: terminal escape sequences and control characters removed, a huge text
    cut (escaping for HTML is the templates' and the browser's ``textContent``)."""
    value = _CONTROL.sub("", _ANSI.sub("", str(text)))
    if len(value) > limit:
        value = value[:limit] + f"… [{len(value) - limit} more characters]"
    return value


def newest(text: object, limit: int = MAX_TEXT) -> str:
    """The end of a long text (a lane's tail shows a long message's newest words), marked where it was cut."""
    value = plain(text, limit=len(str(text)))
    return "…" + value[-limit:] if len(value) > limit else value


def when(moment: float | None) -> str:
    """``14:03:27``, the local time of a moment (seconds since the epoch); ``-`` for none."""
    return time.strftime("%H:%M:%S", time.localtime(moment)) if moment else "-"


#: Characters of an issue's body or comment rendered, at most (a longer one is cut first, with a note).
MAX_MARKDOWN = 20_000


def markdown(text: object, limit: int = MAX_MARKDOWN) -> Markup:
    """An issue's body or comment as inert HTML (:mod:`beflow.web.markdown`), from its plain text (:func:`plain`)."""
    return rendering.markdown(plain(text or "", limit))


def moment(value: dt.datetime | float | None) -> str:
    """``2026-12-06 14:03:27``, a moment in local time to the second (a record's time, a process's start); ``-``
    for none."""
    if value is None:
        return "-"
    if isinstance(value, dt.datetime):
        value = value.timestamp()
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))


#: Characters of a value shown before it is elided (the rest on demand).
ELIDE_AT = 120


def elide(text: object, keep: int = ELIDE_AT) -> Markup:
    """A long value cut to ``keep`` characters with a visible marker, the whole value one click away (a
    ``<details>``: no script)."""
    value = plain(text)
    if len(value) <= keep:
        return Markup(escape(value))
    head = escape(value[:keep])
    whole = escape(value)
    return Markup(
        f'<details class="elided"><summary>{head}<span class="more-marker">… ({len(value) - keep:,} more '
        f'characters: show all)</span></summary><span class="whole">{whole}</span></details>'
    )


def seconds(value: float | None) -> str:
    """A duration as a glance takes it: ``45s``, ``12m``, ``3.5h``."""
    if value is None:
        return "-"
    value = max(0.0, float(value))
    if value < 120:
        return f"{value:.0f}s"
    if value < 7200:
        return f"{value / 60:.0f}m"
    return f"{value / 3600:.1f}h"


def query(values: dict[str, object]) -> str:
    """A link's query string of the values that are set (``status=ready&page=2``)."""
    return urlencode({k: v for k, v in values.items() if v})


def usage_text(usage: api.Usage | None) -> str:
    """``context 2,500/100,000 · 3,400 tokens · 0.40 USD``: what the agent reported, and nothing else."""
    if usage is None:
        return ""
    parts = []
    if usage.context_used is not None:
        window = f"/{usage.context_size:,}" if usage.context_size else ""
        parts.append(f"context {usage.context_used:,}{window}")
    if usage.tokens is not None:
        parts.append(f"{usage.tokens:,} tokens")
    if usage.cost is not None:
        parts.append(f"{usage.cost:.2f} {usage.currency or ''}".strip())
    return " · ".join(parts)


def totals_text(used: api.UsageTotals | None) -> str:
    """``12,345 tokens, 0.42 USD over 3 runs`` (as ``beflow runs`` says it)."""
    if used is None:
        return ""
    return guardrails.Totals(used.runs, used.reported, used.tokens, dict(used.cost)).describe()


def used_line(state: api.State) -> str:
    """The health panel's usage: the watch's finished runs (when it has any) and what its running lanes reported
    so far — agreeing with the lanes, never "no usage reported over 0 runs" while lanes report tokens. Empty when
    there is nothing to say."""
    parts = []
    used = state.totals.used
    if used is not None and used.runs:
        parts.append(totals_text(used))
    reporting = [lane.usage.tokens for lane in state.lanes if lane.usage is not None and lane.usage.tokens is not None]
    if reporting:
        lanes = f"{len(reporting)} running run" + ("s" if len(reporting) != 1 else "")
        parts.append(f"{sum(reporting):,} tokens so far in {lanes}")
    return "; ".join(parts)
