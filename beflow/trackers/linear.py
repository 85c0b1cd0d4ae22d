"""The Linear tracker: the issues of one Linear team, through its GraphQL API (docs/trackers.md).

- **Which issues**: the team's (``tracker.team``), in ``tracker.project`` when given, carrying every label of
  ``tracker.labels`` (default ``beflow``, in any case).
- **Keys** are Linear's identifiers (``ENG-123``); what beflow keeps of an issue beyond a run (its claims) is keyed by
  the issue's stable id, which a move to another team does not change.
- **Status** is the workflow state's type, and labels under ``tracker.status_prefix`` for what Linear has no state
  for (:mod:`beflow.trackers.linear_workflow`). **Priority** is Linear's: urgent first, low, then no priority; then
  age.
- **Comments** beflow writes are each posted once (ids of beflow's choosing); a run keeps one progress comment that it
  edits in place, and its end is said once (:mod:`beflow.trackers.linear_comments`). An agent's words are made inert
  for Linear (:mod:`beflow.trackers.linear_quoting`).
- **Claims** are generation comments with ids of beflow's choosing, which Linear creates once
  (:mod:`beflow.trackers.linear_claims`, the tracker's claim store).
- **Polling** is cheap: the team's active issues are held in memory, and each look asks Linear only what changed since
  the last one (``BeflowChanged``: ids and times, a few points), reading in full only the issues that did; an idle
  watch costs one request a poll (:mod:`beflow.trackers.linear_issues`).
"""

from __future__ import annotations

import os
import re
import uuid
from contextlib import AbstractContextManager
from typing import Any

from beflow.config import LinearTrackerSettings, Project
from beflow.errors import NotFoundError, UsageError, excerpt
from beflow.feedback import Feedback, Gathered
from beflow.records.record import Answer, Question
from beflow.trackers import linear_queries as q
from beflow.trackers import linear_quoting
from beflow.trackers import linear_wire as wire
from beflow.trackers.base import Finding, RateBudget
from beflow.trackers.blockers import Blocker
from beflow.trackers.claims import Claim, ClaimInfo, ClaimsOver, ClaimStore, orphans_of, ready_of
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    Comment,
    Issue,
    Listing,
    Status,
    check_transition,
    draft_comment,
    draft_issue,
    normalize_key,
)
from beflow.trackers.linear_access import access_checks
from beflow.trackers.linear_api import Api, LinearAuthError, LinearError
from beflow.trackers.linear_claims import LinearLeases, is_claim
from beflow.trackers.linear_comments import IssueComments
from beflow.trackers.linear_feedback import answer_in_sessions, gather_prompts
from beflow.trackers.linear_identity import Identity
from beflow.trackers.linear_issues import SHAPE_FIX, TeamIssues, comment_of
from beflow.trackers.linear_sessions import LinearSession, open_session
from beflow.trackers.linear_workflow import Workflow
from beflow.trackers.wire import Wire

_IDENTIFIER = re.compile(r"^[A-Za-z][A-Za-z0-9_]*-[0-9]+$")


def linear_key(key: str) -> str:
    """A key as people type it (``eng-123``, `` ENG-123``) as Linear's identifier (``ENG-123``)."""
    cleaned = normalize_key(key)
    return cleaned.upper() if _IDENTIFIER.match(cleaned) else cleaned


def resolve_token(settings: LinearTrackerSettings) -> str:
    """The personal API key or OAuth token in ``$token_env``; a clear error naming it when it is not set."""
    token = os.environ.get(settings.token_env, "").strip()
    if token:
        return token
    raise LinearAuthError(
        f"tracker: no Linear token: ${settings.token_env} is not set",
        fix=f"export {settings.token_env}=<a personal API key (Linear: Settings > Security & access) or an OAuth "
        "token>; tracker.token_env names another variable.",
    )


def open_linear(project: Project, settings: LinearTrackerSettings, claims: ClaimsOver | None = None) -> LinearTracker:
    """The Linear tracker of ``settings``; ``claims``: the engine's store over its leases (beflow.app)."""
    api = Api(settings.api_url, resolve_token(settings), token_name=settings.token_env)
    return LinearTracker(settings, api, project, claims=claims)


class _IssueAnswer(Wire):
    issue: Any


class _CommentsPage(Wire):
    comments: wire.Connection[wire.Comment]


class _CommentsAnswer(Wire):
    issue: _CommentsPage


class _IssueMade(Wire):
    success: bool
    issue: wire.Issue


class _CreateAnswer(Wire):
    issueCreate: _IssueMade


class _BlockersAnswer(Wire):
    issue: wire.Relations


#: beflow's status of a blocking issue, from its state's type alone (it may be another team's, with other labels).
_BLOCKER_STATUS = {"completed": Status.DONE, "canceled": Status.CLOSED, "started": Status.IN_PROGRESS}


