"""Best of N's judge without a reviewer (beflow.run.judging): which candidate is chosen, and the table."""

from __future__ import annotations

from typing import Any

from beflow.records.record import CandidateRow, CheckResult, RunRecord, now
from beflow.run.judging import choose, passes, row_of, table


def row(candidate: int, **fields: Any) -> CandidateRow:
    values: dict[str, Any] = {
        "run_id": f"r{candidate}",
        "agent": "codex",
        "branch": f"beflow-attempts/7/c{candidate}",
        "outcome": "succeeded",
        "commit": f"{candidate}" * 40,
        "checks_passed": 1,
        "checks_total": 1,
        "lines_changed": 10,
        **fields,
    }
    return CandidateRow(candidate=candidate, **values)


def test_the_passing_candidate_with_the_smallest_diff_is_chosen() -> None:
    rows = [row(1, lines_changed=40), row(2, checks_passed=0, lines_changed=1), row(3, lines_changed=12)]

    assert choose(rows).chosen == 3
    assert choose(rows).reason == "candidate 3 chosen over 1 other passing: 1/1 checks, 12 lines changed"


def test_more_checks_passed_beat_a_smaller_diff() -> None:
    rows = [row(1, checks_total=2, lines_changed=2), row(2, checks_passed=2, checks_total=2, lines_changed=90)]

    assert choose(rows).chosen == 2


def test_equal_diffs_are_decided_by_cost_then_time_then_number() -> None:
    assert choose([row(1, cost=0.5, duration=1.0), row(2, cost=0.2, duration=9.0)]).chosen == 2
    assert choose([row(1, cost=None, duration=1.0), row(2, cost=0.9, duration=9.0)]).chosen == 2  # unknown: last
    assert choose([row(1, duration=8.0), row(2, duration=3.0)]).chosen == 2
    assert choose([row(2), row(1)]).chosen == 1


def test_only_a_succeeded_committed_candidate_that_passed_a_check_may_be_chosen() -> None:
    assert not passes(row(1, outcome="failed"))
    assert not passes(row(1, outcome="no_changes", commit=None, lines_changed=None))
    assert not passes(row(1, checks_passed=0))
    assert passes(row(1, checks_passed=0, checks_total=0))  # no checks: committed work is enough

    verdict = choose([row(1, outcome="over_budget"), row(2, checks_passed=0)])

    assert verdict.chosen is None
    assert verdict.reason.startswith("no candidate of 2 passed")
    assert choose([]).chosen is None


def test_a_candidates_row_comes_from_its_record() -> None:
    record = RunRecord(id="r1", issue="7", mode="auto", agent="claude", started_at=now(), candidate=2)
    record.close("succeeded", "done")
    record.commit, record.lines_changed = "a" * 40, 5
    record.checks = [CheckResult(command="pytest", passed=True), CheckResult(command="ruff", passed=False)]

    made = row_of(record, 2)

    assert (made.candidate, made.checks_passed, made.checks_total, made.lines_changed) == (2, 1, 2, 5)
    assert made.cost is None and made.duration == record.duration


def test_the_table_marks_the_chosen_one_and_names_each_branch() -> None:
    text = table(
        [row(1, chosen=True, cost=0.25, currency="USD", duration=2.0), row(2, commit=None, lines_changed=None)]
    )

    lines = text.splitlines()
    assert lines[2] == "| 1 (chosen) | `codex` | succeeded | 1/1 | 10 | 0.25 USD | 2.0 s | `beflow-attempts/7/c1` |"
    assert lines[3] == "| 2 | `codex` | succeeded | not run | none | not reported |  | `beflow-attempts/7/c2` |"


def test_a_branch_is_linked_once_pushed_said_removed_once_deleted_and_named_otherwise() -> None:
    rows = [
        row(1, branch="b/c1", url="https://h/tree/b/c1"),
        row(2, branch="b/c2", removed=True, url="https://h/tree/b/c2"),
        row(3, branch="b/c3"),
    ]

    text = table(rows)

    assert "| [`b/c1`](https://h/tree/b/c1) |" in text
    assert "| `b/c2` (removed) |" in text and "https://h/tree/b/c2" not in text
    assert "| `b/c3` |" in text
