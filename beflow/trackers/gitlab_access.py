"""What ``beflow doctor`` asks GitLab: whether the token works and has the ``api`` scope, whether the project is there
for it, and whether its user may push (Developer or above). The GitLab tracker and code host both answer
:class:`~beflow.trackers.base.ChecksAccess` with these findings; each names the setting to change when it fails.

The status labels are checked apart, by every tracker that sets up labels (:class:`~beflow.trackers.base.SetsUpLabels`).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from beflow.config import GitLabCodeHostSettings, GitLabTrackerSettings
from beflow.errors import BeflowError
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.base import Finding
from beflow.trackers.gitlab_api import Api, GitLabAuthError, GitLabError, project_id
from beflow.trackers.wire import Wire

#: Every finding is one ``beflow doctor`` line under this name (the tracker's and the code host's, said once).
NAME = "gitlab"
ROLES = {
    wire.GUEST: "Guest",
    wire.REPORTER: "Reporter",
    wire.DEVELOPER: "Developer",
    wire.MAINTAINER: "Maintainer",
    wire.OWNER: "Owner",
}


class _Access(Wire):
    access_level: Annotated[int, Field(strict=True, ge=0)]


class _Permissions(Wire):
    project_access: _Access | None = None
    group_access: _Access | None = None


class _Project(Wire):
    """What a project's answer says of the token user's rights (GitLab sends ``permissions`` to its members)."""

    id: wire.Id
    path_with_namespace: str
    permissions: _Permissions | None = None

    @property
    def access_level(self) -> int | None:
        if self.permissions is None:
            return None
        levels = [a.access_level for a in (self.permissions.project_access, self.permissions.group_access) if a]
        return max(levels) if levels else None


def access_checks(
    api: Api, project: str, settings: GitLabTrackerSettings | GitLabCodeHostSettings, what: str = "tracker"
) -> list[Finding]:
    """The token, the project and the right to push, one finding each, for the project at path ``project``
    (``what``: the settings they come from, ``tracker`` or ``code_host``). A token GitLab refuses is the only
    finding: nothing else can be asked with it."""
    try:
        token = _token(api, settings, what)
    except BeflowError as error:
        return [Finding(NAME, False, error.message, error.fix)]
    findings = [token.finding]
    try:
        seen = _project(api, project, settings, what)
    except BeflowError as error:
        return [*findings, Finding(NAME, False, error.message, error.fix)]
    findings.append(Finding(NAME, True, f"project {project} on {settings.url}"))
    if token.user is not None:
        findings.append(_push(api, project, seen, token.user))
    return findings


class _Token:
    def __init__(self, finding: Finding, user: wire.User | None) -> None:
        self.finding, self.user = finding, user


def _token(api: Api, settings: GitLabTrackerSettings | GitLabCodeHostSettings, what: str) -> _Token:
    variable = f"${api.token_name}"
    new_token = (
        f"Create a personal access token with the api scope ({settings.url}/-/user_settings/personal_access_tokens) "
        f"and set {api.token_name} to it ({what}.token_env names the variable)."
    )
    scopes: wire.TokenSelf | None = None
    try:
        scopes = wire.parse(wire.TokenSelf, api.get("/personal_access_tokens/self"), "GET /personal_access_tokens/self")
    except GitLabAuthError:
        raise
    except GitLabError as error:
        # Another kind of token (a project's, a group's, OAuth) has no such page: its scopes cannot be read here.
        if error.status not in (403, 404):
            raise
    user: wire.User | None = None
    try:
        user = wire.parse(wire.User, api.get("/user"), "GET /user")
    except GitLabAuthError:
        raise
    except GitLabError as error:
        if error.status != 403 or scopes is None:  # (a token without api or read_user may not read its user)
            raise
    who = f"@{user.username}" if user is not None else "its user"
    if scopes is None:
        detail = f"the token in {variable} works ({who}); its scopes could not be read (not a personal access token)"
        return _Token(Finding(NAME, True, detail, "Make sure it has the api scope.", warning=True), user)
    if scopes.revoked or not scopes.active:
        state = "revoked" if scopes.revoked else "no longer active"
        return _Token(Finding(NAME, False, f"the token in {variable} ({who}) is {state}", new_token), None)
    have = ", ".join(scopes.scopes) or "none"
    if not scopes.may_write_api:
        detail = f"the token in {variable} ({who}) lacks the api scope (it has: {have})"
        return _Token(Finding(NAME, False, detail, new_token), user)
    expires = f", expires {scopes.expires_at.isoformat()}" if scopes.expires_at else ""
    return _Token(Finding(NAME, True, f"the token in {variable} ({who}) has the api scope{expires}"), user)


def _project(api: Api, project: str, settings: GitLabTrackerSettings | GitLabCodeHostSettings, what: str) -> _Project:
    try:
        data: Any = api.get(f"/projects/{project_id(project)}")
    except GitLabAuthError:
        raise
    except GitLabError as error:
        if error.status not in (403, 404):
            raise
        raise GitLabError(
            f"{what}.project: {project} is not a project the token in ${api.token_name} can see on {settings.url} "
            f"({error.status})",
            status=error.status,
            fix=f'Check "project" in the {what} settings (and "url"), and that the token\'s user is a member of it.',
        ) from None
    return wire.parse(_Project, data, f"GET /projects/{project_id(project)}")


def _push(api: Api, project: str, seen: _Project, user: wire.User) -> Finding:
    fix = f"Give @{user.username} the Developer role (or higher) in {project}: beflow pushes its runs' branches."
    level = seen.access_level
    if level is None:
        try:
            answer = api.request("GET", f"/projects/{project_id(project)}/members/all/{user.id}", ok=(404,))
        except BeflowError as error:
            return Finding(NAME, False, error.message, error.fix)
        if answer.status == 404:
            return Finding(NAME, False, f"@{user.username} is no member of {project}: it may not push", fix)
        member = wire.parse(wire.Member, answer.data, "GET /projects/:id/members/all/:user_id")
        if member.state not in (None, "active"):
            return Finding(NAME, False, f"@{user.username} is {member.state} in {project}: it may not push", fix)
        level = member.access_level
    role = ROLES.get(level, f"access level {level}")
    if level < wire.DEVELOPER:
        return Finding(NAME, False, f"@{user.username} is {role} in {project}: it may not push", fix)
    return Finding(NAME, True, f"@{user.username} may push to {project} ({role})")
