"""The decisions of a run's lifecycle, as pure functions: how a run ended, where its issue goes, and whether and
when ``beflow watch`` tries again. No I/O here: each is tested by a table (tests/run/test_policy.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from beflow.agent import acpx, acpx_command, agents
from beflow.config import Config, Watch
from beflow.records.record import DONE_OUTCOMES, Outcome, Question, RunRecord
from beflow.system.proc import Completed
from beflow.trackers import Status

#: Outcomes ``beflow watch`` retries (unless the failure is permanent: ``over_budget`` always is).
FAILURES: frozenset[str] = frozenset({"failed", "timeout", "stalled", "over_budget"})


@dataclass(frozen=True)
class Verdict:
    """How an agent session ended, why, and whether any retry could change that."""

    outcome: Outcome
    reason: str
    permanent: bool = False


def judge(
    result: Completed,
    transcript: acpx.Transcript,
    config: Config,
    stderr_tail: Sequence[str] = (),
    *,
    key: str | None = None,
    run_id: str | None = None,
) -> Verdict:
    """The outcome of an unattended session, from acpx's exit code (0 ok, 1 error, 3 timeout, 5 permission denied)
    and what the transcript says (the prompt's stop reason, the agent's or acpx's error), with the agent's own
    account of a failure and its fix (:func:`beflow.agent.agents.diagnose`). ``stderr_tail``: acpx's error output
    (secrets masked; with ``--verbose``, the agent's stderr too), for a failure nothing else explains. ``key`` and
    ``run_id`` let a fix name the commands that run the issue again and show the run."""
    seen = transcript
    if result.timed_out or result.returncode == acpx_command.ACPX_TIMEOUT or seen.acpx_code == "TIMEOUT":
        limit = f"within {config.timeout:g} s" if config.timeout is not None else "in time (acpx said so)"
        return Verdict("timeout", f"the agent did not finish {limit}")
    if seen.stop_reason == "cancelled":
        return Verdict("cancelled", "the agent's turn was cancelled")
    if result.returncode == 0 and seen.stop_reason is not None and seen.error is None:
        if seen.stop_reason == "refusal":
            return Verdict("failed", "the agent refused the task")
        return Verdict("succeeded", f"the agent finished ({seen.stop_reason})")
    stderr = "\n".join(stderr_tail)
    failure = agents.diagnose(seen, config, returncode=result.returncode, stderr=stderr, run_id=run_id)
    if failure is not None and failure.permanent:
        # No retry can log in or install an agent (or start one acpx does not know): a watch gives up at once.
        again = f"run it again (`beflow --auto {key}`)" if key else "run the issue again"
        return Verdict("failed", failure.reason().replace("run the issue again", again), permanent=True)
    if seen.error:
        return Verdict("failed", f"the agent reported an error: {agents.one_line(seen.error)}")
    if result.returncode == acpx_command.ACPX_PERMISSION_DENIED:
        mode = config.permission_policy.mode
        return Verdict("failed", f"the agent was denied a permission it asked for (permissions: {mode})")
    if failure is not None:
        return Verdict("failed", failure.reason())
    lines = agents.agent_lines(stderr)[-3:]
    detail = agents.one_line(" / ".join(lines)) if lines else "no error output"
    return Verdict("failed", f"the agent stopped before finishing its turn (acpx {result.describe()}; {detail})")


def asked(question: Question) -> Verdict:
    """A turn that ended after its agent asked a question (``issue.ask``): it waits for a person's answer."""
    first = agents.one_line(question.text)
    return Verdict("asked", f"the agent asked a question and waits for a person's answer: {first}")


def judge_attended(returncode: int | None, describe: str, config: Config) -> Verdict:
    """The outcome of an attended session: acpx's exit code alone (its output went to the terminal)."""
    if returncode == 0:
        return Verdict("succeeded", "the agent finished (acpx exit 0)")
    if returncode == acpx_command.ACPX_TIMEOUT:
        return Verdict("timeout", "acpx reported a timeout")
    if returncode == acpx_command.ACPX_PERMISSION_DENIED:
        # The person said no at the prompt (or attend.permissions did): their decision, not a failure of the run.
        permissions = config.attend.permissions
        why = f"the agent finished; a permission it asked for was denied (attend.permissions: {permissions})"
        return Verdict("succeeded", why)
    return Verdict("failed", f"acpx {describe} (its output went to the terminal: attended runs keep no transcript)")


# -- where the issue goes -----------------------------------------------------------------------------------------


def status_after(outcome: Outcome, *, retry: bool = False) -> Status:
    """Where an unattended run leaves its issue: ``review`` when it finished, ``blocked`` when its agent asked a
    question, ``ready`` when cancelled or to be retried, else ``failed``."""
    if outcome in DONE_OUTCOMES:
        return Status.REVIEW
    if outcome == "asked":
        return Status.BLOCKED
    if outcome == "cancelled" or retry:
        return Status.READY
    return Status.FAILED


def status_after_supervised(outcome: Outcome, before: Status, *, mode: str) -> Status:
    """Where ``--attend`` or ``--open`` leaves its issue. A person was there: a session that did not finish leaves
    the issue where it was (an ``open`` issue does not join the queue of unattended runs because someone tried it
    by hand). ``--open`` knows only the client's exit code: it goes to ``review`` when the client succeeded."""
    if mode == "open":
        return Status.REVIEW if outcome == "succeeded" else before
    return status_after(outcome) if outcome in DONE_OUTCOMES else before


def give_up_note(note: str | None, attempt: int, *, permanent: bool) -> str | None:
    """The comment of a watch run that fails for good: the run's summary and why beflow stops trying."""
    if note is None:
        return None
    why = "it cannot succeed as configured" if permanent else f"{attempt} attempt(s)"
    return f"{note}\n\nbeflow gives up on this issue: {why}."


# -- retries ------------------------------------------------------------------------------------------------------


def backoff_delay(attempt: int, base: float, ceiling: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: ``base`` doubling per failed attempt, at most ``ceiling``."""
    return float(min(base * (2 ** max(0, attempt - 1)), ceiling))


@dataclass(frozen=True)
class Next:
    """What ``beflow watch`` does with an issue after a run: ``done`` (it finished), ``retry`` attempt
    ``attempt`` after ``delay`` seconds, ``give_up`` (``reason`` says why), or ``nothing`` (cancelled)."""

    action: str
    attempt: int = 0
    delay: float = 0.0
    reason: str = ""


def after_run(outcome: Outcome, attempt: int, *, permanent: bool, reason: str, watch: Watch) -> Next:
    """The next step for an issue whose run (attempt ``attempt``) ended with ``outcome``."""
    if outcome in DONE_OUTCOMES:
        return Next("done")
    if outcome not in FAILURES:
        return Next("nothing")
    if permanent:
        return Next("give_up", reason=f"not retried: {reason}")
    if attempt < watch.max_attempts:
        return Next("retry", attempt + 1, backoff_delay(attempt, watch.backoff, watch.backoff_max))
    return Next("give_up", reason=f"gave up after {attempt} attempts")


def is_final(attempt: int, watch: Watch) -> bool:
    """Whether attempt ``attempt`` is the last: its failure is the last word (``failed`` on the tracker)."""
    return attempt >= watch.max_attempts


@dataclass(frozen=True)
class Recalled:
    """Where an issue's series of attempts stands, taken up from its latest run record."""

    attempts: int
    #: The next attempt and when it is due (seconds since the epoch), when a retry is pending.
    retry: tuple[int, float] | None = None


def recall(latest: RunRecord | None, watch: Watch) -> Recalled:
    """A restarted watcher, another watcher or ``--once`` from cron goes on counting where the last run stopped.

    ``latest`` is the issue's newest run record that is neither running nor cancelled. A run that gave up (its
    last attempt) and an issue that is ready again: a person reopened it, and it gets a fresh series.
    """
    if latest is None or latest.mode != "watch" or latest.outcome not in FAILURES:
        return Recalled(0)
    if latest.attempt >= watch.max_attempts:
        return Recalled(0)
    if latest.finished_at is None:
        return Recalled(latest.attempt)
    due = latest.finished_at.timestamp() + backoff_delay(latest.attempt, watch.backoff, watch.backoff_max)
    return Recalled(latest.attempt, (latest.attempt + 1, due))
