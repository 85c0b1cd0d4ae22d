"""Where an unattended run's agent works: a worktree of ``beflow/<key>``, the files it is given, the sandbox, the hooks
around it.

:class:`Workspace` makes the worktree (HEAD detached, so that only beflow moves the branch), copies the included
files into it, keeps the managed file out of what git stages there while it is injected, opens the run's sandbox
(:mod:`beflow.sandbox`, when the run is sandboxed: :mod:`beflow.sandbox.choice`), runs the project's hooks in it —
as confined as the agent: a hook runs what the agent wrote (``make lint``, ``./check.sh``) — with their output
capped and masked in the run record, and removes the worktree once the run's work is delivered — or keeps it, and
says so, when removing it could lose the agent's work.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from beflow.agent import agent_env
from beflow.config import Hook
from beflow.errors import BeflowError
from beflow.mcpserver.channel import RunChannel
from beflow.repository import excludes, git, refs, repoguard, worktrees
from beflow.run.lifecycle import Session
from beflow.sandbox import choice
from beflow.sandbox.box import Sandbox, SandboxError
from beflow.system import interrupts, proc, threads

#: Bytes kept of each hook's output; beyond, a note says what was left out.
HOOK_LOG_LIMIT = 4 << 20
#: What a sandboxed hook's log says first: why what it tried outside its worktree failed.
SANDBOXED = (
    "its worktree writable, the system and the checkout read-only, $HOME and /tmp empty, no network but beflow's "
    "proxy to the allowed hosts (beflow docs safety)"
)


class Workspace:
    """The worktree of one run and the hooks that run in it."""

    def __init__(self, session: Session, repo: Any) -> None:
        self.session = session
        self.repo = repo
        self.config = session.project.config
        self.worktree: worktrees.Worktree | None = None
        #: The environment of everything that runs in the worktree while the file is injected (acpx, hooks): it
        #: keeps ``.acpxrc.json`` out of what git stages there.
        self.git_env: dict[str, str] = {}
        #: What acpx, the agent and the hooks do not get of beflow's environment (docs/safety.md).
        self.withheld = agent_env.for_agent(self.config).unset
        #: Whether the run is sandboxed, and once the worktree is made, its sandbox: open until the run ends
        #: (:meth:`held`), every hook and the agent's session run in it.
        self.sandboxed = False
        self.sandbox: Sandbox | None = None
        self._open = contextlib.AsyncExitStack()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[Workspace]:
        """The run is the body: what the workspace opened for it (its sandbox) is closed when the body ends, after
        ``before_remove``, however it ends."""
        async with self._open:
            yield self

    def done(self) -> None:
        """Nothing runs in the run's sandbox any more (``before_remove`` has run): the login files its agent and
        hooks refreshed come back now, before the run ends, and a notice says which did not and why."""
        box, self.sandbox = self.sandbox, None
        if box is not None:
            for refused in box.write_back().refused:
                self.session.emit("notice", message=f"sandbox: {refused}")

    @property
    def path(self) -> Path:
        assert self.worktree is not None, "the worktree is made first"
        return self.worktree.path

    async def create(self, channel: RunChannel | None = None) -> worktrees.Worktree:
        """The worktree on ``beflow/<key>`` (continued when the branch exists), its included files copied in, the
        managed file hidden from git when servers are injected, the run's sandbox opened when it is sandboxed
        (``channel``: beflow's own server's, shown to the agent), and ``after_create`` run (fatal when it fails)."""
        session, record = self.session, self.session.record
        # A best-of-N candidate has a worktree of its own beside its siblings'.
        candidate = f"{record.issue} c{record.candidate}" if record.candidate else record.issue
        path = worktrees.worktree_path(session.project.worktrees_dir, candidate)
        branch = record.branch or refs.branch_for(record.issue)
        # Another run's agent at work on the repository may have planted hooks or commands in its config
        # already: then this run's git, before its own agent, is distrusted as well.
        distrust = await threads.blocking(repoguard.agent_at_work, session.project.directory)
        with git.distrusting() if distrust else contextlib.nullcontext():
            base = self.config.worktrees.base
            worktree = await threads.blocking(worktrees.create_worktree, self.repo, path, branch, base)
            self.worktree = worktree
            if worktree.set_aside is not None:
                why = f"{worktree.path} held a directory that was no worktree of the repository: it was kept, moved"
                session.emit("notice", message=f"{why} to {worktree.set_aside}")
            record.worktree = str(worktree.path)
            record.base_commit = worktree.base_commit
            session.store.save(record)
            await threads.blocking(
                worktrees.copy_included, session.project.directory, worktree.path, self.config.worktrees.include
            )
            if session.servers:
                self.git_env = await threads.blocking(excludes.hide_managed_file, worktree.path)
        await self._confine(channel)
        await self.hook("after_create", fatal=True)
        return worktree

    async def _confine(self, channel: RunChannel | None) -> None:
        """Open the run's sandbox when it is sandboxed (``sandbox.enabled``; ``"auto"``: where bwrap starts here, and
        once a process a notice where it does not). Its mounts are worked out now, before anything ran in the
        worktree."""
        session, record = self.session, self.session.record
        chosen = await threads.blocking(choice.choose, self.config)
        notice = choice.first_notice(chosen)
        if notice is not None:
            session.emit("notice", message=notice)
        if not chosen.sandboxed:
            return
        self.sandboxed = record.sandboxed = True
        # Shown read-only: the prompt file acpx may read, and the channel's directory while it exists (beflow's own
        # server in the run reports through it; the run's process writes the record).
        own = [session.store.directory(record.id) / "prompt.md", *([channel.directory] if channel else [])]
        checkout, servers = session.project.directory, session.servers or []
        box = Sandbox(self.config, worktree=self.path, checkout=checkout, own=own, servers=servers)
        self.sandbox = await self._open.enter_async_context(box.opened())

    async def hook(self, name: str, *, fatal: bool) -> None:
        """Run the hook ``name`` in the worktree, if the config has one: in the run's sandbox when the run is
        sandboxed, as confined as the agent. A failure is fatal, or a notice."""
        hook = self.config.hooks.get(name)
        if hook is None:
            return
        failed = await self._run(f"hook {name}", hook, f"hooks/{name}.log", fatal=fatal)
        if failed is not None:
            self._failed(failed[0], fatal, permanent=failed[1])

    async def check(self, number: int, hook: Hook) -> bool:
        """Best of N's judge check ``number`` (from 1) on the candidate's work, run as a hook is (in the run's
        sandbox, its output capped and masked in ``checks/<number>.log``); whether it passed."""
        return await self._run(f"check {number}", hook, f"checks/{number}.log", fatal=False) is None

    async def _run(self, name: str, hook: Hook, log_name: str, *, fatal: bool) -> tuple[str, bool] | None:
        """Run ``hook`` in the worktree (in the run's sandbox when it is sandboxed); None when it passed, else why
        not and whether that is permanent (the sandbox did not start)."""
        session, box = self.session, self.sandbox
        if self.sandboxed and box is None:  # its sandbox did not open: nothing runs unconfined instead
            return f"{name} did not run: the run's sandbox is not open", True
        session.emit("activity", latest=f"{name}: {hook.command}")
        argv = proc.shell(hook.command)
        # Streamed to the log as it comes, up to a limit: a hook that floods (`yes`) keeps beflow's memory flat.
        result: proc.Completed | None = None
        not_started: str | None = None
        hidden: str | None = None
        try:
            log = session.store.log(session.record.id, log_name, HOOK_LOG_LIMIT, session.redact_hooks)
        except OSError as exc:
            # Without the sandbox the agent can write the record: a log it replaced (a symlink to ~/.bashrc) is
            # never written through, and a hook whose output cannot be kept does not run.
            message = f"{name} was not run: its log cannot be written ({exc})"
            if fatal:
                raise BeflowError(message) from None
            return message, False
        with log:
            log.write(f"$ {session.redact.text(hook.command)}\n".encode())
            if box is not None:
                log.write(f"[in the run's sandbox: {SANDBOXED}]\n".encode())
            # A signal stops a hook even in the shielded cleanup (before_remove): it never holds beflow up.
            with interrupts.cut_short_by_signal():
                result = await proc.run(
                    box.wrap(argv, cwd=self.path) if box is not None else argv,
                    cwd=self.path,
                    timeout=hook.timeout,
                    env=self.git_env,
                    unset=self.withheld,  # a hook runs where the agent worked: it gets what the agent gets
                    on_stdout=log.lines,
                    on_stderr=log.lines,
                    max_capture=0 if box is None else 4096,  # (the sandbox's own words, when it did not start)
                    grace=interrupts.grace(proc.DEFAULT_GRACE),
                    stop_escaped=True,
                )
            if box is not None and result is not None:
                session.record.blocked = dict(box.blocked)  # what its proxy refused, the hooks' included
                try:
                    box.check(result)
                except SandboxError as error:  # nothing ran: the sandbox says why
                    not_started = error.message
                hidden = None if result.ok or not_started else self._hidden(box, hook.command)
                for said in (not_started, hidden):
                    if said is not None:
                        log.write(f"[{said}]\n".encode())
            ending = f"{result.describe()} after {result.duration:.1f} s" if result else "stopped by a signal"
            log.close(f"[{ending}]\n".encode())
        if result is None:
            return f"{name} was stopped by a signal; its output is in the run record", False
        if not_started is not None:
            return f"{name} did not run: {not_started}", True
        if not result.ok:
            why = f"; {hidden}" if hidden else ""
            return f"{name} failed ({result.describe()}){why}; its output is in the run record", False
        return None

    def _hidden(self, box: Sandbox, command: str) -> str | None:
        """What of what a failed hook names (its program, a script in the home) the sandbox hid, and how to show
        it; None when it hid nothing the command names."""
        hidden = box.hidden_in(command, cwd=self.path)
        if not hidden:
            return None
        home = box.home
        shown = [f"~/{p.relative_to(home)}" if home in p.parents else str(p) for p in hidden]
        where = shown[0] if hidden[0].is_dir() else (shown[0].rsplit("/", 1)[0] or "/")
        return f"the sandbox hides {', '.join(shown)}: add {json.dumps(where)} to sandbox.read (beflow docs config)"

    def _failed(self, message: str, fatal: bool, *, permanent: bool = False) -> None:
        """A hook that failed: the run fails (``after_create``; ``permanent``: as a sandbox that cannot start does, not
        tried again), or a notice says so."""
        if fatal:
            raise SandboxError(message) if permanent else BeflowError(message)
        self.session.emit("notice", message=message)

    async def remove(self, *, delete_fresh_branch: Callable[[], bool]) -> None:
        """``before_remove``, then the worktree goes (kept, and said, when git refuses); then the branch too, when
        ``delete_fresh_branch()`` says it holds nothing but its base (a new branch would only be clutter)."""
        worktree, record = self.worktree, self.session.record
        assert worktree is not None
        await self.hook("before_remove", fatal=False)
        try:
            prune = self.config.worktrees.dir is None  # beflow's own folder under $BEFLOW_HOME, not the user's
            await threads.blocking(worktrees.remove_worktree, self.repo, worktree.path, prune_parent=prune)
        except BeflowError as error:
            record.worktree_kept = True
            self.session.emit("notice", message=error.message)
        if delete_fresh_branch() and await threads.blocking(
            refs.delete_branch_at, self.repo, worktree.branch, worktree.base_commit
        ):
            record.branch = None
