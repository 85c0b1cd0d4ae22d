"""The fake GitLab the GitLab tracker and code host are tested on: it speaks what GitLab speaks (tokens, pages,
rate limits, ETags, faults), and it is held to the description of GitLab's API, which must catch an answer of another
shape."""

from __future__ import annotations

import email.utils
import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from beflow.trackers import gitlab_wire as wire
from tests.support.gitlab import HANDLERS, PROJECT, TOKEN, FakeGitLab, serve
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab_openapi import OFFICIAL, GitLabSpec, docs_written, document, gitlab_spec
from tests.support.openapi import _nullable

#: The entities and bodies of the description, each written from GitLab's REST API pages
#: (tests/support/gitlab_openapi.py names the page of each): a change to this list is a change to what is checked.
DOC_WRITTEN_SCHEMAS = {
    "Error", "User", "Member", "PersonalAccessToken", "Project", "Label", "Issue", "Position", "Note", "Discussion",
    "MergeRequest", "Pipeline", "Job", "IssueCreate", "IssueUpdate", "NoteCreate", "NoteUpdate", "ThreadReply",
    "MergeRequestCreate", "MergeRequestUpdate", "LabelCreate", "IssueLink", "Approvals", "MergeRequestMerge",
}  # fmt: skip
#: Operations beflow calls that are written from GitLab's pages alone. All of them, for now: GitLab's official
#: description is merged over them once a pinned copy sits at gitlab_openapi.OFFICIAL, and each operation it holds
#: leaves this list.
P = "/api/v4/projects/{id}"
DOC_WRITTEN = {
    "GET /api/v4/user",
    "GET /api/v4/personal_access_tokens/self",
    f"GET {P}",
    f"GET {P}/members/all/{{user_id}}",
    f"GET {P}/labels",
    f"POST {P}/labels",
    f"GET {P}/issues",
    f"POST {P}/issues",
    f"GET {P}/issues/{{issue_iid}}",
    f"PUT {P}/issues/{{issue_iid}}",
    f"GET {P}/issues/{{issue_iid}}/notes",
    f"GET {P}/issues/{{issue_iid}}/links",
    f"POST {P}/issues/{{issue_iid}}/notes",
    f"PUT {P}/issues/{{issue_iid}}/notes/{{note_id}}",
    f"DELETE {P}/issues/{{issue_iid}}/notes/{{note_id}}",
    f"POST {P}/merge_requests/{{merge_request_iid}}/notes",
    f"GET {P}/merge_requests/{{merge_request_iid}}/discussions",
    f"POST {P}/merge_requests/{{merge_request_iid}}/discussions/{{discussion_id}}/notes",
    f"GET {P}/merge_requests",
    f"POST {P}/merge_requests",
    f"GET {P}/merge_requests/{{merge_request_iid}}",
    f"PUT {P}/merge_requests/{{merge_request_iid}}",
    f"GET {P}/merge_requests/{{merge_request_iid}}/approvals",
    f"PUT {P}/merge_requests/{{merge_request_iid}}/merge",
    f"GET {P}/pipelines",
    f"GET {P}/pipelines/{{pipeline_id}}/jobs",
    f"GET {P}/jobs",
    f"GET {P}/jobs/{{job_id}}/trace",
}

API = "/api/v4/projects/acme%2Fwidgets"


def client(fake: FakeGitLab, *, bearer: bool = False) -> httpx.Client:
    auth = {"Authorization": f"Bearer {TOKEN}"} if bearer else {"PRIVATE-TOKEN": TOKEN}
    return httpx.Client(base_url=fake.url, headers=auth)


def test_every_part_of_the_description_names_the_page_it_is_written_from() -> None:
    assert not OFFICIAL.exists()  # (until the shared reference folder holds GitLab's description)
    doc = document()
    operations = {f"{m.upper()} {p}": op for p, item in doc["paths"].items() for m, op in item.items()}
    schemas = doc["components"]["schemas"]
    assert set(schemas) == DOC_WRITTEN_SCHEMAS
    assert docs_written(doc) == set(operations) == DOC_WRITTEN
    pages = [s["x-beflow-doc"] for s in schemas.values()] + [op["x-beflow-doc"] for op in operations.values()]
    assert all(page.startswith("https://docs.gitlab.com/api/") for page in pages)
    assert all(op["operationId"] in HANDLERS for op in operations.values())  # the fake answers every one
    # Every schema an operation names is defined (a dangling reference would make its check vacuous).
    text = json.dumps(doc)
    assert {name for name in re.findall(r"#/components/schemas/(\w+)", text)} <= set(schemas)


