"""What Linear says beflow may do with its token (``beflow doctor``): whose token it is — a person's personal API key
or OAuth token, or an app user's (an OAuth app installed with ``actor=app``, the only kind Linear lets open agent
sessions) — in which workspace, and the team with the states beflow moves its issues to."""

from __future__ import annotations

from beflow.config import LinearTrackerSettings
from beflow.errors import BeflowError
from beflow.trackers import linear_queries as q
from beflow.trackers import linear_wire as wire
from beflow.trackers.base import Finding
from beflow.trackers.linear_api import Api
from beflow.trackers.linear_workflow import Workflow


def token_kind(token: str) -> str:
    """``personal API key`` or ``OAuth token``, as Linear tells them (and as beflow sends them)."""
    return "personal API key" if token.startswith("lin_api_") else "OAuth token"


def access_checks(api: Api, settings: LinearTrackerSettings, workflow: Workflow) -> list[Finding]:
    """Whose token beflow holds and what it can do; the team and its states."""
    try:
        viewer = wire.parse(wire.Viewer, api.query(q.VIEWER), "BeflowViewer")
    except BeflowError as error:
        return [Finding("linear", False, error.message, error.fix)]
    who = viewer.viewer
    kind = token_kind(api.token)
    if viewer.is_app:
        detail = (
            f"an {kind} of the app user {who.name} in the workspace {viewer.organization.urlKey}: it may open agent "
            "sessions"
        )
        findings = [Finding("linear", True, detail)]
    else:
        detail = (
            f"a {kind} of {who.name} in the workspace {viewer.organization.urlKey}: beflow works issues as "
            f"{who.name}; agent sessions need an OAuth app's token (actor=app)"
        )
        findings = [Finding("linear", True, detail)]
    try:
        team = workflow.team()
    except BeflowError as error:
        return [*findings, Finding("linear team", False, error.message, error.fix)]
    started = workflow.first("started", but=(review.id if (review := workflow.review_state()) else None))
    ready = workflow.first(*settings.ready_states)
    names = {
        "in progress": started.name if started else None,
        "review": review.name if review else f"{settings.status_prefix}review (no review state)",
        "ready": ready.name if ready else None,
        "done": (done.name if (done := workflow.first("completed")) else None),
        "closed": (closed.name if (closed := workflow.first("canceled")) else None),
    }
    missing = [status for status, name in names.items() if name is None]
    shown = ", ".join(f"{status}: {name}" for status, name in names.items() if name is not None)
    detail = f"{team.key} ({team.name or team.key}): {shown}"
    if missing:
        fix = f"Add a workflow state for {', '.join(missing)} to the team {team.key} in Linear, or set ready_states."
        return [*findings, Finding("linear team", False, detail + f"; no state for {', '.join(missing)}", fix)]
    return [*findings, Finding("linear team", True, detail)]
