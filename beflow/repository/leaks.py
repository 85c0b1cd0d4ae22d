"""The check of every commit a run made before its branch moves: no injected byte, no secret value, no commit beflow
would not publish."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from beflow.paths import ACPXRC
from beflow.repository.git import streamed
from beflow.repository.reading import CorruptObject, ObjectReader, ObjectTooLarge

if TYPE_CHECKING:
    from beflow.repository.git import At


@dataclass(frozen=True)
class Leak:
    """A commit made during a run that holds what beflow injected (or that beflow will not publish: ``said``)."""

    commit: str
    path: str
    what: str
    #: What is wrong with the commit, when it is not "puts ``what`` in ``path``" (after its name).
    said: str | None = None

    def describe(self, name: str | None = None) -> str:
        """What is wrong, said of ``name`` (default: ``commit <sha>``; a commit the user cannot find any more is
        named for what it was, e.g. "the agent's uncommitted work")."""
        name = name or f"commit {self.commit[:12]}"
        return f"{name} {self.said}" if self.said else f"{name} puts {self.what} in {self.path}"


_BLOB_MODES = {"100644", "100755", "120000"}
#: The largest commit object (its headers and message) beflow checks and publishes. A message is read whole to be
#: checked for secrets, so a larger one is refused unread: no person writes a message of a megabyte, and a commit
#: of 150 MB once took beflow to 607 MB.
MAX_COMMIT = 1 << 20
_SECRET = "a secret value (an injected server's or beflow's own)"


def find_leaks(worktree: At, since: str, head: str, needles: Sequence[bytes], *, managed: bool) -> list[Leak]:
    """Commits of ``since..head`` that carry injected content, or that beflow does not publish, first found first.

    ``needles`` are the injected file's bytes (found anywhere, in any file) and the secret values of the injected
    servers and of beflow itself (found in a file whose earlier version did not already hold them, in a file's
    path, or in a commit's message or headers: all of it is pushed). ``managed``: an injection happened, so any
    change to ``.acpxrc.json`` itself in a commit is a leak (during the run it held the servers).

    Every commit and blob the check reads is re-hashed as it is read (:class:`ObjectReader`): one whose bytes are
    not what its id names is a leak in itself, and a secret is exempted as already there only on the word of an
    earlier version so verified. Memory stays bounded: one commit at a time, none over :data:`MAX_COMMIT`.
    """
    wanted = [n for n in dict.fromkeys(needles) if n]
    leaks: list[Leak] = []
    with ObjectReader(worktree) as reader:
        for commit in streamed(worktree, "rev-list", "--reverse", head, f"^{since}", separator=b"\n"):
            sha = commit.decode("ascii", "replace").strip()
            if not sha:
                continue
            try:
                leaks += _commit_leaks(worktree, reader, sha, wanted, managed)
            except ObjectTooLarge:
                why = f"its message is over {MAX_COMMIT >> 20} MiB, which beflow does not publish (nor read whole)"
                leaks.append(Leak(sha, "its message", "", said=f"is unpublishable: {why}"))
            except CorruptObject as error:
                leaks.append(Leak(sha, "", "", said=f"cannot be checked: {error.message}"))
    return leaks


def _commit_leaks(worktree: At, reader: ObjectReader, commit: str, wanted: list[bytes], managed: bool) -> list[Leak]:
    raw = reader.read(commit, "commit", limit=MAX_COMMIT)
    headers, _, message = raw.partition(b"\n\n")
    leaks = []
    for text in _as_utf8(headers, message):
        if any(needle in text for needle in wanted):
            leaks.append(Leak(commit, "its message", _SECRET))
            break
    if any(needle in headers for needle in wanted):
        leaks.append(Leak(commit, "its author, committer or another header", _SECRET))
    if not wanted and not managed:
        return leaks
    fields = streamed(worktree, "diff-tree", "-r", "-m", "--root", "--no-renames", "--no-commit-id", "-z", commit)
    for meta_bytes in fields:
        meta, path_bytes = meta_bytes.decode("ascii", "replace"), next(fields, b"")
        parts = meta.lstrip(":").split()
        if len(parts) < 5 or parts[4][0] not in "AMT" or parts[1] not in _BLOB_MODES:
            continue
        old_sha, new_sha, path = parts[2], parts[3], path_bytes.decode("utf-8", "surrogateescape")
        if managed and path == ACPXRC:
            leaks.append(Leak(commit, path, "a version of .acpxrc.json, which held the injected servers"))
            continue
        if not wanted:
            continue
        if any(needle in path_bytes for needle in wanted):
            leaks.append(Leak(commit, "a file's name", "a secret value"))  # the name itself is not repeated
            continue
        try:
            found = _search(reader, new_sha, wanted)
            if found and old_sha.strip("0"):  # exempt only what a verified earlier version already held
                found -= _search(reader, old_sha, [wanted[i] for i in sorted(found)], indices=sorted(found))
        except CorruptObject as error:
            leaks.append(Leak(commit, path, "", said=f"cannot be checked: {error.message}"))
            continue
        if found:
            leaks.append(Leak(commit, path, _SECRET))
    return leaks


def _as_utf8(headers: bytes, message: bytes) -> list[bytes]:
    """The message as stored, and as UTF-8 when its ``encoding`` header names another (as a log shows it)."""
    texts = [message]
    for line in headers.split(b"\n"):
        if line.startswith(b"encoding "):
            with contextlib.suppress(LookupError, UnicodeError):
                texts.append(message.decode(line[9:].decode("ascii").strip()).encode("utf-8"))
    return texts


def _search(reader: ObjectReader, sha: str, needles: Sequence[bytes], indices: Sequence[int] | None = None) -> set[int]:
    """Indices (into ``indices``, else ``needles``) of the needles the blob ``sha`` contains; read in chunks and
    re-hashed (:class:`CorruptObject` when its bytes are not the blob ``sha``)."""
    labels = list(indices) if indices is not None else list(range(len(needles)))
    keep = max(len(n) for n in needles) - 1
    tail = b""
    found: set[int] = set()

    def take(chunk: bytes) -> None:
        nonlocal tail
        window = tail + chunk
        found.update(labels[i] for i, needle in enumerate(needles) if labels[i] not in found and needle in window)
        tail = window[-keep:] if keep > 0 else b""

    reader.stream(sha, "blob", take)
    return found
