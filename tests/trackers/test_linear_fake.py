"""The fake Linear the Linear tracker will be tested on, and the GraphQL beflow sends it: every document beflow sends
validates against Linear's pinned schema (a typo fails here), the fake executes every request against that schema and
answers what beflow's models read, and it speaks what Linear speaks (keys and OAuth tokens, pages, filters, ids chosen
by the client, rate limits, faults)."""

from __future__ import annotations

import concurrent.futures
import datetime as dt
import hashlib
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from graphql import GraphQLSchema, OperationDefinitionNode, parse, validate

from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from tests.support.linear import (
    API_KEY,
    APP_TOKEN,
    OAUTH_TOKEN,
    REQUESTS_LIMIT,
    SCHEMA,
    SCHEMA_SHA256,
    FakeLinear,
    complexity,
    linear_schema,
)
from tests.support.linear import linear as linear


@pytest.fixture(scope="session")
def schema() -> GraphQLSchema:
    """Linear's schema, built once for the whole session (the fake's own, cached: the file is 1.2 MB)."""
    return linear_schema()


def post(
    fake: FakeLinear, document: str, variables: dict[str, Any] | None = None, *, token: str = API_KEY
) -> httpx.Response:
    """``document`` sent to the fake as beflow sends it: a key bare, an OAuth token after ``Bearer``."""
    auth = token if token.startswith("lin_api_") else f"Bearer {token}"
    operation = next(d for d in parse(document).definitions if isinstance(d, OperationDefinitionNode))
    body = {"query": document, "variables": variables or {}, "operationName": operation.name.value}
    return httpx.post(fake.url, json=body, headers={"Authorization": auth}, timeout=10)


def data(answer: httpx.Response) -> dict[str, Any]:
    """The ``data`` of a successful answer (any error fails the test, saying what Linear said)."""
    envelope = wire.parse(wire.Envelope, answer.json(), "a request")
    assert answer.status_code == 200 and not envelope.errors, envelope.errors
    assert envelope.data is not None
    return envelope.data


def codes(answer: httpx.Response) -> list[str]:
    return wire.parse(wire.Envelope, answer.json(), "a request").codes


# -- the schema and beflow's documents -----------------------------------------------------------------------------


def test_the_pinned_schema_is_linears_as_published_and_says_where_it_comes_from() -> None:
    assert hashlib.sha256(SCHEMA.read_bytes()).hexdigest() == SCHEMA_SHA256
    readme = (SCHEMA.parent / "README.md").read_text(encoding="utf-8")
    assert SCHEMA_SHA256 in readme
    assert "linear/linear" in readme and "packages/sdk/src/schema.graphql" in readme and "8335e09a" in readme


def test_the_schema_is_built_once_per_session(schema: GraphQLSchema) -> None:
    assert linear_schema() is schema


@pytest.mark.parametrize("name", sorted(q.DOCUMENTS))
def test_every_document_beflow_sends_validates_against_linears_schema(schema: GraphQLSchema, name: str) -> None:
    document = parse(q.DOCUMENTS[name])
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    assert [op.name.value for op in operations if op.name] == [name]  # one operation, named as listed
    assert validate(schema, document) == []


def test_a_typo_in_a_document_fails_the_validation_naming_the_field(schema: GraphQLSchema) -> None:
    typo = q.ISSUES.replace("identifier\n", "identifer\n")
    assert typo != q.ISSUES
    problems = validate(schema, parse(typo))
    assert [p.message for p in problems] == [
        "Cannot query field 'identifer' on type 'Issue'. Did you mean 'identifier'?"
    ]
    wrong_argument = q.COMMENT_UPDATE.replace("commentUpdate(id: $id", "commentUpdate(commentId: $id")
    assert any("Unknown argument 'commentId'" in p.message for p in validate(schema, parse(wrong_argument)))


