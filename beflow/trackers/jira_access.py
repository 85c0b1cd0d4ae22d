"""What ``beflow doctor`` asks of Jira: whose token it is, the project, the account's permissions there
(``/mypermissions``) and whether the workflow offers the transitions ``tracker.transitions`` names."""

from __future__ import annotations

from collections.abc import Callable

from beflow.config import JiraTrackerSettings
from beflow.errors import BeflowError
from beflow.trackers import jira_wire as wire
from beflow.trackers.base import Finding
from beflow.trackers.issue import Listing, Status
from beflow.trackers.jira_api import Api
from beflow.trackers.jira_workflow import Workflow

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
    api: Api, settings: JiraTrackerSettings, listing: Callable[[], Listing], workflow: Workflow
) -> list[Finding]:
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
    return [*findings, _transitions(settings, listing, workflow)]


def _transitions(settings: JiraTrackerSettings, listing: Callable[[], Listing], workflow: Workflow) -> Finding:
    """The transitions, as the workflow of a ready issue of beflow's offers them (none: nothing to ask yet)."""
    moves = settings.transitions
    try:
        sample = next((i for i in listing().issues if i.status in (Status.READY, Status.OPEN)), None)
        if sample is None:
            return Finding("jira transitions", True, "no ready issue to ask the workflow with yet", warning=True)
        offered = workflow.transitions(sample.key)
    except BeflowError as error:
        return Finding("jira transitions", False, error.message, error.fix)
    names = {n.lower() for t in offered for n in (t.name, t.to.name)}
    missing = [f"in_progress ({moves.in_progress})"] if moves.in_progress.lower() not in names else []
    shown = ", ".join(t.name for t in offered) or "none"
    if missing:
        return Finding(
            "jira transitions",
            False,
            f"{sample.key}'s workflow offers {shown}; missing: {', '.join(missing)}",
            "Set tracker.transitions to the workflow's transition names, or add them in Jira.",
        )
    return Finding("jira transitions", True, f"{sample.key}'s workflow offers {shown}")
