"""One agent session of an unattended run: acpx's cold ``exec``, or, on a retry, ``prompt -s`` on the agent's
earlier ACP session (:class:`AgentSession`); and the queue owners and session files a resumed session leaves
behind, stopped and removed, with the worktree of a killed run (:func:`close_killed_runs`, :func:`forget_session`).

`exec` is one-shot: acpx starts the agent, runs one turn and stops it. To resume an agent's ACP session, acpx needs a
named session (`sessions new --name N --resume-session <id>`) and `prompt -s N`, which hands the turn to a detached
"queue owner" process that outlives the command for `--ttl` seconds. beflow keeps that owner on a short leash: a tiny
TTL, `cancel -s` and `sessions close` when the run ends, and a kill of the owner's process group (found through
acpx's queue lock, which names its pid and session) when it still lingers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from beflow.agent.acpx import Transcript
from beflow.agent.acpx_command import (
    cancel_argv,
    close_argv,
    exec_argv,
    permission_args,
    prompt_argv,
    resume_argv,
    session_name,
    tail,
)
from beflow.config import Config
from beflow.guardrails import Usage
from beflow.paths import acpx_home
from beflow.records.logs import LOG_NOTE, TRANSCRIPT_LIMIT
from beflow.records.record import RunRecord, last_on_session
from beflow.records.store import RunStore
from beflow.system import interrupts, liveness, proc
from beflow.system.files import read_regular

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager


class Confinement(Protocol):
    """What every acpx command line of a session runs in when it is confined (:class:`beflow.sandbox.box.Sandbox`):
    opened around the session, wrapping each command line, and asked after each whether it really ran inside."""

    def opened(self) -> AbstractAsyncContextManager[object]: ...

    def wrap(self, argv: Sequence[str], *, cwd: Path) -> list[str]: ...

    def check(self, result: proc.Completed) -> None: ...


def queue_owner_pids(session_id: str, home: Path) -> list[int]:
    """Pids of acpx queue owners serving ``session_id``, from acpx's queue locks under ``home/.acpx``."""
    pids = []
    for lock in (home / ".acpx" / "queues").glob("*.lock"):
        try:
            data = json.loads(read_regular(lock, limit=1 << 16, follow_symlinks=False))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("sessionId") == session_id and isinstance(data.get("pid"), int):
            pids.append(data["pid"])
    return pids


def close_killed_runs(store: RunStore, home: Path | None = None) -> list[RunRecord]:
    """Close the records of runs whose beflow was killed (:meth:`~beflow.records.store.RunStore.close_orphans`), and
    stop the acpx queue owners still serving their sessions: a resumed turn runs in acpx's detached owner, which
    outlives a SIGKILLed beflow with its agent still at work in the worktree; then remove the worktrees they left in
    the user's repository (those agents stopped first). The records closed."""
    closed = store.close_orphans(usage_of=lambda record: reported_usage(store, record))
    for record in closed:
        if not record.session:
            continue
        for pid in queue_owner_pids(record.session, home or acpx_home()):
            proc.kill_group_of(pid, marker="__queue-owner")
    kept = remove_left_worktrees(store, [record for record in closed if record.worktree])
    for record in closed:
        why = kept.get(Path(record.worktree)) if record.worktree else None
        if why is not None:
            record.worktree_kept = True
            record.stop_reason = f"{record.stop_reason}; its worktree is kept ({why}): {record.worktree}"
            store.save(record)
    return closed


def remove_left_worktrees(store: RunStore, records: list[RunRecord]) -> dict[Path, str | None]:
    """Remove the worktrees ``records`` (runs that are over) left registered in the user's repository, as a run that
    ends removes its own (:func:`~beflow.repository.worktrees.remove_left`: git pinned to the repository's
    registration, never led by the worktree's ``.git`` file); a worktree a live run of the project works in now is
    never touched. Each worktree looked at, and why it was kept (None: removed, or no worktree there any more)."""
    if not records:
        return {}
    from beflow.errors import BeflowError
    from beflow.repository import git, worktrees

    live = {r.worktree for r in store.running() if r.worktree and liveness.is_running(r.pid, r.pid_start)}
    try:
        repo = git.open_repo(store.project_dir)
    except BeflowError:
        return {}  # no repository there any more: nothing of it to put back
    # Every commit a run of the worktree named was checked by that run.
    known: dict[str, set[str]] = {}
    for record in records:
        if record.worktree:
            known.setdefault(record.worktree, set()).update(c for c in (record.base_commit, record.commit) if c)
    said: dict[Path, str | None] = {}
    with repo:
        for path, commits in known.items():
            if path in live:
                continue
            try:
                said[Path(path)] = worktrees.remove_left(repo, Path(path), commits)
            except BeflowError as error:
                said[Path(path)] = error.message
    return said


