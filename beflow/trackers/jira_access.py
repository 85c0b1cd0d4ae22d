"""What ``beflow doctor`` asks of Jira: whose token it is, the project, the account's permissions there
(``/mypermissions``) and whether the workflow offers the transitions ``tracker.transitions`` names."""

from __future__ import annotations

from collections.abc import Callable

from beflow.config import JiraTrackerSettings
from beflow.errors import BeflowError
from beflow.trackers import jira_wire as wire
from beflow.trackers.base import Finding
from beflow.trackers.issue import Listing, Status
from beflow.trackers.jira_api import Api, JiraError
from beflow.trackers.jira_workflow import READ_WORKFLOW, Workflow

#: Pages of issue types read at most (50 a page).
MAX_TYPE_PAGES = 10
#: What beflow does in the project, as Jira's permission keys.
NEEDED = (
    "BROWSE_PROJECTS",
    "CREATE_ISSUES",
    "EDIT_ISSUES",
    "TRANSITION_ISSUES",
    "ADD_COMMENTS",
    "EDIT_OWN_COMMENTS",
    "DELETE_OWN_COMMENTS",
)


def access_checks(
    api: Api, settings: JiraTrackerSettings, listing: Callable[[], Listing], workflow: Workflow, where: str = ""
) -> list[Finding]:
    """``where``: the place of ``tracker.issue_type`` in the configuration file (``<file>:<line>: ``)."""
    try:
        me = wire.parse(wire.User, api.get("/myself"), "GET /myself")
        project = wire.parse(wire.Project, api.get(f"/project/{settings.project}"), "GET /project")
    except BeflowError as error:
        return [Finding("jira", False, error.message, error.fix)]
    findings = [Finding("jira", True, f"{me.displayName or me.accountId} on {settings.site}, project {project.key}")]
    params = {"projectKey": settings.project, "permissions": ",".join(NEEDED)}
    try:
        held = wire.parse(wire.MyPermissions, api.get("/mypermissions", params), "GET /mypermissions")
    except BeflowError as error:
        return [*findings, Finding("jira permissions", False, error.message, error.fix)]
    missing = [key for key in NEEDED if not (held.permissions.get(key) and held.permissions[key].havePermission)]
    if missing:
        fix = f"Grant the account {', '.join(missing)} in the permission scheme of {settings.project}."
        findings.append(Finding("jira permissions", False, f"missing in {settings.project}: {', '.join(missing)}", fix))
    else:
        findings.append(Finding("jira permissions", True, f"all beflow needs in {settings.project}"))
    checks = [_issue_type(api, settings, where), claims_check(api, settings), _transitions(settings, listing, workflow)]
    return [*findings, *checks]


def claims_check(api: Api, settings: JiraTrackerSettings) -> Finding:
    """Who sees (and is told of) beflow's claim comments: everyone, or a role or group the account must be in (else
    Jira refuses its claims, or hides them from it)."""
    seen = settings.claim_visibility
    if seen is None:
        return Finding(
            "jira claims",
            True,
            "claim comments are seen by everyone who may see the issue, and each notifies its watchers",
            "Set tracker.claim_visibility to a project role or group the account is in (`beflow docs trackers`).",
            warning=True,
        )
    try:
        me = wire.parse(wire.User, api.get("/myself", {"expand": "groups"}), "GET /myself")
    except BeflowError as error:
        return Finding("jira claims", False, error.message, error.fix)
    mine = {g.name for g in (me.groups.items if me.groups else [])} | {
        g.groupId for g in (me.groups.items if me.groups else []) if g.groupId
    }
    where = f"tracker.claim_visibility: {seen.type} {seen.value!r}"
    if seen.type == "group":
        if seen.value in mine:
            return Finding("jira claims", True, f"claim comments are seen by (and notify) the group {seen.value} only")
        return Finding(
            "jira claims",
            False,
            f"{where}: the account is not in that group, so Jira would refuse its claims",
            f"Add the account to the group {seen.value} in Atlassian administration, or name a group it is in.",
        )
    return _role(api, settings, seen.value, me.accountId, mine, where)


