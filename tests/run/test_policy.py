"""The lifecycle's decisions, each a pure function, each tested by a table."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from beflow.agent import acpx
from beflow.config import Config, Watch
from beflow.records.record import Question, RunRecord
from beflow.run.policy import (
    Next,
    Recalled,
    after_run,
    asked,
    backoff_delay,
    give_up_note,
    judge,
    judge_attended,
    recall,
    status_after,
    status_after_supervised,
)
from beflow.system.proc import Completed
from beflow.trackers import Status

CONFIG = Config.model_validate({"agent": "codex", "timeout": 60, "permissions": "approve-reads"})
WATCH = Watch(max_attempts=3, backoff=10, backoff_max=300)


def transcript(*messages: dict[str, object]) -> acpx.Transcript:
    seen = acpx.Transcript()
    for message in messages:
        seen.feed(json.dumps(message))
    return seen


PROMPT = {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"prompt": []}}


def stopped(reason: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": reason}}


def acpx_error(message: str, **data: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": message, "data": data}}


MISSING = acpx_error("spawn codex ENOENT", detailCode="AGENT_SPAWN_ENOENT")
DISCONNECTED = acpx_error("agent disconnected", detailCode="AGENT_DISCONNECTED")
AGENT_ERROR = {"jsonrpc": "2.0", "id": 2, "error": {"code": -32603, "message": "model overloaded"}}


@pytest.mark.parametrize(
    ("code", "timed_out", "messages", "outcome", "reason", "permanent"),
    [
        (0, False, [PROMPT, stopped("end_turn")], "succeeded", "the agent finished (end_turn)", False),
        (0, False, [PROMPT, stopped("max_tokens")], "succeeded", "the agent finished (max_tokens)", False),
        (0, False, [PROMPT, stopped("refusal")], "failed", "the agent refused the task", False),
        (0, False, [PROMPT, stopped("cancelled")], "cancelled", "the agent's turn was cancelled", False),
        (None, True, [PROMPT], "timeout", "the agent did not finish within 60 s", False),
        (3, False, [PROMPT], "timeout", "the agent did not finish within 60 s", False),
        (1, False, [acpx_error("timed out", acpxCode="TIMEOUT")], "timeout", "within 60 s", False),
        (1, False, [PROMPT, AGENT_ERROR], "failed", "the agent reported an error: model overloaded", False),
        (5, False, [PROMPT], "failed", "denied a permission it asked for (permissions: approve-reads)", False),
        (
            1,
            False,
            [acpx_error("spawn codex ENOENT", detailCode="AGENT_SPAWN_ENOENT")],
            "failed",
            "the agent codex could not be started: spawn codex ENOENT. Fix: ",
            True,
        ),
        (
            1,
            False,
            [acpx_error("agent disconnected", detailCode="AGENT_DISCONNECTED")],
            "failed",
            "acpx: agent disconnected",
            False,
        ),
        (1, False, [PROMPT], "failed", "the agent codex exited in the middle of its turn (acpx exit 1): bang", False),
        (0, False, [PROMPT], "failed", "stopped before finishing its turn (acpx exit 0; boom / bang)", False),
    ],
)
def test_judge(
    code: int | None,
    timed_out: bool,
    messages: list[dict[str, object]],
    outcome: str,
    reason: str,
    permanent: bool,
) -> None:
    result = Completed(argv=["acpx"], returncode=code, timed_out=timed_out)

    verdict = judge(result, transcript(*messages), CONFIG, ["boom", "bang"])

    assert (verdict.outcome, verdict.permanent) == (outcome, permanent)
    assert reason in verdict.reason


def test_judge_without_error_output_says_so() -> None:
    verdict = judge(Completed(argv=["acpx"], returncode=1), acpx.Transcript(), CONFIG)
    assert verdict.reason.startswith("the agent codex exited before its turn began (acpx exit 1) (it said nothing")


AUTH_REQUIRED = [
    {"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": "/w", "mcpServers": []}},
    {"jsonrpc": "2.0", "id": 1, "error": {"code": -32000, "message": "Authentication required"}},
]


@pytest.mark.parametrize(
    ("messages", "stderr", "reason", "permanent"),
    [
        (
            AUTH_REQUIRED,
            [],
            "the agent codex is not logged in: Authentication required (its answer to session/new)",
            True,
        ),
        ([acpx_error("Authentication required", detailCode="AUTH_REQUIRED")], [], "is not logged in", True),
        (
            [
                acpx_error(
                    "ACP agent exited before initialize completed (exit=3, signal=null): no model configured",
                    detailCode="AGENT_STARTUP_FAILED",
                )
            ],
            [],
            "the agent codex exited before it started (exit 3): no model configured",
            False,
        ),
        (
            [PROMPT],
            ["[acpx] spawning agent: codex-acp", "panic: out of memory", "[acpx] done"],
            "exited in the middle of its turn (acpx exit 1): panic: out of memory",
            False,
        ),
    ],
)
def test_judge_says_the_agents_own_cause_in_one_line_with_a_fix(
    messages: list[dict[str, object]], stderr: list[str], reason: str, permanent: bool
) -> None:
    verdict = judge(
        Completed(argv=["acpx"], returncode=1), transcript(*messages), CONFIG, stderr, key="7", run_id="r-1"
    )

    assert verdict.outcome == "failed" and verdict.permanent == permanent
    assert reason in verdict.reason and "\n" not in verdict.reason
    assert ". Fix: " in verdict.reason
    if permanent:
        assert verdict.reason.endswith("then run it again (`beflow --auto 7`)")
    else:
        assert verdict.reason.split(". Fix: ")[1].strip()


@pytest.mark.parametrize(
    ("code", "outcome", "reason"),
    [
        (0, "succeeded", "the agent finished (acpx exit 0)"),
        (3, "timeout", "acpx reported a timeout"),
        (5, "succeeded", "a permission it asked for was denied (attend.permissions: approve-reads)"),
        (1, "failed", "acpx exit 1 (its output went to the terminal"),
        (-15, "failed", "acpx killed by SIGTERM"),
    ],
)
def test_judge_attended(code: int, outcome: str, reason: str) -> None:
    describe = Completed(argv=["acpx"], returncode=code).describe()
    verdict = judge_attended(code, describe, CONFIG)
    assert verdict.outcome == outcome and reason in verdict.reason and not verdict.permanent


@pytest.mark.parametrize(
    ("outcome", "retry", "status"),
    [
        ("succeeded", False, Status.REVIEW),
        ("no_changes", True, Status.REVIEW),
        ("cancelled", False, Status.READY),
        ("failed", True, Status.READY),
        ("timeout", True, Status.READY),
        ("failed", False, Status.FAILED),
        ("timeout", False, Status.FAILED),
        ("stalled", True, Status.READY),
        ("stalled", False, Status.FAILED),
        ("over_budget", False, Status.FAILED),
        ("asked", False, Status.BLOCKED),  # its agent asked: it waits for a person's answer
        ("asked", True, Status.BLOCKED),  # (not put back in the queue: a retry would ask again)
    ],
)
def test_status_after_an_unattended_run(outcome: str, retry: bool, status: Status) -> None:
    assert status_after(outcome, retry=retry) == status  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "outcome", "before", "status"),
    [
        ("attend", "succeeded", Status.OPEN, Status.REVIEW),
        ("attend", "no_changes", Status.OPEN, Status.REVIEW),
        ("attend", "failed", Status.OPEN, Status.OPEN),
        ("attend", "cancelled", Status.READY, Status.READY),
        ("attend", "timeout", Status.FAILED, Status.FAILED),
        ("open", "succeeded", Status.OPEN, Status.REVIEW),
        ("open", "no_changes", Status.OPEN, Status.OPEN),  # the client exited 0 but changed nothing
        ("open", "failed", Status.READY, Status.READY),
    ],
)
def test_status_after_a_supervised_session(mode: str, outcome: str, before: Status, status: Status) -> None:
    assert status_after_supervised(outcome, before, mode=mode) == status  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("note", "attempt", "permanent", "expected"),
    [
        ("summary", 3, False, "summary\n\nbeflow gives up on this issue: 3 attempt(s)."),
        ("summary", 1, True, "summary\n\nbeflow gives up on this issue: it cannot succeed as configured."),
        (None, 3, False, None),  # after_run.comment is off: no comment at all
    ],
)
def test_give_up_note(note: str | None, attempt: int, permanent: bool, expected: str | None) -> None:
    assert give_up_note(note, attempt, permanent=permanent) == expected


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [(1, 10.0), (2, 20.0), (3, 40.0), (4, 80.0), (5, 160.0), (6, 300.0), (40, 300.0)],
)
def test_backoff_doubles_from_the_base_after_each_failed_attempt_up_to_the_ceiling(
    attempt: int, expected: float
) -> None:
    assert backoff_delay(attempt, base=10, ceiling=300) == expected


def test_backoff_never_exceeds_a_ceiling_below_the_base() -> None:
    assert backoff_delay(1, base=10, ceiling=3) == 3.0
    assert backoff_delay(0, base=10, ceiling=300) == 10.0  # no attempt yet: the base


def test_a_question_ends_the_turn_as_asked_naming_it_on_one_line() -> None:
    verdict = asked(Question(text="Keep the old API\n  or remove it?"))
    assert (verdict.outcome, verdict.permanent) == ("asked", False)
    assert verdict.reason.endswith("waits for a person's answer: Keep the old API or remove it?")


@pytest.mark.parametrize(
    ("outcome", "attempt", "permanent", "expected"),
    [
        ("succeeded", 1, False, Next("done")),
        ("no_changes", 3, False, Next("done")),
        ("cancelled", 1, False, Next("nothing")),
        ("failed", 1, False, Next("retry", 2, 10.0)),
        ("timeout", 2, False, Next("retry", 3, 20.0)),
        ("failed", 3, False, Next("give_up", reason="gave up after 3 attempts")),
        ("failed", 1, True, Next("give_up", reason="not retried: boom")),
        ("timeout", 2, True, Next("give_up", reason="not retried: boom")),
        ("stalled", 1, False, Next("retry", 2, 10.0)),  # a stall is not permanent: retried like a failure
        ("stalled", 3, False, Next("give_up", reason="gave up after 3 attempts")),
        ("over_budget", 1, True, Next("give_up", reason="not retried: boom")),  # a budget is permanent
        ("asked", 3, False, Next("nothing")),  # a question spends no attempt and is no failure: no retry
    ],
)
def test_after_run(outcome: str, attempt: int, permanent: bool, expected: Next) -> None:
    assert after_run(outcome, attempt, permanent=permanent, reason="boom", watch=WATCH) == expected  # type: ignore[arg-type]


FINISHED = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def latest(outcome: str, attempt: int, mode: str = "watch", finished: dt.datetime | None = FINISHED) -> RunRecord:
    return RunRecord.model_validate(
        {
            "id": "r",
            "issue": "1",
            "mode": mode,
            "agent": "codex",
            "attempt": attempt,
            "started_at": FINISHED,
            "finished_at": finished,
            "outcome": outcome,
        }
    )


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        (None, Recalled(0)),  # never run
        (latest("succeeded", 2), Recalled(0)),  # finished: a fresh round if it is ready again
        (latest("failed", 1, mode="auto"), Recalled(0)),  # --auto runs do not count towards watch's attempts
        (latest("failed", 3), Recalled(0)),  # gave up, and a person made it ready again
        (latest("failed", 1), Recalled(1, (2, FINISHED.timestamp() + 10))),
        (latest("timeout", 2), Recalled(2, (3, FINISHED.timestamp() + 20))),
        (latest("failed", 2, finished=None), Recalled(2)),
    ],
)
def test_recall(record: RunRecord | None, expected: Recalled) -> None:
    assert recall(record, WATCH) == expected
