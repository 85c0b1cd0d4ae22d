"""What of a user's repository a run must leave as it was: the checkout's files, every ref, HEAD, and every object
file that was there before (new ones may come: a run's objects)."""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from tests.support.projects import git


@dataclass(frozen=True)
class RepoState:
    """A repository's state, compared with ``==`` (objects: see :meth:`objects_kept`)."""

    refs: str
    head: bytes
    packed_refs: bytes | None
    checkout: dict[str, bytes]
    status: str
    objects: dict[str, str]

    @classmethod
    def of(cls, directory: Path) -> RepoState:
        dot_git = directory / ".git"
        packed = dot_git / "packed-refs"
        return cls(
            refs=git(directory, "for-each-ref", "--format=%(refname) %(objectname) %(symref)"),
            head=(dot_git / "HEAD").read_bytes(),
            packed_refs=packed.read_bytes() if packed.exists() else None,
            checkout=_files(directory),
            status=git(directory, "status", "--porcelain=v1", "--untracked-files=all", "--", ":!.beflow"),
            objects=_objects(dot_git / "objects"),
        )

    def same_but_new_objects(self, now: RepoState) -> list[str]:
        """What differs in ``now`` (besides object files that were not there before): empty when nothing."""
        differences = [
            name
            for name in ("refs", "head", "packed_refs", "checkout", "status")
            if getattr(self, name) != getattr(now, name)
        ]
        differences += [f"objects/{path}" for path, digest in self.objects.items() if now.objects.get(path) != digest]
        return differences


def _files(directory: Path) -> dict[str, bytes]:
    """Every file of the checkout (not ``.git``, nor beflow's records and issues) and its bytes."""
    found: dict[str, bytes] = {}
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if not (Path(root) == directory and d in (".git", ".beflow"))]
        for name in files:
            path = Path(root) / name
            found[str(path.relative_to(directory))] = (
                os.readlink(path).encode() if path.is_symlink() else path.read_bytes()
            )
    return found


def _objects(objects: Path) -> dict[str, str]:
    """Every file of the object store and a digest of its bytes and mode."""
    found: dict[str, str] = {}
    for root, _dirs, files in os.walk(objects):
        for name in files:
            path = Path(root) / name
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else os.readlink(path).encode()
            found[str(path.relative_to(objects))] = f"{stat.S_IMODE(info.st_mode):o} {hashlib.sha256(data).hexdigest()}"
    return found
