"""Landing on GitLab (:class:`~beflow.codehosts.base.Lands`): a merge request's approvals and the latest pipeline of
its head as GitLab gives them, and the merge that names the head it was read at (``PUT .../merge`` with ``sha``:
GitLab answers 409 when the source branch moved since), removing the source branch.

GitLab's project setting decides between a merge commit and a fast-forward; ``after_review.method: "squash"`` asks
for a squash, the other methods take the project's.
"""

from __future__ import annotations

from collections.abc import Callable

from beflow.codehosts.base import Landing
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import Api, GitLabError
from beflow.trackers.gitlab_notes import Members

#: A pipeline in one of these has not finished (``manual``: it waits for a person to start a job).
PENDING = frozenset({"created", "waiting_for_resource", "preparing", "pending", "running", "scheduled", "manual"})


class GitLabLanding:
    """One project's merge requests as landing reads and merges them (``members``: who counts, as for feedback;
    ``open_mr``: the code host's own merge request of a branch, never a fork's)."""

    def __init__(
        self, api: Api, base: str, members: Members, open_mr: Callable[[str], wire.MergeRequest | None]
    ) -> None:
        self.api = api
        self._base = base
        self.members = members
        self._open_mr = open_mr

    def landing(self, branch: str) -> Landing | None:
        mr = self._open_mr(branch)
        if mr is None or not mr.sha:
            return None
        failing: tuple[str, ...] = ()
        pending: tuple[str, ...] = ()
        passed: tuple[str, ...] = ()
        path = f"{self._base}/pipelines"
        latest = self.api.get(path, {"sha": mr.sha, "order_by": "id", "sort": "desc", "per_page": 1})
        pipelines = wire.parse_list(wire.Pipeline, latest, f"GET {path}")
        if pipelines:
            name = f"pipeline {pipelines[0].id}"
            status = pipelines[0].status
            if status == "success":
                passed = (name,)
            elif status in PENDING:
                pending = (name,)
            else:
                failing = (f"{name} ({status})",)  # failed, canceled, skipped: none is a pass
        return Landing(
            number=mr.iid,
            branch=branch,
            head=mr.sha,
            url=mr.web_url or f"merge request !{mr.iid}",
            draft=mr.draft,
            approved_by=tuple(self._approvers(mr.iid)),
            failing=failing,
            pending=pending,
            passed=passed,
        )

    def _approvers(self, iid: int) -> list[str]:
        """The approvers who count: members who may push (or ``feedback.allow``), never beflow's own token user."""
        path = f"{self._base}/merge_requests/{iid}/approvals"
        approvals = wire.parse(wire.Approvals, self.api.get(path), f"GET {path}")
        me = self.members.me().id
        found: list[str] = []
        for approver in approvals.approved_by:
            user = approver.user
            if user.id == me:
                continue
            member = self.members.member(user.id)
            if user.username.lower() in self.members.allow or (member is not None and member.may_push):
                found.append(user.username)
        return sorted(found)

    def land(self, landing: Landing, method: str) -> bool:
        path = f"{self._base}/merge_requests/{landing.number}/merge"
        body = {"sha": landing.head, "squash": method == "squash", "should_remove_source_branch": True}
        try:
            self.api.request("PUT", path, json=body)
        except GitLabError as error:
            if error.status in (405, 406, 409, 422):  # not mergeable now, or the head moved (409): not merged
                return False
            raise
        return True
