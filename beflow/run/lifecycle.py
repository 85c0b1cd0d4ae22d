"""One run of one issue, in every mode — ``--auto``, ``watch``, ``--attend``, ``--open``: the request, the prompt,
and the :class:`Session` that owns the run record, the store, the tracker, the events and the injected MCP servers.

:mod:`beflow.run.runner` (the unattended run in a worktree) and :mod:`beflow.run.modes` (the supervised ones in the
checkout) compose a session, so that a run reads, records and reports the same way in every mode. The decisions
(outcomes, statuses, retries) are pure functions in :mod:`beflow.run.policy`; docs/architecture.md shows the whole.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from beflow import guardrails
from beflow.agent.agent_env import run_secrets
from beflow.codehosts.base import CodeHost
from beflow.config import Project
from beflow.errors import BeflowError, LockedError
from beflow.events import EventSink, RunEvent, RunEventKind, safe_sink
from beflow.feedback import Feedback, Ignored, strip_hidden
from beflow.guardrails import Totals
from beflow.mcp.acp import AcpServer, server_names, shadowed_global_servers
from beflow.mcp.inject import Injection, managed_acpxrc
from beflow.mcp.own import secret_part
from beflow.mcp.redact import Redactor
from beflow.ops import rounds
from beflow.paths import ACPXRC
from beflow.records.record import (
    DONE_OUTCOMES,
    WORDS_FIELDS,
    Mode,
    Outcome,
    RunRecord,
    RunStore,
    masked_record,
    new_run_id,
    now,
)
from beflow.repository import repoguard
from beflow.run import prompt
from beflow.run.policy import give_up_note, status_after
from beflow.run.reporter import ProgressReporter
from beflow.system import interrupts
from beflow.system.journal import SAVED_DAYS
from beflow.trackers import Issue, Status, Tracker
from beflow.trackers.base import ShowsProgress
from beflow.trackers.quoting import code, fenced, inert, unmarked


@dataclass
class RunRequest:
    """What to run and how the tracker is left afterwards."""

    key: str
    mode: Mode = "auto"
    attempt: int = 1
    #: Whether a failure is the last word (``failed`` on the tracker) or the dispatcher will retry (``ready``).
    final: bool = True
    #: The issue was picked because it was ready (watch, ``--auto`` without keys): once claimed, it must still be,
    #: or another beflow ran it meanwhile and this run is skipped.
    only_if_ready: bool = False
    owner: str = field(default_factory=lambda: f"beflow {socket.gethostname()}:{os.getpid()}")
    #: 0: the issue's first run; 1, 2...: a review round (docs/rounds.md), answering ``feedback`` on the branch.
    round: int = 0
    feedback: list[Feedback] = field(default_factory=list)
    #: Feedback the round's sources left out, and why (for its record).
    ignored: list[Ignored] = field(default_factory=list)


def _prompt_variables(
    issue: Issue, request: RunRequest, branch: str, run_id: str, previous: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    previous = previous or []
    # Every text of the tracker as a reader of the page sees it, as in review rounds (beflow.feedback.strip_hidden),
    # and the words of one who may not give beflow work left out, saying so.
    comments = [
        {
            "author": c.author,
            "created": c.created.isoformat(),
            "body": strip_hidden(c.text) if c.withheld is None else f"[This comment is left out: {c.withheld}.]",
        }
        for c in issue.comments
    ]
    return {
        "issue": {
            "key": issue.key,
            "title": strip_hidden(issue.title),
            "body": strip_hidden(issue.body),
            "labels": [strip_hidden(label) for label in issue.labels],
            "url": issue.url,
            "comments": comments,
        },
        "attempt": request.attempt,
        "round": request.round,
        "feedback": rounds.prompt_feedback(request.feedback),
        "previous": previous,
        "branch": branch,
        "run_id": run_id,
        "mode": request.mode,
    }


# -- what every mode shares (``--auto``, ``watch``, ``--attend``, ``--open``): the prompt, the record, the tracker --


def render_prompt(project: Project, issue: Issue, request: RunRequest, *, branch: str, run_id: str) -> str:
    """The prompt of one run, from the configured template and the same variables in every mode."""
    # A round's prompt says what the earlier rounds changed and said (their records).
    earlier = rounds.previous(RunStore(project.directory).records([issue.key]), request.round) if request.round else []
    variables = _prompt_variables(issue, request, branch, run_id, earlier)
    return prompt.render(project.config.prompt, project.directory, variables)


def new_record(project: Project, issue: Issue, request: RunRequest, *, run_id: str, branch: str | None) -> RunRecord:
    """A run record in the state ``running``; ``branch`` is where the run commits (None: it does not)."""
    return RunRecord(
        id=run_id,
        issue=issue.key,
        title=issue.title,
        mode=request.mode,
        agent=project.config.agent_label(),
        attempt=request.attempt,
        round=request.round,
        feedback=rounds.consumed(request.feedback),
        feedback_ignored=rounds.left_out(request.ignored),
        branch=branch,
        started_at=now(),
    )


def move_to_in_progress(tracker: Tracker, issue: Issue, note: str | None = None) -> None:
    """The tracker says a run works on the issue (through ``ready`` when it cannot go there directly)."""
    if issue.status in (Status.OPEN, Status.FAILED, Status.DONE):
        tracker.set_status(issue.key, Status.READY, author="beflow")
    tracker.set_status(issue.key, Status.IN_PROGRESS, note=note, author="beflow")


def leave_issue(tracker: Tracker, key: str, status: Status, note: str | None) -> bool:
    """Move the issue on from ``in_progress`` with ``note`` as a comment; False (nothing done) when someone moved it
    by hand during the run (closed it, say) — theirs is the last word — or it cannot be read any more (deleted,
    broken by a hand edit): the run record still says how the run ended."""
    try:
        if tracker.get(key).status != Status.IN_PROGRESS:
            return False
        tracker.set_status(key, status, note=note, author="beflow")
    except BeflowError:  # moved between the look and the write, or unreadable
        return False
    return True


def summary(record: RunRecord, issue_usage: Totals | None = None) -> str:
    """The comment a finished run leaves on its issue; ``issue_usage``: what all of the issue's runs used."""
    lines = [f"beflow run `{record.id}`: **{record.outcome}** — {inert(record.stop_reason or '')}"]
    lines.append(f"- agent: {record.agent}, attempt {record.attempt}, {record.duration or 0:.1f} s")
    used = guardrails.describe(record.usage)
    if used is not None or (issue_usage is not None and issue_usage.runs > 1):
        lines.append(f"- usage: {inert(used or 'none reported by the agent')}")
    if issue_usage is not None and issue_usage.runs > 1:
        lines.append(f"- all runs of this issue: {issue_usage.describe()}")
    if record.unheld:
        lines.append(f"- budgets: {record.unheld}")
    if record.branch:
        lines.append(f"- branch: `{record.branch}`" + (f", commit `{record.commit[:12]}`" if record.commit else ""))
    if record.pull_request:
        lines.append(f"- pull request: {record.pull_request}")
    if record.checkout:
        lines.append(f"- {record.mode} session in the checkout `{record.checkout}`; nothing was committed")
    if record.changed_files:
        lines.append(f"- files changed ({len(record.changed_files)}): {_file_list(record.changed_files)}")
    if record.dirty_before:
        lines.append(
            f"- uncommitted before the run and left as they were ({len(record.dirty_before)}): "
            + _file_list(record.dirty_before)
        )
    if record.mcp_servers:
        lines.append(f"- MCP servers: {', '.join(record.mcp_servers)}")
    if record.sandboxed:  # host names are the agent's choice: shown inert
        lines.append(f"- sandbox: {inert(_blocked(record.blocked) or 'no connection blocked')}")
    if record.worktree_kept:
        lines.append(f"- worktree kept at `{record.worktree}`")
    if record.final_message:  # the agent's words, quoted: GitHub neither closes issues nor pings for them
        said = unmarked("\n".join(record.final_message.strip().splitlines()[:20]))
        lines.append("")
        lines.append(fenced(said[:FINAL_MESSAGE_SHOWN]))
        if len(said) > FINAL_MESSAGE_SHOWN:
            lines.append(f"(the agent's message goes on: `beflow runs show {record.id}` has it whole)")
    return "\n".join(lines)


