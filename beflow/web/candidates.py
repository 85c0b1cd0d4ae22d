"""An issue's best of N as its page shows it (docs/dashboard.md#best-of-n): the candidates side by side — each one's
lane and outcome, agent, checks, cost, time and lines changed, its diff — and the verdict, made of the run records
(the judged run's table once it judged, its candidates' own records while they run).

Each diff is read from git objects as the review's is (:func:`beflow.repository.branch_diff.branch_diff`: verified
blobs, bounded), between the commit its run recorded and the base it started from: never a ref the agent could have
moved since. The templates escape and mask what they show.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from beflow.errors import BeflowError
from beflow.records.record import CandidateRow, RunRecord
from beflow.repository.branch_diff import BranchDiff, branch_diff
from beflow.run.judging import row_of
from beflow.web import api

_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def best_of(records: Sequence[RunRecord], checks: int) -> api.BestOf | None:
    """The latest best of N among an issue's ``records`` (newest first), or None; ``checks``: the judge's count."""
    judged = next((r for r in records if r.best_of > 0), None)
    if judged is None:
        return None
    if judged.candidates:  # judged: its table is the verdict's
        rows = {row.candidate: row for row in judged.candidates}
    else:  # still running: each candidate's own record, as it is now
        rows = {r.candidate: row_of(r, checks) for r in records if r.set_of == judged.id and r.candidate}
    reasons = {r.candidate: r.stop_reason for r in records if r.set_of == judged.id and r.candidate}
    waiting = "waiting for a lane" if judged.outcome == "running" else "not started"
    shown = [
        _view(rows[n], reasons.get(n))
        if n in rows
        else api.CandidateView(candidate=n, run=None, agent=None, outcome=waiting)
        for n in range(1, max([judged.best_of, *rows]) + 1)
    ]
    review = judged.review
    return api.BestOf(
        run=judged.id,
        outcome=judged.outcome,
        reason=judged.stop_reason,
        count=judged.best_of,
        candidates=shown,
        reviewer=review.candidate if review is not None else None,
        reviewer_reason=review.reason if review is not None else None,
        decided_by=judged.decided_by,
        confirming=judged.outcome == "asked" and judged.question is not None,
    )


def _view(row: CandidateRow, reason: str | None) -> api.CandidateView:
    return api.CandidateView(
        candidate=row.candidate,
        run=row.run_id,
        agent=row.agent,
        outcome=row.outcome,
        reason=reason,
        branch=row.branch,
        base_commit=row.base_commit,
        commit=row.commit,
        checks_passed=row.checks_passed,
        checks_total=row.checks_total,
        lines_changed=row.lines_changed,
        cost=row.cost,
        currency=row.currency,
        duration=row.duration,
        passes=row.passes,
        chosen=row.chosen,
        url=row.url,
        removed=row.removed,
    )


def diffs(directory: Path, shown: api.BestOf) -> dict[int, BranchDiff]:
    """Each candidate's committed change (by its number), from the commits its run recorded; a candidate with none,
    or whose objects cannot be read (gone with its branch), has none."""
    found: dict[int, BranchDiff] = {}
    for candidate in shown.candidates:
        commits = (candidate.base_commit or "", candidate.commit or "")
        if candidate.branch is None or not all(_SHA.fullmatch(commit) for commit in commits):
            continue  # (a record's commits are beflow's: anything else is not given to git)
        try:
            diff = branch_diff(directory, candidate.branch, commits[0], tip=commits[1])
        except BeflowError:
            continue
        if diff is not None:
            found[candidate.candidate] = diff
    return found