def test_every_document_stays_far_below_linears_cap_on_one_querys_cost(schema: GraphQLSchema) -> None:
    """Linear refuses a query that costs more than 10,000 points, and meters 250,000 an hour: the listing of a full
    page stays under a third of the cap, and the idle poll's question costs a few hundred at most."""
    costs = {name: complexity(schema, parse(doc), {"first": q.PAGE}, name) for name, doc in q.DOCUMENTS.items()}
    assert max(costs.values()) == costs["BeflowIssues"] < 3500
    assert costs["BeflowChanged"] < 200


def test_every_document_beflow_sends_is_listed() -> None:
    constants = {name: value for name, value in vars(q).items() if name.isupper() and isinstance(value, str)}
    operations = {name: text for name, text in constants.items() if text.lstrip().startswith(("query", "mutation"))}
    assert sorted(operations.values()) == sorted(q.DOCUMENTS.values())


def test_every_document_beflow_sends_is_answered_by_the_fake(linear: FakeLinear) -> None:
    """Each of beflow's documents, sent with the variables beflow sends, answered without an error: the fake does
    all that beflow asks (a document added without the fake learning it fails here)."""
    issue = linear.add_issue("Everything", labels=["beflow"])
    comment = linear.add_comment(issue, "Mine")
    session = linear.delegate(issue)
    app = {
        "BeflowAgentSession",
        "BeflowIssueSessions",
        "BeflowIssuePrompts",
        "BeflowAgentSessionCreate",
        "BeflowAgentSessionUpdate",
        "BeflowAgentActivityCreate",
    }
    variables: dict[str, dict[str, Any]] = {
        "BeflowViewer": {},
        "BeflowTeam": {"key": "ENG"},
        "BeflowWorkflowStates": {"teamKey": "ENG"},
        "BeflowIssues": {"filter": q.issue_filter("ENG", labels=["beflow"], state_types=["unstarted"]), "first": 50},
        "BeflowChanged": {"filter": q.issue_filter("ENG", updated_after="2026-01-01T00:00:00.000Z"), "first": 50},
        "BeflowIssue": {"id": "ENG-1", "first": 50},
        "BeflowBlockers": {"id": "ENG-1", "first": 50},
        "BeflowComments": {"id": issue["id"], "first": 50, "after": None, "includeArchived": True},
        "BeflowComment": {"id": comment["id"]},
        "BeflowAgentSession": {"id": session["id"], "first": 50},
        "BeflowIssueSessions": {"id": issue["id"]},
        "BeflowIssuePrompts": {"id": issue["id"]},
        "BeflowRateLimitStatus": {},
        "BeflowCommentCreate": {"input": {"issueId": issue["id"], "body": "Claimed", "id": str(uuid.uuid4())}},
        "BeflowCommentUpdate": {"id": comment["id"], "input": {"body": "Mine, edited"}},
        "BeflowIssueUpdate": {"id": issue["id"], "input": {"stateId": linear.state("In Progress")["id"]}},
        "BeflowIssueCreate": {"input": {"teamId": linear.team["id"], "title": "Filed", "id": str(uuid.uuid4())}},
        "BeflowLabelCreate": {"input": {"name": "beflow:failed", "teamId": linear.team["id"], "color": "#eb5757"}},
        "BeflowAgentSessionCreate": {"input": {"issueId": issue["id"]}},
        "BeflowAgentSessionUpdate": {
            "id": session["id"],
            "input": {"addedExternalUrls": [{"label": "PR", "url": "u"}]},
        },
        "BeflowAgentActivityCreate": {
            "input": {"agentSessionId": session["id"], "content": {"type": "thought", "body": "Reading"}}
        },
    }
    assert sorted(variables) == sorted(q.DOCUMENTS)
    for name, document in q.DOCUMENTS.items():
        data(post(linear, document, variables[name], token=APP_TOKEN if name in app else API_KEY))
    status = data(post(linear, q.RATE_LIMIT_STATUS))
    limits = wire.parse(wire.RateLimitAnswer, status, "BeflowRateLimitStatus").rateLimitStatus.limits
    assert {limit.type for limit in limits} == {"requestCount", "queryComplexity"}
    assert [s.operation for s in linear.seen][: len(q.DOCUMENTS)] == list(q.DOCUMENTS)


