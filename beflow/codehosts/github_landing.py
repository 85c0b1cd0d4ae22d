"""Landing on GitHub (:class:`~beflow.codehosts.base.Lands`): a pull request's approvals and its head's checks as
GitHub gives them, and the merge that names the head it was read at (``PUT /pulls/{n}/merge`` with ``sha``: GitHub
answers 409 when the branch moved since), then the branch deleted."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from beflow.codehosts.base import Landing
from beflow.codehosts.github_checks import FAILED_STATUSES
from beflow.trackers import github_wire as wire
from beflow.trackers.github_api import Api, GitHubError
from beflow.trackers.github_comments import Authors

#: Check run conclusions that pass (GitHub's own rule for required checks).
PASSED_CHECKS = frozenset({"success", "neutral", "skipped"})
#: The most reviews and check runs read of one pull request (pages of 100).
MAX_PAGES = 10


class GitHubLanding:
    """One repository's pull requests as landing reads and merges them (``authors``: who counts, as for feedback)."""

    def __init__(self, api: Api, repo: str, authors: Authors) -> None:
        self.api = api
        self.authors = authors
        self._base = f"/repos/{repo}"
        self._owner = repo.split("/")[0]

    def _list(self, path: str, params: dict[str, Any] | None = None) -> list[Any]:
        items: list[Any] = []
        for page in range(1, MAX_PAGES + 1):
            data = self.api.request("GET", path, params={"per_page": 100, "page": page, **(params or {})}).data
            batch = data if isinstance(data, list) else (data or {}).get("check_runs") or []
            items += batch
            if len(batch) < 100:
                break
        return items

    def landing(self, branch: str) -> Landing | None:
        path = f"{self._base}/pulls"
        found = self.api.get(path, {"head": f"{self._owner}:{branch}", "state": "open"})
        pulls = wire.parse_list(wire.Pull, found, f"GET {path}")
        if not pulls or pulls[0].head is None or not pulls[0].head.sha:
            return None
        pull, head = pulls[0], pulls[0].head.sha
        approved, changes = self._reviews(pull.number)
        failing, pending, passed = self._checks(head)
        return Landing(
            number=pull.number,
            branch=branch,
            head=head,
            url=pull.html_url,
            draft=bool(pull.draft),
            approved_by=tuple(approved),
            changes_requested_by=tuple(changes),
            failing=tuple(failing),
            pending=tuple(pending),
            passed=tuple(passed),
        )

    def _reviews(self, number: int) -> tuple[list[str], list[str]]:
        """Who approves and who asks for changes: each trusted reviewer's latest deciding review (a comment-only
        review changes nothing, as on GitHub's page); beflow's own token user and strangers never count."""
        path = f"{self._base}/pulls/{number}/reviews"
        reviews, _ = wire.read_each(wire.Review, self._list(path), f"GET {path}")
        latest: dict[str, str] = {}
        for review in reviews:  # oldest first
            state = (review.state or "").upper()
            if state in ("APPROVED", "CHANGES_REQUESTED", "DISMISSED") and self.authors.why_not(review) is None:
                latest[review.login.lower()] = state
        approved = sorted(login for login, state in latest.items() if state == "APPROVED")
        changes = sorted(login for login, state in latest.items() if state == "CHANGES_REQUESTED")
        return approved, changes

    def _checks(self, sha: str) -> tuple[list[str], list[str], list[str]]:
        """The head's check runs and commit statuses that failed, those not finished, and those that passed."""
        failing: list[str] = []
        pending: list[str] = []
        passed: list[str] = []
        path = f"{self._base}/commits/{sha}/check-runs"
        runs, unread = wire.read_each(wire.CheckRun, self._list(path), f"GET {path}")
        failing += [f"a check run GitHub gave in a shape of its own ({item.why})" for item in unread]
        for run in runs:
            name = run.name or f"check run {run.id}"
            if run.status != "completed" or run.conclusion is None:
                pending.append(name)
            elif run.conclusion not in PASSED_CHECKS:
                failing.append(name)  # (failed, timed out, cancelled, action required, stale: none is a pass)
            else:
                passed.append(name)
        path = f"{self._base}/commits/{sha}/status"
        combined = wire.parse(wire.CombinedStatus, self.api.get(path, {"per_page": 100}) or {}, f"GET {path}")
        for status in combined.statuses or []:
            name = status.context or "status"
            if status.state in FAILED_STATUSES:
                failing.append(name)
            elif status.state != "success":
                pending.append(name)
            else:
                passed.append(name)
        return failing, pending, passed

    def land(self, landing: Landing, method: str) -> bool:
        path = f"{self._base}/pulls/{landing.number}/merge"
        try:
            self.api.request("PUT", path, json={"sha": landing.head, "merge_method": method})
        except GitHubError as error:
            if error.status in (405, 409, 422):  # not mergeable now, or the head moved (409): not merged
                return False
            raise
        ref_path = f"{self._base}/git/refs/heads/{quote(landing.branch, safe='/')}"
        self.api.request("DELETE", ref_path, ok=(404, 422))  # (gone already: deleted by GitHub or a person)
        return True
