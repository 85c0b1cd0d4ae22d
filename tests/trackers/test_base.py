"""The statuses, their transitions and the order runs pick issues in."""

from __future__ import annotations

import datetime as dt

import pytest

from beflow.errors import UsageError
from beflow.trackers.issue import TRANSITIONS, Comment, Issue, Status, check_transition, normalize_key

T0 = dt.datetime(2024, 5, 1, 10, 0, tzinfo=dt.UTC)


def issue(key: str, priority: int = 2, created: dt.datetime = T0) -> Issue:
    return Issue(key=key, title=f"issue {key}", status=Status.READY, priority=priority, created=created, updated=T0)


def test_every_status_has_a_row_and_no_status_goes_to_itself() -> None:
    assert set(TRANSITIONS) == set(Status)
    for status, targets in TRANSITIONS.items():
        assert status not in targets


@pytest.mark.parametrize(
    ("current", "target"),
    [("open", "ready"), ("ready", "in_progress"), ("in_progress", "review"), ("review", "done"), ("closed", "ready")],
)
def test_the_usual_path_is_allowed(current: str, target: str) -> None:
    check_transition("7", Status(current), Status(target))


def test_every_status_can_be_closed_and_closed_can_be_reopened() -> None:
    for status in Status:
        check_transition("7", status, Status.CLOSED)
    check_transition("7", Status.CLOSED, Status.READY)


def test_a_question_blocks_a_running_issue_until_an_answer_resumes_it_or_it_fails() -> None:
    check_transition("7", Status.IN_PROGRESS, Status.BLOCKED)
    for target in (Status.IN_PROGRESS, Status.FAILED, Status.READY, Status.CLOSED):
        check_transition("7", Status.BLOCKED, target)
    for current in (Status.OPEN, Status.READY, Status.REVIEW, Status.DONE, Status.FAILED):
        with pytest.raises(UsageError, match="cannot go from"):  # only a run's agent asks
            check_transition("7", current, Status.BLOCKED)
    with pytest.raises(UsageError, match="from blocked it can go to: ready, in_progress, failed, closed"):
        check_transition("7", Status.BLOCKED, Status.REVIEW)


def test_setting_the_same_status_is_not_a_transition() -> None:
    for status in Status:
        check_transition("7", status, status)


def test_a_forbidden_transition_names_both_statuses_and_the_allowed_targets() -> None:
    with pytest.raises(UsageError) as caught:
        check_transition("7", Status.OPEN, Status.DONE)
    assert caught.value.message == "issue 7: cannot go from open to done (from open it can go to: ready, closed)"
    assert caught.value.exit_code == 2


def test_runs_take_lower_priority_numbers_first_then_older_issues_then_lower_keys() -> None:
    later = T0 + dt.timedelta(hours=1)
    issues = [issue("4", 2, T0), issue("3", 1, later), issue("2", 2, later), issue("10", 2, T0)]
    assert [i.key for i in sorted(issues, key=Issue.order)] == ["3", "4", "10", "2"]


def test_times_are_kept_in_utc_to_the_second() -> None:
    local = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=dt.timezone(dt.timedelta(hours=2)))
    comment = Comment(author="alice", created=local, text="hi")
    assert comment.created == T0


def test_text_is_normalized_as_files_keep_it() -> None:
    assert Comment(author="a", created=T0, text="\n\n  indented\r\nline  \n\n").text == "  indented\nline"


def test_keys_as_people_type_them() -> None:
    assert normalize_key("#7") == normalize_key("0007") == normalize_key(" 7 ") == "7"
