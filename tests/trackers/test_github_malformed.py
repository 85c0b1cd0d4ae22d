"""GitHub answers in shapes of their own (a proxy's page, a GitHub Enterprise that differs, a field of another type),
fed through the tracker's real code path by the fake GitHub: an issue that does not read is named and skipped, a
comment that does not read is kept in its place and left out of prompts, a lease that does not read is no lease, and
an answer that does not read at all is a clear error. Never a KeyError or a TypeError from deep inside."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from beflow.errors import BeflowError
from beflow.trackers import Status
from beflow.trackers.github_wire import RateHeaders
from tests.support.github import FakeGitHub
from tests.support.github import github_tracker as tracker
from tests.support.projects import AutoProject

ISSUES = "/repos/octo/hello/issues"


def each(changes: dict[int, Callable[[dict[str, Any]], None]], key: str = "number") -> Callable[[Any], Any]:
    """A tamper that changes the items (of a listing, or the one answer) whose ``key`` is in ``changes``."""

    def change(data: Any) -> Any:
        for item in data if isinstance(data, list) else [data]:
            if isinstance(item, dict) and item.get(key) in changes:
                changes[item[key]](item)
        return data

    return change


def test_issues_in_shapes_of_their_own_are_named_and_skipped_and_the_rest_are_listed(
    gh: AutoProject, github: FakeGitHub, beflow
) -> None:
    for title in ["Good", "Label no string", "Label no object", "No number", "Body no string", "No time", "Bare"]:
        github.add_issue(title, labels=["beflow", "beflow:ready"])
    github.add_issue("A pull request", labels=["beflow", "beflow:ready"], pull=True)
    hostile = github.tamper(
        "GET",
        ISSUES,
        each(
            {
                2: lambda i: i.update(labels=[*i["labels"][:-1], {**i["labels"][-1], "name": 7}]),
                3: lambda i: i["labels"].append(42),
                4: lambda i: i.pop("number"),
                5: lambda i: i.update(body={"text": "hi"}),
                6: lambda i: i.update(created_at="yesterday"),
                7: lambda i: i.update(user=None, title=None, body=None),  # null where GitHub may give null: read
                8: lambda i: i.update(number="eight"),  # a pull request, however it reads, is no issue
            }
        ),
    )
    mine = tracker(gh)

    listing = mine.listing()
    assert [(i.key, i.title, i.body) for i in listing.issues] == [("1", "Good", ""), ("7", "(untitled)", "")]
    assert [p.render().split(": ", 1)[0] for p in listing.problems] == [
        "octo/hello#2",
        "octo/hello#3",
        "octo/hello#?",
        "octo/hello#5",
        "octo/hello#6",
    ]
    said = [p.message for p in listing.problems]
    assert said[0].startswith("issue 2 in octo/hello cannot be read: labels.1.name: Input should be a valid string")
    assert said[2].startswith("an issue in octo/hello cannot be read: number: Field required")
    assert "body" in said[3] and "created_at" in said[4]
    assert sorted(mine.unreadable) == ["2", "3", "5", "6"]
    assert [i.key for i in mine.ready()] == ["1", "7"]
    with pytest.raises(BeflowError, match="issue 6 in octo/hello cannot be read: created_at"):
        mine.get("6")
    with pytest.raises(BeflowError, match="issue 2 in octo/hello cannot be read: labels"):
        mine.set_status("2", Status.IN_PROGRESS)
    assert mine.set_status("7", Status.OPEN).status == Status.OPEN  # the rest goes on as ever

    shown = beflow("issues", "list")
    assert shown.exit_code == 0 and "Good" in shown.stdout
    assert "octo/hello#5: issue 5 in octo/hello cannot be read: body" in shown.stderr
    assert hostile.served >= 4


def test_a_listing_that_is_no_list_is_a_clear_error(gh: AutoProject, github: FakeGitHub, beflow) -> None:
    github.add_issue("Good", labels=["beflow", "beflow:ready"])
    github.tamper("GET", ISSUES, lambda data: {"items": data} if isinstance(data, list) else data)  # a proxy's wrap

    with pytest.raises(BeflowError, match=f"GitHub's answer to GET {ISSUES} cannot be read: it is not a list"):
        tracker(gh).listing()
    shown = beflow("issues", "list")
    assert shown.exit_code != 0 and "it is not a list" in shown.stderr


def test_comments_in_shapes_of_their_own_are_kept_in_place_and_left_out_of_prompts(
    gh: AutoProject, github: FakeGitHub
) -> None:
    github.add_issue("Commented", labels=["beflow", "beflow:ready"])
    good = github.add_comment(1, "Please keep the old name.")
    by_name = github.add_comment(1, "I am a user that is a string.")
    ghost = github.add_comment(1, "From a deleted account.")
    wordless = github.add_comment(1, "Replaced by a number.")
    github.tamper(
        "GET",
        f"{ISSUES}/1/comments",
        each(
            {
                by_name["id"]: lambda c: c.update(user="bob"),
                ghost["id"]: lambda c: c.update(user=None),
                wordless["id"]: lambda c: c.update(body=5),
            },
            key="id",
        ),
    )
    mine = tracker(gh)

    comments = mine.get("1").comments
    assert [(c.author, c.text, c.withheld) for c in comments] == [
        ("alice", good["body"], None),
        (
            "unknown",
            f"(comment {by_name['id']} cannot be read: user: Input should be a valid dictionary or instance of User)",
            "it cannot be read: user: Input should be a valid dictionary or instance of User",
        ),
        ("ghost", "From a deleted account.", None),  # (the fake's comments are by an OWNER)
        (
            "unknown",
            f"(comment {wordless['id']} cannot be read: body: Input should be a valid string)",
            "it cannot be read: body: Input should be a valid string",
        ),
    ]
    assert len(mine.set_status("1", Status.IN_PROGRESS, note="started").comments) == 5


def test_a_lease_that_does_not_read_is_no_lease_and_a_ref_that_does_not_read_is_an_error(
    gh: AutoProject, github: FakeGitHub
) -> None:
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    github.add_issue("Two", labels=["beflow", "beflow:ready"])
    lease = {"owner": "mallory", "host": "x", "pid": "not a pid", "since": 0, "expires": "never"}
    github.refs["refs/beflow/claims/1"] = github.add_commit(f"beflow claim on issue 1\n\n{json.dumps(lease)}\n")
    mine = tracker(gh)

    assert mine.holder("1") is None and mine.last_holder("1") is None  # nobody holds it
    claim = mine.claim("1", owner="watcher a")
    assert mine.holder("1") is not None and mine.holder("1").owner == "watcher a"  # type: ignore[union-attr]
    claim.release()

    github.tamper("GET", "/repos/octo/hello/git/matching-refs/", lambda refs: [*refs, {"ref": 5, "object": None}])
    assert [i.key for i in mine.ready()] == ["1", "2"]  # the listing of claims read what it could

    github.tamper("GET", "/repos/octo/hello/git/ref/beflow/claims/1", lambda ref: {**ref, "object": None})
    with pytest.raises(BeflowError, match="cannot be read: object: Input should be a valid dictionary"):
        tracker(gh).claim("1", owner="watcher b")


def test_rate_limit_headers_and_an_error_said_in_shapes_of_their_own_are_left_unread(
    gh: AutoProject, github: FakeGitHub
) -> None:
    github.add_issue("One", labels=["beflow", "beflow:ready"])
    headers = {"Retry-After": "soon", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "later"}
    github.fail(502, headers=headers, body={"message": {"html": "<h1>Bad gateway</h1>"}}, times=3, only="GET")

    with pytest.raises(BeflowError, match=r"GitHub: GET /repos/octo/hello/issues: 502$"):
        tracker(gh).listing()
    assert [i.key for i in tracker(gh).listing().issues] == ["1"]
    assert len(github.violations) == 3 and all("Bad gateway" in v for v in github.violations)  # (meant to stray)
    github.violations.clear()
    assert RateHeaders.of({"retry-after": "-1", "x-ratelimit-remaining": "1e3", "x-ratelimit-reset": "١٢"}) == (
        RateHeaders()
    )
