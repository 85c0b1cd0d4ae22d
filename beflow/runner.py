"""One unattended run: every ``--auto`` run and every ``watch`` dispatch is exactly this.

claim → worktree on ``beflow/<key>`` → include files → ``after_create`` hook → prompt → MCP servers → inject →
``before_run`` → acpx (supervised) → ``after_run`` → restore → commit → record → tracker update → remove the
worktree (kept, and said so, when that could lose the agent's work) → release the claim.

The record, the tracker, the events and the injection are the run's :class:`~beflow.lifecycle.Session`; how the
session ended is :func:`beflow.policy.judge`'s call.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from beflow import acpx, agent_env, git, guardrails, interrupts, preflight, proc, prompt, repoguard, workers
from beflow.config import Project
from beflow.errors import BeflowError, ConfigError, LockedError, PermanentFailure
from beflow.events import EventSink
from beflow.lifecycle import (
    RunRequest,
    Session,
    cancel_reason,
    refuse_closed,
    render_prompt,
    requeue_orphans,
    settle_orphans,
    summary,
)
from beflow.limits import Limiter, UsageEvents
from beflow.mcp.acp import resolve_servers
from beflow.mcp.inject import Injection
from beflow.mcp.own import follow_progress
from beflow.paths import ACPXRC, acpx_home
from beflow.policy import judge, status_after
from beflow.records import CappedLog, Mode, Outcome, RunRecord, RunStore
from beflow.server.channel import RunChannel, own_channel, with_own_server
from beflow.trackers import Status, Tracker, reading_once
from beflow.trackers.base import Claim, ClaimLost, Publishes

#: Seconds beyond ``timeout`` that beflow gives acpx to stop by itself before stopping it.
TIMEOUT_MARGIN = 15.0

#: Bytes kept of each hook's output, of acpx's transcript and of its stderr; beyond, a note says what was left out.
HOOK_LOG_LIMIT = 4 << 20
TRANSCRIPT_LIMIT = 64 << 20
STDERR_LIMIT = 4 << 20


class NoLongerReady(LockedError):
    """A picked issue was run (or moved) by someone else between the pick and the claim: skip it, quietly."""

    code = "skipped"


class Run:
    """One run of one issue. Build it, then ``await execute()``; the record says how it ended.

    ``cancelled_because`` tells, when the run is cancelled, why, if whoever cancels it knows (the dispatcher's
    reconciliation: "the issue is now closed").
    """

    def __init__(
        self,
        project: Project,
        tracker: Tracker,
        request: RunRequest,
        events: EventSink | None = None,
        *,
        cancelled_because: Callable[[], str | None] | None = None,
    ) -> None:
        self.project = project
        self.tracker = tracker
        self.request = request
        self._events = workers.looped(events) if events is not None else None  # steps in worker threads emit too
        self._cancelled_because = cancelled_because or (lambda: None)

    async def execute(self) -> RunRecord:
        """Run the issue to an outcome; never raises for a failed run (the record says), only for bad usage."""
        issue = await workers.blocking(self.tracker.get, self.request.key)
        refuse_closed(issue)
        claim = await workers.shielded(self.tracker.claim, issue.key, self.request.owner)
        try:
            # What the issue is now that it is ours: another beflow may have run it between our look and our claim.
            issue = await workers.blocking(self.tracker.get, issue.key)
            if self.request.only_if_ready and issue.status != Status.READY:
                raise NoLongerReady(f"issue {issue.key} is no longer ready (it is {issue.status.value})")
            refuse_closed(issue)
            session = Session(
                self.project, self.tracker, issue, self.request, self._events, branch=git.branch_for(issue.key)
            )
            if claim.renew_every is None:
                return await _InWorktree(session, self._cancelled_because).run()
            return await self._leased(claim, session)
        finally:
            with anyio.CancelScope(shield=True):
                await workers.blocking(claim.release)  # a remote tracker's release is a request

    async def _leased(self, claim: Claim, session: Session) -> RunRecord:
        """The run, with its claim's lease renewed beside it while it lives (GitHub). Losing the lease — taken over,
        or not renewed before it ran out — cancels the run: another machine may be running the issue now."""
        lost: list[str] = []
        steps = _InWorktree(
            session, lambda: f"lost the claim on the issue: {lost[0]}" if lost else self._cancelled_because()
        )
        run_scope, record, failure = anyio.CancelScope(), None, None
        async with anyio.create_task_group() as keeper:
            keeper.start_soon(self._keep_claim, claim, session, run_scope, lost)
            try:
                with run_scope:
                    record = await steps.run()
            except Exception as error:  # raised as it is below, not wrapped in the task group's ExceptionGroup
                failure = error
            finally:
                keeper.cancel_scope.cancel()
        if failure is not None:
            raise failure
        return record if record is not None else session.record  # lost: the run recorded itself cancelled

    async def _keep_claim(self, claim: Claim, session: Session, scope: anyio.CancelScope, lost: list[str]) -> None:
        assert claim.renew_every is not None
        while True:
            await anyio.sleep(claim.renew_every)
            try:
                # A renewal bounds its own requests by the time the lease has left; this run never waits for one
                # past that either: a lease it cannot prove is a lease it has lost, before another machine's turn.
                with anyio.fail_after(max(claim.seconds_left() or 0.0, 0.0)):
                    await anyio.to_thread.run_sync(claim.renew, abandon_on_cancel=True)
                continue
            except TimeoutError:
                reason = "the claim could not be renewed before it ran out"
            except ClaimLost as error:
                reason = error.message
            except BeflowError as error:
                left = claim.seconds_left()
                if left is None or left > claim.renew_every:
                    session.emit("notice", message=f"could not renew the claim (trying again): {error.message}")
                    continue
                reason = f"the claim could not be renewed before it ran out: {error.message}"
            lost.append(reason)
            session.claim_lost = reason  # the issue is the new holder's: this run leaves it be
            scope.cancel()
            return


class _InWorktree:
    """The steps of one unattended run, around its session."""

    def __init__(self, session: Session, cancelled_because: Callable[[], str | None]) -> None:
        self.session = session
        self.record = session.record
        self.store = session.store
        self.project = session.project
        self.config = session.project.config
        self.request = session.request
        self.emit = session.emit
        self.transcript = acpx.Transcript()
        self._cancelled_because = cancelled_because
        self._injection: Injection | None = None
        #: The environment of everything that runs in the worktree while the file is injected (acpx, hooks): it
        #: keeps ``.acpxrc.json`` out of what git stages there.
        self._git_env: dict[str, str] = {}
        #: What acpx, the agent and the hooks do not get of beflow's environment (docs/safety.md).
        self._withheld = agent_env.for_agent(self.config).unset
        self._channel: RunChannel | None = None  # mcp.self: where beflow's own server forwards the agent's calls
        #: The guard of the repository's git directory around the agent: what it put back, if anything.
        self._guard: repoguard.Guard | None = None

    async def run(self) -> RunRecord:
        record, issue = self.record, self.session.issue
        branch = git.branch_for(issue.key)
        try:
            text = render_prompt(self.project, issue, self.request, branch=branch, run_id=record.id)
        except BeflowError as error:
            record.permanent = True
            await workers.shielded(self.session.start, "")  # the tracker is told: a watch does not pick it up again
            return await self._finish("failed", f"the prompt did not render: {error.message}")
        try:
            await workers.shielded(self.session.start, text)  # the tracker's lock may be busy for seconds
        except BeflowError as error:  # the issue changed under us (closed, unlabelled): record why, run nothing
            return await self._finish("failed", f"the tracker could not be told that the run started: {error.message}")
        self.emit("started", attempt=self.request.attempt, branch=branch)
        repo = await workers.blocking(git.open_repo, self.project.directory)
        try:
            return await self._in_worktree(repo, branch, text)
        finally:
            repo.close()  # it holds git processes

    async def _in_worktree(self, repo: Any, branch: str, text: str) -> RunRecord:
        record = self.record
        worktree: git.Worktree | None = None

        async def end(outcome: Outcome, reason: str) -> RunRecord:
            """After any way out: commit what the agent changed (the work is never lost), publish a success, then
            record and report."""
            # A step that failed because it was interrupted (git gets the terminal's Ctrl-C too, and dies of it) is
            # a cancellation, not a failure: the issue goes back to ready.
            if outcome == "failed" and await _interrupted():
                outcome, reason = "cancelled", f"{cancel_reason(self._cancelled_because())} ({reason})"
            with anyio.CancelScope(shield=True):
                if outcome == "cancelled":  # cancelled it stays, whatever its commit did
                    await self._wrap_up(worktree, repo, outcome, reason)
                else:
                    outcome, reason = await self._wrap_up(worktree, repo, outcome, reason)
                    if outcome == "succeeded" and self.config.after_run.pull_request:
                        reason = await self._publish(outcome, reason)
            if outcome == "failed" and await _interrupted():  # a git step of the cleanup (the commit), interrupted
                outcome, reason = "cancelled", f"{cancel_reason(self._cancelled_because())} ({reason})"
            return await self._finish(outcome, reason)

        # Bad configuration and MCP servers that do not resolve are permanent failures; a bug in beflow is still
        # recorded, the tracker told and the work kept.
        guarded = self.session.guarded(end, cancelled_because=self._cancelled_because, interrupted=_interrupted)
        async with guarded as ending:
            self._resolve_servers()
            path = git.worktree_path(self.project.worktrees_dir, record.issue)
            # Another run's agent at work on the repository may have planted hooks or commands in its config
            # already: then this run's git, before its own agent, is distrusted as well.
            distrust = await workers.blocking(repoguard.agent_at_work, self.project.directory)
            with git.distrusting() if distrust else contextlib.nullcontext():
                worktree = await workers.blocking(git.create_worktree, repo, path, branch, self.config.worktrees.base)
                record.worktree = str(worktree.path)
                record.base_commit = worktree.base_commit
                self.store.save(record)
                await workers.blocking(
                    git.copy_included, self.project.directory, worktree.path, self.config.worktrees.include
                )
                if self.session.servers:
                    self._git_env = await workers.blocking(git.hide_managed_file, worktree.path)
            await self._hook("after_create", worktree.path, fatal=True)
            with self.session.repository_guarded(worktree.path) as self._guard:
                ending.set(*await self._agent_session(worktree.path, text))
        await anyio.lowlevel.checkpoint()  # a pending cancellation goes on from here, the record written
        return ending.finished

    async def _publish(self, outcome: Outcome, reason: str) -> str:
        """Push the branch and open (or, on a retry, update) its pull request; a failure is said, not fatal: the
        work is committed on the branch either way."""
        record, issue = self.record, self.session.issue
        tracker = self.session.tracker
        if record.branch is None or record.commit is None or not isinstance(tracker, Publishes):
            return reason
        draft = record.model_copy(update={"outcome": outcome, "stop_reason": reason})
        body = f"{summary(draft)}\n\nCloses #{issue.key}" + (f" ({issue.url})" if issue.url else "")
        body = self.session.redact.text(body)  # the agent's final message, say: the token is a secret of the run
        try:
            with git.distrusting():
                url, opened = await workers.blocking(
                    tracker.publish,
                    self.project.directory,
                    record.branch,
                    issue.title,
                    body,
                    draft=self.config.after_run.draft,
                )
        except ClaimLost as error:  # another machine runs the issue now: nothing of this run is published
            self.session.claim_lost = error.message
            self.emit("notice", message=f"no pull request: {error.message}")
            return f"{reason}; not published: {error.message}"
        except BeflowError as error:
            self.emit("notice", message=f"no pull request: {error.message}")
            return f"{reason}; the pull request could not be opened: {error.message}"
        record.pull_request = url
        self.emit("notice", message=f"pull request {'opened' if opened else 'updated'}: {url}")
        return reason

    def _resolve_servers(self) -> None:
        """The run's MCP servers, resolved before anything runs: from here on their secret values are masked in
        everything the record keeps (hook output included)."""
        try:
            servers, self._channel = with_own_server(
                self.project, resolve_servers(self.project), issue=self.record.issue, run_id=self.record.id
            )
        except ConfigError as error:
            raise PermanentFailure(f"MCP servers: {error.message}") from None
        self.session.use_servers(servers)

    async def _agent_session(self, cwd: Path, text: str) -> tuple[Outcome, str]:
        """Inject, run acpx, restore. Returns the outcome and a reason."""
        record = self.record
        redact = self.session.redact
        directory = self.store.directory(record.id)
        transcript_path = directory / "transcript.jsonl"
        stderr_path = directory / "stderr.log"
        with (
            CappedLog(transcript_path, TRANSCRIPT_LIMIT) as transcript_file,
            CappedLog(stderr_path, STDERR_LIMIT, redact) as stderr_file,
        ):
            # Every line acpx prints is life (the agent's messages, tool calls, a running tool's output, its
            # stderr); what the agent reports it used is held to the budgets as it comes (beflow.limits).
            limiter = Limiter(self.config.limits, lambda: self.transcript.latest)
            usage = UsageEvents(self.emit)

            def on_stdout(line: bytes) -> None:
                limiter.alive()
                line = redact(line)
                transcript_file.line(line)
                before, updates = self.transcript.latest, self.transcript.usage.updates
                self.transcript.feed(line)
                if self.transcript.latest and self.transcript.latest != before:
                    self.emit("activity", latest=self.transcript.latest)
                if self.transcript.usage.updates != updates:  # (the turn's own counts come with its end)
                    limiter.check(self.transcript.usage)
                    usage.seen(self.transcript.usage)

            def on_stderr(line: bytes) -> None:
                limiter.alive()
                stderr_file.line(line)

            async with self.session.injected(cwd) as handle:
                self._injection = handle
                await self._hook("before_run", cwd, fatal=False)
                async with (
                    follow_progress(self.store, record.id, lambda note: self.emit("progress", text=note.text)),
                    own_channel(self._channel, self.session.tracker, lambda: self.transcript, self._notice),
                ):
                    result = await limiter.supervise(lambda: self._run_agent(cwd, text, on_stdout, on_stderr))
                await self._hook("after_run", cwd, fatal=False)
        record.final_message = self.transcript.final_message
        record.session = self.transcript.session_id
        record.usage = None if self.transcript.usage.empty else self.transcript.usage
        if result is None or limiter.breach is not None:  # a limit stopped the agent: the limit says why
            breach = limiter.breach
            assert breach is not None
            record.permanent = breach.permanent
            if limiter.stall is not None:
                record.silent_for, record.last_activity = limiter.stall.silent_for, limiter.stall.last_activity
            self.emit("notice", message=breach.reason)
            return breach.outcome, breach.reason
        record.exit_code = result.returncode
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        verdict = judge(result, self.transcript, self.config, stderr, key=self.request.key, run_id=record.id)
        record.permanent = verdict.permanent
        if self._channel is not None and self._channel.failure is not None:
            return verdict.outcome, f"{verdict.reason}; {self._channel.failure}"
        return verdict.outcome, verdict.reason

    def _notice(self, message: str) -> None:
        self.emit("notice", message=message)

    async def _run_agent(
        self, cwd: Path, text: str, on_stdout: proc.LineHandler, on_stderr: proc.LineHandler
    ) -> proc.Completed:
        """acpx for this run: a cold ``exec``, or, on a retry, ``prompt -s`` on the agent's earlier ACP session.

        Resuming needs the earlier run's session id and an agent that supports ``session/resume`` or
        ``session/load``; when acpx cannot resume, the run goes on cold and the record says why.
        """
        record = self.record
        timeout = self.config.timeout
        common: dict[str, Any] = {
            "cwd": cwd,
            "prompt": text,
            "prompt_file": self.store.directory(record.id) / "prompt.md",
            "permissions": self.config.permissions,
            "timeout": timeout,
        }
        supervise: dict[str, Any] = {
            "cwd": cwd,
            "timeout": None if timeout is None else timeout + TIMEOUT_MARGIN,
            "on_stdout": on_stdout,
            "on_stderr": on_stderr,
            "grace": interrupts.grace(proc.DEFAULT_GRACE),
            "env": self._git_env,
            "unset": self._withheld,
        }
        earlier = self._resumable_session() if self.request.attempt > 1 else None
        if earlier is not None:
            name = acpx.session_name(record.issue)
            created = await proc.run(
                acpx.resume_argv(self.config, cwd=cwd, name=name, session_id=earlier),
                cwd=cwd,
                timeout=60,
                env=self._git_env,
                unset=self._withheld,
            )
            if not created.ok:
                record.resume_note = f"could not name the earlier session: {_tail(created)}; started cold"
            else:
                finished = False
                try:
                    result = await proc.run(acpx.prompt_argv(self.config, name=name, **common), **supervise)
                    finished = self.transcript.stop_reason is not None
                finally:
                    await self._end_session(cwd, name, earlier, cancel=not finished)
                if self.transcript.prompted:
                    record.resumed_session = earlier
                    self.transcript.session_id = self.transcript.session_id or earlier  # the next retry resumes it too
                    return result
                why = self.transcript.acpx_error or _tail(result)
                record.resume_note = f"acpx could not resume session {earlier}: {why}; started cold"
                self.transcript = acpx.Transcript()
            self.emit("notice", message=record.resume_note)
        return await proc.run(acpx.exec_argv(self.config, **common), **supervise)

    def _resumable_session(self) -> str | None:
        """The ACP session of this issue's latest earlier run with the same agent, if it recorded one."""
        for earlier in self.store.records([self.record.issue]):
            if (
                earlier.issue == self.record.issue
                and earlier.id != self.record.id
                and earlier.agent == self.record.agent
            ):
                return earlier.session
        return None

    async def _end_session(self, cwd: Path, name: str, session_id: str, *, cancel: bool) -> None:
        """Leave no queue owner behind: cancel an unfinished turn, close the session, stop a lingering owner."""
        with anyio.CancelScope(shield=True):
            if cancel:
                await proc.run(
                    acpx.cancel_argv(self.config, cwd=cwd, name=name), cwd=cwd, timeout=10, unset=self._withheld
                )
            await proc.run(acpx.close_argv(self.config, cwd=cwd, name=name), cwd=cwd, timeout=15, unset=self._withheld)
            for pid in acpx.queue_owner_pids(session_id, acpx_home()):
                await proc.stop_group(pid, grace=2.0)
            acpx.forget_session(session_id, acpx_home())

    async def _hook(self, name: str, cwd: Path, *, fatal: bool) -> None:
        hook = self.config.hooks.get(name)
        if hook is None:
            return
        self.emit("activity", latest=f"hook {name}: {hook.command}")
        # Streamed to the log as it comes, up to a limit: a hook that floods (`yes`) keeps beflow's memory flat.
        path = self.store.directory(self.record.id) / "hooks" / f"{name}.log"
        result: proc.Completed | None = None
        with CappedLog(path, HOOK_LOG_LIMIT, self.session.redact_hooks) as log:
            log.write(f"$ {self.session.redact.text(hook.command)}\n".encode())
            # A signal stops a hook even in the shielded cleanup (before_remove): it never holds beflow up.
            with interrupts.cut_short_by_signal():
                result = await proc.run(
                    proc.shell(hook.command),
                    cwd=cwd,
                    timeout=hook.timeout,
                    env=self._git_env,
                    unset=self._withheld,  # a hook runs where the agent worked: it gets what the agent gets
                    on_stdout=log.line,
                    on_stderr=log.line,
                    max_capture=0,
                    grace=interrupts.grace(proc.DEFAULT_GRACE),
                    stop_escaped=True,
                )
            ending = f"{result.describe()} after {result.duration:.1f} s" if result else "stopped by a signal"
            log.close(f"[{ending}]\n".encode())
        if result is None:
            message = f"hook {name} was stopped by a signal; its output is in the run record"
            if fatal:
                raise BeflowError(message)
            self.emit("notice", message=message)
            return
        if not result.ok:
            message = f"hook {name} failed ({result.describe()}); its output is in the run record"
            if fatal:
                raise BeflowError(message)
            self.emit("notice", message=message)

    async def _wrap_up(
        self, worktree: git.Worktree | None, repo: Any, outcome: Outcome, reason: str
    ) -> tuple[Outcome, str]:
        """Commit what the agent changed (whatever the outcome: it is the agent's work) and remove the worktree.

        Whatever goes wrong here (git refusing a tree the agent broke, say), the worktree is kept and named: the
        agent's work is never lost, and the run is still recorded and reported.
        """
        try:
            with git.distrusting():  # the agent has run: no hook, no configured command in beflow's git from here
                return await self._commit_and_clean(worktree, repo, outcome, reason)
        except Exception as error:
            if worktree is None:  # nothing was there to commit: nothing to keep either
                raise
            self.record.worktree_kept = True
            self.store.save(self.record)
            why = error.message if isinstance(error, BeflowError) else f"{type(error).__name__}: {error}"
            return "failed", f"{reason}; committing the work failed ({why}); the work is kept in {worktree.path}"

    async def _commit_and_clean(
        self, worktree: git.Worktree | None, repo: Any, outcome: Outcome, reason: str
    ) -> tuple[Outcome, str]:
        record = self.record
        if worktree is None:
            return outcome, reason
        injection = self._injection
        if injection is not None and (injection.restored is None or injection.restored.action == "failed"):
            # The worktree may still hold the injected file: nothing is committed, the branch stays where it was.
            return await self._keep(worktree, f"{reason}; {ACPXRC} could not be put back")
        if self._guard is not None and self._guard.changed:  # an agent that works against the user: not delivered
            record.permanent = True  # nor tried again by a watch: the issue is a person's to look at
            return await self._keep(worktree, f"{reason}; {repoguard.describe(self._guard)}")
        if self._git_env:
            await workers.blocking(git.unhide_managed_file, worktree.path)
        if self.config.after_run.commit:
            title = prompt.without_controls(record.title or record.issue)
            message = f"{title}\n\nbeflow run {record.id} ({outcome}) on issue {record.issue}."
            try:
                await workers.blocking(git.commit_all, worktree.path, message)
            except BeflowError as error:
                record.worktree_kept = True
                self.store.save(record)
                return "failed", f"{reason}; {error.message}; the work is kept in {worktree.path}"
        head = await workers.blocking(git.head, worktree.path)
        # Every commit of the run (the agent's own included) is checked before the branch moves to it.
        # The session's redactor leaves beflow's own server out: its BEFLOW_HOME is a path, no secret. It holds
        # beflow's own secrets (the tracker's token) whether or not servers were injected.
        needles = [*([injection.written] if injection is not None else []), *self.session.redact.needles()]
        # A continued branch is checked from the base, whole: it may hold commits no run of this issue made (moved
        # by hand, or by another run's agent, which shares the repository), and all of them would be pushed.
        since = worktree.base_commit
        if worktree.continued:
            since = await workers.blocking(git.resolve_base, repo, self.config.worktrees.base)
        leaks = await workers.blocking(
            git.find_leaks, worktree.path, since, head, needles, managed=injection is not None
        )
        if leaks:
            return await self._keep(worktree, f"{reason}; {leaks[0].describe()}")
        if head != worktree.tip:
            try:
                await workers.blocking(
                    git.publish, worktree.path, worktree.branch, head, worktree.tip, f"beflow run {record.id}"
                )
            except BeflowError as error:
                record.worktree_kept = True
                self.store.save(record)
                return "failed", f"{reason}; {error.message}; the work is commit {head[:12]} in {worktree.path}"
        record.commit = head if head != worktree.base_commit else None
        record.changed_files = await workers.blocking(git.changed_files, worktree.path, worktree.base_commit, head)
        if not self.config.after_run.commit:
            # Nothing is committed: what changed is what the worktree's status says, left there for a person.
            status = await workers.blocking(git.checkout_status, worktree.path)
            record.changed_files += [f"{code.strip()}\t{path}" for path, code in status.items() if path != ACPXRC]
        if outcome == "succeeded" and not record.changed_files:
            outcome, reason = "no_changes", "the agent finished without changing any file"
        if await workers.blocking(git.is_dirty, worktree.path):
            record.worktree_kept = True
            why = "after_run.commit is false" if not self.config.after_run.commit else "uncommitted changes"
            reason += f"; the worktree is kept ({why}): {worktree.path}"
        else:
            await self._remove(repo, worktree)
            # A new branch that holds nothing but its base would only be clutter: `git branch` stays clean.
            fresh = record.commit is None and not worktree.continued and not record.worktree_kept
            if fresh and await workers.blocking(git.delete_branch_at, repo, worktree.branch, worktree.base_commit):
                record.branch = None
        return outcome, reason

    async def _keep(self, worktree: git.Worktree, why: str) -> tuple[Outcome, str]:
        """Fail closed: the branch is not moved, the run's commits are undone into uncommitted changes (nothing
        names them any more), and the worktree is kept with the work."""
        record = self.record
        record.worktree_kept = True
        record.commit = None
        with contextlib.suppress(Exception):
            await workers.blocking(git.uncommit, worktree.path, worktree.base_commit)
        with contextlib.suppress(Exception):
            status = await workers.blocking(git.checkout_status, worktree.path)
            record.changed_files = [f"{code.strip()}\t{path}" for path, code in status.items() if path != ACPXRC]
        self.store.save(record)
        # Whatever the agent achieved, the run did not deliver it: failed.
        return "failed", (
            f"{why}: nothing was committed and {worktree.branch} was not updated; the work is kept as uncommitted "
            f"changes in {worktree.path}"
        )

    async def _remove(self, repo: Any, worktree: git.Worktree) -> None:
        await self._hook("before_remove", worktree.path, fatal=False)
        try:
            prune = self.config.worktrees.dir is None  # beflow's own folder under $BEFLOW_HOME, not the user's
            await workers.blocking(git.remove_worktree, repo, worktree.path, prune_parent=prune)
        except BeflowError as error:
            self.record.worktree_kept = True
            self.emit("notice", message=error.message)

    async def _finish(self, outcome: Outcome, reason: str) -> RunRecord:
        record = self.record
        retry = not (self.request.final or record.permanent)
        return await workers.shielded(
            self.session.finish,
            outcome,
            reason,
            lambda ended: status_after(ended, retry=retry),
            commit=record.commit,
            changed=len(record.changed_files),
            **({"usage": used} if (used := guardrails.event_data(record.usage)) else {}),
        )


