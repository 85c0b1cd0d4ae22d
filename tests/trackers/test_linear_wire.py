"""Linear's answers read into beflow's models: the shapes of Linear's schema read (what beflow does not read is
ignored), the ones beflow cannot use are clear errors naming the field, an unreadable issue of a listing is left
aside alone, and errors and rate-limit headers say what they say."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from beflow.trackers import linear_wire as wire

ADA = {"id": "6f1e9a4c-3c1b-4d5e-9a1f-2b3c4d5e6f70", "name": "Ada Lovelace", "displayName": "ada", "app": False,
       "active": True, "avatarUrl": None}  # fmt: skip
AGENT = {"id": "0b8a7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d", "name": "beflow", "displayName": "beflow", "app": True,
         "active": True}  # fmt: skip
TODO = {"id": "d0c1b2a3-9f8e-4d7c-a6b5-c4d3e2f1a0b9", "name": "Todo", "type": "unstarted", "position": 1.0,
        "color": "#e2e2e2"}  # fmt: skip

#: An issue as ``BeflowIssue`` (the fragment) selects it, with a field it does not select, to show it is ignored.
ISSUE: dict[str, Any] = {
    "id": "9a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d", "identifier": "ENG-123", "title": "Widgets break on resize",
    "description": "Steps:\n1. resize", "priority": 2.0, "createdAt": "2026-07-20T08:15:30.120Z",
    "updatedAt": "2026-07-21T10:00:00.000Z", "url": "https://linear.app/acme/issue/ENG-123/widgets-break-on-resize",
    "state": TODO, "team": {"id": "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f", "key": "ENG"},
    "project": {"id": "2d3e4f5a-6b7c-4d8e-9f0a-1b2c3d4e5f6a", "name": "Widgets"},
    "labels": {"nodes": [{"id": "3e4f5a6b-7c8d-4e9f-8a1b-2c3d4e5f6a7b", "name": "beflow"}]},
    "labelIds": ["3e4f5a6b-7c8d-4e9f-8a1b-2c3d4e5f6a7b"],
    "assignee": ADA, "delegate": AGENT, "branchName": "ada/eng-123-widgets-break-on-resize",
}  # fmt: skip

COMMENT: dict[str, Any] = {
    "id": "4f5a6b7c-8d9e-4f0a-9b1c-2d3e4f5a6b7c", "body": "Looks like the resize observer.",
    "createdAt": "2026-07-21T09:00:00.000Z", "updatedAt": "2026-07-21T09:00:00.000Z", "editedAt": None,
    "archivedAt": None, "parentId": None, "user": ADA,
}  # fmt: skip

SESSION: dict[str, Any] = {
    "id": "5a6b7c8d-9e0f-4a1b-8c2d-3e4f5a6b7c8d", "status": "active", "createdAt": "2026-07-21T10:00:00.000Z",
    "updatedAt": "2026-07-21T10:00:05.000Z", "startedAt": "2026-07-21T10:00:02.000Z", "endedAt": None,
    "url": "https://linear.app/acme/issue/ENG-123#agent-session", "issue": {"id": ISSUE["id"], "identifier": "ENG-123"},
    "appUser": {"id": AGENT["id"]}, "creator": {"id": ADA["id"], "name": "Ada Lovelace"},
    "externalLinks": [{"label": "Pull request", "url": "https://github.com/acme/widgets/pull/7"}],
}  # fmt: skip


def activity(content: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "6b7c8d9e-0f1a-4b2c-9d3e-4f5a6b7c8d9e", "createdAt": "2026-07-21T10:00:03.000Z",
            "updatedAt": "2026-07-21T10:00:03.000Z", "ephemeral": False, "signal": None, "signalMetadata": None,
            "user": {"id": AGENT["id"], "name": "beflow", "app": True}, "sourceComment": None, "content": content,
            **extra}  # fmt: skip


def test_an_issue_reads_with_its_state_team_labels_and_people() -> None:
    issue = wire.parse(wire.Issue, ISSUE, "BeflowIssues")
    assert (issue.identifier, issue.title, issue.rank) == ("ENG-123", "Widgets break on resize", wire.HIGH)
    assert (issue.state.name, issue.state.type, issue.team.key) == ("Todo", "unstarted", "ENG")
    assert issue.labels_complete and not wire.parse(wire.Issue, {**ISSUE, "labelIds": ["a", "b"]}, "x").labels_complete
    assert issue.label_names == ["beflow"] and issue.project == wire.ProjectRef(
        id=ISSUE["project"]["id"], name="Widgets"
    )
    assert issue.assignee is not None and not issue.assignee.app
    assert issue.delegate is not None and issue.delegate.app
    assert issue.updatedAt == dt.datetime(2026, 7, 21, 10, 0, tzinfo=dt.UTC)


def test_what_linear_leaves_out_or_null_reads() -> None:
    bare = {**ISSUE, "description": None, "project": None, "labels": {"nodes": []}, "assignee": None, "delegate": None}
    issue = wire.parse(wire.Issue, bare, "BeflowIssues")
    assert (issue.description, issue.project, issue.labels, issue.assignee) == (None, None, [], None)
    assert wire.parse(wire.Issue, {**bare, "priority": 0}, "x").rank == 5  # no priority: after low
    assert wire.parse(wire.Comment, {**COMMENT, "user": None}, "BeflowIssue").user is None  # an integration's


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"id": 7}, "id"),
        ({"identifier": "123"}, "identifier"),
        ({"priority": "2"}, "priority"),
        ({"priority": 9}, "priority"),
        ({"updatedAt": "yesterday"}, "updatedAt"),
        ({"state": {**TODO, "type": None}}, "state.type"),
        ({"team": None}, "team"),
        ({"labels": {"nodes": [{"id": "x"}]}}, "labels.0.name"),
    ],
)
def test_an_issue_of_another_shape_is_malformed_naming_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(wire.MalformedAnswer) as raised:
        wire.parse(wire.Issue, {**ISSUE, **change}, "BeflowIssues")
    assert str(raised.value).startswith(f"Linear's answer to BeflowIssues cannot be read: {field}: ")
    assert raised.value.code == "linear_malformed"


def test_an_unreadable_issue_of_a_listing_is_left_aside_alone() -> None:
    broken = {**ISSUE, "id": "0d1e2f3a-4b5c-4d6e-8f7a-8b9c0d1e2f3a", "identifier": "ENG-9", "priority": None}
    issues, unread = wire.read_each(wire.Issue, [ISSUE, broken, "junk"], "BeflowIssues")
    assert [i.identifier for i in issues] == ["ENG-123"]
    assert [(u.identifier, u.why.split(":")[0]) for u in unread] == [
        ("ENG-9", "priority"),
        (None, "Input should be a valid dictionary or instance of Issue"),
    ]
    with pytest.raises(wire.MalformedAnswer, match="it is not a list"):
        wire.read_each(wire.Issue, {"nodes": []}, "BeflowIssues")


def test_a_team_knows_its_first_started_state() -> None:
    states = [TODO, {**TODO, "id": "s2", "name": "In Review", "type": "started", "position": 3.0},
              {**TODO, "id": "s3", "name": "In Progress", "type": "started", "position": 2.0},
              {**TODO, "id": "s4", "name": "QA", "type": "a kind of Linear's to come", "position": 4.0}]  # fmt: skip
    raw = {"id": "t", "key": "ENG", "name": "Engineering", "states": {"nodes": states}, "labels": {"nodes": []}}
    team = wire.parse(wire.Team, raw, "BeflowTeam")
    started = team.started()
    assert started is not None and started.name == "In Progress"
    assert wire.parse(wire.Team, {**raw, "states": {"nodes": [TODO]}}, "BeflowTeam").started() is None


def test_comments_with_their_page_and_the_issue_they_are_on() -> None:
    raw = {**ISSUE, "comments": {"nodes": [COMMENT], "pageInfo": {"hasNextPage": True, "endCursor": COMMENT["id"]}}}
    issue = wire.parse(wire.IssueWithComments, raw, "BeflowIssue")
    assert issue.comments.pageInfo == wire.PageInfo(hasNextPage=True, endCursor=COMMENT["id"])
    (comment,) = issue.comments.nodes
    assert comment.user is not None and comment.user.name == "Ada Lovelace" and comment.editedAt is None
    read = wire.parse(wire.CommentOnIssue, {**COMMENT, "issue": {"id": ISSUE["id"], "identifier": "ENG-123"}}, "x")
    assert read.issue == wire.IssueRef(id=ISSUE["id"], identifier="ENG-123")
    with pytest.raises(wire.MalformedAnswer, match=r"body: "):
        wire.parse(wire.Comment, {**COMMENT, "body": None}, "BeflowIssue")


def test_the_viewer_says_whether_it_is_an_app_user() -> None:
    org = {"id": "o", "name": "Acme", "urlKey": "acme"}
    assert wire.parse(wire.Viewer, {"viewer": AGENT, "organization": org}, "BeflowViewer").is_app
    person = wire.parse(wire.Viewer, {"viewer": {"id": ADA["id"], "name": "Ada"}, "organization": org}, "x")
    assert not person.is_app and person.viewer.active


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ({"__typename": "AgentActivityThoughtContent", "type": "thought", "body": "Reading"},
         wire.Thought(body="Reading")),
        ({"type": "action", "action": "Ran", "parameter": "pytest", "result": "3 passed"},
         wire.Action(action="Ran", parameter="pytest", result="3 passed")),
        ({"type": "response", "body": "Done: #7"}, wire.Response(body="Done: #7")),
        ({"type": "elicitation", "body": "May I delete it?"}, wire.Elicitation(body="May I delete it?")),
        ({"type": "error", "body": "Tests fail", "reasonCode": None}, wire.Error(body="Tests fail")),
        ({"type": "prompt", "body": "Go on", "title": None}, wire.Prompt(body="Go on")),
        ({"type": "plan", "steps": []}, wire.OtherContent(type="plan")),
    ],
)  # fmt: skip
def test_each_kind_of_activity_content_reads_as_its_own(content: dict[str, Any], expected: Any) -> None:
    assert wire.parse(wire.AgentActivity, activity(content), "BeflowAgentSession").content == expected


def test_a_content_missing_what_its_kind_has_is_malformed() -> None:
    with pytest.raises(wire.MalformedAnswer, match=r"content\.action\.parameter: Field required"):
        wire.parse(wire.AgentActivity, activity({"type": "action", "action": "Ran"}), "BeflowAgentSession")


def test_a_session_with_a_stop_signal_among_its_activities() -> None:
    stop = activity({"type": "prompt", "body": "Stop"}, signal="stop", user={"id": ADA["id"], "name": "Ada"})
    raw = {**SESSION, "activities": {"nodes": [stop, activity({"type": "thought", "body": "On it"})]}}
    session = wire.parse(wire.AgentSessionWithActivities, raw, "BeflowAgentSession")
    assert [a.stops for a in session.activities.nodes] == [True, False]
    assert session.externalLinks == [
        wire.ExternalLink(label="Pull request", url="https://github.com/acme/widgets/pull/7")
    ]
    assert wire.parse(wire.AgentSession, {**SESSION, "status": "a status to come"}, "x").status == "a status to come"


def test_content_for_an_activity_leaves_out_what_is_not_said() -> None:
    assert wire.content_input(wire.Thought(body="Reading the issue")) == {
        "type": "thought",
        "body": "Reading the issue",
    }
    assert wire.content_input(wire.Action(action="Editing", parameter="src/app.py")) == {
        "type": "action", "action": "Editing", "parameter": "src/app.py",
    }  # fmt: skip
    assert wire.content_input(wire.Error(body="Failed", reasonCode="timeout"))["reasonCode"] == "timeout"


def test_errors_say_their_kind_by_code_or_in_words() -> None:
    extensions = {"code": "RATELIMITED", "type": "ratelimited", "userError": True}
    limited = {"errors": [{"message": "Rate limit exceeded", "extensions": extensions}]}
    envelope = wire.parse(wire.Envelope, limited, "BeflowIssues")
    assert envelope.rate_limited and envelope.data is None and envelope.codes == ["RATELIMITED"]
    in_words = {"data": None, "errors": [{"message": "x", "extensions": {"type": "authentication error"}}]}
    assert wire.parse(wire.Envelope, in_words, "x").codes == [wire.AUTHENTICATION_ERROR]
    said = {"code": "INVALID_INPUT", "userPresentableMessage": "Could not find it."}
    presentable = {"message": "Entity not found: Issue", "extensions": said}
    assert wire.parse(wire.GraphQLError, presentable, "x").text == "Could not find it."
    plain = wire.parse(wire.Envelope, {"data": {"viewer": AGENT}, "errors": None}, "x")
    assert (plain.errors, plain.rate_limited) == ([], False)
    with pytest.raises(wire.MalformedAnswer, match="errors"):
        wire.parse(wire.Envelope, {"errors": "boom"}, "x")


def test_the_rate_limit_headers_say_what_is_left_and_when_it_fills() -> None:
    reset = dt.datetime(2026, 7, 21, 11, 0, tzinfo=dt.UTC)
    millis = str(int(reset.timestamp() * 1000))
    headers = {"X-RateLimit-Requests-Limit": "1500", "X-RateLimit-Requests-Remaining": "0",
               "X-RateLimit-Requests-Reset": millis, "X-RateLimit-Complexity-Limit": "250000",
               "x-ratelimit-complexity-remaining": "249000", "X-RateLimit-Complexity-Reset": millis,
               "X-Complexity": "57"}  # fmt: skip
    read = wire.RateHeaders.of(headers)
    assert (read.requests_limit, read.requests_remaining, read.requests_reset) == (1500, 0, reset)
    assert (read.complexity_remaining, read.complexity) == (249000, 57)
    now = reset - dt.timedelta(minutes=5)
    assert read.resumes(now) == reset
    retry = wire.RateHeaders.of({"Retry-After": "30", "X-RateLimit-Requests-Remaining": "12"})
    assert retry.resumes(now) == now + dt.timedelta(seconds=30)
    junk = wire.RateHeaders.of({"X-RateLimit-Requests-Remaining": "-1", "X-RateLimit-Requests-Reset": "soon"})
    assert (junk.requests_remaining, junk.requests_reset, junk.resumes(now)) == (None, None, None)
    endpoint = wire.RateHeaders.of({"X-RateLimit-Endpoint-Name": "issueCreate",
                                    "X-RateLimit-Endpoint-Requests-Remaining": "0",
                                    "X-RateLimit-Endpoint-Requests-Reset": millis})  # fmt: skip
    assert (endpoint.endpoint_name, endpoint.resumes(now)) == ("issueCreate", reset)