# -- reading issues ----------------------------------------------------------------------------------------------------


def test_the_listing_finds_the_teams_labelled_issues_in_ready_states(linear: FakeLinear) -> None:
    ready = linear.add_issue("Ready", labels=["beflow", "bug"], priority=2)
    linear.add_issue("Unlabelled", labels=["bug"])
    linear.add_issue("Done already", labels=["beflow"], state="Done")
    other = linear.add_team("OPS", "Operations")
    linear.add_issue("Other team", labels=["beflow"], team=other)
    delegated = linear.add_issue("Delegated, no label")
    linear.delegate(delegated)

    def listed(**kwargs: Any) -> list[str]:
        variables = {"filter": q.issue_filter("ENG", state_types=["unstarted"], **kwargs), "first": q.PAGE}
        page = data(post(linear, q.ISSUES, variables))["issues"]
        issues, unread = wire.read_each(wire.Issue, page["nodes"], "BeflowIssues")
        assert unread == []
        return sorted(issue.identifier for issue in issues)

    assert listed(labels=["BEFLOW"]) == [ready["identifier"]]  # labels match regardless of case
    assert listed(labels=["beflow"], delegate=linear.app["id"]) == sorted(
        [ready["identifier"], delegated["identifier"]]
    )
    assert listed(labels=["beflow", "bug"]) == [ready["identifier"]]
    assert listed(labels=["beflow", "docs"]) == []


def test_the_listing_reads_as_beflows_issue(linear: FakeLinear) -> None:
    raw = linear.add_issue("Fix it", description="It *is* broken.", labels=["beflow"], priority=1, project="Widgets")
    variables = {"filter": q.issue_filter("ENG", project="Widgets", labels=["beflow"]), "first": 10}
    (issue,) = wire.parse_list(wire.Issue, data(post(linear, q.ISSUES, variables))["issues"]["nodes"], "BeflowIssues")
    assert (issue.id, issue.identifier, issue.title, issue.description) == (
        raw["id"],
        "ENG-1",
        "Fix it",
        raw["description"],
    )
    assert (issue.state.name, issue.state.type, issue.team.key, issue.rank) == ("Todo", "unstarted", "ENG", 1)
    assert issue.project is not None and issue.project.name == "Widgets"
    assert issue.label_names == ["beflow"] and issue.labels_complete
    assert issue.assignee is None and issue.delegate is None
    assert issue.url == "https://linear.app/acme/issue/eng-1"


def test_the_listing_pages_and_filters_by_update_time(linear: FakeLinear) -> None:
    issues = [linear.add_issue(f"Issue {n}", labels=["beflow"]) for n in range(5)]
    since = issues[2]["updatedAt"]
    variables: dict[str, Any] = {"filter": q.issue_filter("ENG", labels=["beflow"]), "first": 2}
    seen: list[str] = []
    while True:
        page = data(post(linear, q.ISSUES, variables))["issues"]
        seen += [node["identifier"] for node in page["nodes"]]
        if not page["pageInfo"]["hasNextPage"]:
            break
        variables["after"] = page["pageInfo"]["endCursor"]
    assert seen == ["ENG-5", "ENG-4", "ENG-3", "ENG-2", "ENG-1"]  # the last updated first
    assert len(linear.requests("issues")) == 3
    changed = {"filter": q.issue_filter("ENG", updated_after=since), "first": q.PAGE}
    assert [n["identifier"] for n in data(post(linear, q.CHANGED, changed))["issues"]["nodes"]] == ["ENG-5", "ENG-4"]