def reported_usage(store: RunStore, record: RunRecord) -> Usage | None:
    """What the agent of ``record``'s run reported it used, read back from the run's transcript (capped, as beflow
    wrote it), as the run reads it: for a run still going (its record has it only at the end), or a killed beflow's,
    which never wrote it. A run that resumed a session counts its cost from the last figure an earlier run recorded
    on it."""
    try:
        data = store.read(record.id, "transcript.jsonl", limit=TRANSCRIPT_LIMIT + LOG_NOTE)
    except OSError:  # none (killed before the agent started), or not the file beflow wrote: nothing is read
        return None
    # (kept in the record before the turn when the run resumes a session; this run's own record reported nothing)
    earlier = last_on_session(store.records([record.issue]), record.session) if record.session else None
    transcript = Transcript(usage=Usage.resuming(earlier))
    whole = data[: data.rfind(b"\n")]  # the lines written whole: the last may be on its way, or cut by a kill
    if whole:
        transcript.follow(whole)
    return None if transcript.usage.empty else transcript.usage


def forget_session(session_id: str, home: Path) -> list[Path]:
    """Remove acpx's record of a session beflow named for a retry (``~/.acpx/sessions/<id>.json`` and its
    ``.stream.ndjson``): it holds the injected MCP servers, secret values included, and serves no later run (a
    retry names the agent's session afresh)."""
    if not session_id or "/" in session_id or session_id.startswith("."):
        return []
    sessions = home / ".acpx" / "sessions"
    removed = []
    for path in (sessions / f"{session_id}.json", sessions / f"{session_id}.stream.ndjson"):
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    # The queue owner's socket directory, /tmp/acpx-<sha256(home)[:10]>: left empty once the owner is gone.
    with contextlib.suppress(OSError):
        (Path("/tmp") / f"acpx-{hashlib.sha256(str(home).encode()).hexdigest()[:10]}").rmdir()
    return removed


#: Seconds beyond ``timeout`` that beflow gives acpx to stop by itself before stopping it.
TIMEOUT_MARGIN = 15.0


