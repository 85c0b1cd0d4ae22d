"""Where an unattended run's agent works: a worktree of ``beflow/<key>``, the files it is given, the hooks around it.

:class:`Workspace` makes the worktree (HEAD detached, so that only beflow moves the branch), copies the included
files into it, keeps the managed file out of what git stages there while it is injected, runs the project's hooks
in it (their output capped and masked in the run record) and removes it once the run's work is delivered — or
keeps it, and says so, when removing it could lose the agent's work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from beflow import agent_env, git, interrupts, proc, repoguard, workers
from beflow.errors import BeflowError
from beflow.lifecycle import Session

#: Bytes kept of each hook's output; beyond, a note says what was left out.
HOOK_LOG_LIMIT = 4 << 20


class Workspace:
    """The worktree of one run and the hooks that run in it."""

    def __init__(self, session: Session, repo: Any) -> None:
        self.session = session
        self.repo = repo
        self.config = session.project.config
        self.worktree: git.Worktree | None = None
        #: The environment of everything that runs in the worktree while the file is injected (acpx, hooks): it
        #: keeps ``.acpxrc.json`` out of what git stages there.
        self.git_env: dict[str, str] = {}
        #: What acpx, the agent and the hooks do not get of beflow's environment (docs/safety.md).
        self.withheld = agent_env.for_agent(self.config).unset

    @property
    def path(self) -> Path:
        assert self.worktree is not None, "the worktree is made first"
        return self.worktree.path

    async def create(self) -> git.Worktree:
        """The worktree on ``beflow/<key>`` (continued when the branch exists), its included files copied in, the
        managed file hidden from git when servers are injected, and ``after_create`` run (fatal when it fails)."""
        session, record = self.session, self.session.record
        path = git.worktree_path(session.project.worktrees_dir, record.issue)
        branch = git.branch_for(record.issue)
        # Another run's agent at work on the repository may have planted hooks or commands in its config
        # already: then this run's git, before its own agent, is distrusted as well.
        distrust = await workers.blocking(repoguard.agent_at_work, session.project.directory)
        with git.distrusting() if distrust else contextlib.nullcontext():
            worktree = await workers.blocking(git.create_worktree, self.repo, path, branch, self.config.worktrees.base)
            self.worktree = worktree
            if worktree.set_aside is not None:
                why = f"{worktree.path} held a directory that was no worktree of the repository: it was kept, moved"
                session.emit("notice", message=f"{why} to {worktree.set_aside}")
            record.worktree = str(worktree.path)
            record.base_commit = worktree.base_commit
            session.store.save(record)
            await workers.blocking(
                git.copy_included, session.project.directory, worktree.path, self.config.worktrees.include
            )
            if session.servers:
                self.git_env = await workers.blocking(git.hide_managed_file, worktree.path)
        await self.hook("after_create", fatal=True)
        return worktree

    async def hook(self, name: str, *, fatal: bool) -> None:
        """Run the hook ``name`` in the worktree, if the config has one; a failure is fatal, or a notice."""
        hook = self.config.hooks.get(name)
        if hook is None:
            return
        session = self.session
        session.emit("activity", latest=f"hook {name}: {hook.command}")
        # Streamed to the log as it comes, up to a limit: a hook that floods (`yes`) keeps beflow's memory flat.
        result: proc.Completed | None = None
        try:
            log = session.store.log(session.record.id, f"hooks/{name}.log", HOOK_LOG_LIMIT, session.redact_hooks)
        except OSError as exc:
            # Without the sandbox the agent can write the record: a log it replaced (a symlink to ~/.bashrc) is
            # never written through, and a hook whose output cannot be kept does not run.
            message = f"hook {name} was not run: its log cannot be written ({exc})"
            if fatal:
                raise BeflowError(message) from None
            session.emit("notice", message=message)
            return
        with log:
            log.write(f"$ {session.redact.text(hook.command)}\n".encode())
            # A signal stops a hook even in the shielded cleanup (before_remove): it never holds beflow up.
            with interrupts.cut_short_by_signal():
                result = await proc.run(
                    proc.shell(hook.command),
                    cwd=self.path,
                    timeout=hook.timeout,
                    env=self.git_env,
                    unset=self.withheld,  # a hook runs where the agent worked: it gets what the agent gets
                    on_stdout=log.lines,
                    on_stderr=log.lines,
                    max_capture=0,
                    grace=interrupts.grace(proc.DEFAULT_GRACE),
                    stop_escaped=True,
                )
            ending = f"{result.describe()} after {result.duration:.1f} s" if result else "stopped by a signal"
            log.close(f"[{ending}]\n".encode())
        if result is None:
            message = f"hook {name} was stopped by a signal; its output is in the run record"
        elif not result.ok:
            message = f"hook {name} failed ({result.describe()}); its output is in the run record"
        else:
            return
        if fatal:
            raise BeflowError(message)
        session.emit("notice", message=message)

    async def remove(self, *, delete_fresh_branch: Callable[[], bool]) -> None:
        """``before_remove``, then the worktree goes (kept, and said, when git refuses); then the branch too, when
        ``delete_fresh_branch()`` says it holds nothing but its base (a new branch would only be clutter)."""
        worktree, record = self.worktree, self.session.record
        assert worktree is not None
        await self.hook("before_remove", fatal=False)
        try:
            prune = self.config.worktrees.dir is None  # beflow's own folder under $BEFLOW_HOME, not the user's
            await workers.blocking(git.remove_worktree, self.repo, worktree.path, prune_parent=prune)
        except BeflowError as error:
            record.worktree_kept = True
            self.session.emit("notice", message=error.message)
        if delete_fresh_branch() and await workers.blocking(
            git.delete_branch_at, self.repo, worktree.branch, worktree.base_commit
        ):
            record.branch = None
