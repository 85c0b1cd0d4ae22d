"""beflow's statuses in a Jira project's workflow: a status's category (To Do, In Progress, Done) and beflow's labels
under ``status_prefix`` for what Jira has no category for, read and written; moves take the workflow's transitions
named in ``tracker.transitions`` (by the transition's name, or the name of the status it goes to), else any into the
category a status needs.

The transitions are checked against the workflow itself before any run (:meth:`Workflow.verify`): the workflows of
the project's issue types, read with ``POST /workflows`` — which needs the account to hold *View (read-only)
workflow* or *Administer projects* in the project. An account without either is told which transitions could not be
verified, and what it can see (the project's statuses) is checked instead; each claim still asks the issue's own
transitions before anything is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from beflow.config import JiraTrackerSettings
from beflow.errors import BeflowError, ConfigError
from beflow.trackers import jira_wire as wire
from beflow.trackers.issue import Status
from beflow.trackers.jira_api import Api, JiraError

#: What the account needs to read the project's workflows, as people find it in a permission scheme.
READ_WORKFLOW = "View (read-only) workflow (VIEW_READONLY_WORKFLOW) or Administer projects"

#: The categories of Jira's statuses.
NEW, STARTED, FINISHED = "new", "indeterminate", "done"


class JiraWorkflowError(ConfigError):
    """The issue's workflow has no transition beflow needs (``tracker.transitions``): no run starts."""

    code = "jira_workflow"


@dataclass
class Verified:
    """The configured transitions against the project's workflows: ``missing`` (each ``setting (name)`` with the
    workflow lacking it), and, when the workflows could not be read, why and which settings stayed unverified."""

    missing: list[str] = field(default_factory=list)
    #: The workflows read, by name, with the issue types that use them.
    read: dict[str, list[str]] = field(default_factory=dict)
    #: Why the workflows could not be read (None: they were).
    unread: str | None = None
    unverified: list[str] = field(default_factory=list)
    #: Settings whose name is a status of the project (what an account that cannot read workflows sees).
    statuses_seen: list[str] = field(default_factory=list)


