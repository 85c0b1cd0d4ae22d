"""The user's own checkout, where the supervised modes run: what a session changed in it (told apart from what was
uncommitted before), one attended run at a time, and whether git would show the managed ``.acpxrc.json``."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel

from beflow.config import Project
from beflow.errors import LockedError, UsageError
from beflow.paths import ACPXRC, beflow_home, path_key
from beflow.repository import git, status
from beflow.system.files import NotRegularError, open_regular
from beflow.system.locks import NotedLock


def checkout_of(project: Project) -> Path:
    """The git checkout the project lives in: where supervised sessions run."""
    top = git.toplevel(project.directory)
    if top is None:
        raise UsageError(f"{project.directory} is not inside a git repository", fix="Run beflow in a git checkout.")
    return top.resolve()


#: path -> (two-letter git status, fingerprint of the content)
Snapshot = dict[str, tuple[str, str]]


def _fingerprint(path: Path) -> str:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(info.st_mode):
        return f"link:{os.readlink(path)}"
    if not stat.S_ISREG(info.st_mode):
        return f"other:{stat.S_IFMT(info.st_mode)}"
    digest = hashlib.sha256()
    try:  # what the agent may have swapped in since the lstat (a FIFO) is never waited on
        fd = open_regular(path, below=None, follow_symlinks=False)
    except NotRegularError as exc:
        return f"other:{exc.kind}"
    with os.fdopen(fd, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"{stat.S_IMODE(info.st_mode):o}:{digest.hexdigest()}"


def snapshot(checkout: Path, exclude: list[Path]) -> Snapshot:
    """What is uncommitted in the checkout and the content of each such file; paths under ``exclude`` (the
    local tracker's issue files, which beflow itself updates) are left out."""
    result: Snapshot = {}
    for relative, code in status.checkout_status(checkout).items():
        full = checkout / relative
        if any(full == e or e in full.parents for e in exclude):
            continue
        result[relative] = (code, _fingerprint(full))
    return result


def _letter(code: str, path: Path, untracked: str = "A") -> str:
    """``git diff --name-status``-like letter for a porcelain status; an untracked file is ``untracked`` (``A``
    for one the session made, ``?`` for one that was there before it: nobody added it)."""
    if not path.exists() and not path.is_symlink():
        return "D"
    if "R" in code:
        return "R"
    if code == "??":
        return untracked
    if "A" in code:
        return "A"
    return "M"


def compare(checkout: Path, before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """``(changed, untouched)``: files the session changed (new, modified, deleted, or put back to their committed
    content), and files that were uncommitted before it and are exactly as they were. ``STATUS\\tpath`` lines."""
    changed: list[str] = []
    untouched: list[str] = []
    for relative in sorted(set(before) | set(after)):
        was, now = before.get(relative), after.get(relative)
        if was == now and was is not None:
            untouched.append(f"{_letter(was[0], checkout / relative, untracked='?')}\t{relative}")
        else:
            code = now[0] if now is not None else ""
            changed.append(f"{_letter(code, checkout / relative)}\t{relative}")
    return changed, untouched


def refuse_read_only(project: Project, checkout: Path, mode: str, *, injects: bool) -> None:
    """Refuse a supervised run before anything is written when beflow could not write what it must: the run record
    and the claim (``.beflow``), the local tracker's issue file, and — when MCP servers are injected — the
    checkout's ``.acpxrc.json``, which would otherwise be left injected (or half-restored) for good."""
    needed = [(project.state_dir, "the run record goes there")]
    if project.config.tracker.issues_in_checkout():
        needed.append((project.tracker_dir, "the issue's status is kept there"))
    if injects:
        needed.append((checkout, f"the MCP servers are injected into its {ACPXRC} for the run"))
    for path, why in needed:
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        # os.access also answers for a read-only mount and an immutable directory, and for root.
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(
                f"{mode} cannot run here: {existing} is read-only ({why}); nothing was changed",
                fix=f"Make {existing} writable, or run the issue in a worktree: beflow --auto KEY.",
            )


def excluded(project: Project) -> list[Path]:
    return [project.tracker_dir] if project.config.tracker.issues_in_checkout() else []


class _Holder(BaseModel):
    pid: int
    host: str
    issue: str
    run: str
    since: dt.datetime


@contextlib.contextmanager
def checkout_lock(checkout: Path, issue: str, run_id: str) -> Iterator[None]:
    """Hold the checkout for one attended run; a second one is refused at once, naming the holder."""
    key = f"attend-{path_key(checkout)}"
    directory = beflow_home() / "locks"
    lock = NotedLock(directory / f"{key}.lock", directory / f"{key}.json", _Holder)
    note = _Holder(pid=os.getpid(), host=socket.gethostname(), issue=issue, run=run_id, since=dt.datetime.now(dt.UTC))
    if not lock.acquire(note):
        raise LockedError(
            f"an attended run is already going on in {checkout}: {_describe_holder(lock.note())}",
            fix="Wait for it to finish, or stop it (Ctrl-C in its terminal): one attended run per checkout at a time.",
        )
    try:
        yield
    finally:
        lock.release()


def _describe_holder(holder: _Holder | None) -> str:
    if holder is None:
        return "held by another beflow process"
    since = holder.since.astimezone().strftime("%H:%M:%S")
    return f"issue {holder.issue} (run {holder.run}), beflow pid {holder.pid} on {holder.host} since {since}"


class Changes:
    """What a session changes in the checkout: a snapshot when it starts, compared with the checkout when it ends.
    The local tracker's issue files (beflow updates them itself) are left out."""

    def __init__(self, project: Project, checkout: Path) -> None:
        self.checkout = checkout
        self._exclude = excluded(project)
        self.before = snapshot(checkout, self._exclude)

    def compare(self) -> tuple[list[str], list[str]]:
        """``(changed, untouched)``, as :func:`compare` gives them."""
        return compare(self.checkout, self.before, snapshot(self.checkout, self._exclude))


def acpxrc_notice(checkout: Path) -> str | None:
    """The warning for an ``.acpxrc.json`` that git would show (and could commit) while a run is live."""
    path = checkout / ACPXRC
    with git.open_repo(checkout) as repo:
        tracked = status.is_tracked(repo, ACPXRC)
    if tracked:
        return (
            f"{path} is tracked by git: while the run is live it holds the injected MCP servers and shows as "
            "modified; beflow puts it back afterwards. Do not commit it meanwhile."
        )
    if not status.is_ignored(checkout, ACPXRC):
        return (
            f"{path} is not git-ignored: while the run is live it shows in `git status` (beflow puts it back "
            f"afterwards). To ignore it, add this line to {checkout / '.gitignore'}:\n    {ACPXRC}"
        )
    return None


#: What beflow reads from the checkout itself (not from a run's worktree): uncommitted, it still counts.
_READ_FROM_THE_CHECKOUT = (".beflow/", ".mcp.json", ".acpxrc.json")


def invisible_changes(project: Project) -> str | None:
    """A note for uncommitted changes in the checkout, which no unattended run sees: each starts from
    ``worktrees.base`` in a worktree of its own. None when there are none (or no repository to look at)."""
    try:
        entries = status.checkout_status(project.directory)
    except Exception:  # no repository, or git failing: the checks before the run say what is wrong
        return None
    top = git.toplevel(project.directory) or project.directory
    prefix = project.directory.resolve().relative_to(top.resolve()).as_posix() if project.directory != top else ""
    changed = [
        path
        for path in entries
        if not path.removeprefix(f"{prefix}/" if prefix else "").startswith(_READ_FROM_THE_CHECKOUT)
    ]
    if not changed:
        return None
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return (
        f"{len(changed)} uncommitted change{'s' if len(changed) != 1 else ''} in {top} ({shown}) will not be seen "
        f"by the agent: each run starts from worktrees.base ({project.config.worktrees.base}) in a worktree of its "
        "own. Commit them first to include them."
    )