def _role(api: Api, settings: JiraTrackerSettings, role: str, me: str, groups: set[str], where: str) -> Finding:
    """Whether the account is in project role ``role`` (reading roles needs Administer projects: else unverified)."""
    try:
        roles = api.get(f"/project/{settings.project}/role")
        found = roles.get(role) if isinstance(roles, dict) else None
        if not isinstance(found, str):
            named = ", ".join(sorted(roles)) if isinstance(roles, dict) else "none"
            return Finding(
                "jira claims",
                False,
                f"{where}: no such role in {settings.project} (it has: {named})",
                "Set tracker.claim_visibility.value to one of them.",
            )
        path = f"/project/{settings.project}/role/{found.rstrip('/').rpartition('/')[2]}"
        read = wire.parse(wire.ProjectRole, api.get(path), f"GET {path}")
    except JiraError as error:
        if error.status not in (401, 403):
            return Finding("jira claims", False, error.message, error.fix)
        return Finding(
            "jira claims",
            True,
            f"{where}: cannot verify that the account is in the role (reading roles needs Administer projects); "
            "if it is not, Jira refuses its first claim and no run starts",
            f"Check that the account is in the role {role} of {settings.project}, or use a group "
            '(`{"type": "group", ...}`), which beflow can check.',
            warning=True,
        )
    member = any(
        (a.actorUser is not None and a.actorUser.accountId == me)
        or (a.actorGroup is not None and ({a.actorGroup.name, a.actorGroup.groupId} & groups))
        for a in read.actors
    )
    if member:
        return Finding("jira claims", True, f"claim comments are seen by (and notify) the role {role} only")
    return Finding(
        "jira claims",
        False,
        f"{where}: the account is not in that role of {settings.project}, so Jira would refuse its claims",
        f"Add the account (or a group it is in) to the role {role} in {settings.project}'s people settings.",
    )


def _issue_type(api: Api, settings: JiraTrackerSettings, where: str) -> Finding:
    """``tracker.issue_type`` against the issue types the account may create in the project (createmeta)."""
    path = f"/issue/createmeta/{settings.project}/issuetypes"
    found: list[wire.IssueType] = []
    try:
        for _ in range(MAX_TYPE_PAGES):
            page = wire.parse(wire.CreateMetaPage, api.get(path, {"startAt": len(found), "maxResults": 50}), path)
            found += page.issueTypes
            if not page.issueTypes or len(found) >= page.total:
                break
    except BeflowError as error:
        return Finding("jira issue type", False, error.message, error.fix)
    names = [t.name for t in found if not t.subtask]
    if settings.issue_type in names:
        return Finding("jira issue type", True, f"beflow files {settings.issue_type} issues in {settings.project}")
    close = [n for n in names if n.lower() == settings.issue_type.lower()]
    offered = ", ".join(names) or "none"
    return Finding(
        "jira issue type",
        False,
        f"{where}tracker.issue_type: {settings.issue_type!r} is not an issue type the account may create in "
        f"{settings.project} (it may create: {offered})",
        f'Set tracker.issue_type to "{close[0]}" (Jira spells it so).'
        if close
        else "Set tracker.issue_type to one of them (its default is Task).",
    )


def _transitions(settings: JiraTrackerSettings, listing: Callable[[], Listing], workflow: Workflow) -> Finding:
    """The configured transitions against the project's workflows; when the account cannot read them, which could
    not be verified, checked against what it can see: the project's statuses, and a ready issue's transitions."""
    try:
        found = workflow.verify()
    except BeflowError as error:
        return Finding("jira transitions", False, error.message, error.fix)
    if found.missing:
        return Finding(
            "jira transitions",
            False,
            "; ".join(found.missing),
            "Set tracker.transitions to the workflow's transition (or status) names, or add them to the workflow.",
        )
    if found.unread is None:
        flows = ", ".join(f"{name} ({', '.join(kinds)})" for name, kinds in found.read.items())
        names = ", ".join(f"{s} ({n})" for s, n in workflow.configured())
        return Finding("jira transitions", True, f"{names} in every workflow of {settings.project}: {flows}")
    return _as_seen(settings, listing, workflow, found.unread, found.unverified, found.statuses_seen)


def _as_seen(
    settings: JiraTrackerSettings,
    listing: Callable[[], Listing],
    workflow: Workflow,
    why: str,
    unverified: list[str],
    statuses: list[str],
) -> Finding:
    """What an account that cannot read the workflows can check: a ready issue's transitions now."""
    grant = (
        f"Grant the account {READ_WORKFLOW} in {settings.project}'s permission scheme so that beflow can check the "
        "workflow before any run (until then each claim asks the issue's own transitions before writing anything)."
    )
    try:
        sample = next((i for i in listing().issues if i.status in (Status.READY, Status.OPEN)), None)
        offered = workflow.transitions(sample.key) if sample is not None else []
    except BeflowError as error:
        return Finding("jira transitions", False, error.message, error.fix)
    start = settings.transitions.in_progress
    names = {n.lower() for t in offered for n in (t.name, t.to.name)}
    if sample is not None and start.lower() not in names:
        shown = ", ".join(t.name for t in offered) or "none"
        return Finding(
            "jira transitions",
            False,
            f"{sample.key}'s workflow offers {shown}; missing: in_progress ({start})",
            "Set tracker.transitions to the workflow's transition names, or add them in Jira.",
        )
    said = [f"cannot read {settings.project}'s workflows ({why})"]
    if unverified:
        said.append(f"not verified: {', '.join(unverified)}")
    if statuses:
        said.append(f"statuses of the project (the transitions into them not verified): {', '.join(statuses)}")
    if sample is not None:
        said.append(f"{sample.key} offers in_progress ({start})")
    return Finding("jira transitions", True, "; ".join(said), grant, warning=True)