class LinearTracker:
    """Issues of one Linear team (see the module's description)."""

    def __init__(
        self,
        settings: LinearTrackerSettings,
        api: Api,
        project: Project | None = None,
        *,
        claims: ClaimsOver | None = None,
    ) -> None:
        self.settings = settings
        self.api = api
        self.project = project
        where = f"team {settings.team}" + (f", project {settings.project}" if settings.project else "")
        self.description = f"Linear issues of {where} labelled {', '.join(settings.labels) or '(any)'}"
        self.identity = f"linear:{settings.team}" + (f"/{settings.project}" if settings.project else "")
        self.labels_home = f"the Linear team {settings.team}"
        #: The team's workflow states and labels, and beflow's statuses in them.
        self.workflow = Workflow(api, settings)
        #: Generation comments (beflow.trackers.linear_claims): the tracker's own claims, kept by the issues' ids.
        self.leases = LinearLeases(settings, api, self._id_of)
        #: Who runs which issue: the leases, or the engine's store over them (a fleet's running workflows).
        self.claims: ClaimStore = claims(self.identity, self.leases) if claims else self.leases
        self.comments = IssueComments(api, self.leases)
        #: Who beflow is in Linear (the token's user), asked once.
        self.me = Identity(api)
        #: The team's issues that are beflow's, as last read (beflow.trackers.linear_issues).
        self.issues = TeamIssues(api, settings, self.workflow, self.leases, self.me)

    def reading_once(self) -> AbstractContextManager[None]:
        """Every question of the block is answered from one look at Linear (a watch tick)."""
        return self.issues.reading_once()

    @property
    def unreadable(self) -> dict[str, str]:
        """The issues the last look could not read, and why: they are skipped until fixed."""
        return self.issues.unreadable

    # -- reading -----------------------------------------------------------------------------------------------------

    def listing(self, status: Status | None = None, label: str | None = None) -> Listing:
        if status in (Status.DONE, Status.CLOSED) or status is None:
            types = {Status.DONE: ["completed"], Status.CLOSED: ["canceled"]}.get(status) if status else None
            flt = q.issue_filter(
                self.settings.team,
                project=self.settings.project,
                labels=self.settings.labels,
                state_types=types or (),
                handed=True,
            )
            read = self.issues.fetch(flt)
            self.issues.take(read)
            raws = [r for r in read if isinstance(r, wire.Issue) and self.issues.mine(r)]
        else:
            self.issues.look()
            raws = list(self.issues.active.values())
        issues = self.issues.readable(raws)
        chosen = [i for i in issues if (status is None or i.status == status) and (label is None or label in i.labels)]
        return Listing(issues=sorted(chosen, key=_by_key), problems=list(self.issues.problems.values()))

    def ready(self) -> list[Issue]:
        self.issues.look()
        candidates = self.issues.readable(list(self.issues.active.values()))
        return ready_of(candidates, self.claims)

    def orphaned(self) -> list[Issue]:
        self.issues.look()
        candidates = self.issues.readable(list(self.issues.active.values()))
        return orphans_of(candidates, self.claims)

    def _raw(self, key: str, comments: bool = False, *, mine: bool = True) -> tuple[wire.Issue, list[wire.Comment]]:
        """Issue ``key`` as Linear gives it (and its comments, oldest first, without beflow's claims); ``mine``: a
        :class:`NotFoundError` when it is not beflow's."""
        wanted = linear_key(key)
        if not _IDENTIFIER.match(wanted) and not _is_uuid(wanted):
            shown = excerpt(key, quote=False)
            raise NotFoundError(
                f"no issue {shown} in the Linear team {self.settings.team}: Linear's issues are identifiers such as "
                f"{self.settings.team}-123",
                fix="beflow issues list",
            )
        try:
            data = self.api.query(q.ISSUE_WITH_COMMENTS, {"id": wanted, "first": q.PAGE if comments else 0})
        except LinearError as error:
            if wire.INVALID_INPUT in error.codes or "ENTITY_NOT_FOUND" in error.codes:
                raise NotFoundError(
                    f"no issue {wanted} in Linear", fix="`beflow issues list` shows every issue."
                ) from None
            raise
        got = wire.read(wire.IssueWithComments, wire.parse(_IssueAnswer, data, "BeflowIssue").issue)
        if isinstance(got, wire.Unread):
            raise self.issues.problem(got.id or wanted, got.identifier or wanted, got.why, SHAPE_FIX)
        self.issues.ids[got.identifier] = got.id
        self.issues.ids[wanted] = got.id
        if mine and not self.issues.mine(got):
            labels = ", ".join(self.settings.labels)
            raise NotFoundError(
                f"issue {wanted} is not beflow's: it is not in the team {self.settings.team}"
                + (f" and project {self.settings.project}" if self.settings.project else "")
                + f" with the label(s) {labels}",
                fix=f"Add the label(s) {labels} in Linear to hand it to beflow.",
            )
        found = list(got.comments.nodes)
        after = got.comments.pageInfo.endCursor if comments and got.comments.pageInfo.hasNextPage else None
        while after:
            variables = {"id": got.id, "first": q.PAGE, "after": after}
            page = wire.parse(_CommentsAnswer, self.api.query(q.COMMENTS, variables), "BeflowComments").issue
            found.extend(page.comments.nodes)
            after = page.comments.pageInfo.endCursor if page.comments.pageInfo.hasNextPage else None
        conversation = sorted((c for c in found if not is_claim(got.id, c)), key=lambda c: c.createdAt)
        return got, conversation

    def get(self, key: str, *, mine: bool = True) -> Issue:
        raw, comments = self._raw(key, comments=True, mine=mine)
        return self.issues.issue(raw, [c for c in (comment_of(c) for c in comments) if c is not None])

    def _id_of(self, key: str) -> str:
        """The stable id of issue ``key`` (read when not known yet)."""
        wanted = linear_key(key)
        return self.issues.ids.get(wanted) or self._raw(wanted)[0].id

    def blockers(self, issue: Issue) -> list[Blocker]:
        """The issues ``issue`` is blocked by: the ``blocks`` relations that point at it. One request, asked only of
        an issue about to be dispatched (the listings stay as cheap as they were)."""
        variables = {"id": issue.id or linear_key(issue.key), "first": q.PAGE}
        found = wire.parse(_BlockersAnswer, self.api.query(q.BLOCKERS, variables), "BeflowBlockers")
        return [
            Blocker(r.issue.identifier, _BLOCKER_STATUS.get(r.issue.state.type, Status.OPEN))
            for r in found.issue.inverseRelations.nodes
            if r.type == "blocks"
        ]

    # -- writing -----------------------------------------------------------------------------------------------------

    def create(
        self,
        title: str,
        body: str = "",
        labels: list[str] | None = None,
        priority: int = DEFAULT_PRIORITY,
        status: Status = Status.READY,
    ) -> Issue:
        draft = draft_issue(title, body, labels, priority, status)  # the same checks as every tracker
        team = self.workflow.team()
        names = list(dict.fromkeys([*self.settings.labels, *draft.labels]))
        payload: dict[str, Any] = {
            "id": str(uuid.uuid4()),  # a retry after a lost answer is refused, never a second issue
            "teamId": team.id,
            "title": draft.title,
            "description": draft.body,
            "priority": _linear_priority(priority),
        }
        if self.settings.project is not None:
            project = next(
                (
                    r.project.id
                    for r in self.issues.active.values()
                    if r.project and r.project.name == self.settings.project
                ),
                None,
            )
            if project is None:
                raise UsageError(
                    f"beflow files issues in the project {self.settings.project} once it has seen one of its issues",
                    fix="File the first one in Linear, or run `beflow issues list` first.",
                )
            payload["projectId"] = project
        state = self.workflow.first(*self.settings.ready_states)
        if status == Status.OPEN:
            held_back = [t for t in ("backlog", "unstarted", "triage") if t not in self.settings.ready_states]
            state = self.workflow.first(*held_back)
            if state is None:
                names.append(self.workflow.label(Status.OPEN) or "")
        if state is not None:
            payload["stateId"] = state.id
        payload["labelIds"] = [self.workflow.label_id(name) for name in names if name]
        try:
            data = self.api.mutate(q.ISSUE_CREATE, {"input": payload}, retry=True)
            made = wire.parse(_CreateAnswer, data, "BeflowIssueCreate").issueCreate.issue
        except LinearError as error:
            if wire.INVALID_INPUT not in error.codes:
                raise
            made = self._raw(payload["id"])[0]  # refused because the first try made it
        self.issues.take([made])
        return self.issues.issue(made)

    def comment(self, key: str, text: str, author: str) -> Comment:
        draft_comment(text, author)
        raw, _ = self._raw(key)
        with self.claims.under_lease(raw.identifier):
            posted = self.comments.post(raw.id, text)
        made = comment_of(posted)
        assert made is not None
        return made

    def set_status(self, key: str, status: Status, note: str | None = None, author: str = "beflow") -> Issue:
        status = Status(status)
        raw, _ = self._raw(key)
        names = self.workflow.names(raw)
        current = self.workflow.status_of(raw, names)
        check_transition(raw.identifier, current, status)
        with self.claims.under_lease(raw.identifier):  # a run's moves and comments, only while the issue is its own
            if current != status:
                update = self.workflow.move(raw, names, status, delegated=self.issues.delegated(raw))
                if status == Status.IN_PROGRESS:  # the claim is won: beflow is the one working it, as Linear shows
                    update |= self.me.take(raw)
                if update:
                    self.api.mutate(q.ISSUE_UPDATE, {"id": raw.id, "input": update}, retry=True)
            if note and note.strip():
                self.comments.note(raw.identifier, raw.id, current, status, note)
            elif status == Status.IN_PROGRESS and current != status:
                self.comments.start_progress(raw.identifier, raw.id, "beflow is working on this issue.")
        # As it is now, even if it stopped being beflow's meanwhile (a person took the label away).
        return self.get(raw.identifier, mine=False)

    def progress(self, key: str, text: str, *, force: bool = False) -> bool:
        """Edit the run's progress comment (at most every ``PROGRESS_EVERY`` seconds); whether it was edited."""
        return self.comments.progress(linear_key(key), text, force=force)

    def agent_session(self, key: str) -> LinearSession | None:
        """A new agent session on the issue for a run, when the token is an app's (None with a person's)."""
        if not self.me.is_app:
            return None
        return open_session(self.api, self._id_of(key), self.me.viewer().viewer.id)

    # -- feedback (beflow.feedback.FeedbackSource: a person's follow-up in an agent session) ------------------------

    def gather(self, key: str, branch: str) -> Gathered:
        """The follow-up messages the workspace's members sent beflow's agent sessions on issue ``key``
        (:mod:`beflow.trackers.linear_feedback`); none with a person's token, which has no sessions (no request)."""
        if not self.me.is_app:
            return Gathered()
        return gather_prompts(self.api, self._id_of(key), self.me.viewer().viewer.id)

    def reply(self, piece: Feedback, body: str) -> None:
        """Nothing: a prompt is answered by the round's own run, which reports in an agent session of the issue."""

    # -- answers (beflow.trackers.base.HearsAnswers: a reply to the run's elicitation) -----------------------------

    def answer_of(self, key: str, question: Question, run_id: str) -> Answer | None:
        """A member's reply in beflow's agent session to the elicitation the run ``run_id`` ended with (its agent's
        question); none with a person's token, which has no sessions (no request): a comment answers there."""
        if not self.me.is_app or question.asked is None:
            return None
        return answer_in_sessions(self.api, self._id_of(key), self.me.viewer().viewer.id, question.asked, run_id)

    def ensure_labels(self) -> list[str]:
        """Make the labels beflow needs that the team lacks; the names made."""
        return self.workflow.ensure()

    def missing_labels(self) -> list[str]:
        return self.workflow.missing()

    def access_checks(self) -> list[Finding]:
        """Whose token beflow holds, whether it may open agent sessions, and the team's states (``beflow doctor``)."""
        return access_checks(self.api, self.settings, self.workflow)

    def rate_budget(self) -> RateBudget:
        stats = self.api.stats
        return RateBudget(stats.remaining, stats.reset, stats.rate_limited)

    # -- claims: generation comments (beflow.trackers.linear_claims) -------------------------------------------------

    def claim(self, key: str, owner: str) -> Claim:
        raw, _ = self._raw(key)
        return self.claims.claim(raw.identifier, owner)

    def holder(self, key: str) -> ClaimInfo | None:
        return self.claims.holder(linear_key(key))

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.claims.last_holder(linear_key(key))

    # -- words -------------------------------------------------------------------------------------------------------

    def inert(self, text: str) -> str:
        """Quoted so that Linear acts on nothing in it: no mention, no issue linked, no magic word moving an issue."""
        return linear_quoting.inert(text)

    def pull_request_inert(self, text: str) -> str:
        """Linear's code-host integration reads a pull request's title and body for ``Fixes ENG-1``: every
        identifier in the agent's words is broken, its quoted message included."""
        return linear_quoting.keys_inert(text)

    def held_secrets(self) -> list[str]:
        """The token this tracker calls Linear with."""
        return [self.api.token] if self.api.token else []


def _linear_priority(priority: int) -> int:
    """beflow's priority (lower first) as Linear's: 0 and 1 urgent, 2 high, 3 normal, 4 low; beyond, and the
    default of an issue nobody gave one, no priority."""
    if priority == DEFAULT_PRIORITY or priority > 4:
        return wire.NO_PRIORITY
    return max(priority, wire.URGENT)


def _is_uuid(text: str) -> bool:
    try:
        return str(uuid.UUID(text)) == text.lower()
    except ValueError:
        return False


def _by_key(issue: Issue) -> tuple[str, int, str]:
    team, _, number = issue.key.rpartition("-")
    return (team, int(number) if number.isdigit() else 0, issue.key)