def test_an_issue_is_read_by_its_identifier_with_its_comments(linear: FakeLinear) -> None:
    raw = linear.add_issue("With talk")
    linear.add_comment(raw, "First")
    bot = linear.add_comment(raw, "From an integration")
    bot["user"] = None
    answer = data(post(linear, q.ISSUE_WITH_COMMENTS, {"id": "ENG-1", "first": 50}))["issue"]
    issue = wire.parse(wire.IssueWithComments, answer, "BeflowIssue")
    assert issue.id == raw["id"]
    assert sorted((c.body, c.user.name if c.user else None) for c in issue.comments.nodes) == [
        ("First", "Ada Lovelace"),
        ("From an integration", None),
    ]
    missing = post(linear, q.ISSUE_WITH_COMMENTS, {"id": "ENG-99", "first": 50})
    assert codes(missing) == [wire.INVALID_INPUT]
    assert missing.json()["errors"][0]["message"] == "Entity not found: Issue"


def test_the_viewer_says_whether_the_token_is_an_apps(linear: FakeLinear) -> None:
    person = wire.parse(wire.Viewer, data(post(linear, q.VIEWER)), "BeflowViewer")
    app = wire.parse(wire.Viewer, data(post(linear, q.VIEWER, token=APP_TOKEN)), "BeflowViewer")
    assert (person.viewer.name, person.is_app, app.viewer.name, app.is_app) == ("Ada Lovelace", False, "beflow", True)
    assert person.organization.urlKey == "acme"


def test_the_team_has_its_workflow_states_and_labels(linear: FakeLinear) -> None:
    linear.label("beflow")
    (team,) = wire.parse(wire.Teams, data(post(linear, q.TEAM, {"key": "ENG"})), "BeflowTeam").teams.nodes
    assert [s.name for s in sorted(team.states.nodes, key=lambda s: s.position or 0)][:4] == [
        "Backlog", "Todo", "In Progress", "In Review",
    ]  # fmt: skip
    started = team.started()
    assert started is not None and started.name == "In Progress"
    assert [label.name for label in team.labels.nodes] == ["beflow"]
    states = data(post(linear, q.WORKFLOW_STATES, {"teamKey": "ENG"}))["workflowStates"]["nodes"]
    assert {s["type"] for s in states} == {"backlog", "unstarted", "started", "completed", "canceled"}
    assert data(post(linear, q.TEAM, {"key": "NOPE"}))["teams"]["nodes"] == []


# -- tokens ------------------------------------------------------------------------------------------------------------


def test_a_key_goes_bare_and_an_oauth_token_after_bearer(linear: FakeLinear) -> None:
    assert data(post(linear, q.VIEWER, token=API_KEY))["viewer"]["name"] == "Ada Lovelace"
    assert data(post(linear, q.VIEWER, token=OAUTH_TOKEN))["viewer"]["name"] == "Ada Lovelace"
    body = {"query": q.VIEWER, "operationName": "BeflowViewer"}
    for headers in ({"Authorization": f"Bearer {API_KEY}"}, {"Authorization": OAUTH_TOKEN}, {}):
        refused = httpx.post(linear.url, json=body, headers=headers)
        assert (refused.status_code, codes(refused)) == (400, [wire.AUTHENTICATION_ERROR])
    assert [s.auth for s in linear.seen] == ["key", "bearer", "bearer", "key", None]


# -- writing -------------------------------------------------------------------------------------------------------


def test_a_comment_made_with_an_id_of_beflows_choosing_is_made_once(linear: FakeLinear) -> None:
    issue = linear.add_issue("Claimed twice?")
    chosen = str(uuid.uuid4())
    made = post(linear, q.COMMENT_CREATE, {"input": {"issueId": "ENG-1", "body": "mine", "id": chosen}})
    comment = wire.parse(wire.CommentCreated, data(made)["commentCreate"], "BeflowCommentCreate").comment
    assert (comment.id, comment.body, comment.issue) == (chosen, "mine", wire.IssueRef(id=issue["id"]))
    again = post(linear, q.COMMENT_CREATE, {"input": {"issueId": "ENG-1", "body": "theirs", "id": chosen}})
    assert codes(again) == [wire.INVALID_INPUT]
    assert [c["body"] for c in issue["comments"]] == ["mine"]
    not_v4 = str(uuid.uuid5(uuid.NAMESPACE_URL, "x"))
    assert codes(post(linear, q.COMMENT_CREATE, {"input": {"issueId": "ENG-1", "body": "x", "id": not_v4}})) == [
        wire.INVALID_INPUT
    ]


