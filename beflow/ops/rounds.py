"""Review rounds, the run side: which feedback an issue has that no round answered, which round comes next, and
what a round leaves behind (docs/rounds.md).

A round is a run (:class:`beflow.run.runner.Run`) whose :class:`~beflow.run.request.RunRequest` carries ``round`` and
``feedback``. Where the feedback comes from is a :class:`~beflow.feedback.FeedbackSource`'s business (the tracker,
the code host, or both); what was answered is beflow's own record of each round that delivered (its
``feedback``), counted while the round's commit is on the branch. Every round's commit also carries a
``Beflow-Feedback: <id>`` trailer per piece it answered, for people reading the history; beflow never reads them
back, since the agent's own commits on the branch could carry any (a machine that did not make the commit fetches
the branch first: :func:`catch_up`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from beflow.codehosts.base import CodeHost
from beflow.config import Project
from beflow.errors import BeflowError
from beflow.feedback import (
    Feedback,
    FeedbackSource,
    Gathered,
    Ignored,
    MirrorsAnswers,
    due_at,
    merged,
    pending,
    strip_hidden,
    trailer_lines,
)
from beflow.ops import fixes
from beflow.records.record import CONSUMED_TEXT, DONE_OUTCOMES, Consumed, LeftOut, RunRecord
from beflow.records.reviews import PageReviews
from beflow.records.store import RunStore
from beflow.repository import git, refs
from beflow.trackers import Issue, Status, Tracker

#: The start of the comment an issue gets once its rounds reach ``feedback.max_rounds`` (said once: an issue whose
#: comments hold it is not told again).
CAPPED = "beflow does not start another review round"


def sources(*candidates: object) -> list[FeedbackSource]:
    """Those of ``candidates`` (the tracker, the code host) that are sources of feedback."""
    found: list[FeedbackSource] = []
    for candidate in candidates:
        if isinstance(candidate, FeedbackSource) and all(candidate is not other for other in found):
            found.append(candidate)
    return found


def page_reviews(directory: Path, code_host: object) -> PageReviews:
    """The reviews given on beflow's page as a feedback source, its answers mirrored in the branch's pull request
    when the code host can say them (:class:`~beflow.feedback.MirrorsAnswers`)."""
    if not isinstance(code_host, MirrorsAnswers):
        return PageReviews(directory)
    host = code_host

    def mirror(piece: Feedback, body: str) -> None:
        host.mirror(refs.branch_for(piece.reply_to or ""), piece, body)

    return PageReviews(directory, mirror)


def sources_of(directory: Path, tracker: Tracker, code_host: CodeHost | None) -> list[FeedbackSource]:
    """Every source of feedback a project has: its tracker, its code host and the reviews on beflow's page (a watch
    and a fleet's dispatcher and workers alike read these)."""
    return sources(tracker, code_host, page_reviews(directory, code_host))


def gather(found: Iterable[FeedbackSource], key: str, branch: str) -> Gathered:
    """What every source says of issue ``key`` and ``branch``, as one (blocking: call it in a worker thread)."""
    return merged([source.gather(key, branch) for source in found])


def history(store: RunStore, key: str, issue_id: str | None = None) -> list[RunRecord]:
    """The runs of issue ``key``, newest first; with ``issue_id`` (the tracker's stable id), those it had under
    another key too (a Linear issue moved to another team)."""
    return store.records([key], ids=[issue_id] if issue_id else ())


def branch_in(records: Iterable[RunRecord], key: str) -> str:
    """Where the runs of an issue commit: the branch its first run had (named from its key then: an issue whose key
    changed since keeps it), else ``beflow/<key>``. A best-of-N candidate's branch is its own, never the issue's."""
    for record in sorted(records, key=lambda r: (r.started_at, r.id)):
        if record.branch and not record.candidate:
            return record.branch
    return refs.branch_for(key)


