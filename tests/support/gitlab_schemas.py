"""The entities and request bodies of GitLab's REST API (v4) that the fake GitLab is checked against, each written
from the GitLab REST API page that ``SCHEMA_DOCS`` names (the operations that use them: ``gitlab_openapi.py``)."""

from __future__ import annotations

from typing import Any

DOCS = "https://docs.gitlab.com/api/"


def ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def list_of(name: str) -> dict[str, Any]:
    return {"type": "array", "items": ref(name)}


def _object(required: dict[str, Any], optional: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    # (OpenAPI 3.0 wants a `required` list to name one field at least: none is said by leaving it out.)
    names = {"required": list(required)} if required else {}
    return {"type": "object", **names, "properties": {**required, **(optional or {})}, **more}


def _body(required: dict[str, Any], optional: dict[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    """A request body: the fields beflow may send, no others (a stray field is a client bug the check catches)."""
    return _object(required, optional, additionalProperties=False, **more)


INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
TIME = {"type": "string", "format": "date-time"}
NTIME = {"type": "string", "format": "date-time", "nullable": True}
NSTR = {"type": "string", "nullable": True}
NINT = {"type": "integer", "nullable": True}
NDATE = {"type": "string", "format": "date", "nullable": True}
#: Labels as GitLab takes them in a body: a comma-separated string, or an array of names.
LABELS = {"anyOf": [STR, {"type": "array", "items": STR}]}


def _enum_of(*values: str) -> dict[str, Any]:
    return {"type": "string", "enum": list(values)}


# -- entities and bodies: what beflow reads is required and typed, the rest typed as GitLab's pages type it -----------

SCHEMAS: dict[str, Any] = {
    "Error": {
        "type": "object",
        "properties": {
            "message": {"anyOf": [STR, {"type": "object"}, {"type": "array"}]},
            "error": STR,
            "error_description": STR,
        },
        "anyOf": [{"required": ["message"]}, {"required": ["error"]}],
    },
    "User": _object(
        {"id": INT, "username": STR},
        {"name": STR, "state": STR, "bot": BOOL, "locked": BOOL, "avatar_url": NSTR, "web_url": STR},
    ),
    "Member": {
        "allOf": [
            ref("User"),
            _object(
                {"access_level": {"type": "integer", "enum": [0, 5, 10, 15, 20, 30, 40, 50, 60]}},
                {"expires_at": NDATE, "created_at": TIME},
            ),
        ]
    },
    "PersonalAccessToken": _object(
        {"id": INT, "scopes": {"type": "array", "items": STR}, "active": BOOL, "revoked": BOOL},
        {
            "name": STR,
            "description": NSTR,
            "user_id": INT,
            "created_at": TIME,
            "last_used_at": NTIME,
            "expires_at": NDATE,
        },
    ),
    "Project": _object(
        {"id": INT, "path_with_namespace": STR},
        {"name": STR, "default_branch": NSTR, "web_url": STR, "http_url_to_repo": STR},
    ),
    "Label": _object({"id": INT, "name": STR}, {"color": STR, "text_color": STR, "description": NSTR}),
    "Issue": _object(
        {
            "id": INT,
            "iid": {"type": "integer", "minimum": 1},
            "project_id": INT,
            "title": STR,
            "state": {"type": "string", "enum": ["opened", "closed"]},
            "labels": {"type": "array", "items": {"anyOf": [STR, ref("Label")]}},
            "created_at": TIME,
            "updated_at": TIME,
        },
        {
            "description": NSTR,
            "confidential": BOOL,
            "weight": NINT,
            "author": ref("User"),
            "assignees": list_of("User"),
            "closed_at": NTIME,
            "web_url": STR,
            "user_notes_count": INT,
        },
    ),
    # An issue linked to another, as the other's links list it: the issue and the link.
    "IssueLink": {
        "allOf": [
            ref("Issue"),
            _object(
                {
                    "issue_link_id": INT,
                    "link_type": {"type": "string", "enum": ["relates_to", "blocks", "is_blocked_by"]},
                },
                {"link_created_at": TIME, "link_updated_at": TIME},
            ),
        ]
    },
    "Position": _object(
        {"position_type": {"type": "string", "enum": ["text", "image", "file"]}},
        {
            "base_sha": NSTR,
            "start_sha": NSTR,
            "head_sha": NSTR,
            "old_path": NSTR,
            "new_path": NSTR,
            "old_line": NINT,
            "new_line": NINT,
            "line_range": {"type": "object", "nullable": True},
        },
    ),
    "Note": _object(
        {"id": INT, "body": STR, "author": ref("User"), "created_at": TIME, "system": BOOL},
        {
            "type": {"type": "string", "nullable": True, "enum": ["DiffNote", "DiscussionNote", None]},
            "updated_at": TIME,
            "noteable_id": INT,
            "noteable_type": STR,
            "noteable_iid": NINT,
            "resolvable": BOOL,
            "resolved": BOOL,
            "resolved_by": {"allOf": [ref("User")], "nullable": True},
            "confidential": BOOL,
            "internal": BOOL,
            "position": ref("Position"),
        },
    ),
    "Discussion": _object(
        {
            "id": {"type": "string", "minLength": 1},
            "individual_note": BOOL,
            "notes": {"type": "array", "minItems": 1, "items": ref("Note")},
        },
    ),
    "MergeRequest": _object(
        {
            "id": INT,
            "iid": {"type": "integer", "minimum": 1},
            "project_id": INT,
            "title": STR,
            "state": {"type": "string", "enum": ["opened", "closed", "locked", "merged"]},
            "source_project_id": INT,
            "target_project_id": INT,
            "source_branch": STR,
            "target_branch": STR,
            "created_at": TIME,
            "updated_at": TIME,
        },
        {
            "description": NSTR,
            "draft": BOOL,
            "work_in_progress": BOOL,
            "sha": NSTR,
            "merge_commit_sha": NSTR,
            "author": ref("User"),
            "merged_at": NTIME,
            "closed_at": NTIME,
            "labels": {"type": "array", "items": STR},
            "web_url": STR,
            "detailed_merge_status": STR,
        },
    ),
    "Approvals": _object(
        {"approved_by": {"type": "array", "items": _object({"user": ref("User")})}},
        {"approved": BOOL, "approvals_required": INT, "approvals_left": INT},
    ),
    "Pipeline": _object(
        {"id": INT, "project_id": INT, "sha": STR, "status": STR},
        {"iid": INT, "ref": NSTR, "source": STR, "created_at": NTIME, "updated_at": NTIME, "web_url": STR},
    ),
    "Job": _object(
        {"id": INT, "name": STR, "status": STR},
        {
            "stage": STR,
            "allow_failure": BOOL,
            "failure_reason": STR,
            "web_url": STR,
            "ref": STR,
            "created_at": TIME,
            "started_at": NTIME,
            "finished_at": NTIME,
            "pipeline": {"type": "object"},
        },
    ),
    # Request bodies: the fields beflow sends, no others.
    "IssueCreate": _body(
        {"title": {"type": "string", "minLength": 1}}, {"description": STR, "labels": LABELS, "confidential": BOOL}
    ),
    "IssueUpdate": _body(
        {},
        {
            "title": STR,
            "description": STR,
            "labels": LABELS,
            "add_labels": LABELS,
            "remove_labels": LABELS,
            "state_event": {"type": "string", "enum": ["close", "reopen"]},
        },
        minProperties=1,
    ),
    "NoteCreate": _body({"body": {"type": "string", "minLength": 1, "maxLength": 1000000}}, {"internal": BOOL}),
    "NoteUpdate": _body({}, {"body": {"type": "string", "minLength": 1, "maxLength": 1000000}}),
    "ThreadReply": _body({"body": {"type": "string", "minLength": 1, "maxLength": 1000000}}),
    "MergeRequestCreate": _body(
        {
            "source_branch": {"type": "string", "minLength": 1},
            "target_branch": {"type": "string", "minLength": 1},
            "title": {"type": "string", "minLength": 1},
        },
        {"description": STR, "labels": LABELS, "remove_source_branch": BOOL},
    ),
    "MergeRequestUpdate": _body(
        {},
        {
            "title": {"type": "string", "minLength": 1},
            "description": STR,
            "labels": LABELS,
            "state_event": {"type": "string", "enum": ["close", "reopen"]},
        },
        minProperties=1,
    ),
    "MergeRequestMerge": _body(
        {"sha": {"type": "string", "minLength": 40, "maxLength": 64}},
        {"squash": BOOL, "should_remove_source_branch": BOOL, "merge_commit_message": STR},
    ),
    "LabelCreate": _body({"name": {"type": "string", "minLength": 1}, "color": STR}, {"description": STR}),
}

#: The page of GitLab's REST API each model above is written from.
SCHEMA_DOCS: dict[str, str] = {
    "Error": "rest/troubleshooting/#status-codes",
    "User": "users/",
    "Member": "members/",
    "PersonalAccessToken": "personal_access_tokens/",
    "Project": "projects/",
    "Label": "labels/",
    "Issue": "issues/",
    "Position": "discussions/",
    "Note": "notes/",
    "Discussion": "discussions/",
    "MergeRequest": "merge_requests/",
    "Pipeline": "pipelines/",
    "Job": "jobs/",
    "IssueCreate": "issues/",
    "IssueUpdate": "issues/",
    "NoteCreate": "notes/",
    "NoteUpdate": "notes/",
    "ThreadReply": "discussions/",
    "MergeRequestCreate": "merge_requests/",
    "MergeRequestUpdate": "merge_requests/",
    "LabelCreate": "labels/",
    "IssueLink": "issue_links/#list-issue-relations",
    "Approvals": "merge_request_approvals/",
    "MergeRequestMerge": "merge_requests/",
}
