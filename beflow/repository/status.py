"""What a checkout or a worktree holds against its commits: tracked, ignored, changed, uncommitted."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from beflow.paths import ACPXRC
from beflow.repository.git import CommandFailed, run

if TYPE_CHECKING:
    from beflow.repository.git import At


def is_tracked(where: At, relative: str) -> bool:
    """Whether git tracks ``relative`` (a path from the top of the work tree)."""
    return bool(run(where, "ls-files", "--", relative).strip())


def is_ignored(directory: Path, relative: str) -> bool:
    """Whether git ignores ``relative`` in the checkout (a tracked file is never ignored)."""
    try:
        run(directory, "check-ignore", "-q", "--", relative)
    except CommandFailed:
        return False
    return True


def is_dirty(worktree: At) -> bool:
    """Uncommitted changes besides beflow's own managed file."""
    status = run(worktree, "status", "--porcelain", "--untracked-files=all")
    lines = [line for line in status.splitlines() if line[3:] != ACPXRC]
    return bool(lines)


def checkout_status(directory: At) -> dict[str, str]:
    """Every path ``git status`` reports in a checkout (untracked files one by one) and its two-letter status.

    Read with ``-z``, so that no path is quoted or mangled; a rename is reported under its new path.
    """
    fields = run(directory, "status", "--porcelain=v1", "-z", "--untracked-files=all").split("\0")
    entries: dict[str, str] = {}
    index = 0
    while index < len(fields):
        entry = fields[index]
        index += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if "R" in code or "C" in code:
            index += 1  # the original path of a rename or copy follows
        entries[path] = code
    return entries


def changed_files(worktree: At, base: str, head: str) -> list[str]:
    """``STATUS\\tpath`` lines of what changed between two commits."""
    if base == head:
        return []
    return run(worktree, "diff", "--name-status", "--no-ext-diff", "--no-textconv", base, head).splitlines()


def diff(directory: Path, base: str, head: str) -> str:
    """The stat and the patch of what changed between two commits."""
    return run(directory, "diff", "--stat", "--patch", "--no-ext-diff", "--no-textconv", base, head).removesuffix("\n")


def lines_changed(where: At, base: str, head: str) -> int:
    """Lines added plus removed between two commits (``git diff --numstat``); a binary file counts one line."""
    total = 0
    for line in run(where, "diff", "--numstat", "--no-ext-diff", "--no-textconv", "-z", base, head).split("\0"):
        parts = line.split("\t", 2)
        if len(parts) < 3:  # (a rename's paths follow its counts, each on its own)
            continue
        added, removed, _ = parts
        total += int(added) + int(removed) if added.isdigit() and removed.isdigit() else 1
    return total