def answered(
    directory: Path, key: str, base: str = "HEAD", store: RunStore | None = None, *, issue_id: str | None = None
) -> set[str]:
    """The ids of the feedback the rounds of issue ``key`` (and of its stable ``issue_id``: its runs under an
    earlier key) answered on its branch: beflow's own record of each round that delivered (its ``feedback``), while
    the round's commit is still on the branch (since ``base``). A ``Beflow-Feedback:`` trailer in a commit the agent
    made is the agent's word, not beflow's: the branch's history is not read for what was answered."""
    runs = history(store or RunStore(directory), key, issue_id)
    records = [r for r in runs if r.round > 0 and r.outcome in DONE_OUTCOMES and r.commit and r.feedback]
    if not records:
        return set()
    branch = branch_in(runs, key)
    since: str | None = None
    tip: str | None = None
    with contextlib.suppress(BeflowError), git.open_repo(directory) as repo:
        since = refs.resolve_base(repo, base)
        tip = refs.branch_tip(repo, branch)
        if tip is not None and since is not None and not refs.is_ancestor(directory, since, tip):
            since = None  # (the base moved on past the branch's start: the branch's whole history counts)
    if tip is None:
        return set()
    done: set[str] = set()
    for record in records:
        assert record.commit is not None
        on_branch = refs.is_ancestor(directory, record.commit, tip)
        if on_branch and (since is None or not refs.is_ancestor(directory, record.commit, since)):
            done.update(piece.id for piece in record.feedback)
    return done


def completed(records: Iterable[RunRecord]) -> int:
    """The highest round the issue finished (0: only its first run did, or none)."""
    return max((r.round for r in records if r.outcome in DONE_OUTCOMES), default=0)


def first_run_done(records: Iterable[RunRecord]) -> bool:
    """Whether any run of the issue finished: only then can there be feedback on its work."""
    return any(r.outcome in DONE_OUTCOMES for r in records)


@dataclass
class Plan:
    """The round an issue is due for, if any: its number, the pieces it answers, those left out, when it may start
    (``feedback.settle`` after the latest piece), whether the rounds ended (``merged``/``closed``) or reached
    ``feedback.max_rounds`` (``capped``)."""

    round: int
    pieces: list[Feedback] = field(default_factory=list)
    ignored: list[Ignored] = field(default_factory=list)
    due: dt.datetime | None = None
    ended: str | None = None
    capped: bool = False
    #: What the issue was told as this plan flagged it ``needs-human`` (its fix rounds spent), if it did.
    flagged: str | None = None

    @property
    def startable(self) -> bool:
        return bool(self.pieces) and self.ended is None and not self.capped


def plan(
    project: Project,
    found: list[FeedbackSource],
    key: str,
    store: RunStore | None = None,
    *,
    number: int | None = None,
    issue_id: str | None = None,
    tracker: Tracker | None = None,
    fix_rounds: int = 0,
) -> Plan | None:
    """The round issue ``key`` is due for (blocking): None when it has no source of feedback or no run of it
    finished yet; else its unanswered feedback and the round that answers it. ``number``: the round is known
    (a fleet's workflow counts them; the runs' records are on other machines), so no record is read.
    ``issue_id``: the tracker's stable id, by which the runs of an issue whose key changed are found, and its
    branch. ``tracker``: failed checks start rounds at most ``feedback.max_fix_rounds`` times
    (:mod:`beflow.ops.fixes`), the issue flagged once they are spent; ``fix_rounds``: those a fleet's workflow
    counted since the flag (its rounds' records may be on other machines)."""
    if not found:
        return None
    store = store or RunStore(project.directory)
    # (a round whose number is known reads the records for its branch alone, only a moved issue has another one,
    # and for the fix rounds spent, counted only when a failed check is among the pieces)
    records = history(store, key, issue_id) if number is None or issue_id or tracker is not None else []
    if number is None:
        if not first_run_done(records):
            return None
        number = completed(records) + 1
    branch = branch_in(records, key)
    gathered = gather(found, key, branch)
    config = project.config.feedback
    # The branch's history is read only when there is feedback to hold against it (a git process per issue).
    base = project.config.worktrees.base
    done = answered(project.directory, key, base, store, issue_id=issue_id) if gathered.pieces else set()
    left = pending(gathered.pieces, done)
    ignored, flagged = list(gathered.ignored), None
    if tracker is not None and gathered.ended is None:
        left, held, flagged = fixes.hold(tracker, key, left, records, config.max_fix_rounds, fix_rounds)
        ignored += held
    return Plan(
        number,
        left,
        ignored,
        due_at(left, config.settle),
        gathered.ended,
        capped=number > config.max_rounds,
        flagged=flagged,
    )


