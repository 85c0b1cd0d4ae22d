"""A branch's change against its base, file by file, as a reviewer reads it (the dashboard's review of a run's work).

Which files changed comes from ``git diff-tree`` between the fork point and the tip (names and object ids); what
each file held comes from :class:`~beflow.repository.reading.ObjectReader`, which re-hashes every blob it reads:
the agent could have written into the object store its worktree shares, and bytes that are not the object their
id names are never shown as the branch's. Nothing is read through the worktree's files. Bounded: so many files,
so many lines, blobs up to a size.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from beflow.repository import git, refs
from beflow.repository.reading import CorruptObject, ObjectReader, ObjectTooLarge

#: Files shown, at most (a note says how many more changed).
MAX_FILES = 100
#: Bytes of one version of a file read, at most: a larger one is named, not diffed.
MAX_BLOB = 512 * 1024
#: Lines of one file's diff shown, at most.
MAX_LINES = 2000
#: Lines of context around each change.
CONTEXT = 3

_BLOB_MODES = {"100644", "100755", "120000"}
_ZERO = frozenset("0")


@dataclass(frozen=True)
class Line:
    """One line of a hunk: ``add``, ``del`` or ``same``, its numbers in the old and new file, its text."""

    kind: Literal["add", "del", "same"]
    old: int | None
    new: int | None
    text: str


@dataclass
class Hunk:
    header: str
    lines: list[Line] = field(default_factory=list)


@dataclass
class FileChange:
    """One changed file: ``added``, ``deleted`` or ``modified``; its hunks, or a note saying why there are none
    (binary, too large, unreadable)."""

    path: str
    status: Literal["added", "deleted", "modified"]
    hunks: list[Hunk] = field(default_factory=list)
    note: str | None = None
    added: int = 0
    removed: int = 0


@dataclass
class BranchDiff:
    branch: str
    base: str
    tip: str
    files: list[FileChange]
    more: int = 0


def branch_diff(directory: Path, branch: str, base: str, tip: str | None = None) -> BranchDiff | None:
    """``branch``'s change (or commit ``tip``'s) against its fork from ``base`` (``worktrees.base``); None when the
    branch does not exist (yet)."""
    with git.open_repo(directory) as repo:
        since = refs.resolve_base(repo, base)
    tip = tip or refs.branch_tip(directory, branch)
    if tip is None:
        return None
    try:
        fork = git.run(directory, "merge-base", since, tip).strip() or since
    except git.CommandFailed:
        fork = since  # (no common history: the whole base is the other side)
    return _between(directory, branch, fork, tip)


@functools.lru_cache(maxsize=16)
def _between(directory: Path, branch: str, fork: str, tip: str) -> BranchDiff:
    """The change from ``fork`` to ``tip``, kept for the next reader: commits are named by their content, so the
    same two ids are the same change (an issue's page, read again on each of its events, diffs it once). Callers
    do not change what it returns."""
    fields = git.streamed(directory, "diff-tree", "-r", "--no-renames", "-z", fork, tip)
    files: list[FileChange] = []
    more = 0
    with ObjectReader(directory) as reader:
        for meta_bytes in fields:
            meta, path = meta_bytes.decode("ascii", "replace"), next(fields, b"").decode("utf-8", "replace")
            parts = meta.lstrip(":").split()
            if len(parts) < 5:
                continue
            if len(files) >= MAX_FILES:
                more += 1
                continue
            files.append(_change(reader, path, parts))
    return BranchDiff(branch=branch, base=fork, tip=tip, files=files, more=more)


def _change(reader: ObjectReader, path: str, parts: list[str]) -> FileChange:
    old_mode, new_mode, old_sha, new_sha = parts[:4]
    status: Literal["added", "deleted", "modified"] = (
        "added" if set(old_sha) <= _ZERO else "deleted" if set(new_sha) <= _ZERO else "modified"
    )
    change = FileChange(path=path, status=status)
    if (status != "added" and old_mode not in _BLOB_MODES) or (status != "deleted" and new_mode not in _BLOB_MODES):
        change.note = "not a file (a submodule)"
        return change
    try:
        old = b"" if status == "added" else reader.read(old_sha, "blob", limit=MAX_BLOB)
        new = b"" if status == "deleted" else reader.read(new_sha, "blob", limit=MAX_BLOB)
    except ObjectTooLarge:
        change.note = f"too large to show (over {MAX_BLOB // 1024} KiB)"
        return change
    except CorruptObject as error:
        change.note = f"not shown: {error.message}"
        return change
    if b"\0" in old[:8192] or b"\0" in new[:8192]:
        change.note = "a binary file"
        return change
    change.hunks, change.added, change.removed = hunks(_lines(old), _lines(new))
    return change


def _lines(data: bytes) -> list[str]:
    return data.decode("utf-8", "replace").splitlines()


def hunks(old: list[str], new: list[str]) -> tuple[list[Hunk], int, int]:
    """The hunks that turn ``old`` into ``new`` (:data:`CONTEXT` lines around each change, at most
    :data:`MAX_LINES` lines in all), and how many lines were added and removed."""
    found: list[Hunk] = []
    shown = added = removed = 0
    matcher = difflib.SequenceMatcher(None, old, new)
    for group in matcher.get_grouped_opcodes(CONTEXT):
        first, last = group[0], group[-1]
        header = f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@"
        hunk = Hunk(header)
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                hunk.lines += [Line("same", i1 + k + 1, j1 + k + 1, old[i1 + k]) for k in range(i2 - i1)]
                continue
            if tag in ("replace", "delete"):
                hunk.lines += [Line("del", i + 1, None, old[i]) for i in range(i1, i2)]
                removed += i2 - i1
            if tag in ("replace", "insert"):
                hunk.lines += [Line("add", None, j + 1, new[j]) for j in range(j1, j2)]
                added += j2 - j1
        if shown < MAX_LINES:
            hunk.lines = hunk.lines[: MAX_LINES - shown]
            shown += len(hunk.lines)
            found.append(hunk)
    return found, added, removed


def _range(start: int, end: int) -> str:
    """A hunk's range as unified diffs write it: an empty one starts at the line before it (``-0,0``: a new file)."""
    return f"{start + 1 if end > start else start},{end - start}"
