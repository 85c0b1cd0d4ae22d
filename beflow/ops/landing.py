"""Landing (docs/rounds.md#landing, opt-in ``after_review.merge: "approved-and-green"``): an issue in review whose
pull request trusted people approved and whose every check passed is merged by beflow, its issue moved to done and
its branch deleted.

The code host reads and merges (:class:`~beflow.codehosts.base.Lands`); what may land is decided here, from what it
read: never with a failing or pending check, never on beflow's own approval (the host never counts its token's
user), never while someone trusted asks for changes, never a head no check passed on, and never a head other than
the one whose checks were read (the merge names it, and the host refuses a moved one).
"""

from __future__ import annotations

from beflow.codehosts.base import CodeHost, Landing, Lands
from beflow.config import AfterReview
from beflow.repository import refs
from beflow.trackers import Status, Tracker

#: The start of the note an issue gets as beflow lands its pull request.
LANDED = "beflow merged the pull request"


def blocker(landing: Landing, settings: AfterReview) -> str | None:
    """Why ``landing`` may not be merged now (None: it may)."""
    if landing.draft:
        return "the pull request is a draft"
    if landing.failing:
        return f"checks failed: {', '.join(landing.failing)}"
    if landing.pending:
        return f"checks have not finished: {', '.join(landing.pending)}"
    if not landing.passed:
        return "no check ran on its head yet"  # (a head pushed a moment ago: its checks may not have started)
    if landing.changes_requested_by:
        return f"changes were requested by {', '.join(landing.changes_requested_by)}"
    if len(landing.approved_by) < settings.approvals:
        return f"{len(landing.approved_by)} of {settings.approvals} approval(s) from people with write access"
    return None


def land(tracker: Tracker, code_host: CodeHost | None, key: str, settings: AfterReview) -> str | None:
    """Land issue ``key``'s pull request if it may be (blocking); what was done, said for an event (None: nothing,
    it is not ready or there is nothing to land)."""
    if settings.merge is None or not isinstance(code_host, Lands):
        return None
    found = code_host.landing(refs.branch_for(key))
    if found is None or blocker(found, settings) is not None:
        return None
    if not code_host.land(found, settings.method):
        return None  # its head moved since its checks were read, or the host would not: the next look decides again
    approvers = ", ".join(found.approved_by)
    said = f"{LANDED} ({settings.method}, approved by {approvers}, every check passed): {found.url}"
    tracker.set_status(key, Status.DONE, note=said + ".")
    return said
