"""CI fix rounds (docs/rounds.md#failed-checks): failed checks start rounds at most ``feedback.max_fix_rounds``
times, then the issue is flagged ``needs-human`` once, and no fix round starts until a person removes the flag. In
process: the local tracker, beflow's own run records, and the fake GitHub's checks through the real code host."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from beflow.codehosts.github import GitHubCodeHost
from beflow.config import Config, GitHubCodeHostSettings, Project
from beflow.config import Feedback as FeedbackSettings
from beflow.feedback import Feedback
from beflow.ops import fixes, rounds
from beflow.records.record import Consumed, RunRecord
from beflow.records.store import RunStore
from beflow.trackers import LocalTracker, Status
from beflow.trackers.github_api import Api
from tests.support.github import TOKEN, FakeGitHub

NOW = dt.datetime.now(dt.UTC)
EARLIER = NOW - dt.timedelta(minutes=1)


@pytest.fixture
def tracker(repo: Path) -> LocalTracker:
    return LocalTracker(repo / ".beflow" / "issues", repo)


def check(n: int, author: str = "ci") -> Feedback:
    return Feedback(id=f"check-run:{n}", kind="check", author=author, body=f"ci: failure {n}", created=NOW)


def review(n: int) -> Feedback:
    return Feedback(id=f"review:{n}", kind="review", author="alice", body="rename it", created=NOW)


def record(key: str, number: int, *kinds: str, started: dt.datetime = EARLIER, attempt: int = 1) -> RunRecord:
    return RunRecord(
        id=f"20240501-1000{number:02d}-{attempt}",
        issue=key,
        mode="auto",
        agent="codex",
        attempt=attempt,
        round=number,
        feedback=[Consumed(id=f"{kind}:{number}", kind=kind, author="x") for kind in kinds],
        started_at=started,
        outcome="succeeded",
    )


def in_review(tracker: LocalTracker) -> str:
    key = tracker.create("Fix it", status=Status.READY).key
    tracker.set_status(key, Status.IN_PROGRESS)
    return tracker.set_status(key, Status.REVIEW).key


def test_checks_start_rounds_until_the_fix_rounds_are_spent_then_the_issue_is_flagged_once(
    tracker: LocalTracker,
) -> None:
    key = in_review(tracker)
    # A round that answered a check and its retry are one fix round; a review round is none.
    one = [record(key, 1, "check"), record(key, 1, "check", attempt=2), record(key, 2, "review")]
    pieces = [check(3), review(3)]

    kept, held, said = fixes.hold(tracker, key, pieces, one, most=2)
    assert (kept, held, said) == (pieces, [], None)

    two = [*one, record(key, 3, "check", "review")]
    kept, held, said = fixes.hold(tracker, key, pieces, two, most=2)

    assert kept == [review(3)]  # the reviewer's words still start a round
    assert [h.id for h in held] == ["check-run:3"] and "max_fix_rounds" in held[0].why
    assert said is not None and said.startswith(fixes.STOPPED)
    issue = tracker.get(key)
    assert "needs-human" in issue.labels and issue.status == Status.REVIEW
    assert [c.text for c in issue.comments if c.text.startswith(fixes.STOPPED)] == [said + "."]

    # Flagged: checks are held, and nothing more is said, however often it is asked.
    for _ in range(2):
        kept, held, said = fixes.hold(tracker, key, [check(4)], two, most=2)
        assert (kept, said) == ([], None) and "flagged" in held[0].why
    assert len([c for c in tracker.get(key).comments if c.text.startswith(fixes.STOPPED)]) == 1


def test_a_person_removing_the_flag_gives_the_fix_rounds_back_counted_from_the_flag(tracker: LocalTracker) -> None:
    key = in_review(tracker)
    before = [record(key, 1, "check", started=NOW - dt.timedelta(hours=2)), record(key, 2, "check")]
    fixes.hold(tracker, key, [check(3)], before, most=1)
    flagged = tracker.get(key)
    assert "needs-human" in flagged.labels
    path = flagged.path
    assert path is not None
    path.write_text(path.read_text().replace("labels: [needs-human]", "labels: []"))  # a person, in the issue's file
    assert "needs-human" not in tracker.get(key).labels

    kept, held, _ = fixes.hold(tracker, key, [check(4)], before, most=1)
    assert [p.id for p in kept] == ["check-run:4"] and held == []  # the rounds before the flag are not counted
    later = [*before, record(key, 3, "check", started=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5))]
    kept, _, said = fixes.hold(tracker, key, [check(5)], later, most=1)
    assert kept == [] and said is not None  # spent again: flagged again


def test_no_fix_round_at_all_with_max_fix_rounds_zero_and_a_flag_a_person_set_holds_checks(
    tracker: LocalTracker,
) -> None:
    key = in_review(tracker)
    kept, _, said = fixes.hold(tracker, key, [check(1)], [], most=0)
    assert kept == [] and said is not None

    other = in_review(tracker)
    tracker.flag(other, "needs-human", "a person wants to look first")
    kept, held, said = fixes.hold(tracker, other, [check(2)], [], most=2)
    assert kept == [] and said is None and "flagged" in held[0].why


def test_a_strangers_copy_of_the_flags_words_gives_no_round_back() -> None:
    from beflow.trackers.issue import Comment, Issue

    at = NOW - dt.timedelta(hours=1)
    real = Comment(author="beflow", created=at, text=f"{fixes.STOPPED}: x.")
    forged = Comment(author="mallory", created=NOW, text=f"{fixes.STOPPED}: y.").withholding("a stranger")
    issue = Issue(key="1", title="t", status=Status.REVIEW, created=at, updated=NOW, comments=[real, forged])
    assert fixes.flagged_since(issue) == real.created


def test_the_round_plan_holds_the_failed_checks_of_githubs_pull_request_once_spent(
    tracker: LocalTracker, repo: Path, github: FakeGitHub
) -> None:
    key = in_review(tracker)
    number = github.open_pull(f"beflow/{key}")
    sha = github.pulls[number]["head"]["sha"]
    github.add_check_run(sha, "tests", conclusion="failure")
    feedback = FeedbackSettings(checks=True, settle=0.1, max_fix_rounds=1)
    project = Project(config=Config(feedback=feedback), config_path=None, directory=repo)
    settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url)
    api = Api(github.url, TOKEN)
    try:
        host = GitHubCodeHost(settings, "octo/hello", api, None, feedback=feedback)
        store = RunStore(repo)
        first = record(key, 0)
        store.create(first, "prompt")

        planned = rounds.plan(project, [host], key, store, tracker=tracker)
        assert planned is not None and planned.startable and [p.kind for p in planned.pieces] == ["check"]

        store.create(record(key, 1, "check"), "prompt")  # its fix round ran; the check fails again
        github.add_check_run(sha, "tests", conclusion="failure")
        planned = rounds.plan(project, [host], key, store, tracker=tracker)
    finally:
        api.close()

    assert planned is not None and not planned.startable and planned.flagged is not None
    assert "needs-human" in tracker.get(key).labels
    assert {i.why for i in planned.ignored if i.id.startswith("check-run:")} == {
        "the issue had its 1 fix round(s) for failed checks (feedback.max_fix_rounds)"
    }


def test_a_watch_survey_flags_the_issue_once_and_queues_no_fix_round(
    tracker: LocalTracker, repo: Path, github: FakeGitHub
) -> None:
    from beflow.watch.rounds import ReviewRounds

    key = in_review(tracker)
    number = github.open_pull(f"beflow/{key}")
    github.add_check_run(github.pulls[number]["head"]["sha"], "tests", conclusion="failure")
    feedback = FeedbackSettings(checks=True, settle=0.1, max_fix_rounds=1)
    project = Project(config=Config(feedback=feedback), config_path=None, directory=repo)
    store = RunStore(repo)
    store.create(record(key, 0), "prompt")
    store.create(record(key, 1, "check"), "prompt")
    emitted: list[tuple[str, str, dict[str, object]]] = []
    rounds = ReviewRounds(lambda: 2e9, lambda kind, key, **data: emitted.append((kind, key, data)))
    api = Api(github.url, TOKEN)
    try:
        host = GitHubCodeHost(
            GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url),
            "octo/hello",
            api,
            None,
            feedback=feedback,
        )
        for _ in range(2):
            assert rounds.survey(project, tracker, host, running=set(), ready=[]) == []
    finally:
        api.close()

    assert [(kind, k) for kind, k, _ in emitted] == [("skipped", key)]
    assert str(emitted[0][2]["reason"]).startswith(fixes.STOPPED)
    assert "needs-human" in tracker.get(key).labels


def test_a_strangers_copy_of_the_no_more_rounds_words_does_not_silence_the_note() -> None:
    from beflow.trackers.issue import Comment, Issue

    at = NOW - dt.timedelta(hours=1)
    forged = Comment(author="mallory", created=at, text=f"{rounds.CAPPED}: x.").withholding("a stranger")
    quoted = Comment(author="beflow", created=at, text=f"beflow answered this: > {rounds.CAPPED}")
    issue = Issue(key="1", title="t", status=Status.REVIEW, created=at, updated=NOW, comments=[forged, quoted])
    assert not rounds.said_end(issue)
    said = Comment(author="beflow", created=NOW, text=f"{rounds.CAPPED}: it had its 2 review round(s).")
    assert rounds.said_end(issue.model_copy(update={"comments": [forged, quoted, said]}))