#: Characters of the agent's final message a comment or pull request body quotes: GitHub refuses a body of more
#: than 65,536, and an agent's message can be any length.
FINAL_MESSAGE_SHOWN = 4000


def _blocked(blocked: dict[str, int]) -> str | None:
    from beflow.sandbox.box import describe_blocked  # (the sandbox is loaded by runs that use it)

    return describe_blocked(blocked)


def _file_list(lines: list[str], limit: int = 10) -> str:
    shown = ", ".join(code(line.split(chr(9))[-1]) for line in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")


def cancel_reason(known: str | None = None) -> str:
    """Why a run is being cancelled: what the canceller said, else the signal, else beflow itself."""
    return known or f"cancelled by {interrupts.state.signal_name or 'beflow'}"


def refuse_closed(issue: Issue) -> None:
    """A closed issue is not run in any mode: reopen it first."""
    if issue.status == Status.CLOSED:
        raise BeflowError(f"issue {issue.key} is closed", fix=f"beflow issues reopen {issue.key}")


def settle_orphans(tracker: Tracker, store: RunStore) -> list[str]:
    """Issues left ``in_progress`` by a run that finished its work but could not tell the tracker (the issue file
    was unreadable at that moment): they get the status and comment the run would have given them, instead of
    being run again. Runs that did not finish are left to :func:`requeue_orphans`."""
    settled: list[str] = []
    orphaned = tracker.orphaned()
    if not orphaned:
        return settled
    records = store.records([issue.key for issue in orphaned])
    for issue in orphaned:
        latest = next((r for r in records if r.issue == issue.key), None)
        if latest is None or latest.outcome not in DONE_OUTCOMES:
            continue
        try:
            claim = tracker.claim(issue.key, owner="beflow (settling a finished run)")
        except BeflowError:
            continue  # a run has it now
        with claim:
            if leave_issue(tracker, issue.key, status_after(latest.outcome), summary(latest)):
                settled.append(issue.key)
    return settled


def requeue_orphans(tracker: Tracker, author: str = "beflow") -> list[Issue]:
    """Put every issue a killed run left ``in_progress`` (no live claim) back to ``ready``, with a comment saying
    why, so that a run picks it up again; returns them. (Call :func:`settle_orphans` first: an issue whose run had
    finished gets that run's status instead.)"""
    requeued = []
    for issue in tracker.orphaned():
        last = tracker.last_holder(issue.key)  # the dead holder's note, if it left one
        try:
            claim = tracker.claim(issue.key, owner=f"{author} (requeue)")
        except LockedError:
            continue  # a run took it in the meantime
        with claim:
            if tracker.get(issue.key).status != Status.IN_PROGRESS:
                continue
            who = f" (it was claimed by {last.owner}, pid {last.pid} on {last.host})" if last else ""
            note = (
                f"The run working on this issue stopped without finishing{who}: no process holds its claim "
                "any more. Back to ready, so that a run picks it up again."
            )
            requeued.append(tracker.set_status(issue.key, Status.READY, note=note, author=author))
    return requeued


# -- the session ----------------------------------------------------------------------------------------------------


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
        self._reporter = ProgressReporter(self._progress) if isinstance(tracker, ShowsProgress) else None

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
        move_to_in_progress(self.tracker, self.issue, note)

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
        record.close(outcome, reason)
        self.mask_record()
        self.store.save(record)
        if self.claim_lost is not None:  # the issue is another run's now: its status and comments are that run's
            self.emit("finished", outcome=record.outcome, reason=record.stop_reason, **details)
            return record
        status = status_for(record.outcome)
        note = summary(record, self._issue_usage()) if self.project.config.after_run.comment else None
        if status == Status.FAILED and self.request.mode == "watch":
            note = give_up_note(note, record.attempt, permanent=record.permanent)
        note = self.redact.text(note) if note is not None else None
        key = record.issue
        if status == Status.OPEN:  # in_progress cannot go back to open directly
            left = leave_issue(self.tracker, key, Status.READY, note)
            if left:
                self.tracker.set_status(key, Status.OPEN, author="beflow")
        else:
            left = leave_issue(self.tracker, key, status, note)
        if not left:
            try:
                now_status = self.tracker.get(key).status  # moved by hand (closed, say): theirs is the last word
            except BeflowError as error:
                self._unreported(f"the issue could not be updated ({error.message})")
            else:
                if now_status == Status.IN_PROGRESS:  # still ours: the tracker failed past every retry
                    self._unreported("the tracker was not told how the run ended (it failed to answer)")
                elif note and now_status == status:  # moved, but its comment was not posted
                    self._unreported(
                        "the comment saying how the run ended could not be posted",
                        later=f"it is in the run record (beflow runs show {record.id})",
                    )
        self.emit("finished", outcome=record.outcome, reason=record.stop_reason, **details)
        return record

    def _issue_usage(self) -> Totals | None:
        """What every run of the issue used (all rounds and attempts, this one included), for its comment."""
        try:
            return guardrails.total(r.usage for r in self.store.records([self.record.issue]) if r.finished)
        except OSError:
            return None

    def _unreported(
        self, why: str, later: str = "the next beflow run or watch tick brings the issue up to date"
    ) -> None:
        """Say on the terminal and in the record that the tracker's last word on the run is missing."""
        self.record.unreported = why
        self.store.save(self.record)
        self.emit("notice", message=f"{why}; the run record keeps the outcome, and {later}")
