"""A run's file edits as the run page shows them: the ``diff`` content of ACP tool calls (``path``, ``oldText``,
``newText``; ``oldText`` absent for a new file) as a unified diff, bounded.

The text is the agent's: it is shown as text (the templates escape it, :func:`beflow.web.filters.plain` removes
terminal escapes), never as markup. A huge edit is summarised, not diffed: comparing two files of megabytes would
hold a request for seconds.
"""

from __future__ import annotations

import difflib
import hashlib
from collections.abc import Callable, Iterator
from typing import Any

from beflow.agent.acpx import LogLine

#: Characters of the old and new text together beyond which an edit is summarised, not diffed.
MAX_INPUT = 200_000
#: Lines of one unified diff shown, at most (a note says how many more there are).
MAX_LINES = 400
#: Characters of one diff line shown, at most.
MAX_LINE = 500


def unified(path: str, old: str | None, new: str) -> str:
    """The unified diff of one edit (``--- /dev/null`` for a new file), at most :data:`MAX_LINES` lines."""
    if len(old or "") + len(new) > MAX_INPUT:
        before = "a new file" if old is None else f"{len(old.splitlines()):,} lines"
        return f"--- {path}\n+++ {path}\n(too large to show: {before} → {len(new.splitlines()):,} lines)"
    lines = difflib.unified_diff(
        (old or "").splitlines(),
        new.splitlines(),
        fromfile="/dev/null" if old is None else path,
        tofile=path,
        lineterm="",
    )
    shown: list[str] = []
    more = 0
    for line in lines:
        if len(shown) >= MAX_LINES:
            more += 1
            continue
        shown.append(line if len(line) <= MAX_LINE else line[:MAX_LINE] + " …")
    if not shown:
        shown = [f"--- {path}", f"+++ {path}", "(no change)"]
    if more:
        shown.append(f"… [{more:,} more lines]")
    return "\n".join(shown)


def reader() -> Callable[[str, dict[str, Any]], Iterator[LogLine]]:
    """The ``content`` reader of :func:`beflow.agent.acpx.readable` that shows each distinct edit of a tool call once
    (an agent may send the same diff when the call starts and when it ends) as a ``diff`` line."""
    seen: set[tuple[str, str]] = set()

    def read(call: str, item: dict[str, Any]) -> Iterator[LogLine]:
        if item.get("type") != "diff":
            return
        path, old, new = item.get("path"), item.get("oldText"), item.get("newText")
        if not isinstance(path, str) or not isinstance(new, str) or not isinstance(old, str | None):
            return
        digest = hashlib.sha256(f"{path}\0{old}\0{new}".encode(errors="replace")).hexdigest()
        if (call, digest) in seen:
            return
        seen.add((call, digest))
        yield LogLine("diff", unified(path, old, new))

    return read