def test_an_official_copy_is_merged_over_the_operations_written_from_the_docs(tmp_path: Path) -> None:
    # A stand-in for a pinned copy of GitLab's description: its own parameter names, a query parameter the docs-written
    # listing lacks, a status more, and an entity that leaves every field optional.
    official, loose = tmp_path / "official.yaml", "#/components/schemas/Loose"
    listing = {"operationId": "theirs", "parameters": [
        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "noteable_id", "in": "path", "required": True, "schema": {"type": "integer"}},
        {"name": "activity_filter", "in": "query", "schema": {"type": "string", "enum": ["all_notes"]}},
        {"name": "sort", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"]}},
    ], "responses": {
        "200": {"description": "ok", "content": {"application/json": {"schema": {"$ref": loose}}}},
        "422": {"description": "no"},
    }}  # fmt: skip
    official.write_text(json.dumps({
        "openapi": "3.0.0", "info": {"version": "19.5"},
        "paths": {"/api/v4/projects/{id}/issues/{noteable_id}/notes": {"get": listing},
                  "/api/v4/projects/{id}/snippets": {"get": listing}},
        "components": {"schemas": {"Loose": {"type": "object"}, "Note": {"type": "object"}}},
    }))  # fmt: skip
    doc = document(official)
    notes = f"GET {P}/issues/{{issue_iid}}/notes"
    assert docs_written(doc) == DOC_WRITTEN - {notes}
    assert f"{P}/snippets" not in doc["paths"]  # what beflow does not call stays out
    merged = doc["paths"][f"{P}/issues/{{issue_iid}}/notes"]["get"]
    assert merged["operationId"] == "getApiV4ProjectsIdIssuesIssueIidNotes"
    assert "422" in merged["responses"] and "Loose" in doc["components"]["schemas"]
    assert doc["components"]["schemas"]["Note"]["required"]  # the docs-written entity stays
    api = GitLabSpec(_nullable(doc))
    path = f"{API}/issues/1/notes"
    assert api.check_request("GET", path, {"activity_filter": "all_notes", "order_by": "created_at"}, None) == []
    assert "is not one of" in api.check_request("GET", path, {"sort": "up"}, None)[0]
    assert "'author' is a required property" in " ".join(api.check_response("GET", path, 200, [{"id": 1}]))


def test_the_description_is_valid_openapi() -> None:
    validate(_nullable_free(document()))


def _nullable_free(node: Any) -> Any:
    # x- keys are allowed anywhere in OpenAPI but not inside schemas by every validator: strip beflow's markers.
    if isinstance(node, dict):
        return {k: _nullable_free(v) for k, v in node.items() if not k.startswith("x-beflow")}
    if isinstance(node, list):
        return [_nullable_free(v) for v in node]
    return node


def test_a_token_is_asked_for_in_either_header(gitlab: FakeGitLab) -> None:
    with client(gitlab) as http, client(gitlab, bearer=True) as bearer:
        assert wire.parse(wire.User, http.get("/api/v4/user").json(), "GET /user").username == "beflow-bot"
        assert bearer.get("/api/v4/personal_access_tokens/self").json()["scopes"] == ["api"]
        refused = httpx.get(gitlab.url + "/api/v4/user", headers={"PRIVATE-TOKEN": "nope"})
        assert (refused.status_code, refused.json()) == (401, {"message": "401 Unauthorized"})


def test_listings_page_by_offset_and_by_keyset(gitlab: FakeGitLab) -> None:
    for n in range(5):
        gitlab.add_issue(f"issue {n}", labels=["beflow:ready"])
    with client(gitlab) as http:
        first = http.get(f"{API}/issues", params={"per_page": 2, "labels": "beflow:ready", "sort": "asc"})
        assert [i["iid"] for i in first.json()] == [1, 2]
        assert (first.headers["x-next-page"], first.headers["x-total"]) == ("2", "5")
        seen, url = [], f"{API}/issues?per_page=2&sort=asc"
        while url:
            answer = http.get(url)
            seen += [i["iid"] for i in answer.json()]
            url = wire.next_page(answer.headers) or ""
        assert seen == [1, 2, 3, 4, 5]
        assert http.get(f"{API}/issues", params={"page": 3, "per_page": 2}).headers["x-next-page"] == ""
    pipeline = gitlab.add_pipeline("a" * 40, "main", "failed", {f"job{n}": ("failed", "log") for n in range(5)})
    with client(gitlab) as http:
        names, url = [], f"{API}/jobs?pagination=keyset&per_page=2&order_by=id&sort=asc"
        while url:
            answer = http.get(url)
            assert "x-next-page" not in answer.headers and "x-total" not in answer.headers
            names += [j["name"] for j in answer.json()]
            url = wire.next_page(answer.headers) or ""
        assert names == [f"job{n}" for n in range(5)]
        jobs = http.get(f"{API}/pipelines/{pipeline['id']}/jobs", params={"scope": "failed"}).json()
        assert len(jobs) == 5
        assert http.get(f"{API}/jobs/{jobs[0]['id']}/trace").text == "log"


