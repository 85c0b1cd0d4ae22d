"""How the pages' templates say things: text of an agent's or a tracker's as plain text, times, durations and
what runs used (the filters of :func:`environment`). Escaping for HTML is the templates' (autoescape) and, on the
live page, the browser's ``textContent``."""

from __future__ import annotations

import re
import time
from pathlib import Path
from urllib.parse import urlencode

from jinja2 import Environment, FileSystemLoader, select_autoescape

from beflow import guardrails
from beflow.web import api

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
    return templates


def plain(text: object, limit: int = MAX_TEXT) -> str:
    """``text`` as plain text for a page: terminal escape sequences and control characters removed, a huge text
    cut (escaping for HTML is the templates' and the browser's ``textContent``)."""
    value = _CONTROL.sub("", _ANSI.sub("", str(text)))
    if len(value) > limit:
        value = value[:limit] + f"… [{len(value) - limit} more characters]"
    return value


def when(moment: float | None) -> str:
    """``14:03:27``, the local time of a moment (seconds since the epoch); ``-`` for none."""
    return time.strftime("%H:%M:%S", time.localtime(moment)) if moment else "-"


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
