"""One unattended run: every ``--auto`` run and every ``watch`` dispatch is exactly this.

claim → prompt → MCP servers → the workspace (:mod:`beflow.run.workspace`: worktree on ``beflow/<key>``, included
files, ``after_create``) → the agent's turn (:class:`beflow.run.turn.AgentTurn`: inject, ``before_run``, acpx cold or
resumed, ``after_run``, restore) → delivery (:func:`beflow.run.delivery.deliver`, one thread hop: commit, leak check,
compare-and-swap, push and pull request through the code host) → record → remove the worktree (kept, and said
so, when that could lose the agent's work) → tracker update → release the claim.

The record, the tracker, the events and the injection are the run's :class:`~beflow.run.lifecycle.Session`; how the
session ended is :func:`beflow.run.policy.judge`'s call, what became of its work the delivery's
:class:`~beflow.run.delivery.Verdict`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import anyio
import anyio.from_thread
import anyio.lowlevel

from beflow import guardrails
from beflow.codehosts.base import CodeHost
from beflow.config import Project
from beflow.errors import BeflowError, ConfigError, LockedError, PermanentFailure
from beflow.events import EventSink
from beflow.feedback import pending
from beflow.mcp.acp import resolve_servers
from beflow.mcpserver.channel import RunChannel, with_own_server
from beflow.ops import rounds
from beflow.paths import ACPXRC
from beflow.records.record import DONE_OUTCOMES, CheckResult, Outcome, RunRecord
from beflow.repository import git, objectstore, refs, repoguard, status
from beflow.run import agent_choice as choice
from beflow.run import delivery, prompt
from beflow.run.issue_status import refuse_closed
from beflow.run.lifecycle import Session, cancel_reason
from beflow.run.policy import status_after
from beflow.run.request import RunRequest, branch_of, render_prompt
from beflow.run.summary import commit_words, pull_request_summary
from beflow.run.turn import AgentTurn
from beflow.run.workspace import Workspace
from beflow.system import interrupts, threads
from beflow.trackers import Issue, Status, Tracker
from beflow.trackers.claims import Claim, while_held
from beflow.trackers.quoting import code


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
        self._events = threads.looped(events) if events is not None else None  # steps in worker threads emit too
        self._cancelled_because = cancelled_because or (lambda: None)

    async def execute(self) -> RunRecord:
        """Run the issue to an outcome; never raises for a failed run (the record says), only for bad usage."""
        issue = await threads.blocking(self.tracker.get, self.request.key)
        refuse_closed(issue)
        claim = await threads.shielded(self.tracker.claim, issue.key, self.request.owner)
        try:
            # What the issue is now that it is ours: another beflow may have run it between our look and our claim.
            issue = await threads.blocking(self.tracker.get, issue.key)
            # A review round starts from review (or from ready: put back in the queue, or retried).
            startable = (Status.READY, Status.REVIEW) if self.request.round else (Status.READY,)
            if self.request.answer is not None:  # an answered question: the issue waits for this run
                startable = (Status.BLOCKED,)
            if self.request.only_if_ready and issue.status not in startable:
                raise NoLongerReady(f"issue {issue.key} is no longer ready (it is {issue.status.value})")
            refuse_closed(issue)
            await threads.blocking(self._choose_agent, issue)
            if self.request.round:
                await threads.blocking(self._round_catch_up, issue)
            session = Session(
                self.project,
                self.tracker,
                issue,
                self.request,
                self._events,
                branch=branch_of(self.project.directory, issue),
                code_host=self.code_host,
            )
            return await self._held(claim, session)
        finally:
            with anyio.CancelScope(shield=True):
                await threads.blocking(claim.release)  # a remote tracker's release is a request

    def _choose_agent(self, issue: Issue) -> None:
        """The run's agent and model as the issue's labels choose them (``agent:NAME``, ``model:NAME``), within the
        config's lists; labels that name anything else refuse the run: the issue leaves the queue (back to open),
        saying why once, and no agent starts."""
        try:
            self.project, chose = choice.for_issue(self.project, issue)
        except choice.AgentRefused as refused:
            said = f"{choice.REFUSED}: {refused.message}. {refused.fix}"
            if not any(c.text == said for c in issue.comments):
                if issue.status == Status.READY:
                    self.tracker.set_status(issue.key, Status.OPEN, note=said)
                else:
                    self.tracker.comment(issue.key, said, author="beflow")
            raise
        self.request.chosen_by = list(chose.labels)

    def _round_catch_up(self, issue: Issue) -> None:
        """Before a round, once the issue is ours: the branch as the code host has it (another machine may have
        pushed a round), and only the feedback no round on it answered yet; none left: another run answered it."""
        project, request, key = self.project, self.request, issue.key
        branch = branch_of(project.directory, issue)
        rounds.catch_up(self.code_host, project.directory, branch)
        done = rounds.answered(project.directory, key, project.config.worktrees.base, issue_id=issue.id)
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
            if lost:
                return f"lost the claim on the issue: {lost[0]}"
            return session.stopped or self._cancelled_because()

        # A person's stop in the run's agent session (heard on the session's own thread) cancels the run as Ctrl-C
        # and a watch's cancel do: through a cancellation, the record closed as cancelled, everything restored.
        stop_scope, loop = anyio.CancelScope(), anyio.lowlevel.current_token()

        def stop() -> None:
            session.stopped = "a person stopped it in the issue's agent session"
            anyio.from_thread.run_sync(stop_scope.cancel, token=loop)

        session.on_stop = stop
        steps = InWorktree(session, cancelled_because, self.code_host, claim)

        async def work() -> RunRecord | None:
            with stop_scope:
                return await steps.run()
            return None

        record = await while_held(claim, work, lose, lambda message: session.emit("notice", message=message))
        return record if record is not None else session.record


class InWorktree:
    """One unattended run, composed: its session, its workspace (:mod:`beflow.run.workspace`), the agent
    (:class:`beflow.agent.session.AgentSession`) and the delivery of its work (:mod:`beflow.run.delivery`)."""

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
        self._channel: RunChannel | None = None  # mcp.self: where beflow's own server forwards the agent's calls
        self._turn: AgentTurn | None = None
        #: The guard of the repository's git directory around the agent: what it put back, if anything.
        self._guard: repoguard.Guard | None = None

    async def run(self) -> RunRecord:
        record, issue = self.record, self.session.issue
        branch = record.branch or refs.branch_for(issue.key)
        try:
            review = self.request.review  # (best of N's reviewer: its prompt is beflow's)
            text = (
                review
                if review is not None
                else render_prompt(self.project, issue, self.request, branch=branch, run_id=record.id)
            )
        except BeflowError as error:
            record.permanent = True
            await threads.shielded(self.session.start, "")  # the tracker is told: a watch does not pick it up again
            return await self._finish("failed", f"the prompt did not render: {error.message}")
        try:
            await threads.shielded(self.session.start, text)  # the tracker's lock may be busy for seconds
        except BeflowError as error:  # the issue changed under us (closed, unlabelled): record why, run nothing
            return await self._finish("failed", f"the tracker could not be told that the run started: {error.message}")
        self.emit("started", attempt=self.request.attempt, branch=branch, **self._round())
        try:
            repo = await threads.blocking(git.open_repo, self.project.directory)
        except anyio.get_cancelled_exc_class():  # stopped before the run's guard: its record is closed here
            with anyio.CancelScope(shield=True):
                await self._finish("cancelled", cancel_reason(self._cancelled_because()))
            raise
        try:
            # The run's sandbox, once the workspace opened it, lasts until the run ends: before_remove runs in it.
            async with Workspace(self.session, repo).held() as workspace:
                return await self._in_worktree(workspace, text)
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
            # The agent has run: no git command of beflow's from here runs a hook or a configured command (the
            # worktree's removal and the fresh branch's deletion included).
            with anyio.CancelScope(shield=True), git.distrusting():
                if workspace.worktree is not None:
                    delivered = await self._deliver(workspace, outcome, reason)
                    if outcome != "cancelled":  # cancelled it stays, whatever its commit did
                        outcome, reason = delivered
                workspace.done()  # (its sandbox: the login files come back, or a notice says why not)
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
            await workspace.create(self._channel)
            self._turn = AgentTurn(self.session, workspace, self._channel)
            branch = self.record.branch or refs.branch_for(self.record.issue)
            with self.session.repository_guarded(workspace.path, branch=branch) as self._guard:
                ending.set(*await self._turn.run(text))
        await anyio.lowlevel.checkpoint()  # a pending cancellation goes on from here, the record written
        return ending.finished

    async def _deliver(self, workspace: Workspace, outcome: Outcome, reason: str) -> tuple[Outcome, str]:
        """Delivery in one thread hop (:func:`beflow.run.delivery.deliver`), its verdict written into the record, then
        the worktree removed unless it is kept."""
        record, worktree = self.record, workspace.worktree
        assert worktree is not None
        injection, guard = self._turn.injection if self._turn is not None else None, self._guard
        refuse, for_good = None, False
        if injection is not None and (injection.restored is None or injection.restored.action == "failed"):
            refuse = f"{ACPXRC} could not be put back"  # the worktree may still hold the injected file
        elif guard is not None and guard.changed:  # an agent that works against the user: not delivered
            refuse, for_good = repoguard.describe(guard), True  # nor tried again by a watch: a person's to look at
        elif guard is not None and guard.found is not None and not record.sandboxed:
            # Unsandboxed, the agent could write the object store and the refs (in the sandbox, only others can).
            refuse, for_good = objectstore.describe(guard.found), bool(guard.found.objects)
        words = commit_words(self.session.tracker, self.code_host)
        # The title is whoever filed the issue's words: in a commit message it closes or moves nothing either.
        title = words(prompt.without_controls(record.title or record.issue))
        job = delivery.Job(
            worktree=worktree,
            directory=self.project.directory,
            outcome=outcome,
            reason=reason,
            message=f"{title}\n\nbeflow run {record.id} ({outcome}) on issue {record.issue}."
            if self.config.after_run.commit
            else None,
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
            words=words,
        )
        verdict = await threads.blocking(delivery.deliver, job)
        verdict.onto(record)
        if verdict.claim_lost is not None:
            self.session.claim_lost = verdict.claim_lost
        self.store.save(record)
        for notice in verdict.notices:
            self.emit("notice", message=notice)
        if self.request.candidate and verdict.commit is not None and verdict.outcome == "succeeded":
            await self._judge_checks(workspace, verdict.commit)
        published = verdict.claim_lost is None and verdict.proposed in (None, "opened", "updated")
        if self.request.round and verdict.outcome in DONE_OUTCOMES and verdict.commit is not None and published:
            await threads.blocking(self._reply, verdict.outcome)
        if not verdict.worktree_kept:
            # A new branch that holds nothing but its base would only be clutter: `git branch` stays clean.
            fresh = record.commit is None and not worktree.continued
            await workspace.remove(delete_fresh_branch=lambda: fresh and not record.worktree_kept)
        return verdict.outcome, verdict.reason

    async def _judge_checks(self, workspace: Workspace, commit: str) -> None:
        """A best-of-N candidate's committed work: the lines it changes, and the judge's checks run on it in its
        worktree and sandbox, as hooks are (``attempts.judge.checks``); all recorded for the judge."""
        record = self.record
        assert record.base_commit is not None
        record.lines_changed = await threads.blocking(
            status.lines_changed, self.project.directory, record.base_commit, commit
        )
        for number, check in enumerate(self.config.attempts.judge.commands(), start=1):
            passed = await workspace.check(number, check)
            record.checks.append(CheckResult(command=check.command, passed=passed))
        self.store.save(record)

    def _reply(self, outcome: Outcome) -> None:
        """Answer each piece the round consumed where it was given: what changed, with the commit."""
        found = rounds.sources_of(self.project.directory, self.session.tracker, self.code_host)
        body = self.session.redact.text(rounds.reply_text(self.record, outcome))
        for problem in rounds.reply_all(found, self.request.feedback, body):
            self.emit("notice", message=problem)

    def _proposal(self) -> delivery.Proposal | None:
        """How a succeeded run is proposed, when the config asks for pull requests and a code host takes them."""
        if not self.config.after_run.pull_request or self.code_host is None:
            return None
        record, issue = self.record, self.session.issue

        def body(verdict: delivery.Verdict) -> str:
            draft = verdict.onto(record.model_copy(update={"outcome": verdict.outcome, "stop_reason": verdict.reason}))
            text = pull_request_summary(draft, self.session.tracker)
            return self.session.redact.text(f"{text}\n\n{issue_line()}")  # (the agent's words: masked)

        def issue_line() -> str:
            # Merging closes the issue only when asked (after_run.closes_issue): a closing word acts on the code
            # host's own issue of that number, which for another tracker's key is some other issue.
            if self.config.after_run.closes_issue:
                return f"Closes #{issue.key}" + (f" ({issue.url})" if issue.url else "")
            return f"Issue: {issue.url}" if issue.url else f"Issue: {code(issue.key)}"

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

    def _round(self) -> dict[str, int]:
        """What a review round's events add: its number."""
        return {"round": self.request.round} if self.request.round else {}

    async def _finish(self, outcome: Outcome, reason: str) -> RunRecord:
        record = self.record
        retry = not (self.request.final or record.permanent)
        return await threads.shielded(
            self.session.finish,
            outcome,
            reason,
            lambda ended: status_after(ended, retry=retry),
            commit=record.commit,
            changed=len(record.changed_files),
            **self._round(),
            **({"usage": used} if (used := guardrails.event_data(record.usage)) else {}),
        )