def test_updated_after_lists_only_what_changed(gitlab: FakeGitLab) -> None:
    old = gitlab.add_issue("old")
    with client(gitlab) as http:
        since = http.get(f"{API}/issues").json()[0]["updated_at"]
        new = gitlab.add_issue("new")
        new["updated_at"] = "2999-01-01T00:00:00.000Z"
        changed = http.get(f"{API}/issues", params={"updated_after": "2100-01-01T00:00:00Z"}).json()
        assert [i["iid"] for i in changed] == [new["iid"]]
        assert old["iid"] in [i["iid"] for i in http.get(f"{API}/issues", params={"updated_after": since}).json()]


def test_rate_limits_etags_and_faults(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("one")
    with client(gitlab) as http:
        answer = http.get(f"{API}/issues/{issue['iid']}")
        before = wire.RateHeaders.of(answer.headers).remaining
        assert before is not None and answer.headers["etag"].startswith('W/"')
        again = http.get(f"{API}/issues/{issue['iid']}", headers={"If-None-Match": answer.headers["etag"]})
        assert (again.status_code, again.content) == (304, b"")
        assert "etag" not in http.get(f"{API}/issues").headers  # listings answer no 304
        gitlab.fail(502, times=2, only="POST", after=True)
        lost = http.post(f"{API}/issues/{issue['iid']}/notes", json={"body": "once"})
        assert lost.status_code == 502
        assert [n["body"] for n in http.get(f"{API}/issues/{issue['iid']}/notes").json()] == ["once"]
        gitlab.rate_remaining = 0
        limited = http.get(f"{API}/issues")
        assert (limited.status_code, limited.headers["retry-after"]) == (429, "60")
        assert wire.RateHeaders.of(limited.headers).remaining == 0


def test_internal_notes_edits_deletions_and_the_clock(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("one")
    notes = f"{API}/issues/{issue['iid']}/notes"
    with client(gitlab) as http:
        made = http.post(notes, json={"body": "hold", "internal": True}).json()
        assert made["internal"] is True and made["confidential"] is True
        same = http.put(f"{notes}/{made['id']}", json={"body": "hold"}).json()
        assert same["updated_at"] == made["updated_at"]  # an edit that changes nothing moves nothing
        time.sleep(0.002)
        edited = http.put(f"{notes}/{made['id']}", json={"body": "held"}).json()
        assert edited["updated_at"] > made["updated_at"] and len(edited["updated_at"]) == len(
            "2026-01-01T00:00:00.000Z"
        )
        gone = http.delete(f"{notes}/{made['id']}")
        assert (gone.status_code, gone.content) == (204, b"")
        assert http.delete(f"{notes}/{made['id']}").status_code == 404 and http.get(notes).json() == []
        date = email.utils.parsedate_to_datetime(gone.headers["date"])  # GitLab's clock, in whole seconds
        assert abs(date.timestamp() - time.time()) < 5


def test_requests_held_and_notes_committed_late(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("one")
    notes = f"{API}/issues/{issue['iid']}/notes"
    gitlab.stall_notes(60)  # until released below: no timing to win
    seen: list[Any] = []
    late = threading.Thread(target=lambda: seen.append(client(gitlab).post(notes, json={"body": "first"}).json()))
    late.start()
    while gitlab.stalls:
        time.sleep(0.01)
    with client(gitlab) as http:
        second = http.post(notes, json={"body": "second"}).json()
        assert [n["body"] for n in http.get(notes).json()] == ["second"]  # the first is not seen yet
        gitlab.released.set()  # the first note's transaction commits now
        late.join()
        gitlab.released.clear()
        assert seen[0]["id"] < second["id"]  # its id was drawn first
        assert [n["body"] for n in http.get(notes, params={"sort": "asc"}).json()] == ["first", "second"]
        gitlab.delay("GET", notes, 60)
        with pytest.raises(httpx.ReadTimeout):
            http.get(notes, timeout=0.05)  # held, the connection open


def test_a_review_thread_is_answered_in_place(gitlab: FakeGitLab) -> None:
    reviewer = gitlab.user("rev", access_level=30)
    stranger = gitlab.user("passerby")
    iid = gitlab.open_mr("beflow/1", "Draft: beflow/1")
    position = {"base_sha": "a" * 40, "start_sha": "a" * 40, "head_sha": "b" * 40, "old_path": "x.py",
                "new_path": "x.py", "old_line": None, "new_line": 3}  # fmt: skip
    gitlab.add_note("MergeRequest", iid, "rename this", author=reviewer, position=position)
    gitlab.add_note("MergeRequest", iid, "@beflow do it", author=stranger)
    with client(gitlab) as http:
        threads = wire.parse_list(wire.Discussion, http.get(f"{API}/merge_requests/{iid}/discussions").json(), "GET")
        diff = threads[0]
        assert diff.notes[0].position is not None and diff.notes[0].position.line == 3 and not diff.resolved
        reply = http.post(f"{API}/merge_requests/{iid}/discussions/{diff.id}/notes", json={"body": "done in abc"})
        assert reply.status_code == 201
        assert [n["body"] for n in http.get(f"{API}/merge_requests/{iid}/discussions").json()[0]["notes"]] == [
            "rename this",
            "done in abc",
        ]
        member = http.get(f"{API}/members/all/{reviewer['id']}").json()
        assert wire.parse(wire.Member, member, "GET").may_push
        assert http.get(f"{API}/members/all/{stranger['id']}").status_code == 404
        mr = wire.parse(wire.MergeRequest, http.get(f"{API}/merge_requests/{iid}").json(), "GET")
        assert mr.draft and mr.state == "opened"
        gitlab.merge(iid)
        assert http.get(f"{API}/merge_requests", params={"state": "merged"}).json()[0]["iid"] == iid


def tamper_and_request(change: Any, method: str, path: str, body: Any = None) -> list[str]:
    with serve() as fake:
        fake.add_issue("one")
        fake.tamper(method, path, change)
        with client(fake) as http:
            http.request(method, path, json=body)
        return fake.violations


@pytest.mark.parametrize(
    ("change", "caught"),
    [
        (lambda issues: [{**issues[0], "iid": "1"}], "0/iid: '1' is not of type 'integer'"),
        (lambda issues: [{**issues[0], "state": "open"}], "0/state: 'open' is not one of"),
        (lambda issues: issues[0], "issues -> 200: (top): {'id'"),  # (a dict where a list is due)
        (lambda issues: [{k: v for k, v in issues[0].items() if k != "updated_at"}], "'updated_at' is a required"),
    ],
)
def test_a_malformed_answer_is_caught_by_the_description(change: Any, caught: str) -> None:
    violations = tamper_and_request(change, "GET", f"{API}/issues")
    assert any(caught in v for v in violations), violations


def test_a_malformed_request_is_caught_by_the_description() -> None:
    with serve() as fake, client(fake) as http:
        http.post(f"{API}/issues", json={"title": "x", "lables": "a"})
        http.get(f"{API}/issues", params={"state": "open", "since": "x"})
        http.get(f"/api/v4/projects/{PROJECT}/snippets")
    joined = "\n".join(fake.violations)
    assert "Additional properties are not allowed ('lables' was unexpected)" in joined
    assert "?state=open" in joined and "unknown query parameter 'since'" in joined
    assert "is no operation of GitLab's REST API" in joined


def test_the_description_is_built_once() -> None:
    assert gitlab_spec() is gitlab_spec()


def test_every_answer_of_the_fake_reads_into_beflow_s_models(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("one", labels=["beflow:ready"])
    gitlab.add_note("Issue", issue["iid"], "a note")
    pipeline = gitlab.add_pipeline("c" * 40, "beflow/1", "failed", {"test": ("failed", "boom")})
    with client(gitlab) as http:
        assert wire.parse(wire.TokenSelf, http.get("/api/v4/personal_access_tokens/self").json(), "GET").may_write_api
        issues = wire.parse_list(
            wire.Issue, http.get(f"{API}/issues", params={"with_labels_details": "true"}).json(), ""
        )
        assert issues[0].labels == ["beflow:ready"]
        notes = wire.parse_list(wire.Note, http.get(f"{API}/issues/{issue['iid']}/notes").json(), "GET")
        assert [n.text for n in notes] == ["a note"]
        edited = http.put(f"{API}/issues/{issue['iid']}/notes/{notes[0].id}", json={"body": "edited"}).json()
        assert wire.parse(wire.Note, edited, "PUT").text == "edited"
        closed = http.put(
            f"{API}/issues/{issue['iid']}", json={"state_event": "close", "remove_labels": "beflow:ready"}
        )
        assert wire.parse(wire.Issue, closed.json(), "PUT").state == "closed"
        assert wire.parse_list(wire.Label, http.get(f"{API}/labels").json(), "GET")[0].name == "beflow:ready"
        pipelines = wire.parse_list(wire.Pipeline, http.get(f"{API}/pipelines", params={"sha": "c" * 40}).json(), "")
        assert [p.failed for p in pipelines] == [True]
        jobs = wire.parse_list(wire.Job, http.get(f"{API}/pipelines/{pipeline['id']}/jobs").json(), "GET")
        assert [j.name for j in jobs if j.failed] == ["test"]
