"""The managed ``.acpxrc.json``: written around an agent session, put back exactly as it was afterwards.

acpx reads ``<cwd>/.acpxrc.json`` (plain JSON) and forwards its ``mcpServers`` to the agent's ``session/new``; it has
no other per-directory way in. :func:`managed_acpxrc` wraps a whole agent session:

1. it takes a lock for the target directory (``$BEFLOW_HOME/locks/``, so nothing extra appears in the user's
   directory) and an ``flock`` on the directory itself, which holds across ``BEFLOW_HOME`` s; a second manager
   for the same path waits, then refuses with :class:`~beflow.errors.LockedError`;
2. it journals the prior state (existed or not, exact bytes, mode, or the symlink it was) through
   :mod:`beflow.mcp.journal`, fsynced, before touching anything;
3. it writes ``.acpxrc.json`` atomically, mode 0600 (env and headers may hold secrets): ``mcpServers`` is the
   translated list and every other key of a prior file that parsed as a JSON object is kept; a prior that did
   not parse gives a fresh file;
4. in a ``finally`` (success, error, timeout, cancellation, Ctrl-C, SIGTERM) it restores: a file that did not
   exist is removed; one that did gets its exact prior bytes and mode back. If someone changed the file during
   the session, that version is first saved under ``$BEFLOW_HOME/saved/`` (for
   :data:`~beflow.system.journal.SAVED_DAYS` days: it may hold the injected secrets). Then the journal entry goes.

The restore is synchronous on purpose: there is no ``await`` in it for a cancellation to interrupt. When beflow
is killed outright (SIGKILL, power loss), the journal survives and :func:`~beflow.mcp.orphans.recover_orphans`
(``beflow restore``, and quietly every beflow command at start) puts the file back once its process is gone.
Nothing at the target is ever opened without knowing it is a regular file (a FIFO would block for ever).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import stat
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

import beflow.mcp.journal as journal
from beflow.errors import BeflowError, LockedError, NotFoundError
from beflow.mcp import orphans
from beflow.mcp.acp import AcpServer, server_names, wire
from beflow.mcp.journal import JournalEntry, Restored
from beflow.paths import ACPXRC, path_key
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, describe_kind, read_regular
from beflow.system.journal import this_process
from beflow.system.locks import waiting_for

#: Seconds a second run waits for the first to finish with the same ``.acpxrc.json`` before refusing.
DEFAULT_LOCK_TIMEOUT = 30.0


class Injection(BaseModel):
    """The handle of one managed session; ``restored`` is filled in when the session ends."""

    target: Path
    #: Names of the injected servers (for run records: never values).
    names: list[str]
    existed: bool
    #: False when a prior file existed but was not a JSON object: the session got a fresh file.
    prior_parsed: bool
    #: Keys of the prior file kept beside ``mcpServers``.
    kept_keys: list[str]
    #: Names in the prior file's own ``mcpServers``, which the injected list replaces during the session.
    replaced: list[str]
    #: Orphans of a killed beflow for the same path, restored before this session started.
    recovered: list[Restored]
    restored: Restored | None = None
    #: The bytes beflow wrote (they hold secret values): what must never reach a commit. Never serialized.
    written: bytes = Field(default=b"", exclude=True, repr=False)

    @property
    def saved(self) -> Path | None:
        """Where a version changed by someone else during the session was saved, once it has ended."""
        return self.restored.saved if self.restored else None


# --- where the state lives ------------------------------------------------------------------------------------


def _key(directory: Path) -> str:
    # Keyed by the directory, not the file: the file may be a symlink, and resolving it would give a different
    # key while beflow's regular file stands in for it. The prefix keeps these apart from other per-path locks.
    return f"acpxrc-{path_key(directory)}"


# --- reading the prior and composing the managed file --------------------------------------------------------


class _Prior(BaseModel):
    existed: bool
    mode: int | None = None
    symlink: str | None = None
    data: bytes | None = None  # the exact bytes of a regular file
    content: bytes | None = None  # what acpx would read (through a symlink too)


def _read_prior(target: Path, *, trust_link: bool) -> _Prior:
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return _Prior(existed=False)
    refusal = "Move it away (acpx expects a JSON file there), or turn MCP injection off (mcp.enabled)."
    if stat.S_ISLNK(info.st_mode):
        link = os.readlink(target)
        try:
            pointed = os.stat(target).st_mode  # (its kind only: a stat opens nothing)
        except OSError:
            return _Prior(existed=True, symlink=link)  # a dangling link: acpx sees no file
        if not stat.S_ISREG(pointed):
            what = describe_kind(pointed)
            raise BeflowError(f"{target} is a symlink to {what}; beflow will not replace it", fix=refusal)
        if not trust_link:
            # A worktree holds what its branch holds, which an agent may have written: what the link points to (a
            # file of the user's the agent cannot read) is never read into the file the agent gets.
            return _Prior(existed=True, symlink=link)
        try:
            content = read_regular(target, limit=journal.MAX_MANAGED)
        except NotRegularError as exc:
            raise BeflowError(f"{target} is a symlink to {exc.kind}; beflow will not replace it", fix=refusal) from None
        except OSError:
            content = None  # gone since, or too large to be acpx's: the session gets a fresh file
        return _Prior(existed=True, symlink=link, content=content)
    if not stat.S_ISREG(info.st_mode):
        raise BeflowError(f"{target} is not a regular file; beflow will not replace it", fix=refusal)
    try:
        data = read_regular(target, limit=journal.MAX_MANAGED, follow_symlinks=False)
    except NotRegularError:
        raise BeflowError(f"{target} is not a regular file; beflow will not replace it", fix=refusal) from None
    except FileTooLarge:
        raise BeflowError(
            f"{target} is larger than {journal.MAX_MANAGED} bytes; beflow will not replace it", fix=refusal
        ) from None
    except OSError as exc:
        raise BeflowError(
            f"{target}: cannot read it ({exc.strerror}), so it could not be put back; nothing was changed",
            fix="Make it readable, or move it away, or turn MCP injection off (mcp.enabled).",
        ) from None
    return _Prior(existed=True, mode=stat.S_IMODE(info.st_mode), data=data, content=data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # JavaScript's JSON.parse (acpx) rejects NaN and Infinity


def parse_prior(content: bytes | None) -> dict[str, Any] | None:
    """The prior file as acpx's ``JSON.parse`` would take it, when it is a JSON object; otherwise ``None``."""
    if content is None:
        return None
    try:
        value = json.loads(content.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def compose(content: bytes | None, servers: Sequence[AcpServer]) -> tuple[bytes, dict[str, Any] | None]:
    """The managed file's bytes: the prior object (when it parsed) with ``mcpServers`` set, and that prior."""
    prior = parse_prior(content)
    document = dict(prior) if prior is not None else {}
    document["mcpServers"] = wire(servers)  # replaced in place when present: other keys keep their order
    try:
        return (json.dumps(document, indent=2, ensure_ascii=False) + "\n").encode("utf-8"), prior
    except UnicodeEncodeError:  # a lone surrogate escaped in the prior: keep it escaped
        return (json.dumps(document, indent=2) + "\n").encode("utf-8"), prior


# --- the manager ----------------------------------------------------------------------------------------------


async def _acquire(
    target: Path, key: str, on_wait: Callable[[str], None] | None, timeout: float, poll: float
) -> orphans.DirectoryLocks:
    """The locks for ``target``, waiting for another beflow run to finish with it."""

    def waiting() -> None:
        if on_wait is not None:
            on_wait(
                f"waiting up to {timeout:g} s for another beflow run ({orphans.holder(key)}) to finish with {target}"
            )

    held = await waiting_for(lambda: orphans.try_lock(key, target.parent), timeout=timeout, poll=poll, on_wait=waiting)
    if held is None:
        raise LockedError(
            f"{target} is managed by another beflow run ({orphans.holder(key)}); gave up after {timeout:g} s",
            fix="Wait for that run to finish (or stop it), then try again.",
        )
    return held


def _begin(target: Path, key: str, servers: Sequence[AcpServer], trust_link: bool) -> tuple[JournalEntry, Injection]:
    """Journal the prior state, then write the managed file."""
    prior = _read_prior(target, trust_link=trust_link)
    data, parsed = compose(prior.content, servers)
    owner = this_process()
    entry = JournalEntry(
        target=target,
        pid=owner.pid,
        pid_start=owner.pid_start,
        existed=prior.existed,
        mode=prior.mode,
        symlink=prior.symlink,
        prior=None if prior.data is None else base64.b64encode(prior.data).decode("ascii"),
        written_sha256=hashlib.sha256(data).hexdigest(),
        created=dt.datetime.now(dt.UTC),
    )
    journal.record(key, entry)  # before the target is touched, so a crash from here on can be undone
    try:
        atomic_write(target, data, mode=0o600)
    except BaseException:
        journal.finish(entry, key)
        raise
    previous = parsed.get("mcpServers") if parsed is not None else None
    handle = Injection(
        target=target,
        names=server_names(servers),
        existed=prior.existed,
        prior_parsed=prior.content is None or parsed is not None,
        kept_keys=[k for k in (parsed or {}) if k != "mcpServers"],
        replaced=[str(s["name"]) for s in previous if isinstance(s, dict) and "name" in s]
        if isinstance(previous, list)
        else [],
        recovered=[],
        written=data,
    )
    return entry, handle


@asynccontextmanager
async def managed_acpxrc(
    cwd: Path,
    servers: Sequence[AcpServer] | None,
    *,
    on_wait: Callable[[str], None] | None = None,
    on_saved: Callable[[Path], None] | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
    poll_interval: float = 0.1,
    trust_link: bool = False,
) -> AsyncIterator[Injection | None]:
    """Inject ``servers`` (the translated list) into ``<cwd>/.acpxrc.json`` for the body; restore it after.

    Yields ``None`` and touches nothing (no lock, no journal) when ``servers`` is empty or ``None``. ``on_wait``
    is called once with a message when another run holds the path; after ``lock_timeout`` seconds
    :class:`LockedError` names the path and the holder's pid. ``on_saved`` gets the path of a version someone
    else wrote during the session, saved aside before the prior came back (also on ``handle.saved``).
    ``trust_link``: a symlink at the path is the user's own (in their checkout, not a worktree of a branch an agent
    wrote), and what it points to is read for the keys the session keeps; otherwise the session gets a fresh file.
    """
    if not servers:
        yield None
        return
    directory = Path(cwd).resolve()
    if not directory.is_dir():
        raise NotFoundError(f"{directory}: no such directory to inject MCP servers into")
    target = directory / ACPXRC
    key = _key(directory)
    lock = await _acquire(target, key, on_wait, lock_timeout, poll_interval)
    try:
        # Holding the lock proves no other manager is active here: a journal entry left for this path is an
        # orphan (even of a still-running process whose restore failed) and must be undone before a new one.
        recovered = orphans.recover_held(key, spare_live=False) + orphans.recover_foreign(key)
        # A file that is still an earlier run's injection, its prior lost, must not be taken for the prior.
        failed = [r for r in recovered if r.action == "failed" or r.unresolved]
        if failed:
            raise BeflowError(
                f"{target}: an earlier run's state could not be restored: {failed[0].detail}",
                fix="Fix the cause and run `beflow restore`, then try again.",
            )
        entry, handle = _begin(target, key, servers, trust_link)
        handle.recovered = recovered
        try:
            yield handle
        finally:
            # The session's own restore: there is no "left by" owner to name, as there is for an orphan.
            handle.restored = journal.finish(entry, key).model_copy(update={"pid": None})
            if handle.restored.saved is not None and on_saved is not None:
                on_saved(handle.restored.saved)
    finally:
        lock.release()
