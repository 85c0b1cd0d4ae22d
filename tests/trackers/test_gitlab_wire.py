"""GitLab's answers read into beflow's models: the shapes GitLab's pages record read, the ones beflow cannot use are
clear errors naming the field, and the headers say what they say."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from beflow.trackers import gitlab_wire as wire

AUTHOR = {"id": 1, "username": "root", "name": "Administrator", "state": "active", "locked": False,
          "avatar_url": "https://www.gravatar.com/avatar/e64c7d89f26bd1972efa854d13d7dd61?s=80&d=identicon",
          "web_url": "http://localhost:3000/root"}  # fmt: skip

#: As GitLab's issues page records a listed issue (fields beflow does not read kept, to show they are ignored).
ISSUE: dict[str, Any] = {
    "id": 76, "iid": 6, "project_id": 1, "title": "Consequatur vero maxime deserunt laboriosam est voluptas dolorem.",
    "description": "Ratione dolores corrupti mollitia soluta quia.", "state": "opened",
    "created_at": "2018-03-01T09:08:27.617Z", "updated_at": "2018-03-02T10:41:38.234Z", "closed_at": None,
    "closed_by": None, "labels": ["foo", "beflow:ready"], "milestone": None, "assignees": [], "author": AUTHOR,
    "type": "ISSUE", "user_notes_count": 1, "merge_requests_count": 0, "upvotes": 0, "downvotes": 0,
    "due_date": None, "confidential": False, "discussion_locked": None, "issue_type": "issue",
    "web_url": "http://gitlab.example.com/my-group/my-project/issues/6", "weight": None,
    "time_stats": {"time_estimate": 0, "total_time_spent": 0},
}  # fmt: skip

#: As GitLab's discussions page records a merge request's diff thread.
DIFF_THREAD: dict[str, Any] = {
    "id": "87805b7c09016a7058e91bdbe7b29d1f284a39e6", "individual_note": False,
    "notes": [{
        "id": 1128, "type": "DiffNote", "body": "diff comment", "attachment": None, "author": AUTHOR,
        "created_at": "2018-03-04T09:17:22.520Z", "updated_at": "2018-03-04T09:17:22.520Z", "system": False,
        "noteable_id": 3, "noteable_type": "MergeRequest", "noteable_iid": None, "commit_id": "4803c71e",
        "position": {"base_sha": "b5d6e7b1613fca24d250fa8e5bc7bcc3dd6002ef",
                     "start_sha": "7c9c2ead8a320fb7ba0b4e234bd9529a2614e306",
                     "head_sha": "4803c71e6b1833ca72b8b26ef2ecd5adc8a38031", "old_path": "package.json",
                     "new_path": "package.json", "position_type": "text", "old_line": 27, "new_line": 27,
                     "line_range": {"start": {"line_code": "588440f6_27_27", "type": "new", "old_line": None,
                                              "new_line": 27}}},
        "resolved": False, "resolvable": True, "resolved_by": None, "confidential": False, "internal": False,
    }],
}  # fmt: skip

MERGE_REQUEST: dict[str, Any] = {
    "id": 1, "iid": 1, "project_id": 3, "title": "test1", "description": "fixed login page css paddings",
    "state": "merged", "merged_at": "2018-09-07T11:16:17.520Z", "created_at": "2017-04-29T08:46:00Z",
    "updated_at": "2017-04-29T08:46:00Z", "target_branch": "main", "source_branch": "test1", "author": AUTHOR,
    "source_project_id": 3, "target_project_id": 3,
    "draft": False, "work_in_progress": False, "sha": "8888888888888888888888888888888888888888",
    "detailed_merge_status": "not_open", "web_url": "http://gitlab.example.com/my-group/my-project/merge_requests/1",
}  # fmt: skip


def test_an_issue_as_recorded_reads_with_its_label_names() -> None:
    issue = wire.parse(wire.Issue, ISSUE, "GET /projects/1/issues")
    assert (issue.iid, issue.state, issue.labels) == (6, "opened", ["foo", "beflow:ready"])
    assert issue.updated_at == dt.datetime(2018, 3, 2, 10, 41, 38, 234000, tzinfo=dt.UTC)
    detailed = {**ISSUE, "labels": [{"id": 1, "name": "foo", "color": "#fff"}, {"id": 2, "name": "beflow:ready"}]}
    assert wire.parse(wire.Issue, detailed, "GET").labels == ["foo", "beflow:ready"]


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"iid": "6"}, "iid"),
        ({"state": "open"}, "state"),
        ({"iid": None}, "iid"),
        ({"created_at": "soon"}, "created_at"),
    ],
)
def test_an_issue_beflow_cannot_use_is_a_clear_error(change: dict[str, Any], where: str) -> None:
    with pytest.raises(wire.MalformedAnswer, match=rf"GET /projects/1/issues/6 cannot be read: {where}"):
        wire.parse(wire.Issue, {**ISSUE, **change}, "GET /projects/1/issues/6")


def test_a_listing_reads_the_items_it_can_and_names_the_others() -> None:
    good, bad = wire.read_each(wire.Issue, [ISSUE, {**ISSUE, "iid": 7, "title": None}, "junk"], "GET issues")
    assert [i.iid for i in good] == [6]
    assert [(u.iid, u.why) for u in bad] == [(7, "title: Input should be a valid string"), (None, bad[1].why)]
    with pytest.raises(wire.MalformedAnswer, match="it is not a list"):
        wire.read_each(wire.Issue, {"message": "x"}, "GET issues")


def test_a_diff_thread_reads_with_its_position() -> None:
    thread = wire.parse(wire.Discussion, DIFF_THREAD, "GET discussions")
    note = thread.notes[0]
    assert note.type == "DiffNote" and note.position is not None
    assert (note.position.path, note.position.line, (note.position.head_sha or "")[:8]) == (
        "package.json",
        27,
        "4803c71e",
    )
    assert not thread.resolved
    done = {**DIFF_THREAD, "notes": [{**DIFF_THREAD["notes"][0], "resolved": True}]}
    assert wire.parse(wire.Discussion, done, "GET").resolved
    general = {"id": "a", "individual_note": True, "notes": [{**DIFF_THREAD["notes"][0], "type": None,
                                                              "position": None, "resolvable": False}]}  # fmt: skip
    assert wire.parse(wire.Discussion, general, "GET").resolved
    with pytest.raises(wire.MalformedAnswer, match=r"notes\.0\.author"):
        wire.parse(wire.Discussion, {**DIFF_THREAD, "notes": [{**DIFF_THREAD["notes"][0], "author": None}]}, "GET")


def test_a_merge_request_and_its_states() -> None:
    mr = wire.parse(wire.MergeRequest, MERGE_REQUEST, "GET mr")
    assert (mr.state, mr.source_branch, mr.draft) == ("merged", "test1", False)
    with pytest.raises(wire.MalformedAnswer, match="state"):
        wire.parse(wire.MergeRequest, {**MERGE_REQUEST, "state": "open"}, "GET mr")


def test_a_member_may_push_from_developer_up_and_only_while_active() -> None:
    member = {**AUTHOR, "access_level": 30, "expires_at": None}
    assert wire.parse(wire.Member, member, "GET").may_push
    assert not wire.parse(wire.Member, {**member, "access_level": 20}, "GET").may_push
    assert not wire.parse(wire.Member, {**member, "state": "blocked"}, "GET").may_push
    with pytest.raises(wire.MalformedAnswer, match="access_level"):
        wire.parse(wire.Member, {**member, "access_level": "30"}, "GET")


def test_the_token_says_its_scopes() -> None:
    token = {"id": 4, "name": "beflow", "revoked": False, "created_at": "2020-07-23T14:31:47.729Z",
             "scopes": ["api"], "user_id": 3, "last_used_at": "2021-10-06T17:58:37.550Z", "active": True,
             "expires_at": None}  # fmt: skip
    assert wire.parse(wire.TokenSelf, token, "GET").may_write_api
    assert not wire.parse(wire.TokenSelf, {**token, "scopes": ["read_api"]}, "GET").may_write_api
    assert not wire.parse(wire.TokenSelf, {**token, "revoked": True}, "GET").may_write_api


def test_a_pipeline_and_its_failed_jobs() -> None:
    pipeline = {"id": 47, "iid": 12, "project_id": 1, "status": "failed", "source": "push", "ref": "new-pipeline",
                "sha": "a91957a858320c0e17f3a0eca7cfacbff50ea29a", "web_url": "https://example.com/foo/bar/pipelines/47",
                "created_at": "2016-08-11T11:28:34.085Z", "updated_at": "2016-08-11T11:32:35.169Z"}  # fmt: skip
    assert wire.parse(wire.Pipeline, pipeline, "GET").failed
    jobs = [{"id": 7, "name": "rspec", "stage": "test", "status": "failed", "allow_failure": False,
             "failure_reason": "script_failure"},
            {"id": 8, "name": "lint", "stage": "test", "status": "failed", "allow_failure": True}]  # fmt: skip
    assert [j.name for j in wire.parse_list(wire.Job, jobs, "GET jobs") if j.failed] == ["rspec"]


def test_rate_headers_and_the_next_page() -> None:
    rate = wire.RateHeaders.of({"RateLimit-Remaining": "17", "RateLimit-Reset": "1609844400", "Retry-After": "x"})
    assert (rate.remaining, rate.reset, rate.retry_after) == (17, 1609844400, None)
    link = ('<https://gitlab.example.com/api/v4/projects/8/issues?page=1&per_page=3>; rel="prev", '
            '<https://gitlab.example.com/api/v4/projects/8/issues?page=3&per_page=3>; rel="next"')  # fmt: skip
    assert wire.next_page({"Link": link}) == "https://gitlab.example.com/api/v4/projects/8/issues?page=3&per_page=3"
    assert wire.next_page({"link": '<https://x/?page=1>; rel="first"'}) is None


def test_error_answers_say_what_they_say() -> None:
    assert wire.error_message({"message": "404 Project Not Found"}) == "404 Project Not Found"
    assert wire.error_message({"error": "insufficient_scope"}) == "insufficient_scope"
    assert wire.error_message({"message": {"title": ["is too long"]}}) == "{'title': ['is too long']}"
    assert wire.error_message(["x"]) is None