def test_of_racing_creates_with_one_id_exactly_one_is_made(linear: FakeLinear) -> None:
    """What a claim on Linear can stand on: watchers that create a comment with the same id at once (each its own
    words) — one is made, the others are refused, and reading the id says whose it is."""
    issue = linear.add_issue("Raced")
    chosen = str(uuid.uuid4())
    start = threading.Barrier(6)

    def claim(n: int) -> int:
        start.wait()
        variables = {"input": {"issueId": issue["id"], "body": f"watcher {n}", "id": chosen}}
        return post(linear, q.COMMENT_CREATE, variables).json().get("data") is not None

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        won = [n for n, ok in zip(range(6), pool.map(claim, range(6)), strict=True) if ok]
    assert len(won) == 1 and len(issue["comments"]) == 1
    assert data(post(linear, q.COMMENT_BY_ID, {"id": chosen}))["comment"]["body"] == f"watcher {won[0]}"


def test_a_deleted_comment_keeps_its_id_taken_and_is_read_when_asked_for(linear: FakeLinear) -> None:
    issue = linear.add_issue("Talk")
    gone = linear.add_comment(issue, "Deleted")
    linear.add_comment(issue, "Kept")
    linear.delete_comment(gone)

    def bodies(archived: bool) -> list[str]:
        variables = {"id": issue["id"], "first": 50, "includeArchived": archived}
        nodes = data(post(linear, q.COMMENTS, variables))["issue"]["comments"]["nodes"]
        return sorted(c["body"] for c in nodes)

    assert (bodies(False), bodies(True)) == (["Kept"], ["Deleted", "Kept"])
    linear.add_comment(issue, "beflow-claim 1", user=linear.app)
    mine = {"user": {"isMe": {"eq": True}}, "body": {"startsWith": "beflow-claim"}}
    variables = {"id": issue["id"], "first": 50, "includeArchived": True, "filter": mine}
    assert data(post(linear, q.COMMENTS, variables, token=APP_TOKEN))["issue"]["comments"]["nodes"][0]["body"] == (
        "beflow-claim 1"
    )
    assert data(post(linear, q.COMMENTS, variables))["issue"]["comments"]["nodes"] == []  # not the person's
    read = wire.parse(wire.CommentOnIssue, data(post(linear, q.COMMENT_BY_ID, {"id": gone["id"]}))["comment"], "x")
    assert read.archivedAt is not None and read.issue is not None and read.issue.identifier == "ENG-1"
    again = {"input": {"issueId": issue["id"], "body": "x", "id": gone["id"]}}
    assert codes(post(linear, q.COMMENT_CREATE, again)) == [wire.INVALID_INPUT]


def test_only_its_author_edits_a_comment(linear: FakeLinear) -> None:
    issue = linear.add_issue("Progress")
    theirs = linear.add_comment(issue, "A person's words", user=linear.user("Grace Hopper"))
    refused = post(linear, q.COMMENT_UPDATE, {"id": theirs["id"], "input": {"body": "rewritten"}})
    assert codes(refused) == [wire.FORBIDDEN] and theirs["body"] == "A person's words"
    mine = linear.add_comment(issue, "Working…")
    edited = post(linear, q.COMMENT_UPDATE, {"id": mine["id"], "input": {"body": "Done."}})
    comment = wire.parse(wire.CommentCreated, data(edited)["commentUpdate"], "BeflowCommentUpdate").comment
    assert comment.body == "Done." and comment.editedAt is not None and comment.editedAt > comment.createdAt


