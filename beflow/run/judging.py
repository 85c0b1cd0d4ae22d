"""Best of N's judge without a reviewer: which candidate's work is proposed, and the comparison table.

Pure functions of the candidates' rows (:class:`~beflow.records.record.CandidateRow`), so that the decision is tested
without running anything. A candidate *passes* when it succeeded with a commit and passed at least one of the
judge's checks (every candidate that committed passes when there are none). The best passing one passed the most
checks, then changed the fewest lines (added plus removed), then cost least (a cost not reported counts last), then
took the least time; the lower candidate number breaks what is left.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from beflow.records.record import CandidateRow, RunRecord
from beflow.trackers.quoting import code


@dataclass(frozen=True)
class Choice:
    """The judge's verdict: the chosen candidate's number (None: none passed) and why, in a sentence."""

    chosen: int | None
    reason: str


def row_of(record: RunRecord, checks: int) -> CandidateRow:
    """A candidate's line in the table, from its record; ``checks``: how many checks the judge has."""
    usage = record.usage
    return CandidateRow(
        candidate=record.candidate,
        run_id=record.id,
        agent=record.agent,
        branch=record.branch,
        outcome=record.outcome,
        base_commit=record.base_commit,
        commit=record.commit,
        checks_passed=sum(check.passed for check in record.checks),
        checks_total=checks,
        lines_changed=record.lines_changed,
        cost=usage.cost if usage is not None else None,
        currency=usage.currency if usage is not None else None,
        duration=record.duration,
    )


def passes(row: CandidateRow) -> bool:
    """Whether the candidate may be chosen: it succeeded, committed its work and passed a check (if there are any)."""
    return row.passes


def _rank(row: CandidateRow) -> tuple[int, int, float, float, int]:
    cost = row.cost if row.cost is not None else math.inf
    duration = row.duration if row.duration is not None else math.inf
    return (-row.checks_passed, row.lines_changed or 0, cost, duration, row.candidate)


def choose(rows: Sequence[CandidateRow]) -> Choice:
    """The best passing candidate (see the module's description), or None and why none passed."""
    passing = sorted((row for row in rows if passes(row)), key=_rank)
    if not passing:
        return Choice(None, f"no candidate of {len(rows)} passed: none succeeded with a commit that passed a check")
    best = passing[0]
    checks = f"{best.checks_passed}/{best.checks_total} checks" if best.checks_total else "no checks configured"
    others = f" over {len(passing) - 1} other passing" if len(passing) > 1 else ""
    return Choice(
        best.candidate, f"candidate {best.candidate} chosen{others}: {checks}, {best.lines_changed} lines changed"
    )


def branch_cell(row: CandidateRow) -> str:
    """A candidate's branch in the table: a link once pushed, said removed once deleted (never a dead link)."""
    if not row.branch:
        return "none"
    if row.removed:
        return f"{code(row.branch)} (removed)"
    return f"[{code(row.branch)}]({row.url})" if row.url else code(row.branch)


def table(rows: Sequence[CandidateRow], *, link: Callable[[CandidateRow], str] | None = None) -> str:
    """The comparison table, in Markdown: one line per candidate; ``link``: how a candidate's branch is named."""
    named = link or branch_cell
    lines = [
        "| candidate | agent | outcome | checks passed | lines changed | cost | time | branch |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        mark = " (chosen)" if row.chosen else ""
        checks = f"{row.checks_passed}/{row.checks_total}" if row.commit is not None else "not run"
        cost = f"{row.cost:.4g} {row.currency or ''}".strip() if row.cost is not None else "not reported"
        time = f"{row.duration:.1f} s" if row.duration is not None else ""
        changed = str(row.lines_changed) if row.lines_changed is not None else "none"
        lines.append(
            f"| {row.candidate}{mark} | {code(row.agent)} | {row.outcome} | {checks} | {changed} | {cost} | {time} "
            f"| {named(row)} |"
        )
    return "\n".join(lines)
