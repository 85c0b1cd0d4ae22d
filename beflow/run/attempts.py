"""Best of N (docs/runs.md#best-of-n): several candidates at one issue, judged, and one pull request.

The issue is claimed once, by the judged run (:class:`BestOf`). Each candidate is a full unattended run of its own
(:class:`beflow.run.runner.InWorktree`: its worktree, its branch ``beflow-attempts/<key>/c<N>``, injection and restore,
sandbox, limits, record), with its agent (``attempts.agents`` in turn) and the prompt variable ``candidate``; a
candidate tells the tracker nothing. Each takes a lane of its own (``lanes``). A candidate that committed its work runs
the judge's checks in its sandbox, as hooks run; then :func:`beflow.run.judging.choose` picks one, its commit
becomes ``beflow/<key>`` and only it is proposed, the comparison table in its pull request and in the issue's comment.
None passing: the issue fails with the table, every branch kept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import anyio

from beflow.codehosts.base import CodeHost
from beflow.config import Hooks, Project
from beflow.errors import BeflowError
from beflow.events import EventSink
from beflow.feedback import strip_hidden
from beflow.ops import questions
from beflow.records.record import CandidateRow, Outcome, Question, RunRecord
from beflow.records.store import RunStore
from beflow.repository import refs, status
from beflow.run import judging, prompt
from beflow.run.candidates import candidates_for
from beflow.run.issue_status import refuse_closed
from beflow.run.lifecycle import Session, unexpected
from beflow.run.policy import status_after
from beflow.run.request import RunRequest
from beflow.run.runner import InWorktree, NoLongerReady, Run
from beflow.run.set_budget import SetBudget
from beflow.run.summary import pull_request_summary
from beflow.system import threads
from beflow.trackers import Issue, Status, Tracker
from beflow.trackers.claims import Claim, ClaimLost, while_held
from beflow.trackers.quoting import code, fenced


class BestOf:
    """The judged run of one issue: its candidates, the verdict and the one pull request. Build it, then ``await
    execute()``; the record it returns is the issue's (outcome, the chosen commit, the table); the candidates' are
    in the store beside it. ``lanes``: what each candidate holds while it runs (a watch's or ``--auto``'s limiter,
    a fleet worker's lanes)."""

    def __init__(
        self,
        project: Project,
        tracker: Tracker,
        request: RunRequest,
        count: int,
        events: EventSink | None = None,
        *,
        code_host: CodeHost | None = None,
        lanes: AbstractAsyncContextManager[object] | None = None,
        cancelled_because: Callable[[], str | None] | None = None,
        candidate_events: EventSink | None = None,
        confirming: RunRecord | None = None,
    ) -> None:
        self.project = project
        #: The judged run whose choice a person answered (``attempts.confirm``): this run promotes what they chose
        #: and runs no candidate.
        self.confirming = confirming
        self.tracker = tracker
        self.request = request
        self.count = count
        self.code_host = code_host
        self.lanes = lanes or anyio.CapacityLimiter(count)
        self._events = threads.looped(events) if events is not None else None
        #: Where the candidates' own events go (a watch's lane follows the judged run's only); default: ``events``.
        heard = candidate_events if candidate_events is not None else events
        self._candidate_events = threads.looped(heard) if heard is not None else None
        self._cancelled_because = cancelled_because or (lambda: None)

    async def execute(self, notice: str | None = None) -> RunRecord:
        """Claim the issue, run the candidates, judge, propose; never raises for a failed run (the record says).
        ``notice``: what the run says first (:func:`candidates_for`'s)."""
        issue = await threads.blocking(self.tracker.get, self.request.key)
        refuse_closed(issue)
        claim = await threads.shielded(self.tracker.claim, issue.key, self.request.owner)
        try:
            issue = await threads.blocking(self.tracker.get, issue.key)
            # (a person's answer to the confirmation: the issue waits blocked for this run)
            startable = Status.BLOCKED if self.request.answer is not None else Status.READY
            if self.request.only_if_ready and issue.status != startable:
                raise NoLongerReady(f"issue {issue.key} is no longer ready (it is {issue.status.value})")
            refuse_closed(issue)
            branch = refs.branch_for(issue.key)
            session = Session(
                self.project, self.tracker, issue, self.request, self._events, branch=branch, code_host=self.code_host
            )
            lost: list[str] = []

            def lose(reason: str) -> None:
                lost.append(reason)
                session.claim_lost = reason

            def because() -> str | None:
                return f"lost the claim on the issue: {lost[0]}" if lost else self._cancelled_because()

            judged = _Judged(self, session, claim, because, notice)
            record = await while_held(claim, judged.run, lose, lambda m: session.emit("notice", message=m))
            return record if record is not None else session.record
        finally:
            with anyio.CancelScope(shield=True):
                await threads.blocking(claim.release)


class _Judged:
    """The body of a best-of-N run while its claim holds."""

    def __init__(
        self,
        best: BestOf,
        session: Session,
        claim: Claim,
        cancelled_because: Callable[[], str | None],
        notice: str | None,
    ) -> None:
        self.notice = notice
        self.best = best
        self.session = session
        self.record = session.record
        self.claim = claim
        self.config = best.project.config
        self._cancelled_because = cancelled_because
        #: Whether ``beflow/<key>`` did not exist when the candidates started: one there at promotion was planted
        #: meanwhile (an unsandboxed agent can write any ref), and is set aside rather than followed.
        self.started_without = False
        #: What the candidates and the reviewer cost together, against ``attempts.max_cost``.
        self.budget = SetBudget(self.config.attempts.max_cost, self.config.limits.currency)

    async def run(self) -> RunRecord:
        session, record = self.session, self.record
        agents = [self._project_of(n).config.agent_label() for n in range(1, self.best.count + 1)]
        record.agent = f"best of {self.best.count}: {', '.join(dict.fromkeys(agents))}"
        record.best_of = self.best.count
        plan = f"Best of {self.best.count}: candidates on beflow-attempts branches, judged; see their runs.\n"
        if self.best.confirming is not None:
            asking = self.best.confirming.id
            plan = f"Best of {self.best.count}: the candidate a person chose (run {asking}) is proposed.\n"
        await threads.shielded(session.start, plan)
        session.emit("started", attempt=self.best.request.attempt, branch=record.branch)
        if self.notice is not None:
            session.emit("notice", message=self.notice)

        async def finish(outcome: Outcome, reason: str) -> RunRecord:
            retry = not (self.best.request.final or record.permanent)
            return await threads.shielded(
                session.finish, outcome, reason, lambda ended: status_after(ended, retry=retry), commit=record.commit
            )

        async with session.guarded(finish, cancelled_because=self._cancelled_because) as ending:
            if self.best.confirming is not None:
                ending.set(*await self._confirmed(self.best.confirming))
            else:
                directory, branch = self.best.project.directory, record.branch or refs.branch_for(record.issue)
                self.started_without = await threads.blocking(refs.branch_tip, directory, branch) is None
                ending.set(*await self._judge(await self._candidates()))
        return ending.finished

    def _project_of(self, candidate: int) -> Project:
        """The project as candidate ``candidate`` runs it: its agent (``attempts.agents`` in turn), so that the
        preset, the login variables and the record follow it."""
        config = self.config.model_copy(update={"agent": self.config.attempts.agent_of(candidate, self.config.agent)})
        return self.best.project.model_copy(update={"config": config})

    async def _candidates(self) -> list[RunRecord]:
        """Every candidate run at once, each in a lane; one that breaks (a bug, a hostile agent) is its own
        failure, never its siblings'."""
        best, issue = self.best, self.session.issue
        done: dict[int, RunRecord] = {}

        async def one(candidate: int) -> None:
            async with best.lanes:
                request = dataclasses.replace(best.request, candidate=candidate)
                session = Session(
                    self._project_of(candidate),
                    best.tracker,
                    issue,
                    request,
                    best._candidate_events,
                    branch=refs.candidate_branch(issue.key, candidate),
                    code_host=best.code_host,  # (its secrets are masked in the candidate's record too)
                )
                session.budget = self.budget
                session.record.set_of = self.record.id
                done[candidate] = session.record
                if self.budget.breach is not None:  # spent before its lane came: it never starts
                    session.record.outcome, session.record.stop_reason = "over_budget", self.budget.breach.reason
                    return
                try:
                    done[candidate] = await InWorktree(session, self._cancelled_because, None, self.claim).run()
                except Exception as error:  # recorded as failed by the run itself; the siblings go on
                    self.session.emit("notice", message=f"candidate {candidate}: {unexpected(error)}")

        async with anyio.create_task_group() as tasks:
            for candidate in range(1, best.count + 1):
                tasks.start_soon(one, candidate)
        return [done[n] for n in sorted(done)]

    async def _judge(self, records: Sequence[RunRecord]) -> tuple[Outcome, str]:
        """The verdict and the table in the record; then the chosen candidate made ``beflow/<key>`` and proposed, or
        (``attempts.confirm``) the issue left waiting for a person to confirm or override the choice."""
        record, checks = self.record, len(self.config.attempts.judge.checks)
        rows = [judging.row_of(r, checks) for r in records]
        choice = await self._reviewed(rows) or judging.choose(rows)
        if self.budget.breach is not None:  # judged among those that finished: the reason says why there were few
            choice = judging.Choice(choice.chosen, f"{self.budget.breach.reason}; {choice.reason}")
        record.candidates = [row.model_copy(update={"chosen": row.candidate == choice.chosen}) for row in rows]
        self.session.store.save(record)
        if choice.chosen is None:
            return "failed", f"{choice.reason}; every candidate's branch is kept"
        if self.config.attempts.confirm:
            try:  # (the confirming run cannot tell a planted branch from a person's: it is set aside now)
                said = await threads.blocking(self._set_aside_planted, None)
            except BeflowError as error:
                return "failed", f"{choice.reason}; {error.message}"
            return self._ask(choice.chosen, choice.reason if said is None else f"{choice.reason}; {said}")
        return await self._promote(choice.chosen, choice.reason)

    def _set_aside_planted(self, new: str | None) -> str | None:
        """A ``beflow/<key>`` that appeared while the candidates ran (an unsandboxed agent can write any ref) is set
        aside as ``beflow-attempts/<key>/planted`` — never followed, pushed or proposed — and the branch moved to
        ``new`` (None: removed); what was done, or None when there was nothing to set aside."""
        if not self.started_without:
            return None
        record = self.record
        branch, aside = record.branch or refs.branch_for(record.issue), refs.planted_branch(record.issue)
        planted = refs.set_aside(self.best.project.directory, branch, aside, new, f"beflow {record.id}")
        self.started_without = new is None  # (set aside once: from here on the branch is beflow's)
        if planted is None:
            return None
        said = f"{branch} appeared while the candidates ran (at {planted[:12]}): set aside as {aside}, not used"
        self.session.emit("notice", message=said)
        return said

    def _ask(self, chosen: int, reason: str, why: str | None = None) -> tuple[Outcome, str]:
        """``attempts.confirm``: the run ends ``asked``, its issue ``blocked`` with the question as its comment (the
        questions' machinery: no lane held, ``limits.wait`` bounds it); ``why``: what was wrong with an answer."""
        rows = self.record.candidates
        text = (
            f"The judge chose candidate {chosen} ({reason}). Nothing is proposed until a person confirms it or "
            f"chooses another: answer `c{chosen}` (or `yes`), or another candidate's `c<N>` (one that did not pass "
            f"only with `anyway`: `c<N> anyway`); `beflow issues confirm {self.record.issue} [N]` or the dashboard "
            "do the same.\n\n" + judging.table(rows)
        )
        if why is not None:
            text = f"{why}.\n\n{text}"
        self.record.question = Question(text=text, choices=[f"c{row.candidate}" for row in rows])
        said = f"candidate {chosen} chosen; waiting for a person to confirm it or choose another (attempts.confirm)"
        return "asked", f"{why}; {said}" if why else said

    async def _confirmed(self, asking: RunRecord) -> tuple[Outcome, str]:
        """A person answered the judged run ``asking``'s confirmation: what they chose is promoted; an answer that
        chooses none (or one that may not be) asks again, saying why."""
        record, answer = self.record, self.best.request.answer
        assert answer is not None
        # (links and removals are this run's to make: none is taken from the earlier record)
        fresh = {"chosen": False, "url": None, "removed": False}
        record.candidates = [row.model_copy(update=fresh) for row in asking.candidates]
        record.review = asking.review
        proposed = next((row.candidate for row in asking.candidates if row.chosen), None)
        decided = questions.decision(answer.text, record.candidates, proposed)
        if decided.chosen is None:
            assert decided.why is not None
            again = proposed if proposed is not None else record.candidates[0].candidate
            return self._ask(again, asking.stop_reason or "", why=f"{answer.author}'s answer: {decided.why}")
        record.decided_by = answer.author
        if decided.chosen == proposed:
            reason = f"candidate {decided.chosen} chosen by the judge and confirmed by {answer.author}"
        else:
            over = f"over the judge's candidate {proposed}" if proposed is not None else "the judge having chosen none"
            reason = f"candidate {decided.chosen} chosen by {answer.author}, {over}"
        if decided.anyway:
            reason += " (it did not pass; chosen anyway)"
        return await self._promote(decided.chosen, reason)

    async def _promote(self, chosen: int, reason: str) -> tuple[Outcome, str]:
        """Candidate ``chosen``'s commit becomes ``beflow/<key>``, the others' branches are pushed beside it or
        removed (``attempts.keep``), and its pull request is opened."""
        record, store = self.record, self.session.store
        record.candidates = [row.model_copy(update={"chosen": row.candidate == chosen}) for row in record.candidates]
        row = next(row for row in record.candidates if row.candidate == chosen)
        assert row.commit is not None, "a candidate that committed nothing is never chosen"
        try:
            record.changed_files = (await threads.blocking(store.get, row.run_id)).changed_files
        except BeflowError:  # (its record is gone: the list of files is left out, nothing else needs it)
            record.changed_files = []
        record.base_commit, record.lines_changed = row.base_commit, row.lines_changed
        branch, directory = record.branch or refs.branch_for(record.issue), self.best.project.directory
        try:
            said = await threads.blocking(self._set_aside_planted, row.commit)
            if said is None:
                await threads.blocking(refs.move_branch, directory, branch, row.commit, None, f"beflow {record.id}")
            else:
                reason = f"{reason}; {said}"
        except BeflowError as error:
            return "failed", f"{reason}; {branch} could not be made: {error.message}"
        record.commit = row.commit
        store.save(record)
        if not self.config.attempts.keep:  # before the pull request, so that its table says they went
            await threads.blocking(self._remove_branches)
        host = self.best.code_host if self.config.after_run.pull_request else None
        if host is not None and self.config.attempts.keep:
            await threads.blocking(self._publish_others, host, chosen)
        if host is not None:
            reason = await threads.blocking(self._propose, host, branch, reason)
        store.save(record)
        return "succeeded", reason

    async def _reviewed(self, rows: Sequence[CandidateRow]) -> judging.Choice | None:
        """The reviewer's choice among the passing candidates (``attempts.judge.reviewer``), or None: no reviewer,
        fewer than two passing, or no answer that names one of them (then the checks and the diffs choose, as said).

        The reviewer is a run of its own (in a lane, its sandbox, its record) in a worktree of the base: beflow's
        prompt gives it the issue and each passing candidate's diff (capped), it answers through
        ``candidate.choose`` (beflow's own MCP server, bound to its run), and nothing it changes is committed."""
        best, issue = self.best, self.session.issue
        reviewer = self.config.attempts.judge.reviewer
        passing = [row for row in rows if judging.passes(row)]
        if reviewer is None or len(passing) < 2 or self.budget.breach is not None:
            return None
        text = await threads.blocking(review_prompt, best.project.directory, issue, passing)
        after_run = self.config.after_run.model_copy(update={"commit": False, "pull_request": False})
        mcp = self.config.mcp.model_copy(update={"self_server": True})  # (its answer goes through beflow's server)
        update = {"agent": reviewer, "hooks": Hooks(), "after_run": after_run, "mcp": mcp}
        config = self.config.model_copy(update=update)
        session = Session(
            best.project.model_copy(update={"config": config}),
            best.tracker,
            issue,
            dataclasses.replace(best.request, review=text),
            best._candidate_events,
            branch=refs.review_branch(issue.key),
            code_host=best.code_host,
        )
        session.record.reviewing = [row.candidate for row in passing]
        session.budget = self.budget  # (its cost counts with the candidates')
        session.record.set_of = self.record.id
        async with best.lanes:
            try:
                await InWorktree(session, self._cancelled_because, None, self.claim).run()
            except Exception as error:  # recorded by the run itself: the checks and the diffs choose
                self.session.emit("notice", message=f"the reviewer: {unexpected(error)}")
        answer = session.store.read_choice(session.record.id)
        if answer is None or answer.candidate not in session.record.reviewing:
            why = f"the reviewer (run {session.record.id}) chose no candidate that passed: the checks and diffs choose"
            self.session.emit("notice", message=why)
            return None
        self.record.review = answer
        return judging.Choice(answer.candidate, f"candidate {answer.candidate} chosen by the reviewer")

    def _propose(self, host: CodeHost, branch: str, reason: str) -> str:
        """Push ``beflow/<key>`` and open its pull request, the table in its body; a failure is said, not fatal."""
        record, issue = self.record, self.session.issue
        draft = record.model_copy(update={"outcome": "succeeded", "stop_reason": reason})
        line = _issue_line(issue, closes=self.config.after_run.closes_issue)
        body = self.session.redact.text(f"{pull_request_summary(draft, self.session.tracker)}\n\n{line}")
        try:
            with self.claim.held():
                host.push(self.best.project.directory, branch)
            with self.claim.held():
                pull = host.propose(branch, issue.title, body, draft=self.config.after_run.draft)
        except ClaimLost as error:
            self.session.claim_lost = error.message
            return f"{reason}; not published: {error.message}"
        except BeflowError as error:
            self.session.emit("notice", message=f"no pull request: {error.message}")
            return f"{reason}; the pull request could not be opened: {error.message}"
        record.pull_request = pull.url
        self.session.emit("notice", message=f"pull request {'opened' if pull.opened else 'updated'}: {pull.url}")
        return reason

    def _remove_branches(self) -> None:
        """``attempts.keep`` off: the candidates' branches go once one is ``beflow/<key>`` (each only if it is still
        where its run left it); the table says which went."""
        directory, gone = self.best.project.directory, set()
        for row in self.record.candidates:
            if row.branch and row.commit and refs.delete_branch_at(directory, row.branch, row.commit):
                gone.add(row.candidate)
        self.record.candidates = [
            row.model_copy(update={"removed": row.candidate in gone}) for row in self.record.candidates
        ]

    def _publish_others(self, host: CodeHost, chosen: int) -> None:
        """``attempts.keep`` on, a pull request to open: the other candidates' committed branches are pushed too, so
        that its table links each (a branch that could not be pushed is named, not linked: no dead link). Each
        commit was checked for leaks when its run committed it, as the chosen one's was."""
        rows = []
        for row in self.record.candidates:
            directory = self.best.project.directory
            # (only as its run left it: whatever else moved it is not published)
            if row.candidate != chosen and row.branch and row.commit == refs.branch_tip(directory, row.branch or ""):
                try:
                    with self.claim.held():
                        host.push(directory, row.branch)
                    row = row.model_copy(update={"url": host.branch_url(row.branch)})
                except BeflowError as error:
                    said = f"candidate {row.candidate}'s branch not pushed: {error.message}"
                    self.session.emit("notice", message=said)
            rows.append(row)
        self.record.candidates = rows


#: Bytes of each candidate's diff the reviewer is shown; beyond, a line says how much was left out.
REVIEW_DIFF = 32 << 10


def review_prompt(directory: Path, issue: Issue, passing: Sequence[CandidateRow]) -> str:
    """The reviewer's prompt: the issue, each passing candidate's figures and diff (capped at :data:`REVIEW_DIFF`
    bytes, control characters replaced), and how to answer."""
    numbers = ", ".join(str(row.candidate) for row in passing)
    parts = [
        f"You review {len(passing)} candidate solutions to one issue, each on a branch of its own. Do not change "
        "any file. Read the issue and each candidate's diff, then call the tool `candidate_choose` of beflow's MCP "
        f"server once, with the number of the candidate you prefer ({numbers}) and why, in a few sentences.",
        "",
        f"# Issue {issue.key}: {prompt.without_controls(strip_hidden(issue.title))}",
        "",
        prompt.without_controls(strip_hidden(issue.body)),
    ]
    for row in passing:
        assert row.commit is not None and row.base_commit is not None
        diff = status.diff(directory, row.base_commit, row.commit).encode("utf-8", "replace")
        shown = diff[:REVIEW_DIFF].decode("utf-8", "replace")
        cut = f"\n[{len(diff) - REVIEW_DIFF} more bytes of the diff are left out]" if len(diff) > REVIEW_DIFF else ""
        figures = f"{row.checks_passed}/{row.checks_total} checks passed, {row.lines_changed} lines changed"
        parts += [
            "",
            f"## Candidate {row.candidate} ({figures})",
            "",
            fenced(prompt.without_controls(shown), "diff") + cut,
        ]
    return "\n".join(parts) + "\n"


def _issue_line(issue: Issue, *, closes: bool) -> str:
    if closes:  # (as a plain run's pull request says it: beflow.run.runner)
        return f"Closes #{issue.key}" + (f" ({issue.url})" if issue.url else "")
    return f"Issue: {issue.url}" if issue.url else f"Issue: {code(issue.key)}"


async def run_issue(
    project: Project,
    tracker: Tracker,
    request: RunRequest,
    events: EventSink,
    *,
    code_host: CodeHost | None,
    lanes: int | AbstractAsyncContextManager[object],
    cancelled_because: Callable[[], str | None],
    candidate_events: EventSink,
) -> RunRecord:
    """One issue's run as a watch starts it in its ``lanes``: best of N when it has lanes for more than one
    candidate and still asks for them (:func:`~beflow.run.candidates.candidates_for`), else a plain run. ``lanes``:
    how many (a watch's), or what each candidate takes (a fleet worker's, which runs any number in turn). A round,
    and an answer to an agent's question (which resumes the run that asked), is never a best of N."""
    count, notice, confirming = 1, None, await threads.blocking(_confirming, project, request)
    if confirming is not None:  # a person answered best of N's confirmation: what they chose is proposed
        count = confirming.best_of
    elif (not isinstance(lanes, int) or lanes > 1) and not request.round and request.answer is None:
        issue = await threads.blocking(tracker.get, request.key)
        count, notice = await threads.blocking(candidates_for, project, issue, None)
    if count > 1:
        best = BestOf(
            project,
            tracker,
            request,
            count,
            events,
            code_host=code_host,
            lanes=anyio.CapacityLimiter(lanes) if isinstance(lanes, int) else lanes,
            cancelled_because=cancelled_because,
            candidate_events=candidate_events,
            confirming=confirming,
        )
        return await best.execute(notice)
    return await Run(
        project, tracker, request, events, cancelled_because=cancelled_because, code_host=code_host
    ).execute()


def _confirming(project: Project, request: RunRequest) -> RunRecord | None:
    """The judged run whose confirmation ``request`` answers (``attempts.confirm``), if it answers one."""
    if request.answer is None:
        return None
    try:
        asking = RunStore(project.directory).get(request.answer.run)
    except BeflowError:
        return None
    return asking if asking.best_of > 1 and asking.candidates else None
