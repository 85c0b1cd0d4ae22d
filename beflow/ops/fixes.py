"""CI fix rounds (docs/rounds.md#failed-checks): a failed check on beflow's pull request starts a round at most
``feedback.max_fix_rounds`` times; then the issue is flagged ``needs-human`` with one comment saying why, and its
failed checks start no round until a person removes the flag.

What was spent is beflow's own record: the rounds whose records answered a check (one per round number, retries
included), since the issue was last flagged (the flag's comment, a trusted one: a stranger's copy of its words
gives no round back). A restart reads the same records and comments, so it resets nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from beflow.feedback import Feedback, Ignored
from beflow.records.record import RunRecord
from beflow.trackers import Issue, Tracker
from beflow.trackers.base import FlagsIssues

#: The flag an issue gets once its fix rounds are spent (``beflow:needs-human`` on GitHub and GitLab).
NEEDS_HUMAN = "needs-human"
#: The start of the comment that says so (the latest trusted one is where the count starts again).
STOPPED = "beflow stops fixing the failed checks"


def is_check(piece: Feedback) -> bool:
    return piece.kind == "check"


def flagged_since(issue: Issue) -> dt.datetime | None:
    """When the issue was last flagged: its latest trusted comment that says so (None: never)."""
    times = [c.created for c in issue.comments if c.text.startswith(STOPPED) and c.withheld is None]
    return max(times, default=None)


def spent(records: Iterable[RunRecord], since: dt.datetime | None) -> int:
    """The fix rounds the issue had since ``since``: the round numbers whose runs answered a failed check."""
    return len(
        {
            r.round
            for r in records
            if r.round > 0 and any(c.kind == "check" for c in r.feedback) and (since is None or r.started_at > since)
        }
    )


def is_flagged(tracker: Tracker, issue: Issue) -> bool:
    """Whether a person is asked to look: the flag's label, or (a tracker without flags) the comment alone."""
    if isinstance(tracker, FlagsIssues):
        return tracker.flag_label(NEEDS_HUMAN) in issue.labels
    return flagged_since(issue) is not None


def hold(
    tracker: Tracker, key: str, pieces: list[Feedback], records: list[RunRecord], most: int, counted: int = 0
) -> tuple[list[Feedback], list[Ignored], str | None]:
    """The pieces a round may answer, the failed checks held back and why, and what was said on the issue when this
    call flagged it (blocking: the issue is read only when a failed check is among ``pieces``). ``counted``: the
    fix rounds spent since the flag as a fleet's workflow counted them (its records are spread over machines)."""
    checks = [piece for piece in pieces if is_check(piece)]
    if not checks:
        return pieces, [], None
    issue = tracker.get(key)
    said: str | None = None
    if is_flagged(tracker, issue):
        why = f"the issue is flagged {NEEDS_HUMAN}: a person removes the flag to let failed checks start rounds again"
    elif max(spent(records, flagged_since(issue)), counted) < most:
        return pieces, [], None
    else:
        why = f"the issue had its {most} fix round(s) for failed checks (feedback.max_fix_rounds)"
        names = ", ".join(sorted({piece.author for piece in checks}))
        said = (
            f"{STOPPED}: it had its {most} fix round(s) (feedback.max_fix_rounds) and the checks still fail "
            f"({names}). A person should look"
        )
        if isinstance(tracker, FlagsIssues):
            said += f"; removing the label {tracker.flag_label(NEEDS_HUMAN)} lets beflow try again"
            tracker.flag(key, NEEDS_HUMAN, said + ".")
        else:
            tracker.comment(key, said + ".", author="beflow")
    held = [Ignored(id=piece.id, author=piece.author, why=why) for piece in checks]
    return [piece for piece in pieces if not is_check(piece)], held, said