class RoundsEnded(BeflowError):
    """An issue's review rounds are over (``feedback.max_rounds``, or its pull request merged or closed)."""

    code = "rounds_ended"


def end_reason(planned: Plan, max_rounds: int) -> str:
    if planned.ended == "merged":
        return "its pull request was merged"
    if planned.ended == "closed":
        return "its pull request or the issue was closed"
    return f"it had its {max_rounds} review round(s) (feedback.max_rounds)"


def said_end(issue: Issue) -> bool:
    """Whether the issue already says no further round starts: a trusted comment that begins so (a stranger's copy
    of the words, or an agent's quoted inside beflow's reply, does not silence the note)."""
    return any(c.text.startswith(CAPPED) and c.withheld is None for c in issue.comments)


def note_end(tracker: Tracker, key: str, planned: Plan, max_rounds: int) -> bool:
    """Say on the issue, once, that no further review round starts, and why; a merged pull request moves the issue
    to done. Whether anything was said."""
    issue = tracker.get(key)
    if planned.ended == "merged" and issue.status == Status.REVIEW:
        tracker.set_status(key, Status.DONE, note=f"{CAPPED}: {end_reason(planned, max_rounds)}.")
        return True
    if said_end(issue) or issue.status in (Status.CLOSED, Status.DONE):
        return False
    text = f"{CAPPED}: {end_reason(planned, max_rounds)}. The issue stays in review"
    if planned.capped:
        text += f"; raising feedback.max_rounds (now {max_rounds}) lets the feedback since start another"
    tracker.comment(key, text + ".", author="beflow")
    return True


def catch_up(code_host: CodeHost | None, directory: Path, branch: str) -> str | None:
    """``branch`` as the code host has it, when another machine pushed it further: the local branch is moved
    there (a fast-forward, compare-and-swap) before the round's worktree is made from it. Returns the tip the
    round starts from (None: no such branch). A local branch ahead of the host's (not pushed yet) is kept; one
    that went another way than the host's is an error: a person must look."""
    with git.open_repo(directory) as repo:
        local = refs.branch_tip(repo, branch)
    if code_host is None:
        return local
    remote = code_host.fetch(directory, branch)
    if remote is None or remote == local:
        return local
    if local is None or refs.is_ancestor(directory, local, remote):
        refs.move_branch(directory, branch, remote, local, "beflow: the branch as the code host has it")
        return remote
    if refs.is_ancestor(directory, remote, local):
        return local  # this machine's commits are not pushed yet: they are pushed with the round's
    raise git.GitError(
        f"{branch} here and on {code_host.description} went different ways ({local[:12]} and {remote[:12]})",
        fix=f"Make one of them contain the other (git fetch origin {branch}, then merge or reset), then run again.",
    )


def consumed(pieces: Iterable[Feedback], mask: Any = None) -> list[Consumed]:
    """What a record keeps of the pieces a round answers (``mask``: the run's redactor's ``text``)."""
    shown = mask or (lambda text: text)
    return [
        Consumed(
            id=p.id,
            kind=p.kind,
            author=p.author,
            url=p.url,
            path=p.path,
            line=p.line,
            excerpt=shown(p.body[:CONSUMED_TEXT]),
        )
        for p in pieces
    ]