class Workflow:
    def __init__(self, api: Api, settings: JiraTrackerSettings) -> None:
        self.api = api
        self.settings = settings
        self._verified: Verified | None = None

    def configured(self) -> list[tuple[str, str]]:
        """The transitions beflow takes by name: (setting, name)."""
        moves = self.settings.transitions
        named = [("in_progress", moves.in_progress), ("review", moves.review), ("done", moves.done)]
        return [(setting, name) for setting, name in named if name is not None]

    def verify(self) -> Verified:
        """Every configured transition against the workflow of each issue type of the project (sub-tasks aside)."""
        key = self.settings.project
        project = wire.parse(wire.Project, self.api.get(f"/project/{key}"), "GET /project")
        path = f"/project/{key}/statuses"
        types = [t for t in wire.parse_list(wire.IssueTypeStatuses, self.api.get(path), f"GET {path}") if not t.subtask]
        found = Verified()
        offered: dict[str, set[str]] = {}
        for kind in types:
            pair = {"projectId": project.id, "issueTypeId": kind.id}
            try:
                answer = self.api.request("POST", "/workflows", json={"projectAndIssueTypes": [pair]}, retry=True)
                read = wire.parse(wire.WorkflowRead, answer.data, "POST /workflows")
            except wire.MalformedAnswer as error:  # (an answer that does not read blocks no run: each claim checks)
                found.unread = error.message
                break
            except JiraError as error:
                if error.status not in (400, 403, 404):
                    raise
                found.unread = error.message
                break
            names = {s.statusReference: s.name for s in read.statuses}
            for flow in read.workflows:
                found.read.setdefault(flow.name or flow.id, []).append(kind.name)
                offered.setdefault(flow.name or flow.id, set()).update(
                    n.lower()
                    for t in flow.transitions
                    if t.type != "INITIAL"
                    for n in (t.name, names.get(t.toStatusReference, ""))
                    if n
                )
        if found.unread is not None or not offered:
            found.unread = found.unread or f"Jira showed no workflow of {key}'s issue types"
            statuses = {s.name.lower() for t in types for s in t.statuses}
            for setting, name in self.configured():
                shown = f"{setting} ({name})"
                (found.statuses_seen if name.lower() in statuses else found.unverified).append(shown)
            return found
        for name, taken in offered.items():
            lacking = [f"{s} ({n})" for s, n in self.configured() if n.lower() not in taken]
            if lacking:
                kinds = ", ".join(found.read[name])
                found.missing.append(f"workflow {name!r} ({kinds}) lacks {', '.join(lacking)}")
        return found

    def check_setup(self) -> None:
        """:class:`JiraWorkflowError` naming every configured transition a workflow of the project lacks, before any
        run starts (a workflow that has them all is asked once; one that cannot be read is left to each claim)."""
        if self._verified is not None:
            return
        try:
            found = self.verify()
        except ConfigError:
            raise
        except BeflowError:
            return  # (Jira unreachable, or an odd answer: asked again before the next run; each claim checks too)
        if found.missing:
            raise JiraWorkflowError(
                f"Jira project {self.settings.project}: {'; '.join(found.missing)}",
                fix="Set tracker.transitions to the workflow's transition (or status) names, or add the transitions "
                "to the workflow in Jira; `beflow doctor` lists what is missing.",
            )
        self._verified = found

    def status_of(self, raw: wire.Issue) -> Status:
        """beflow's status of an issue: its status's category, and beflow's labels for what Jira has none for."""
        prefix = self.settings.status_prefix
        flags = {label[len(prefix) :] for label in raw.fields.labels if label.startswith(prefix)}
        category = raw.fields.status.statusCategory.key
        if category == FINISHED:
            return Status.CLOSED if "closed" in flags else Status.DONE
        if "failed" in flags:
            return Status.FAILED
        if "review" in flags:
            return Status.REVIEW
        if category == STARTED:
            return Status.IN_PROGRESS
        return Status.OPEN if "open" in flags else Status.READY

    def transitions(self, key: str) -> list[wire.Transition]:
        """The transitions the workflow offers issue ``key`` now."""
        path = f"/issue/{key}/transitions"
        return [t for t in wire.parse(wire.Transitions, self.api.get(path), f"GET {path}").transitions if t.isAvailable]

    def check_start(self, raw: wire.Issue) -> None:
        """:class:`JiraWorkflowError` when a ready issue's workflow offers no ``in_progress`` transition: a run is
        refused before anything is written."""
        if self.status_of(raw) != Status.READY:
            return
        self._find(raw, self.transitions(raw.key), self.settings.transitions.in_progress, "in_progress")

    def _find(self, raw: wire.Issue, found: list[wire.Transition], named: str, setting: str) -> wire.Transition:
        chosen = next((t for t in found if named.lower() in (t.name.lower(), t.to.name.lower())), None)
        if chosen is None:
            offered = ", ".join(t.name for t in found) or "none"
            raise JiraWorkflowError(
                f"issue {raw.key}: its workflow offers no transition {named!r} from {raw.fields.status.name!r} "
                f"(it offers: {offered})",
                fix=f"Set tracker.transitions.{setting} to one of them, or add the transition to the project's "
                "workflow in Jira (`beflow doctor` lists what is missing).",
            )
        return chosen

    def _transition(self, raw: wire.Issue, named: str | None, category: str | None, setting: str) -> None:
        """Take the transition ``named``, else any into ``category``; a named one the workflow lacks is
        :class:`JiraWorkflowError`; a category none leads to is left as it is."""
        found = self.transitions(raw.key)
        if named is not None:
            chosen: wire.Transition | None = self._find(raw, found, named, setting)
        else:
            chosen = next((t for t in found if t.to.statusCategory.key == category), None)
        if chosen is None or (chosen.to.id and chosen.to.id == raw.fields.status.id):
            return
        self.api.request("POST", f"/issue/{raw.key}/transitions", json={"transition": {"id": chosen.id}})

    def move(self, raw: wire.Issue, status: Status) -> None:
        """Move the issue to ``status``: its transition, then beflow's labels."""
        prefix = self.settings.status_prefix
        flags = {f"{prefix}{name}" for name in ("open", "review", "failed", "closed")}
        keep: set[str] = set()
        category = raw.fields.status.statusCategory.key
        moves = self.settings.transitions
        if status == Status.IN_PROGRESS:
            self._transition(raw, moves.in_progress, None, "in_progress")
        elif status == Status.REVIEW:
            if moves.review is not None:
                self._transition(raw, moves.review, None, "review")
            keep = {f"{prefix}review"}
        elif status == Status.DONE:
            self._transition(raw, moves.done, None, "done")
        elif status == Status.CLOSED:
            if category != FINISHED:
                self._transition(raw, None, FINISHED, "done")
            keep = {f"{prefix}closed"}
        elif category != NEW:  # ready, open, failed: back to a To Do status
            self._transition(raw, None, NEW, "in_progress")
        if status in (Status.OPEN, Status.FAILED):
            keep = {f"{prefix}{status.value}"}
        present = set(raw.fields.labels)
        changes = [{"remove": label} for label in sorted((flags - keep) & present)]
        changes += [{"add": label} for label in sorted(keep - present)]
        if changes:
            self.api.request("PUT", f"/issue/{raw.key}", json={"update": {"labels": changes}})