def test_an_issue_is_moved_delegated_and_labelled(linear: FakeLinear) -> None:
    raw = linear.add_issue("Move me", labels=["beflow"])
    before = raw["updatedAt"]
    failed = data(post(linear, q.LABEL_CREATE, {"input": {"name": "beflow:failed", "teamId": linear.team["id"]}}))
    label = wire.parse(wire.LabelCreated, failed["issueLabelCreate"], "BeflowLabelCreate").issueLabel
    started = linear.state("In Progress")
    change = {"stateId": started["id"], "delegateId": linear.app["id"], "addedLabelIds": [label.id],
              "removedLabelIds": [linear.label("beflow")["id"]]}  # fmt: skip
    answer = data(post(linear, q.ISSUE_UPDATE, {"id": "ENG-1", "input": change}))["issueUpdate"]
    issue = wire.parse(wire.IssueUpdated, answer, "BeflowIssueUpdate").issue
    assert issue is not None and (issue.state.type, issue.label_names) == ("started", ["beflow:failed"])
    assert (
        issue.delegate is not None
        and issue.delegate.app
        and issue.updatedAt > wire.parse(wire.Issue, {**answer["issue"], "updatedAt": before}, "x").updatedAt
    )
    to_a_person = post(linear, q.ISSUE_UPDATE, {"id": "ENG-1", "input": {"delegateId": linear.person["id"]}})
    assert codes(to_a_person) == [wire.INVALID_INPUT]
    other_team = linear.add_team("OPS", "Operations")
    foreign = post(linear, q.ISSUE_UPDATE, {"id": "ENG-1", "input": {"stateId": other_team["states"][0]["id"]}})
    assert codes(foreign) == [wire.INVALID_INPUT] and raw["state"] is started
    duplicate = post(linear, q.LABEL_CREATE, {"input": {"name": "BEFLOW:FAILED", "teamId": linear.team["id"]}})
    assert codes(duplicate) == [wire.INVALID_INPUT]


# -- agent sessions ------------------------------------------------------------------------------------------------


def test_an_app_opens_a_session_and_reports_its_activities(linear: FakeLinear) -> None:
    linear.add_issue("Agent work")
    opened = {"input": {"issueId": "ENG-1"}}
    assert codes(post(linear, q.AGENT_SESSION_CREATE_ON_ISSUE, opened)) == [wire.FORBIDDEN]  # a person's key
    made = data(post(linear, q.AGENT_SESSION_CREATE_ON_ISSUE, opened, token=APP_TOKEN))["agentSessionCreateOnIssue"]
    session = wire.parse(wire.SessionWritten, made, "BeflowAgentSessionCreate").agentSession
    assert (session.status, session.appUser.id) == ("pending", linear.app["id"])

    def report(content: wire.Thought | wire.Action | wire.Response, **extra: Any) -> wire.AgentActivity:
        variables = {"input": {"agentSessionId": session.id, "content": wire.content_input(content), **extra}}
        answer = data(post(linear, q.AGENT_ACTIVITY_CREATE, variables, token=APP_TOKEN))["agentActivityCreate"]
        return wire.parse(wire.ActivityCreated, answer, "BeflowAgentActivityCreate").agentActivity

    assert report(wire.Thought(body="Reading the issue")).content == wire.Thought(body="Reading the issue")
    assert linear.sessions[session.id]["status"] == "active"
    report(wire.Action(action="Running", parameter="pytest"), ephemeral=True)
    done = report(wire.Action(action="Ran", parameter="pytest", result="12 passed"))
    assert isinstance(done.content, wire.Action) and done.content.result == "12 passed"
    link = {"externalUrls": [{"label": "Pull request", "url": "https://github.com/acme/widgets/pull/7"}]}
    updated = post(linear, q.AGENT_SESSION_UPDATE, {"id": session.id, "input": link}, token=APP_TOKEN)
    assert data(updated)["agentSessionUpdate"]["agentSession"]["externalLinks"] == link["externalUrls"]
    report(wire.Response(body="Opened the pull request."))
    read = data(post(linear, q.AGENT_SESSION, {"id": session.id, "first": 50}, token=APP_TOKEN))["agentSession"]
    full = wire.parse(wire.AgentSessionWithActivities, read, "BeflowAgentSession")
    assert full.status == "complete" and full.endedAt is not None
    # The ephemeral action was replaced by the next activity: three are left, the latest first.
    assert [a.content.type for a in full.activities.nodes] == ["response", "action", "thought"]