def _cancel_pending() -> bool:
    """Whether the current task is being cancelled (a signal, a watch stopping the run) though no checkpoint has
    said so yet: the step that was running failed of the same interruption."""
    return anyio.current_effective_deadline() == -math.inf


async def _interrupted() -> bool:
    """Whether the run is being cancelled, for a step that just failed. Git gets the terminal's Ctrl-C too and can
    die of it before beflow's own signal handler has had its turn on the event loop: a short shielded pause lets
    the handler run, so an interrupted step is taken for the cancellation it is, never for a failure."""
    if _cancel_pending():
        return True
    with anyio.CancelScope(shield=True):
        await anyio.sleep(0.1)
    return _cancel_pending()


def _tail(result: proc.Completed) -> str:
    """What a failed acpx call said, for notes: its JSON error's message, else its last line."""
    lines = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return result.describe()
    last = lines[-1]
    with contextlib.suppress(ValueError, KeyError, TypeError):
        last = str(json.loads(last)["error"]["message"])
    return f"{result.describe()}: {last[:300]}"


#: What beflow reads from the checkout itself (not from a run's worktree): uncommitted, it still counts.
_READ_FROM_THE_CHECKOUT = (".beflow/", ".mcp.json", ".acpxrc.json")


def invisible_changes(project: Project) -> str | None:
    """A note for uncommitted changes in the checkout, which no unattended run sees: each starts from
    ``worktrees.base`` in a worktree of its own. None when there are none (or no repository to look at)."""
    try:
        status = git.checkout_status(project.directory)
    except Exception:  # no repository, or git failing: the checks before the run say what is wrong
        return None
    top = git.toplevel(project.directory) or project.directory
    prefix = project.directory.resolve().relative_to(top.resolve()).as_posix() if project.directory != top else ""
    changed = [
        path
        for path in status
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


async def run_many(
    project: Project,
    tracker: Tracker,
    keys: list[str],
    *,
    limit: int | None = None,
    concurrency: int = 1,
    events: EventSink | None = None,
    mode: Mode = "auto",
) -> list[RunRecord]:
    """Run the named issues, or every ready issue once, ``concurrency`` at a time."""
    preflight.check(project)
    picked = not keys
    store = RunStore(project.directory)
    store.close_orphans()
    with reading_once(tracker):  # one scan of the tracker for all of this
        settle_orphans(tracker, store)
        if picked:
            requeue_orphans(tracker)
            keys = [issue.key for issue in tracker.ready()]
        else:
            # Unknown keys fail before anything runs; a key named twice runs once.
            keys = list(dict.fromkeys(tracker.get(key).key for key in keys))
    if limit is not None:
        keys = keys[:limit]
    records: list[RunRecord] = []
    refused: list[BeflowError] = []
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(key: str) -> None:
        async with limiter:
            request = RunRequest(key=key, mode=mode, only_if_ready=picked)
            try:
                records.append(await Run(project, tracker, request, events).execute())
            except NoLongerReady:
                pass  # another beflow ran it meanwhile: nothing to do here
            except LockedError as error:
                if not picked:
                    refused.append(error)  # named by the user: say that someone else has it
                # picked from the ready list: another beflow is running it, which is what the user wants
            except BeflowError as error:  # closed, claimed by another run: the other issues still run
                refused.append(error)

    async with anyio.create_task_group() as tasks:
        for key in keys:
            tasks.start_soon(one, key)
    if len(refused) == 1:
        raise refused[0]
    if refused:
        raise BeflowError("; ".join(e.message for e in refused), fix=refused[0].fix)
    return records
