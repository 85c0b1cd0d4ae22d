"""The :class:`Session` of one run of one issue, in every mode — ``--auto``, ``watch``, ``--attend``, ``--open``: it
owns the run record, the store, the tracker, the events and the injected MCP servers.

:mod:`beflow.run.runner` (the unattended run in a worktree) and :mod:`beflow.run.modes` (the supervised ones in the
checkout) compose a session, so that a run reads, records and reports the same way in every mode. What a run starts
from is :mod:`beflow.run.request` (the request, the prompt, the new record); where its issue goes on the tracker,
:mod:`beflow.run.issue_status`; its comment, :mod:`beflow.run.summary`. The decisions (outcomes, statuses, retries)
are pure functions in :mod:`beflow.run.policy`; docs/architecture.md shows the whole.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from beflow import guardrails
from beflow.agent.agent_env import run_secrets
from beflow.codehosts.base import CodeHost
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.events import EventSink, RunEvent, RunEventKind, safe_sink
from beflow.guardrails import Totals
from beflow.mcp.acp import AcpServer, server_names, shadowed_global_servers
from beflow.mcp.inject import Injection, managed_acpxrc
from beflow.mcp.own import secret_part
from beflow.mcp.redact import Redactor
from beflow.ops.questions import question_comment
from beflow.paths import ACPXRC
from beflow.records.record import DONE_OUTCOMES, WORDS_FIELDS, Outcome, RunRecord, masked_record, new_run_id
from beflow.records.store import RunStore
from beflow.repository import repoguard
from beflow.run import issue_status
from beflow.run.issue_status import Unreported
from beflow.run.policy import give_up_note
from beflow.run.reporter import ProgressReporter
from beflow.run.request import RunRequest, new_record
from beflow.run.session_reporter import SessionReporter
from beflow.run.set_budget import SetBudget
from beflow.run.summary import summary
from beflow.system import interrupts
from beflow.system.journal import SAVED_DAYS
from beflow.trackers import Issue, Status, Tracker
from beflow.trackers.base import HostsAgentSessions, ShowsProgress
from beflow.trackers.quoting import inert


def cancel_reason(known: str | None = None) -> str:
    """Why a run is being cancelled: what the canceller said, else the signal, else beflow itself."""
    return known or f"cancelled by {interrupts.state.signal_name or 'beflow'}"


def unexpected(error: BaseException) -> str:
    """The reason a run records for a bug in beflow: the error itself, not the task group's wrapping of it."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"beflow failed unexpectedly: {type(error).__name__}: {error}"


@dataclass
class Ending:
    """How the body of :meth:`Session.guarded` ended: it says so (``outcome``, ``reason``), or an error says it for
    it; ``record`` is the finished record once the block is left."""

    outcome: Outcome = "failed"
    reason: str = "the run did not finish"
    record: RunRecord | None = None

    def set(self, outcome: Outcome, reason: str) -> None:
        self.outcome, self.reason = outcome, reason

    @property
    def finished(self) -> RunRecord:
        assert self.record is not None, "read after the guarded block"
        return self.record


