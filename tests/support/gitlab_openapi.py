"""The description of GitLab's REST API (v4) the fake GitLab (``tests/support/gitlab.py``) is held to: every request
the client sends and every answer the fake gives is checked against it, as the fake GitHub is checked against
octokit's description (``tests/support/openapi.py``, whose checker this reuses).

Every part of it is written here from GitLab's REST API pages, each naming its page (``x-beflow-doc``): the
operations beflow calls (``OPERATIONS``: their path parameters, the query parameters beflow sends, the statuses and
the schemas of the answers and bodies) and the entities (``tests/support/gitlab_schemas.py``: what beflow reads is
required and typed, the rest typed as the pages type it). tests/trackers/test_gitlab_fake.py lists them all.

GitLab's own OpenAPI description (``doc/api/openapi/openapi_v3.yaml`` in the GitLab repository) is not in the repo
yet: copies of reference data come only from the shared reference folder, which holds none. When a pinned copy sits
at ``OFFICIAL`` it is merged over the operations written here (see ``merge_official``) and the test lists which
operations are still written from the docs.
"""

from __future__ import annotations

import copy
import functools
import re
from pathlib import Path
from typing import Any

import yaml

from tests.support.gitlab_schemas import BOOL, DOCS, INT, SCHEMA_DOCS, SCHEMAS, STR, TIME, list_of, ref
from tests.support.openapi import Spec, _nullable

#: Where a pinned copy of GitLab's official description would be read from (absent until the shared reference folder
#: provides one; copy it here from there, whole or as an excerpt of the operations below).
OFFICIAL = Path(__file__).with_name("gitlab_openapi_official.yaml")

P = "/api/v4/projects/{id}"
PROJECT = {"name": "id", "in": "path", "required": True, "schema": {"oneOf": [STR, INT]}}
PAGES = [
    {"name": "page", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1}},
    {"name": "per_page", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 1, "maximum": 100}},
]
SORT = {"type": "string", "enum": ["asc", "desc"]}
#: The statuses of a pipeline, and of a job (the pipelines and jobs pages list the same ones).
CI_STATUSES = [
    "created", "waiting_for_resource", "preparing", "pending", "running", "success", "failed", "canceled", "skipped",
    "manual", "scheduled",
]  # fmt: skip


def _path(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema or INT}


def _query(name: str, schema: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "schema": schema, **more}


def _enum(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


#: Label names in a query: one comma-separated value (``labels=a,b``), as GitLab's pages say.
LABEL_QUERY = _query("labels", {"type": "array", "items": STR}, style="form", explode=False)


def _op(
    doc: str,
    ok: dict[str, Any] | None,
    params: list[dict[str, Any]],
    *,
    status: str = "200",
    body: str | None = None,
    content_type: str = "application/json",
    errors: tuple[str, ...] = ("400", "404", "409"),
) -> dict[str, Any]:
    """An operation written from GitLab's page ``doc`` (its operationId is given by ``operations``)."""
    error = {"description": "error", "content": {"application/json": {"schema": ref("Error")}}}
    operation: dict[str, Any] = {
        "x-beflow-doc": DOCS + doc,
        "parameters": params,
        # (``ok`` None: the answer has no body, as GitLab's 204 No Content)
        "responses": {
            status: {"description": "OK"} | ({} if ok is None else {"content": {content_type: {"schema": ok}}})
        }
        | {code: copy.deepcopy(error) for code in errors},
    }
    if body:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(body)}}}
    return operation


ISSUE, MR = [PROJECT, _path("issue_iid")], [PROJECT, _path("merge_request_iid")]

