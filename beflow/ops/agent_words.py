"""What an agent's own words may do: masked before beflow writes them down, inert where its tracker would act on
them, and its follow-ups unable to queue work for itself (docs/safety.md).

An agent's words are masked before beflow writes them down: the progress lines (``run.progress``), comments and
follow-ups an agent sends through beflow's MCP server go to ``progress.jsonl``, the record, ``runs show``, MCP
read-backs and the issue — a public comment, on GitHub — with every secret of its run masked, as transcripts are.

The server that takes them may be another process than the run's: it knows the injected servers' values from the
run's own injected ``.acpxrc.json`` (the file the agent's servers came from) and beflow's own secrets from its
environment, when it holds them. Through the run's channel (``mcp.self``) the words are masked in the run's own
process, with every secret the run holds: a tracker's token ``gh auth token`` gave too. The run's process masks
the progress file again when the run ends, with every secret it holds
(:meth:`beflow.run.lifecycle.Session.mask_record`).
"""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING

from beflow.ops.operations import Context
from beflow.trackers.issue import DEFAULT_PRIORITY

if TYPE_CHECKING:  # loaded when an agent bound to a run speaks: every other command starts without them
    from beflow.mcp.acp import AcpServer
    from beflow.mcp.redact import Redactor
    from beflow.records.record import RunRecord

#: The largest injected file read for its values (the injected set of a big ``.mcp.json`` stays well below).
MAX_INJECTED = 8 << 20


def injected_servers(record: RunRecord) -> list[AcpServer]:
    """The servers injected into the run's ``.acpxrc.json`` (in its worktree, or the checkout of a supervised run),
    beflow's own left out; none when the file is not there or not the run's."""
    from pydantic import ValidationError

    from beflow.mcp.acp import AcpRemote, AcpStdio
    from beflow.mcp.own import is_own_server
    from beflow.paths import ACPXRC
    from beflow.system.files import read_regular

    place = record.worktree or record.checkout
    if not place or not record.mcp_servers:
        return []
    try:  # the agent's worktree: what is in the file's place is read only if it is a file, never through a link
        document = json.loads(read_regular(Path(place) / ACPXRC, limit=MAX_INJECTED, below=Path(place)))
    except (OSError, ValueError):
        return []
    entries = document.get("mcpServers") if isinstance(document, dict) else None
    servers: list[AcpServer] = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("name") not in record.mcp_servers:
            continue
        try:
            server: AcpServer = (AcpStdio if "command" in entry else AcpRemote).model_validate(entry)
        except ValidationError:
            continue
        if not is_own_server(server):
            servers.append(server)
    return servers


def _redactor(context: Context) -> Redactor:
    from beflow.agent.agent_env import held_secrets
    from beflow.mcp.redact import Redactor
    from beflow.records.record import RunStore

    record = None
    if context.bound_run is not None:
        try:
            record = RunStore(context.project.directory).load(context.bound_run)  # this run's, never a prefix's
        except (OSError, ValueError):
            record = None
    servers = injected_servers(record) if record is not None else []
    # Every secret the run holds, when the run's channel hands them over (a token from `gh auth token` is in no
    # variable); else those of beflow's environment.
    secrets = context.secrets
    return Redactor(servers, secrets=list(secrets) if secrets is not None else held_secrets(context.project.config))


def agent_words(context: Context, text: str) -> str:
    """``text`` from an agent bound to a run, with the run's secrets masked and no mark of beflow's in it (a
    ``<!-- beflow:rework -->`` of its own would start a review round: :func:`beflow.trackers.quoting.unmarked`); anyone
    else's as it is."""
    if context.bound_issue is None and context.bound_run is None:
        return text
    from beflow.mcp.redact import Redactor
    from beflow.trackers.quoting import unmarked

    redact = context.cache.get("agent words")
    if not isinstance(redact, Redactor):
        redact = context.cache["agent words"] = _redactor(context)
    return unmarked(redact.text(text))


def posted_words(context: Context, text: str) -> str:
    """What an agent bound to a run posts to its tracker (a comment, a follow-up's title and body, a status note):
    :func:`agent_words`, made inert by the tracker (:meth:`~beflow.trackers.base.Tracker.inert`: on GitHub, quoted so
    that it pings nobody and links or closes no issue; the local tracker keeps the words as they are)."""
    if context.bound_issue is None and context.bound_run is None:
        return text
    return context.open_tracker().inert(agent_words(context, text))


# -- an agent's follow-ups ---------------------------------------------------------------------------------------------
# What an agent may say about the issues it files (docs/safety.md: an agent cannot queue work for itself).
#
# An agent's follow-up is filed ``open``: a person decides when it is ready and how urgent it is. Labels are how a
# tracker keeps status and priority (GitHub: ``beflow:ready``, ``priority:0``), so an agent's labels that read as a
# status or a priority are dropped, whatever their spelling: compared case-folded, stripped and in Unicode's NFKC form
# (GitHub matches label names without regard to case; ``ｐｒｉｏｒｉｔｙ:０`` is ``priority:0`` once normalized), and
# a priority more urgent than the default becomes the default.

#: Prefixes of labels that carry a status on some tracker: beflow's own, whatever the project configured.
STATUS_PREFIXES = ("beflow:", "beflow/", "beflow-", "status:")
_PRIORITY = re.compile(r"^p(?:rio(?:rity)?)?\s*[:=/\-_ ]?\s*\d+$")


def fold(label: str) -> str:
    """A label as trackers compare it: NFKC, case-folded, without surrounding (or inner runs of) white space, and
    without the invisible characters a lookalike would hide in it."""
    text = unicodedata.normalize("NFKC", label).casefold()
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Cc"))
    return re.sub(r"\s+", " ", text).strip()


def is_status_or_priority(label: str, status_prefix: str | None = None) -> bool:
    """Whether ``label`` reads as a status (``beflow:ready``) or a priority (``priority:0``) on some tracker."""
    folded = fold(label)
    prefixes = (*STATUS_PREFIXES, *((fold(status_prefix),) if status_prefix else ()))
    return folded.startswith(prefixes) or bool(_PRIORITY.match(folded))


def agent_follow_up(
    labels: list[str], priority: int, status_prefix: str | None = None
) -> tuple[list[str], int, list[str]]:
    """The labels and priority an agent's follow-up is filed with, and the labels dropped (status, priority)."""
    kept = [label for label in labels if not is_status_or_priority(label, status_prefix)]
    dropped = [label for label in labels if label not in kept]
    return kept, max(priority, DEFAULT_PRIORITY), dropped