class Session:
    """One run of one issue, in any mode, from its record to the tracker's last word.

    It owns the run record (created with the session: never missing), the store it is written to, the tracker, the
    event sink and the injected MCP servers. A mode composes it: :meth:`start` (record and prompt written, issue
    ``in_progress``), :meth:`use_servers`, :meth:`injected` around the agent, :meth:`finish` (record closed,
    tracker told, ``finished`` emitted).
    """

    def __init__(
        self,
        project: Project,
        tracker: Tracker,
        issue: Issue,
        request: RunRequest,
        events: EventSink | None,
        *,
        branch: str | None,
        checkout: Path | None = None,
        run_id: str | None = None,
        code_host: CodeHost | None = None,
    ) -> None:
        self.project = project
        self.tracker = tracker
        self.issue = issue
        self.request = request
        #: Every secret beflow holds for this project (the tracker's token): a secret of the run, masked wherever its
        #: output goes and refused by the check before publishing, like the injected servers' values.
        self.secrets = run_secrets(project, tracker, code_host)
        self.store = RunStore(project.directory, mask=lambda text: self.redact.text(text))
        # The terminal may be gone (SIGHUP) or a pipe closed: progress never blocks a run or its cleanup.
        self._events = safe_sink(events)
        self.record = new_record(project, issue, request, run_id=run_id or new_run_id(issue.key), branch=branch)
        if checkout is not None:
            self.record.checkout = str(checkout)
        self.servers: list[AcpServer] | None = None
        #: Masks the secrets (the injected servers' values, beflow's own) in everything written to the record.
        self.redact = Redactor(secrets=self.secrets)
        #: The same for hook output, where values of any length are masked (a hook may print the injected file).
        self.redact_hooks = Redactor(secrets=self.secrets, words=True)
        #: Why the claim's lease was lost, if it was: another machine owns the issue now, and this run leaves it be.
        self.claim_lost: str | None = None
        #: Trackers that show a run's progress on the issue are told from a thread of the run's own.
        #: A best-of-N candidate (and its reviewer) leaves the issue to the judged run (:mod:`beflow.run.attempts`):
        #: it tells the tracker nothing itself.
        self.reports = not request.candidate and request.review is None
        shows = isinstance(tracker, ShowsProgress) and self.reports
        self._reporter = ProgressReporter(self._progress) if shows else None
        #: The run as an agent's session on the issue, for a tracker that hosts them (opened by :meth:`start`).
        self._session: SessionReporter | None = None
        #: Called (from another thread) when a person asks the run to stop in its agent session.
        self.on_stop: Callable[[], None] | None = None
        #: Why the run was stopped by a person in its agent session, if it was: its issue is held back (``open``),
        #: not put back in the queue, or a watch would run it again at once.
        self.stopped: str | None = None
        #: Best of N: the set's budget this run's spending counts against (``attempts.max_cost``), if it is a candidate.
        self.budget: SetBudget | None = None

    @property
    def run_id(self) -> str:
        return self.record.id

    def emit(self, kind: RunEventKind, **data: Any) -> None:
        """Only emits: the tracker is told of the activity from the run's reporter thread (beflow.run.reporter)."""
        # The agent's words (progress, activity) and every message reach the terminal, --json and the issue masked.
        data = {name: self.redact.text(v) if isinstance(v, str) else v for name, v in data.items()}
        self._events(RunEvent.of(kind, self.record.id, self.record.issue, **data))
        if kind == "activity" and self._reporter is not None and self.claim_lost is None:
            latest = inert(str(data["latest"]))  # the agent's activity: no mention pings, no reference links
            self._reporter.report(f"beflow run `{self.record.id}` is working on this issue: {latest}")
        if self._session is not None and self.claim_lost is None:
            if kind == "activity":  # a tool call: the next activity replaces it
                self._session.action("Working", self.tracker.inert(str(data["latest"])), ephemeral=True)
            elif kind == "progress":
                self._session.action("Progress", self.tracker.inert(str(data["text"])))

    def _progress(self, text: str) -> None:
        if isinstance(self.tracker, ShowsProgress) and self.claim_lost is None:  # (the lease may have been lost since)
            self.tracker.progress(self.record.issue, text)

    @asynccontextmanager
    async def guarded(
        self,
        finish: Callable[[Outcome, str], Awaitable[RunRecord]],
        *,
        cancelled_because: Callable[[], str | None] = lambda: None,
        interrupted: Callable[[], Awaitable[bool]] | None = None,
    ) -> AsyncIterator[Ending]:
        """The body of a run, every way out of it ending in exactly one ``finish(outcome, reason)`` (a mode's
        wrap-up, then :meth:`finish`; shielded after a cancellation or a bug). The body says how it ended on the
        :class:`Ending` it is given; a :class:`BeflowError` is a failure with its message (permanent when the
        error is); a cancellation is ``cancelled`` (``cancelled_because`` says why, if the canceller told) and goes
        on; a bug in beflow is recorded and raised — unless ``interrupted()`` says the run is being cancelled, when
        the step that broke was only the first to feel it and the run ends as the body's end does."""
        ending = Ending()
        try:
            yield ending
        except BeflowError as error:
            self.record.permanent = self.record.permanent or error.permanent
            ending.set("failed", error.message)
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                ending.record = await finish("cancelled", cancel_reason(cancelled_because()))
            raise
        except Exception as error:
            if interrupted is None or not await interrupted():
                with anyio.CancelScope(shield=True):
                    ending.record = await finish("failed", unexpected(error))
                raise
            ending.set("failed", f"{type(error).__name__}: {error}")
        # Not shielded here: ``finish`` shields what must not be cut, and may still ask whether the run is being
        # cancelled (a shield would hide that).
        ending.record = await finish(ending.outcome, ending.reason)

    def start(self, prompt_text: str, note: str | None = None) -> None:
        """The record is written with its prompt, and the tracker says a run works on the issue."""
        self.store.create(self.record, prompt_text)
        if not self.reports:
            return
        self._open_session()  # the first word after the claim: an agent session wants one within seconds
        issue_status.move_to_in_progress(self.tracker, self.issue, note)

    def _open_session(self) -> None:
        if not isinstance(self.tracker, HostsAgentSessions) or self.request.mode not in ("auto", "watch"):
            return
        try:
            session = self.tracker.agent_session(self.record.issue)
            if session is None:
                return
            session.thought(f"beflow is working on this (run `{self.record.id}`).")
        except BeflowError as error:  # the session is a courtesy: the run goes on without it
            self.emit("notice", message=f"no agent session on the issue: {error.message}")
            return

        def stop() -> None:
            if self.on_stop is not None:
                self.on_stop()

        def failed(error: Exception) -> None:
            self.emit("notice", message=f"the issue's agent session is not told of the run any more: {error}")

        self._session = SessionReporter(session, stop, on_error=failed)

    def use_servers(self, servers: list[AcpServer] | None) -> None:
        """The run's MCP servers: named in the record, and from here on their secret values are masked in
        everything the record keeps (hook output and transcripts included)."""
        self.servers = servers
        self.record.mcp_servers = server_names(servers)
        secret = [secret_part(s) for s in servers or []]  # beflow's own: its capability
        self.redact = Redactor(secret, secrets=self.secrets)
        self.redact_hooks = Redactor(secret, words=True, secrets=self.secrets)

    def mask_record(self) -> None:
        """The record (in memory: the summary, the comment and the pull request are built from it), the run's
        progress file and its prompt with every secret masked."""
        masked = masked_record(self.record, self.redact.text)
        for name in WORDS_FIELDS:
            if getattr(masked, name) != getattr(self.record, name):
                setattr(self.record, name, getattr(masked, name))
        self.store.mask_files(self.record.id)

    @contextlib.contextmanager
    def repository_guarded(self, directory: Path, *, branch: str | None = None) -> Iterator[repoguard.Guard]:
        """The body (the agent's session) cannot change the repository's git directory for good: what it changed
        there is put back, named in the record and said on the terminal (:mod:`beflow.repository.repoguard`). With
        ``branch``
        (an unattended run's), the object store and the refs are noted too: the refs that moved and the run does
        not build on are named here (what fails the run is the delivery's to say)."""
        store = (self.project.directory, branch, self.project.config.worktrees.base) if branch else None
        guard = repoguard.begin(directory, store)
        try:
            yield guard
        finally:
            # Synchronous, like the managed file's restore: nothing here for a cancellation to cut in two.
            repoguard.end(guard)
            if guard.changed:
                self.record.git_restored = list(guard.changed)
                self.store.save(self.record)
                self.emit("notice", message=repoguard.describe(guard))
            if guard.found is not None and guard.found.refs and not self.record.sandboxed:
                self.record.refs_moved = list(guard.found.refs)
                self.store.save(self.record)
                moved = ", ".join(guard.found.refs)
                self.emit("notice", message=f"refs moved during the run, not by beflow: {moved}")

    @asynccontextmanager
    async def injected(self, cwd: Path, *, checkout: bool = False) -> AsyncIterator[Injection | None]:
        """The run's MCP servers in ``cwd``'s ``.acpxrc.json`` for the body, the file put back exactly afterwards
        (on every way out, Ctrl-C included); what became of it goes into the record. ``checkout``: ``cwd`` is the
        user's own checkout (a symlinked ``.acpxrc.json`` there is theirs), not a worktree an agent's branch filled."""
        record = self.record
        shadowed = shadowed_global_servers() if self.servers else None
        if shadowed:
            record.mcp_shadowed = shadowed.names
            self.emit("notice", message=f"injected MCP servers shadow {', '.join(shadowed.names)} from {shadowed.path}")
        self.store.save(record)

        def on_saved(path: Path) -> None:
            message = f"{ACPXRC} was changed during the run; that version is saved at {path} for {SAVED_DAYS} days"
            self.emit("notice", message=message)

        handle = None
        try:
            async with managed_acpxrc(
                cwd,
                self.servers,
                on_wait=lambda m: self.emit("notice", message=m),
                on_saved=on_saved,
                trust_link=checkout,
            ) as handle:
                yield handle
        finally:
            if handle is not None and handle.restored is not None and handle.restored.replaced is not None:
                replaced = handle.restored.replaced
                self.emit(
                    "notice", message=f"{ACPXRC} had been replaced during the run by {replaced}; beflow put it back"
                )
            if handle is not None and handle.restored is not None:
                # "left by beflow pid N" is for orphans of another process, not this one's own restore
                restored = handle.restored.model_copy(update={"pid": None}).describe()
                if restored not in record.restored:
                    record.restored.append(restored)

    def finish(
        self, outcome: Outcome, reason: str, status_for: Callable[[Outcome], Status], **details: Any
    ) -> RunRecord:
        """Close the record, tell the tracker (``status_for`` the outcome, the summary as a comment) and emit
        ``finished`` with ``details``. The tracker's failure is a notice, never the run's: the record keeps the
        outcome."""
        record = self.record
        if self._reporter is not None:
            self._reporter.close()  # (its last update must not land on the issue after the outcome)
        if self._session is not None:
            self._session.close()  # (the activities queued are sent before the session's last word)
        record.close(outcome, reason)
        if record.question is not None and record.outcome == "asked":
            record.question.asked = record.finished_at  # its answer is a comment from here on
        self.mask_record()
        self.store.save(record)
        if self.claim_lost is not None or not self.reports:  # the issue is another run's: its status and comments too
            self.emit("finished", outcome=record.outcome, reason=record.stop_reason, **details)
            return record
        status = Status.OPEN if record.outcome == "cancelled" and self.stopped else status_for(record.outcome)
        note = (
            summary(record, self._issue_usage(), inert=self.tracker.inert)
            if self.project.config.after_run.comment
            else None
        )
        if status == Status.FAILED and self.request.mode == "watch":
            note = give_up_note(note, record.attempt, permanent=record.permanent)
        asks = status == Status.BLOCKED and record.question is not None
        if asks:  # the question is the run's one comment (and its agent session's elicitation: _end_session)
            assert record.question is not None
            note = question_comment(
                record.issue, record.question, record.id, self.tracker.inert, judge=record.best_of > 0
            )
        note = self.redact.text(note) if note is not None else None
        missing = issue_status.leave_finished(self.tracker, record.issue, status, note, run_id=record.id)
        if missing is not None:
            self._unreported(missing)
        self._end_session(record)
        self.emit("finished", outcome=record.outcome, reason=record.stop_reason, **details)
        return record

    def _end_session(self, record: RunRecord) -> None:
        """The agent session's last word: a response with the pull request, the agent's question (an elicitation),
        or the error that ended the run."""
        if self._session is None:
            return
        said = self.tracker.inert(self.redact.text(record.stop_reason or record.outcome))
        try:
            if record.outcome in DONE_OUTCOMES:
                done = "Done" if record.outcome == "succeeded" else "Done, without changing anything"
                where = f": {record.pull_request}" if record.pull_request else f" on `{record.branch}`"
                self._session.session.respond(f"{done}{where}. {said}", record.pull_request)
            elif record.outcome == "cancelled":
                self._session.session.respond(f"Stopped: {said}")
            elif record.outcome == "asked" and record.question is not None:
                # The session awaits the person's input: their reply there (or a comment) resumes it.
                asked = [record.question.text, *(f"{n}. {c}" for n, c in enumerate(record.question.choices, 1))]
                self._session.session.elicit(self.tracker.inert(self.redact.text("\n".join(asked))))
            else:
                self._session.session.error(f"The run {record.outcome.replace('_', ' ')}: {said}")
        except BeflowError as error:
            self.emit("notice", message=f"the issue's agent session was not told how the run ended: {error.message}")

    def _issue_usage(self) -> Totals | None:
        """What every run of the issue used (all rounds and attempts, this one included), for its comment."""
        try:
            return guardrails.total(r.usage for r in self.store.records([self.record.issue]) if r.finished)
        except OSError:
            return None

    def _unreported(self, missing: Unreported) -> None:
        """Say on the terminal and in the record that the tracker's last word on the run is missing."""
        self.record.unreported = missing.why
        self.store.save(self.record)
        self.emit("notice", message=f"{missing.why}; the run record keeps the outcome, and {missing.later}")