#: Every operation beflow calls, by path and method, each written from the page (and section) it names.
OPERATIONS: dict[str, dict[str, dict[str, Any]]] = {
    "/api/v4/user": {"get": _op("users/", ref("User"), [])},
    "/api/v4/personal_access_tokens/self": {"get": _op("personal_access_tokens/", ref("PersonalAccessToken"), [])},
    P: {"get": _op("projects/", ref("Project"), [PROJECT])},
    f"{P}/members/all/{{user_id}}": {"get": _op("members/", ref("Member"), [PROJECT, _path("user_id")])},
    f"{P}/labels": {
        "get": _op("labels/", list_of("Label"), [PROJECT, *PAGES]),
        "post": _op("labels/", ref("Label"), [PROJECT], status="201", body="LabelCreate"),
    },
    f"{P}/issues": {
        "get": _op(
            "issues/#list-project-issues",
            list_of("Issue"),
            [
                PROJECT,
                *PAGES,
                _query("state", _enum("opened", "closed", "all")),
                LABEL_QUERY,
                _query("updated_after", TIME),
                _query("confidential", BOOL),
                _query("with_labels_details", BOOL),
                _query("order_by", _enum("created_at", "updated_at", "priority", "label_priority", "weight")),
                _query("sort", SORT),
            ],
            errors=("400", "404"),
        ),
        "post": _op("issues/#new-issue", ref("Issue"), [PROJECT], status="201", body="IssueCreate"),
    },
    f"{P}/issues/{{issue_iid}}": {
        "get": _op("issues/#single-project-issue", ref("Issue"), ISSUE, errors=("404",)),
        "put": _op("issues/#edit-an-issue", ref("Issue"), ISSUE, body="IssueUpdate"),
    },
    f"{P}/issues/{{issue_iid}}/notes": {
        "get": _op(
            "notes/#list-project-issue-notes",
            list_of("Note"),
            [*ISSUE, *PAGES, _query("order_by", _enum("created_at", "updated_at")), _query("sort", SORT)],
            errors=("404",),
        ),
        "post": _op("notes/#create-new-issue-note", ref("Note"), ISSUE, status="201", body="NoteCreate"),
    },
    f"{P}/issues/{{issue_iid}}/links": {
        "get": _op("issue_links/#list-issue-relations", list_of("IssueLink"), ISSUE, errors=("404",)),
    },
    f"{P}/issues/{{issue_iid}}/notes/{{note_id}}": {
        "put": _op("notes/#modify-existing-issue-note", ref("Note"), [*ISSUE, _path("note_id")], body="NoteUpdate"),
        "delete": _op("notes/#delete-an-issue-note", None, [*ISSUE, _path("note_id")], status="204", errors=("404",)),
    },
    f"{P}/merge_requests": {
        "get": _op(
            "merge_requests/#list-project-merge-requests",
            list_of("MergeRequest"),
            [
                PROJECT,
                *PAGES,
                _query("state", _enum("opened", "closed", "locked", "merged", "all")),
                LABEL_QUERY,
                _query("updated_after", TIME),
                _query("source_branch", STR),
                _query("order_by", _enum("created_at", "updated_at")),
                _query("sort", SORT),
            ],
            errors=("400", "404", "422"),
        ),
        "post": _op(
            "merge_requests/#create-mr",
            ref("MergeRequest"),
            [PROJECT],
            status="201",
            body="MergeRequestCreate",
            errors=("400", "404", "409", "422"),
        ),
    },
    f"{P}/merge_requests/{{merge_request_iid}}": {
        "get": _op("merge_requests/#get-single-mr", ref("MergeRequest"), MR, errors=("404",)),
        "put": _op(
            "merge_requests/#update-mr",
            ref("MergeRequest"),
            MR,
            body="MergeRequestUpdate",
            errors=("400", "404", "409", "422"),
        ),
    },
    f"{P}/merge_requests/{{merge_request_iid}}/approvals": {
        "get": _op("merge_request_approvals/#get-the-approval-state-of-merge-requests", ref("Approvals"), MR),
    },
    f"{P}/merge_requests/{{merge_request_iid}}/merge": {
        "put": _op(
            "merge_requests/#merge-a-merge-request",
            ref("MergeRequest"),
            MR,
            body="MergeRequestMerge",
            errors=("400", "401", "404", "405", "406", "409", "422"),
        ),
    },
    f"{P}/merge_requests/{{merge_request_iid}}/notes": {
        "post": _op("notes/#create-new-merge-request-note", ref("Note"), MR, status="201", body="NoteCreate"),
    },
    f"{P}/merge_requests/{{merge_request_iid}}/discussions": {
        "get": _op(
            "discussions/#list-project-merge-request-discussion-items",
            list_of("Discussion"),
            [*MR, *PAGES],
            errors=("404",),
        ),
    },
    f"{P}/merge_requests/{{merge_request_iid}}/discussions/{{discussion_id}}/notes": {
        "post": _op(
            "discussions/#add-note-to-existing-merge-request-thread",
            ref("Note"),
            [*MR, _path("discussion_id", STR)],
            status="201",
            body="ThreadReply",
        ),
    },
    f"{P}/pipelines": {
        "get": _op(
            "pipelines/#list-project-pipelines",
            list_of("Pipeline"),
            [
                PROJECT,
                *PAGES,
                _query("sha", STR),
                _query("ref", STR),
                _query("status", _enum(*CI_STATUSES)),
                _query("updated_after", TIME),
                _query("order_by", _enum("id", "status", "ref", "updated_at", "user_id")),
                _query("sort", SORT),
            ],
            errors=("400", "404"),
        ),
    },
    f"{P}/pipelines/{{pipeline_id}}/jobs": {
        "get": _op(
            "jobs/#list-pipeline-jobs",
            list_of("Job"),
            [
                PROJECT,
                _path("pipeline_id"),
                *PAGES,
                _query("scope", _enum(*CI_STATUSES)),
                _query("include_retried", BOOL),
            ],
            errors=("400", "404"),
        ),
    },
    f"{P}/jobs": {
        "get": _op(
            "jobs/#list-project-jobs",
            list_of("Job"),
            [
                PROJECT,
                *PAGES,
                _query("scope", _enum(*CI_STATUSES)),
                _query("pagination", _enum("keyset")),
                _query("order_by", _enum("id")),
                _query("sort", SORT),
                _query("cursor", STR),
            ],
        ),
    },
    f"{P}/jobs/{{job_id}}/trace": {
        "get": _op("jobs/#get-a-log-file", STR, [PROJECT, _path("job_id")], content_type="text/plain"),
    },
}