def left_out(ignored: Iterable[Ignored]) -> list[LeftOut]:
    return [LeftOut(id=i.id, author=i.author, why=i.why) for i in ignored]


def prompt_feedback(pieces: Iterable[Feedback]) -> list[dict[str, Any]]:
    """The template's ``feedback``: each piece with kind, author, url, body, path, line, hunk and thread."""
    return [
        {
            "id": p.id,
            "kind": p.kind,
            "author": p.author,
            "url": p.url,
            # (cleaned by its source already; again here, for every source, the local tracker's too)
            "body": strip_hidden(p.body),
            "path": p.path,
            "line": p.line,
            "hunk": p.hunk,
            "thread": [{"author": c.author, "body": strip_hidden(c.body)} for c in p.thread],
        }
        # File by file: what concerns the whole change first, then each file's pieces by line.
        for p in sorted(pieces, key=lambda p: (p.path is not None, p.path or "", p.line or 0))
    ]


def previous(records: Iterable[RunRecord], before: int) -> list[dict[str, Any]]:
    """The template's ``previous``: what each earlier finished run of the issue (round 0 and the rounds before
    ``before``) changed and said, oldest first, one per round (its latest finished run)."""
    by_round: dict[int, RunRecord] = {}
    for record in records:  # newest first
        if record.outcome in DONE_OUTCOMES and record.round < before and record.round not in by_round:
            by_round[record.round] = record
    return [
        {
            "round": number,
            "run_id": r.id,
            "commit": r.commit,
            "changed_files": [line.split("\t")[-1] for line in r.changed_files],
            "said": r.final_message or "",
            "feedback": [{"author": c.author, "body": c.excerpt, "path": c.path, "line": c.line} for c in r.feedback],
        }
        for number, r in sorted(by_round.items())
    ]


def commit_messages(title: str, run_id: str, key: str, number: int, ids: list[str]) -> tuple[str, str]:
    """A round's commit message, and that of its empty commit when the agent changed nothing: what it answered,
    as trailers (the last paragraph, where git reads them)."""

    def head(outcome: str) -> str:
        return f"{title}\n\nbeflow run {run_id} ({outcome}) on issue {key}, review round {number}."

    trailers = trailer_lines(ids)
    empty = f"{head('no_changes')}\n\nThe agent changed no file in this round; this commit records what it answered."
    return f"{head('succeeded')}\n\n{trailers}", f"{empty}\n\n{trailers}"


def reply_text(record: RunRecord, outcome: str) -> str:
    """What beflow answers in each piece's thread once its round is delivered (``outcome``: its delivery's)."""
    short = record.commit[:12] if record.commit else None
    files = [line.split("\t")[-1] for line in record.changed_files]
    if outcome == "succeeded" and files:
        more = f" and {len(files) - 10} more" if len(files) > 10 else ""
        shown = ", ".join(f"`{name}`" for name in files[:10]) + more
        what = f"changed {shown}"
    else:
        what = "changed no file"
    text = f"beflow answered this in review round {record.round} (run `{record.id}`): {what}"
    text += f", commit `{short}`" if short else ""
    text += f" on `{record.branch}`" if record.branch else ""
    text += f"; pull request: {record.pull_request}" if record.pull_request else ""
    return text + "."


def reply_all(found: Iterable[FeedbackSource], pieces: Iterable[Feedback], body: str) -> list[str]:
    """Answer every piece through each source (a source answers only what it gave: the others ignore it); the
    problems, said, never raised."""
    problems: list[str] = []
    found = list(found)
    for piece in pieces:
        for source in found:
            try:
                source.reply(piece, body)
            except BeflowError as error:
                problems.append(f"the reply to feedback {piece.id} failed: {error.message}")
    return problems
