"""A sandboxed run's own objects: the object directory its agent writes, and their way into the user's store.

In the sandbox the run's own object directory (:data:`RUN_OBJECTS`, in its worktree's git directory) is mounted at
``<common>/objects`` with the user's objects a read-only alternate, so the agent can change no object of the
user's. beflow's commit for such a run is written beside them, in a quarantine (:func:`quarantined`), and what the
run's commit and the worktree's index need is brought into the repository's store by a fetch that re-hashes and
checks every object (:func:`import_objects`): the agent's bytes are never taken for what their names say.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from beflow.repository.git import CommandFailed, GitError
from beflow.repository.isolated import bare, isolated
from beflow.repository.worktrees import Worktree
from beflow.system.files import atomic_write

#: The run's own object directory, in its worktree's git directory.
RUN_OBJECTS = "beflow-objects"


def make_run_objects(objects: Path, user_objects: Path) -> Path:
    """The run's object directory ``objects`` (:data:`RUN_OBJECTS` in the worktree's git directory), made if it is
    not there, its ``info/alternates`` naming ``user_objects`` (where the sandbox shows the user's objects)."""
    info = objects / "info"
    for directory in (objects, info, objects / "pack"):
        if directory.is_symlink() or (directory.exists() and not directory.is_dir()):
            raise GitError(f"{directory} is not a directory of beflow's", fix=f"Remove {directory}.")
        directory.mkdir(mode=0o755, exist_ok=True)
    atomic_write(info / "alternates", f"{user_objects}\n", durable=False)
    return objects


def forget_run_objects_alternates(objects: Path) -> None:
    """Drop the alternates a sandbox gave the run's object directory: outside it, they name nothing of beflow's."""
    with contextlib.suppress(FileNotFoundError):
        info = objects / "info"
        if info.is_dir() and not info.is_symlink():
            (info / "alternates").unlink()


def run_objects_of(worktree: Worktree) -> Path | None:
    """The run's object directory of ``worktree``, if a sandbox made one (a directory, never a symlink)."""
    if worktree.git_dir is None:
        return None
    objects = worktree.git_dir / RUN_OBJECTS
    return objects if objects.is_dir() and not objects.is_symlink() else None


def _check_run_objects(objects: Path) -> None:
    """Every entry of the run's object directory is a directory or a regular file: git never follows a symlink
    the agent put there (to another repository's pack, say) nor opens a FIFO it made."""
    forget_run_objects_alternates(objects)
    pending = [objects]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(Path(entry.path))
                elif not stat.S_ISREG(info.st_mode):
                    raise GitError(f"the run's object directory holds {entry.path}, which is not a regular file")


@contextlib.contextmanager
def quarantined(worktree: Worktree, objects: Path | None) -> Iterator[dict[str, str] | None]:
    """The environment of beflow's git that writes objects for a run whose objects are in ``objects``: a fresh
    directory of its own, with the repository's objects and then the run's as alternates. None: no run objects,
    beflow writes into the repository's store (the objects there were checked: :mod:`beflow.repository.objectstore`)."""
    if objects is None or worktree.git_dir is None:
        yield None
        return
    _check_run_objects(objects)
    user = worktree.git_dir.parent.parent / "objects"
    with tempfile.TemporaryDirectory(prefix="beflow-import-") as scratch:
        send = Path(scratch) / "send"
        (send / "objects" / "info").mkdir(parents=True)
        (send / "refs").mkdir()
        (send / "objects" / "info" / "alternates").write_text(f"{user}\n{objects}\n", encoding="utf-8")
        bare(send, worktree.base_commit, _SEND_CONFIG)
        yield {"GIT_OBJECT_DIRECTORY": str(send / "objects")}


#: The sending side of an import reads the objects themselves only: nothing the run's directory holds beside them
#: (a commit-graph, a multi-pack-index, bitmaps) decides what is sent.
_SEND_CONFIG = "[core]\n\tcommitGraph = false\n\tmultiPackIndex = false\n[pack]\n\tuseBitmaps = false\n"


def import_objects(worktree: Worktree, env: dict[str, str], tips: Sequence[str]) -> None:
    """Bring ``tips`` and all they reach into the repository's object store from the quarantine of ``env``: a
    fetch, from beflow's isolated git (no configuration file read), whose index-pack re-hashes every object it
    receives and checks it (``fetch.fsckObjects``). What the repository has already (the run's start) is not
    sent again."""
    assert worktree.git_dir is not None
    send = Path(env["GIT_OBJECT_DIRECTORY"]).parent
    user = worktree.git_dir.parent.parent / "objects"
    for index, tip in enumerate(dict.fromkeys(tips)):
        (send / "refs" / "run").mkdir(exist_ok=True)
        (send / "refs" / "run" / str(index)).write_text(f"{tip}\n", encoding="utf-8")
    receive = send.parent / "receive"
    (receive / "refs" / "have").mkdir(parents=True)
    have = [c for c in (worktree.base_commit, worktree.tip, worktree.checked_from) if c]
    for index, commit in enumerate(dict.fromkeys(have)):
        (receive / "refs" / "have" / str(index)).write_text(f"{commit}\n", encoding="utf-8")
    bare(receive, worktree.base_commit)
    settings = [
        ("fetch.fsckObjects", "true"),
        ("protocol.ext.allow", "never"),
        ("fetch.writeCommitGraph", "false"),
        ("gc.auto", "0"),
        ("maintenance.auto", "false"),
    ]
    try:
        receiving = isolated(receive, str(send), *settings, GIT_OBJECT_DIRECTORY=str(user))
        receiving("fetch", "--no-tags", "--no-write-fetch-head", "--", "beflow", "+refs/run/*:refs/run/*")
    except CommandFailed as exc:
        raise GitError(
            "the objects the agent wrote in the sandbox could not be brought into the repository (each is "
            f"re-hashed and checked on the way): {exc.stderr}"
        ) from None
