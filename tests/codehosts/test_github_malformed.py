"""The GitHub code host given answers in shapes of their own (a field of another type, a field left out, a list
that is none), through its real code path on the fake GitHub: a piece of feedback that does not read is left out
and said why, the rest is gathered; an answer that does not read at all is a clear error, never a crash."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from beflow.codehosts import github_feedback
from beflow.codehosts.github import GitHubCodeHost
from beflow.config import Feedback as FeedbackSettings
from beflow.config import GitHubCodeHostSettings
from beflow.errors import BeflowError
from beflow.trackers.github_api import Api
from tests.support.github import TOKEN, FakeGitHub

PULLS = "/repos/octo/hello/pulls"


@pytest.fixture
def host(github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., GitHubCodeHost]]:
    """``host(**feedback settings)``: a code host on the fake GitHub that reads its listings on every gather."""
    monkeypatch.setattr(github_feedback, "FRESH", 0.0)
    apis: list[Api] = []

    def make(**feedback: Any) -> GitHubCodeHost:
        apis.append(Api(github.url, TOKEN))
        settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url)
        return GitHubCodeHost(settings, "octo/hello", apis[-1], None, feedback=FeedbackSettings(**feedback))

    yield make
    for api in apis:
        api.close()


def by_id(changes: dict[int, Callable[[dict[str, Any]], None]]) -> Callable[[Any], Any]:
    def change(items: Any) -> Any:
        for item in items:
            if item.get("id") in changes:
                changes[item["id"]](item)
        return items

    return change


def test_feedback_in_shapes_of_its_own_is_left_out_with_why_and_the_rest_gathered(
    host: Callable[..., GitHubCodeHost], github: FakeGitHub
) -> None:
    number = github.open_pull("beflow/1")
    good = github.submit_review(number, "Please cover the empty case.")
    named = github.submit_review(number, "My user is a name.")
    unnumbered = github.submit_review(number, "I have no id.")
    github.submit_review(
        number,
        state="COMMENTED",
        comments=[{"path": "a.py", "line": 1, "body": "Rename."}, {"path": "b.py", "line": 2, "body": "Odd line."}],
    )
    inline, odd = github.review_comments_of(number)
    asked = github.add_comment(number, "@beflow handle None too")
    wordless = github.add_comment(number, "@beflow my body is a number")
    tampered = [
        github.tamper(
            "GET",
            f"{PULLS}/{number}/reviews",
            by_id({named["id"]: lambda r: r.update(user="mallory"), unnumbered["id"]: lambda r: r.pop("id")}),
        ),
        github.tamper("GET", f"{PULLS}/{number}/comments", by_id({odd["id"]: lambda c: c.update(line="ten")})),
        github.tamper(
            "GET", f"/repos/octo/hello/issues/{number}/comments", by_id({wordless["id"]: lambda c: c.update(body=5)})
        ),
    ]

    gathered = host().gather("1", "beflow/1")

    assert [p.id for p in gathered.pieces] == [
        f"review:{good['id']}",
        f"review-comment:{inline['id']}",
        f"issue-comment:{asked['id']}",
    ]
    why = "GitHub's answer for it cannot be read: "
    assert [(i.id, i.author, i.why) for i in gathered.ignored] == [
        (f"review:{named['id']}", "unknown", f"{why}user: Input should be a valid dictionary or instance of User"),
        ("review:?", "unknown", f"{why}id: Field required"),
        (
            f"review-comment:{odd['id']}",
            "unknown",
            f"{why}line: Input should be a valid integer, unable to parse string as an integer",
        ),
        (f"issue-comment:{wordless['id']}", "unknown", f"{why}body: Input should be a valid string"),
    ]
    assert all(t.served for t in tampered)


def test_checks_or_a_pull_request_in_shapes_of_their_own_are_a_clear_error(
    host: Callable[..., GitHubCodeHost], github: FakeGitHub
) -> None:
    number = github.open_pull("beflow/1")
    github.set_head(number, "c" * 40)
    github.add_check_run("c" * 40, "tests")
    github.tamper("GET", "/repos/octo/hello/commits/", lambda runs: {**runs, "check_runs": "none"})

    with pytest.raises(BeflowError, match="check-runs cannot be read: check_runs: Input should be a valid list"):
        host(checks=True).gather("1", "beflow/1")
    assert host().gather("1", "beflow/1").ended is None  # without checks, the rest reads

    github.tamper("GET", PULLS, lambda pulls: [{k: v for k, v in p.items() if k != "html_url"} for p in pulls])
    with pytest.raises(BeflowError, match=f"GET {PULLS} \\(item 0\\) cannot be read: html_url: Field required"):
        host().find("beflow/1")