def test_a_delegation_opens_a_session_a_person_can_stop(linear: FakeLinear) -> None:
    issue = linear.add_issue("Delegated")
    session = linear.delegate(issue)
    linear.prompt(session, "Also update the docs.")
    linear.prompt(session, "Stop, please.", stop=True)
    read = data(post(linear, q.AGENT_SESSION, {"id": session["id"], "first": 50}, token=APP_TOKEN))["agentSession"]
    full = wire.parse(wire.AgentSessionWithActivities, read, "BeflowAgentSession")
    assert full.issue is not None and full.issue.identifier == "ENG-1" and full.creator is not None
    latest, earlier = full.activities.nodes
    assert latest.stops and isinstance(latest.content, wire.Prompt) and latest.content.body == "Stop, please."
    assert not earlier.stops and not earlier.user.app
    listed = {"filter": q.issue_filter("ENG", labels=["beflow"], delegate=linear.app["id"]), "first": 10}
    assert [n["identifier"] for n in data(post(linear, q.ISSUES, listed))["issues"]["nodes"]] == ["ENG-1"]


def test_an_activity_of_the_wrong_shape_or_someone_elses_session_is_refused(linear: FakeLinear) -> None:
    session = linear.delegate(linear.add_issue("Delegated"))
    no_body = {"input": {"agentSessionId": session["id"], "content": {"type": "thought"}}}
    assert codes(post(linear, q.AGENT_ACTIVITY_CREATE, no_body, token=APP_TOKEN)) == [wire.INVALID_INPUT]
    a_prompt = {"input": {"agentSessionId": session["id"], "content": {"type": "prompt", "body": "Me?"}}}
    assert codes(post(linear, q.AGENT_ACTIVITY_CREATE, a_prompt, token=APP_TOKEN)) == [wire.INVALID_INPUT]
    other_app = linear.token(linear.user("Another agent", app=True))
    thought = {"input": {"agentSessionId": session["id"], "content": {"type": "thought", "body": "Mine now"}}}
    assert codes(post(linear, q.AGENT_ACTIVITY_CREATE, thought, token=other_app)) == [wire.FORBIDDEN]
    assert session["activities"] == []


# -- rate limits, faults, and what the fake refuses to guess -------------------------------------------------------


def test_every_answer_says_what_is_left_and_what_the_request_cost(linear: FakeLinear) -> None:
    linear.add_issue("One", labels=["beflow"])
    viewer = post(linear, q.VIEWER)
    listing = post(linear, q.ISSUES, {"filter": q.issue_filter("ENG"), "first": 50})
    small, large = wire.RateHeaders.of(viewer.headers), wire.RateHeaders.of(listing.headers)
    assert (small.requests_limit, small.requests_remaining, large.requests_remaining) == (
        REQUESTS_LIMIT, REQUESTS_LIMIT - 1, REQUESTS_LIMIT - 2,
    )  # fmt: skip
    assert small.complexity is not None and large.complexity is not None and 0 < small.complexity < large.complexity
    assert large.complexity_remaining == (small.complexity_remaining or 0) - large.complexity
    assert small.requests_reset is not None and small.requests_reset > dt.datetime.now(dt.UTC)
    assert small.resumes(dt.datetime.now(dt.UTC)) is None