def operation_id(method: str, template: str) -> str:
    """The operation's name, spelt from its method and path (``GET /api/v4/user`` -> ``getApiV4User``)."""
    words = re.split(r"[^A-Za-z0-9]+", template)
    return method.lower() + "".join(word[:1].upper() + word[1:] for word in words if word)


def _shape(template: str) -> str:
    # Two descriptions may name a path's parameters differently (GitLab's names an issue's `noteable_id` where its
    # pages say `issue_iid`): an operation is the same one when its method and the path's shape agree.
    return re.sub(r"\{[^}]+\}", "{}", template)


def merge_official(paths: dict[str, Any], official: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``paths`` with GitLab's official description merged over them, and the schemas it brings.

    For each operation beflow calls that the official description holds, its query parameters replace the ones
    written here (a parameter beflow sends that it lacks is kept, so the check says what beflow sends) and its
    statuses are added. The path (its parameter names: the fake is keyed on them), the operationId, the request body
    and the answers' schemas written here stay: GitLab's entities leave every field optional and its listings name
    one entity where they answer a list, so a check against them alone could not fail. ``x-beflow-official`` marks
    the operations it touched.
    """
    merged = copy.deepcopy(paths)
    ours = {(method, _shape(t)): op for t, item in merged.items() for method, op in item.items()}
    for template, item in official.get("paths", {}).items():
        for method, theirs in item.items():
            op = ours.get((method, _shape(template)))
            if op is None or not isinstance(theirs, dict):
                continue  # an operation beflow does not call stays out: calling it is a finding
            query = [p for p in theirs.get("parameters", []) if p.get("in") == "query"]
            named = {p["name"] for p in query}
            op["parameters"] = [
                p for p in op["parameters"] if p["in"] == "path" or p["name"] not in named
            ] + copy.deepcopy(query)
            for status, response in theirs.get("responses", {}).items():
                op["responses"].setdefault(str(status), copy.deepcopy(response))
            op["x-beflow-official"] = theirs.get("operationId", f"{method} {template}")
    return merged, copy.deepcopy(official.get("components", {}).get("schemas", {}))


def document(official: Path = OFFICIAL) -> dict[str, Any]:
    """The description the fake is held to: the operations written from GitLab's pages, with GitLab's official
    description merged over them when a pinned copy is at ``official``."""
    paths: dict[str, Any] = copy.deepcopy(OPERATIONS)
    for template, item in paths.items():
        for method, operation in item.items():
            operation["operationId"] = operation_id(method, template)
    schemas = {name: {**schema, "x-beflow-doc": DOCS + SCHEMA_DOCS[name]} for name, schema in SCHEMAS.items()}
    info: dict[str, Any] = {"title": "GitLab REST API (the part beflow speaks)", "version": "v4"}
    if official.is_file():
        pinned = yaml.safe_load(official.read_text(encoding="utf-8"))
        paths, theirs = merge_official(paths, pinned)
        schemas = {**theirs, **schemas}  # (a name both define keeps the one written here)
        info["x-official"] = pinned.get("info", {}).get("version", "unknown")
    error = {"application/json": {"schema": ref("Error")}}
    for item in paths.values():
        for operation in item.values():
            for status, response in operation["responses"].items():
                if not str(status).startswith("2") and "content" not in response:
                    response["content"] = error  # GitLab sends {"message": ...} with its errors
    return {"openapi": "3.0.0", "info": info, "paths": paths, "components": {"schemas": schemas}}


def docs_written(description: dict[str, Any]) -> set[str]:
    """The operations of ``description`` written from GitLab's pages alone, as ``METHOD /path``."""
    return {
        f"{method.upper()} {template}"
        for template, item in description["paths"].items()
        for method, operation in item.items()
        if "x-beflow-official" not in operation
    }


class GitLabSpec(Spec):
    """GitLab's description, checked by the same machinery as GitHub's."""

    uri = "urn:gitlab-rest-api"
    title = "GitLab's REST API as described in tests/support/gitlab_openapi.py"
    error_pointer = "/components/schemas/Error"


@functools.cache
def gitlab_spec() -> GitLabSpec:
    """The description, assembled once per test session."""
    return GitLabSpec(_nullable(document()))
