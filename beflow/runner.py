"""One unattended run: every ``--auto`` run and every ``watch`` dispatch is exactly this.

claim → prompt → MCP servers → the workspace (:mod:`beflow.workspace`: worktree on ``beflow/<key>``, included
files, ``after_create``) → inject → ``before_run`` → the agent (:class:`beflow.acpx.AgentSession`, cold or resumed)
→ ``after_run`` → restore → delivery (:func:`beflow.delivery.deliver`, one thread hop: commit, leak check,
compare-and-swap, push and pull request through the code host) → record → tracker update → remove the worktree
(kept, and said so, when that could lose the agent's work) → release the claim.

The record, the tracker, the events and the injection are the run's :class:`~beflow.lifecycle.Session`; how the
session ended is :func:`beflow.policy.judge`'s call, what became of its work the delivery's
:class:`~beflow.delivery.Verdict`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.lowlevel

from beflow import acpx, delivery, git, guardrails, interrupts, preflight, prompt, repoguard, rounds, spending, workers
from beflow.codehosts import CodeHost, open_code_host
from beflow.config import Project
from beflow.errors import BeflowError, ConfigError, LockedError, PermanentFailure
from beflow.events import EventSink
from beflow.feedback import pending
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
from beflow.paths import ACPXRC
from beflow.policy import judge, status_after
from beflow.records import DONE_OUTCOMES, CappedLog, Mode, Outcome, RunRecord, RunStore
from beflow.sandbox.box import Sandbox
from beflow.server.channel import RunChannel, own_channel, with_own_server
from beflow.trackers import Status, Tracker, reading_once
from beflow.trackers.base import Claim
from beflow.trackers.claims import while_held
from beflow.workspace import Workspace

#: Bytes kept of acpx's transcript and of its stderr; beyond, a note says what was left out.
TRANSCRIPT_LIMIT = 64 << 20
STDERR_LIMIT = 4 << 20


class NoLongerReady(LockedError):
    """A picked issue was run (or moved) by someone else between the pick and the claim: skip it, quietly."""

    code = "skipped"


class Run:
    """One run of one issue. Build it, then ``await execute()``; the record says how it ended.

    ``cancelled_because`` tells, when the run is cancelled, why, if whoever cancels it knows (the dispatcher's
    reconciliation: "the issue is now closed"). ``code_host`` is where a succeeded run's branch is proposed
    (:func:`beflow.codehosts.open_code_host`, opened before any agent ran); None: the branch stays local.
    """

    def __init__(
        self,
        project: Project,
        tracker: Tracker,
        request: RunRequest,
        events: EventSink | None = None,
        *,
        cancelled_because: Callable[[], str | None] | None = None,
        code_host: CodeHost | None = None,
    ) -> None:
        self.project = project
        self.tracker = tracker
        self.code_host = code_host
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
            # A review round starts from review (or from ready: put back in the queue, or retried).
            startable = (Status.READY, Status.REVIEW) if self.request.round else (Status.READY,)
            if self.request.only_if_ready and issue.status not in startable:
                raise NoLongerReady(f"issue {issue.key} is no longer ready (it is {issue.status.value})")
            refuse_closed(issue)
            if self.request.round:
                await workers.blocking(self._round_catch_up, issue.key)
            session = Session(
                self.project,
                self.tracker,
                issue,
                self.request,
                self._events,
                branch=git.branch_for(issue.key),
                code_host=self.code_host,
            )
            return await self._held(claim, session)
        finally:
            with anyio.CancelScope(shield=True):
                await workers.blocking(claim.release)  # a remote tracker's release is a request

    def _round_catch_up(self, key: str) -> None:
        """Before a round, once the issue is ours: the branch as the code host has it (another machine may have
        pushed a round), and only the feedback no round on it answered yet; none left: another run answered it."""
        project, request = self.project, self.request
        branch = git.branch_for(key)
        rounds.catch_up(self.code_host, project.directory, branch)
        done = rounds.answered(project.directory, branch, project.config.worktrees.base)
        request.feedback = pending(request.feedback, done)
        if not request.feedback:
            raise NoLongerReady(f"the feedback on issue {key} was answered meanwhile")

    async def _held(self, claim: Claim, session: Session) -> RunRecord:
        """The run, while its claim holds (a lease is renewed beside it: :func:`~beflow.trackers.claims.while_held`).
        A lost lease cancels the run, which records itself cancelled and leaves the issue to its new holder."""
        lost: list[str] = []

        def lose(reason: str) -> None:
            lost.append(reason)
            session.claim_lost = reason  # the issue is the new holder's: this run leaves it be

        def cancelled_because() -> str | None:
            return f"lost the claim on the issue: {lost[0]}" if lost else self._cancelled_because()

        steps = _InWorktree(session, cancelled_because, self.code_host, claim)
        record = await while_held(claim, steps.run, lose, lambda message: session.emit("notice", message=message))
        return record if record is not None else session.record


class _InWorktree:
    """One unattended run, composed: its session, its workspace (:mod:`beflow.workspace`), the agent
    (:class:`beflow.acpx.AgentSession`) and the delivery of its work (:mod:`beflow.delivery`)."""

    def __init__(
        self,
        session: Session,
        cancelled_because: Callable[[], str | None],
        code_host: CodeHost | None = None,
        claim: Claim | None = None,
    ) -> None:
        self.session = session
        self.record = session.record
        self.store = session.store
        self.project = session.project
        self.config = session.project.config
        self.request = session.request
        self.emit = session.emit
        self.code_host = code_host
        self.claim = claim
        self._cancelled_because = cancelled_because
        self._injection: Injection | None = None
        self._channel: RunChannel | None = None  # mcp.self: where beflow's own server forwards the agent's calls
        #: The guard of the repository's git directory around the agent: what it put back, if anything.
        self._guard: repoguard.Guard | None = None
        self._agent: acpx.AgentSession | None = None

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
        self.emit("started", attempt=self.request.attempt, branch=branch, **self._round())
        repo = await workers.blocking(git.open_repo, self.project.directory)
        try:
            return await self._in_worktree(Workspace(self.session, repo), text)
        finally:
            repo.close()  # it holds git processes

    async def _in_worktree(self, workspace: Workspace, text: str) -> RunRecord:
        async def end(outcome: Outcome, reason: str) -> RunRecord:
            """After any way out: deliver what the agent changed (the work is never lost), then record and
            report."""
            # A step that failed because it was interrupted (git gets the terminal's Ctrl-C too, and dies of it) is
            # a cancellation, not a failure: the issue goes back to ready.
            if outcome == "failed" and await interrupts.being_cancelled():
                outcome, reason = "cancelled", f"{cancel_reason(self._cancelled_because())} ({reason})"
            with anyio.CancelScope(shield=True):
                if workspace.worktree is not None:
                    delivered = await self._deliver(workspace, outcome, reason)
                    if outcome != "cancelled":  # cancelled it stays, whatever its commit did
                        outcome, reason = delivered
            if (
                outcome == "failed" and await interrupts.being_cancelled()
            ):  # a git step of the cleanup (the commit), interrupted
                outcome, reason = "cancelled", f"{cancel_reason(self._cancelled_because())} ({reason})"
            return await self._finish(outcome, reason)

        # Bad configuration and MCP servers that do not resolve are permanent failures; a bug in beflow is still
        # recorded, the tracker told and the work kept.
        guarded = self.session.guarded(
            end, cancelled_because=self._cancelled_because, interrupted=interrupts.being_cancelled
        )
        async with guarded as ending:
            self._resolve_servers()
            await workspace.create()
            with self.session.repository_guarded(workspace.path) as self._guard:
                ending.set(*await self._agent_session(workspace, text))
        await anyio.lowlevel.checkpoint()  # a pending cancellation goes on from here, the record written
        return ending.finished

    async def _deliver(self, workspace: Workspace, outcome: Outcome, reason: str) -> tuple[Outcome, str]:
        """Delivery in one thread hop (:func:`beflow.delivery.deliver`), its verdict written into the record, then
        the worktree removed unless it is kept."""
        record, worktree = self.record, workspace.worktree
        assert worktree is not None
        injection, guard = self._injection, self._guard
        refuse, for_good = None, False
        if injection is not None and (injection.restored is None or injection.restored.action == "failed"):
            refuse = f"{ACPXRC} could not be put back"  # the worktree may still hold the injected file
        elif guard is not None and guard.changed:  # an agent that works against the user: not delivered
            refuse, for_good = repoguard.describe(guard), True  # nor tried again by a watch: a person's to look at
        title = prompt.without_controls(record.title or record.issue)
        job = delivery.Job(
            worktree=worktree,
            directory=self.project.directory,
            repo=workspace.repo,
            outcome=outcome,
            reason=reason,
            message=f"{title}\n\nbeflow run {record.id} ({outcome}) on issue {record.issue}."
            if self.config.after_run.commit
            else None,
            base=self.config.worktrees.base,
            # The session's redactor leaves beflow's own server out: its BEFLOW_HOME is a path, no secret. It holds
            # beflow's own secrets (the tracker's token) whether or not servers were injected.
            needles=[*([injection.written] if injection is not None else []), *self.session.redact.needles()],
            managed=injection is not None,
            refuse=refuse,
            refuse_for_good=for_good,
            hidden=bool(workspace.git_env),
            run_id=record.id,
            proposal=self._proposal() if outcome != "cancelled" else None,
            answered=rounds.commit_messages(
                title, record.id, record.issue, self.request.round, [p.id for p in self.request.feedback]
            )
            if self.request.round and self.config.after_run.commit
            else None,
        )
        verdict = await workers.blocking(delivery.deliver, job)
        record.commit = verdict.commit
        record.changed_files = list(verdict.changed_files)
        record.permanent = record.permanent or verdict.permanent
        record.worktree_kept = verdict.worktree_kept
        if verdict.pull_request is not None:
            record.pull_request = verdict.pull_request
        if verdict.claim_lost is not None:
            self.session.claim_lost = verdict.claim_lost
        self.store.save(record)
        for notice in verdict.notices:
            self.emit("notice", message=notice)
        published = verdict.claim_lost is None and verdict.proposed in (None, "opened", "updated")
        if self.request.round and verdict.outcome in DONE_OUTCOMES and verdict.commit is not None and published:
            await workers.blocking(self._reply, verdict.outcome)
        if not verdict.worktree_kept:
            # A new branch that holds nothing but its base would only be clutter: `git branch` stays clean.
            fresh = record.commit is None and not worktree.continued
            await workspace.remove(delete_fresh_branch=lambda: fresh and not record.worktree_kept)
        return verdict.outcome, verdict.reason

    def _reply(self, outcome: Outcome) -> None:
        """Answer each piece the round consumed where it was given: what changed, with the commit."""
        found = rounds.sources(self.session.tracker, self.code_host)
        body = self.session.redact.text(rounds.reply_text(self.record, outcome))
        for problem in rounds.reply_all(found, self.request.feedback, body):
            self.emit("notice", message=problem)

    def _proposal(self) -> delivery.Proposal | None:
        """How a succeeded run is proposed, when the config asks for pull requests and a code host takes them."""
        if not self.config.after_run.pull_request or self.code_host is None:
            return None
        record, issue = self.record, self.session.issue

        def body(verdict: delivery.Verdict) -> str:
            draft = record.model_copy(
                update={
                    "outcome": verdict.outcome,
                    "stop_reason": verdict.reason,
                    "commit": verdict.commit,
                    "changed_files": list(verdict.changed_files),
                    "worktree_kept": verdict.worktree_kept,
                }
            )
            text = f"{summary(draft)}\n\nCloses #{issue.key}" + (f" ({issue.url})" if issue.url else "")
            return self.session.redact.text(text)  # the agent's final message, say: the token is a secret of the run

        held = self.claim.held if self.claim is not None else contextlib.nullcontext
        return delivery.Proposal(self.code_host, issue.title, body, self.config.after_run.draft, held)

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

    async def _agent_session(self, workspace: Workspace, text: str) -> tuple[Outcome, str]:
        """Inject, run acpx, restore. Returns the outcome and a reason."""
        record, cwd = self.record, workspace.path
        redact = self.session.redact
        box = Sandbox.for_run(self.config, cwd, self.project.directory, self._own_paths(), self.session.servers)
        record.sandboxed = box is not None
        agent = self._agent = acpx.AgentSession(
            self.config, cwd, env=workspace.git_env, unset=workspace.withheld, sandbox=box
        )
        directory = self.store.directory(record.id)
        transcript_path = directory / "transcript.jsonl"
        stderr_path = directory / "stderr.log"
        with (
            CappedLog(transcript_path, TRANSCRIPT_LIMIT) as transcript_file,
            CappedLog(stderr_path, STDERR_LIMIT, redact) as stderr_file,
        ):
            # Every line of the ACP stream is life (the agent's messages, tool calls, a running tool's output; not
            # its stderr); what the agent reports it used is held to the budgets as it comes (beflow.limits).
            limiter = Limiter(self.config.limits, lambda: agent.transcript.latest, self._notice)
            usage = UsageEvents(self.emit)

            def on_stdout(line: bytes) -> None:
                limiter.alive()
                line = redact(line)
                transcript_file.line(line)
                transcript = agent.transcript
                before, updates = transcript.latest, transcript.usage.updates
                transcript.feed(line)
                if transcript.latest and transcript.latest != before:
                    self.emit("activity", latest=transcript.latest)
                if transcript.usage.updates != updates:  # (the turn's own counts come with its end)
                    limiter.check(transcript.usage)
                    usage.seen(transcript.usage)

            def on_stderr(line: bytes) -> None:
                stderr_file.line(line)

            async with self.session.injected(cwd) as handle:
                self._injection = handle
                await workspace.hook("before_run", fatal=False)
                async with (
                    follow_progress(self.store, record.id, lambda note: self.emit("progress", text=note.text)),
                    own_channel(self._channel, self.session.tracker, lambda: agent.transcript, self._notice),
                ):
                    resume = self.request.attempt > 1 or self.request.round > 0  # a retry, or a review round
                    earlier = self.store.resumable_session(record) if resume else None
                    if earlier is not None:  # kept before the turn: a killed beflow's next command ends its owner
                        record.session = earlier
                        await workers.blocking(self.store.save, record)
                    try:
                        result = await limiter.supervise(
                            lambda: agent.run(
                                text,
                                key=record.issue,
                                prompt_file=directory / "prompt.md",
                                earlier=earlier,
                                earlier_usage=self._session_spent(earlier),
                                on_stdout=on_stdout,
                                on_stderr=on_stderr,
                                on_cold_start=self._started_cold,
                            )
                        )
                    finally:
                        if box is not None:  # what the sandbox's proxy refused, however the run ended
                            record.blocked = dict(box.blocked)
                    record.resumed_session = agent.resumed_session
                await workspace.hook("after_run", fatal=False)
        transcript = agent.transcript
        record.unheld = limiter.ended(transcript.usage)  # the turn's own token counts come with its end
        record.final_message = transcript.final_message
        record.session = transcript.session_id
        record.usage = None if transcript.usage.empty else transcript.usage
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
        verdict = judge(result, transcript, self.config, stderr, key=self.request.key, run_id=record.id)
        record.permanent = verdict.permanent
        if self._channel is not None and self._channel.failure is not None:
            return verdict.outcome, f"{verdict.reason}; {self._channel.failure}"
        return verdict.outcome, verdict.reason

    def _round(self) -> dict[str, int]:
        """What a review round's events add: its number."""
        return {"round": self.request.round} if self.request.round else {}

    def _own_paths(self) -> list[Path]:
        """What beflow's own server writes for the run (its record, the channel): a sandbox lets it through."""
        return [self.store.directory(self.record.id)] + ([self._channel.directory] if self._channel else [])

    def _notice(self, message: str) -> None:
        self.emit("notice", message=message)

    def _started_cold(self, why: str) -> None:
        self.record.resume_note = why
        self.emit("notice", message=why)

    def _session_spent(self, session: str | None) -> guardrails.Usage | None:
        """What the latest run on the ACP session ``session`` reported, that a resumed run's cost counts from."""
        if session is None:
            return None
        return spending.last_on_session(self.store.records([self.record.issue]), session)

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
            **self._round(),
            **({"usage": used} if (used := guardrails.event_data(record.usage)) else {}),
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
    code_host = open_code_host(project, tracker)  # before any agent runs: where to push is read now
    found = rounds.sources(tracker, code_host)
    picked = not keys
    store = RunStore(project.directory)
    acpx.close_killed_runs(store)
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
                # Unanswered feedback on an issue's work makes its run a review round, at once (no settle wait).
                planned = await workers.blocking(rounds.plan, project, found, key)
                if planned is not None and planned.pieces:
                    if planned.capped or planned.ended is not None:
                        most = project.config.feedback.max_rounds
                        await workers.blocking(rounds.note_end, tracker, key, planned, most)
                        raise rounds.RoundsEnded(rounds.end_reason(planned, most))
                    request.round, request.feedback, request.ignored = planned.round, planned.pieces, planned.ignored
                records.append(await Run(project, tracker, request, events, code_host=code_host).execute())
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