def test_a_spent_bucket_is_ratelimited_until_it_fills(linear: FakeLinear) -> None:
    linear.spend(requests=0)
    limited = post(linear, q.VIEWER)
    envelope = wire.parse(wire.Envelope, limited.json(), "BeflowViewer")
    assert limited.status_code == 400 and envelope.rate_limited and envelope.data is None
    assert limited.json()["errors"][0]["extensions"]["type"] == "ratelimited"
    headers = wire.RateHeaders.of(limited.headers)
    now = dt.datetime.now(dt.UTC)
    assert headers.requests_remaining == 0 and headers.resumes(now) == headers.requests_reset
    linear.refill()
    linear.spend(complexity=5)
    assert data(post(linear, q.VIEWER))["viewer"]["name"] == "Ada Lovelace"  # a cheap question still fits
    costly = post(linear, q.ISSUES, {"filter": q.issue_filter("ENG"), "first": 50})
    spent = wire.RateHeaders.of(costly.headers)
    assert codes(costly) == [wire.RATELIMITED] and spent.complexity_remaining == 2  # left, but too little for it
    assert spent.resumes(now) is None and spent.resumes(now, limited=True) == spent.complexity_reset
    assert [s.codes for s in linear.seen] == [[wire.RATELIMITED], [], [wire.RATELIMITED]]


def test_a_storm_of_5xx_passes_and_a_lost_answer_still_made_its_change(linear: FakeLinear) -> None:
    issue = linear.add_issue("Flaky")
    linear.fail(502, times=2)
    linear.fail(503, field="commentCreate", after=True)
    assert [post(linear, q.VIEWER).status_code for _ in range(3)] == [502, 502, 200]
    chosen = str(uuid.uuid4())
    create = {"input": {"issueId": issue["id"], "body": "once", "id": chosen}}
    lost = post(linear, q.COMMENT_CREATE, create)
    assert lost.status_code == 503 and lost.headers["content-type"].startswith("text/html")
    assert [c["id"] for c in issue["comments"]] == [chosen]  # made, though its answer was lost
    # Sent again with its id, the create is refused, and reading the id says the comment is there: never twice.
    assert codes(post(linear, q.COMMENT_CREATE, create)) == [wire.INVALID_INPUT]
    assert data(post(linear, q.COMMENT_BY_ID, {"id": chosen}))["comment"]["body"] == "once"


def test_a_request_linear_would_refuse_or_the_fake_cannot_answer_fails_the_test(linear: FakeLinear) -> None:
    bad = post(linear, "query BeflowX { viewer { id nickname } }")
    assert (bad.status_code, codes(bad)) == (400, [wire.GRAPHQL_VALIDATION_FAILED])
    linear.add_issue("Estimated")
    unanswered = post(linear, "query BeflowY { projects(first: 1) { nodes { id } } }")
    assert codes(unanswered) == ["INTERNAL_SERVER_ERROR"]
    not_kept = post(linear, "query BeflowZ { issues(filter: { estimate: { eq: 3 } }) { nodes { id } } }")
    assert codes(not_kept) == ["INTERNAL_SERVER_ERROR"]
    wrong_variable = post(linear, q.ISSUES, {"filter": {"team": {"key": {"eq": 7}}}, "first": "ten"})
    assert (wrong_variable.status_code, codes(wrong_variable)) == (400, [wire.GRAPHQL_VALIDATION_FAILED] * 2)
    assert len(linear.violations) == 5, linear.violations
    assert "Cannot query field 'nickname' on type 'User'" in linear.violations[0]
    assert "the fake does not answer projects" in linear.violations[1]
    assert "the fake keeps no 'estimate'" in linear.violations[2]
    assert "Variable '$filter' has invalid value at .team.key.eq" in linear.violations[3]
    linear.violations.clear()  # (seen: the fixture would fail the test on them)


def test_the_fake_serves_graphql_only(linear: FakeLinear) -> None:
    assert httpx.get(linear.url.removesuffix("/graphql") + "/api/v1").status_code == 404
    assert linear.violations == ["request: GET /api/v1: Linear's API is POST /graphql"]
    linear.violations.clear()


def test_the_fake_is_at_the_path_beflows_default_endpoint_has(linear: FakeLinear) -> None:
    assert Path(httpx.URL(linear.url).path).name == "graphql"