class AgentSession:
    """acpx for one unattended run: a cold ``exec``, or, on a retry, ``prompt -s`` on the agent's earlier ACP session.

    Resuming needs the earlier run's session id and an agent that supports ``session/resume`` or ``session/load``;
    when acpx cannot resume, the run goes on cold and :attr:`resume_note` says why. :attr:`transcript` is the
    stream being read (a fresh one when a resume fell through to a cold start): feed it what acpx prints.
    """

    def __init__(
        self,
        config: Config,
        cwd: Path,
        *,
        env: dict[str, str] | None = None,
        unset: list[str] | None = None,
        sandbox: Confinement | None = None,
        grant: str | None = None,
    ) -> None:
        self.config = config
        #: The one permission request a person allowed for this turn (:mod:`beflow.ops.permission_asks`), if any.
        self.grant = grant
        #: ``sandbox.enabled``: every acpx command line of the session runs in it (docs/safety.md#the-sandbox).
        self.sandbox = sandbox
        self.cwd = cwd
        self.env = env or {}
        self.unset = unset or []
        self.transcript = Transcript()
        #: The earlier session this run resumed, if it did; why it could not, if it tried and could not.
        self.resumed_session: str | None = None
        self.resume_note: str | None = None

    async def run(
        self,
        text: str,
        *,
        key: str,
        prompt_file: Path,
        earlier: str | None,
        on_stdout: proc.LinesHandler,
        on_stderr: proc.LinesHandler,
        on_cold_start: Callable[[str], None] = lambda why: None,
        earlier_usage: Usage | None = None,
        resumed: tuple[str, Path] | None = None,
    ) -> proc.Completed:
        """Run the agent on ``text`` (resuming ``earlier`` when given) to the end: how acpx ended. A resume that
        fell through calls ``on_cold_start(why)`` before the cold start. ``earlier_usage``: what the last run on
        ``earlier`` reported, so that a resumed run's cost is its own (ACP's is the session's, cumulative). In a
        sandbox that cannot start, nothing runs: :class:`~beflow.sandbox.box.SandboxError` says why. ``resumed``: the
        prompt (and its file) of a resumed session instead of ``text``, which a cold start still gets whole (the
        answer to the agent's question: the session knows the rest)."""
        args = (text, key, prompt_file, earlier, on_stdout, on_stderr, on_cold_start, earlier_usage, resumed)
        if self.sandbox is None:
            return await self._run(*args)
        async with self.sandbox.opened():
            return await self._run(*args)

    def _argv(self, argv: list[str]) -> list[str]:
        return argv if self.sandbox is None else self.sandbox.wrap(argv, cwd=self.cwd)

    def _started(self, result: proc.Completed) -> proc.Completed:
        """``result``, once it is sure the sandbox started it: one that did not fails the run with its reason."""
        if self.sandbox is not None:
            self.sandbox.check(result)
        return result

    async def _run(
        self,
        text: str,
        key: str,
        prompt_file: Path,
        earlier: str | None,
        on_stdout: proc.LinesHandler,
        on_stderr: proc.LinesHandler,
        on_cold_start: Callable[[str], None],
        earlier_usage: Usage | None,
        resumed: tuple[str, Path] | None,
    ) -> proc.Completed:
        config, cwd = self.config, self.cwd
        timeout = config.timeout
        common: dict[str, Any] = {
            "cwd": cwd,
            "prompt": text,
            "prompt_file": prompt_file,
            "permissions": permission_args(config, self.grant),
            "timeout": timeout,
        }
        supervise: dict[str, Any] = {
            "cwd": cwd,
            "timeout": None if timeout is None else timeout + TIMEOUT_MARGIN,
            "on_stdout": on_stdout,
            "on_stderr": on_stderr,
            "grace": interrupts.grace(proc.DEFAULT_GRACE),
            "env": self.env,
            "unset": self.unset,
        }
        if earlier is not None:
            name = session_name(key)
            created = await proc.run(
                self._argv(resume_argv(config, cwd=cwd, name=name, session_id=earlier)),
                cwd=cwd,
                timeout=60,
                env=self.env,
                unset=self.unset,
            )
            self._started(created)
            if not created.ok:
                self.resume_note = f"could not name the earlier session: {tail(created)}; started cold"
            else:
                self.transcript.usage = Usage.resuming(earlier_usage)
                again = common if resumed is None else {**common, "prompt": resumed[0], "prompt_file": resumed[1]}
                finished = False
                try:
                    result = self._started(
                        await proc.run(self._argv(prompt_argv(config, name=name, **again)), **supervise)
                    )
                    finished = self.transcript.stop_reason is not None
                finally:
                    await self._end(name, earlier, cancel=not finished)
                if self.transcript.prompted:
                    self.resumed_session = earlier
                    self.transcript.session_id = self.transcript.session_id or earlier  # the next retry resumes it
                    return result
                why = self.transcript.acpx_error or tail(result)
                self.resume_note = f"acpx could not resume session {earlier}: {why}; started cold"
                self.transcript = Transcript()
            on_cold_start(self.resume_note)
        return self._started(await proc.run(self._argv(exec_argv(config, **common)), **supervise))

    async def _end(self, name: str, session_id: str, *, cancel: bool) -> None:
        """Leave no queue owner behind: cancel an unfinished turn, close the session, stop a lingering owner."""
        config, cwd = self.config, self.cwd
        with anyio.CancelScope(shield=True):
            if cancel:
                await proc.run(
                    self._argv(cancel_argv(config, cwd=cwd, name=name)), cwd=cwd, timeout=10, unset=self.unset
                )
            await proc.run(self._argv(close_argv(config, cwd=cwd, name=name)), cwd=cwd, timeout=15, unset=self.unset)
            for pid in queue_owner_pids(session_id, acpx_home()):
                await proc.stop_group(pid, grace=2.0)
            forget_session(session_id, acpx_home())
