"""``beflow watch``: the command, its JSON event stream, its exit codes, several watchers, signals."""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from beflow.cli.watch import render
from beflow.events import WATCH_EVENTS, WatchEvent
from beflow.mcp.journal import journal_dir
from beflow.paths import ACPXRC
from beflow.records.record import RunRecord
from beflow.trackers import Issue, Status
from beflow.trackers.local import LocalTracker
from beflow.watch.lanes import Running, Snapshot
from beflow.watch.retries import Backoff
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

FAST = {"interval": 0.1, "concurrency": 2, "max_attempts": 2, "backoff": 0.1, "backoff_max": 1}

#: Every event ``--json`` streams (docs/modes.md documents each: tests/test_events.py).
EVENTS = WATCH_EVENTS


def events_of(stdout: str) -> list[dict[str, Any]]:
    """The ``--json`` stream: every line one JSON object with an event name, an issue (or null) and a time."""
    events = [json.loads(line) for line in stdout.splitlines()]
    for event in events:
        assert event["event"] in EVENTS
        assert "issue" in event and isinstance(event["time"], float)
    return events


def wait_for(path: Path, timeout: float = 60) -> None:
    eventually(path.exists, f"{path} appeared", timeout)


# -- --once and --json ------------------------------------------------------------------------------------------


def test_once_with_nothing_ready_exits_0_quietly(auto_project: AutoProject, beflow) -> None:
    auto_project.new_issue("write one.txt 1", status=Status.OPEN)

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 0
    assert events_of(result.stdout) == []
    assert auto_project.records() == []


def test_once_on_a_terminal_with_nothing_ready_says_so_with_the_issues_by_status(
    auto_project: AutoProject, beflow
) -> None:
    """Without `--json`, a `--once` that started nothing says why instead of printing nothing."""
    empty = beflow("watch", "--once")
    auto_project.new_issue("write one.txt 1", status=Status.OPEN)
    auto_project.new_issue("write two.txt 2", status=Status.OPEN)
    closed = auto_project.new_issue("write three.txt 3", status=Status.OPEN)
    auto_project.tracker.set_status(closed, Status.CLOSED)
    some = beflow("watch", "--once")

    assert (empty.exit_code, empty.stdout, some.exit_code, some.stdout) == (0, "", 0, "")
    assert empty.stderr == (
        'nothing ready: there are no issues yet (`beflow issues new "TITLE"` files one, ready for runs)\n'
    )
    assert some.stderr == ("nothing ready: 2 open, 1 closed (`beflow issues set-status KEY ready` makes one ready)\n")
    assert auto_project.records() == []


def test_once_on_a_terminal_with_a_ready_issue_backing_off_says_when_it_is_due(
    auto_project: AutoProject, beflow
) -> None:
    auto_project.configure(watch={**FAST, "backoff": 3600, "backoff_max": 3600})
    auto_project.new_issue("fail nope")
    assert beflow("watch", "--once", "--json").exit_code == 1

    waiting = beflow("watch", "--once")

    assert waiting.exit_code == 0
    assert re.fullmatch(
        r"nothing started: 1 ready; 1 backing off after a failed run, the next due at \d\d:\d\d:\d\d\n",
        waiting.stderr,
    ), waiting.stderr


def test_once_held_back_by_the_configuration_exits_2_and_changes_nothing(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(agent="claud")
    key = auto_project.new_issue("write a.txt x")

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 2
    assert "agent: 'claud' is not an agent acpx knows" in result.stderr
    assert auto_project.records() == []
    assert auto_project.issue(key).status.value == "ready"


def test_once_with_nothing_ready_still_reports_a_configuration_every_run_would_fail_on(
    auto_project: AutoProject, beflow
) -> None:
    auto_project.configure(agent="claud")
    auto_project.new_issue("write one.txt 1", status=Status.OPEN)

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 2
    assert "agent: 'claud' is not an agent acpx knows" in result.stderr


def test_once_with_nothing_ready_opens_no_repository(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Opening the repository with git is for a run about to start: an idle `--once` (cron) stays cheap."""
    auto_project.new_issue("write one.txt 1", status=Status.OPEN)
    monkeypatch.setattr("beflow.repository.git._repository", lambda: pytest.fail("the repository was opened"))

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 0, result.stderr


def test_once_with_nothing_ready_outside_a_repository_says_so(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    auto_project.new_issue("write one.txt 1", status=Status.OPEN)
    monkeypatch.setattr("beflow.run.preflight.git_toplevel", lambda *a, **k: None)

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 2
    assert "is not inside a git repository" in result.stderr


def test_once_runs_what_is_ready_and_exits_0_when_every_run_succeeded(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(watch=FAST)
    key = auto_project.new_issue("write one.txt 1")

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 0, result.stderr
    events = events_of(result.stdout)
    assert [(e["event"], e["issue"]) for e in events] == [("dispatched", key), ("finished", key)]
    dispatched, finished = events
    assert dispatched["attempt"] == 1
    record = auto_project.only_record()
    assert finished["run"] == record.id and finished["outcome"] == "succeeded"
    assert record.mode == "watch"
    assert auto_project.branch_files(f"beflow/{key}")["one.txt"] == "1"
    assert auto_project.issue(key).status == Status.REVIEW


def test_once_exits_1_when_a_run_failed_and_does_not_wait_for_its_retry(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(watch=FAST)
    good = auto_project.new_issue("write one.txt 1", priority=1)
    bad = auto_project.new_issue("fail nope", priority=2)

    result = beflow("watch", "--once", "--json")

    assert result.exit_code == 1
    events = events_of(result.stdout)
    assert [e["issue"] for e in events if e["event"] == "dispatched"] == [good, bad]  # by priority
    outcomes = {e["issue"]: e["outcome"] for e in events if e["event"] == "finished"}
    assert outcomes == {good: "succeeded", bad: "failed"}
    (retry,) = [e for e in events if e["event"] == "retry_scheduled"]
    assert (retry["issue"], retry["attempt"], retry["delay"]) == (bad, 2, 0.1)
    assert len(auto_project.records(bad)) == 1  # one tick: the retry is for the next watch
    assert auto_project.issue(bad).status == Status.READY


def test_once_from_cron_goes_on_counting_attempts_and_honours_the_backoff(auto_project: AutoProject, beflow) -> None:
    """Each `beflow watch --once` is a new process: the attempt count and the backoff come from the run records."""
    auto_project.configure(watch={**FAST, "backoff": 3600, "backoff_max": 3600})
    key = auto_project.new_issue("fail nope")

    assert beflow("watch", "--once", "--json").exit_code == 1
    waiting = beflow("watch", "--once", "--json")  # within the backoff: nothing to do
    assert (waiting.exit_code, events_of(waiting.stdout)) == (0, [])

    auto_project.configure(watch={**FAST, "backoff": 0.1})
    time.sleep(0.2)  # the retry is due now
    last = beflow("watch", "--once", "--json")
    assert last.exit_code == 1
    events = events_of(last.stdout)
    assert [(e["event"], e.get("attempt")) for e in events][:1] == [("dispatched", 2)]
    assert events[-1]["event"] == "failed" and events[-1]["reason"] == "gave up after 2 attempts"
    assert [r.attempt for r in auto_project.records(key)] == [2, 1]
    assert auto_project.issue(key).status == Status.FAILED


def test_once_still_cancels_a_run_whose_issue_is_closed(
    auto_project: AutoProject, beflow_process, tmp_path: Path
) -> None:
    auto_project.configure(watch=FAST)
    marks = tmp_path / "marks.log"
    key = auto_project.new_issue("sleep 60", f"mark {marks}")

    process = beflow_process("watch", "--once", "--json", cwd=auto_project.directory)
    wait_for(marks)
    auto_project.tracker.set_status(key, Status.CLOSED, author="someone")
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 1, stderr
    assert [e["event"] for e in events_of(stdout)] == ["dispatched", "cancelled", "finished"]
    assert auto_project.only_record().outcome == "cancelled"
    assert auto_project.issue(key).status == Status.CLOSED


# -- several watchers -------------------------------------------------------------------------------------------


def test_two_watchers_started_together_run_each_issue_exactly_once(
    auto_project: AutoProject, beflow_process, tmp_path: Path
) -> None:
    auto_project.configure(watch={**FAST, "concurrency": 4})
    marks = tmp_path / "marks"
    marks.mkdir()
    keys = [auto_project.new_issue(f"write {n}.txt {n}", "sleep 1", f"mark {marks / str(n)}") for n in range(4)]

    watchers = [beflow_process("watch", "--once", "--json", cwd=auto_project.directory) for _ in range(2)]
    outputs = [watcher.communicate(timeout=120) for watcher in watchers]

    assert [watcher.returncode for watcher in watchers] == [0, 0], [err for _, err in outputs]
    events = [event for stdout, _ in outputs for event in events_of(stdout)]
    assert sorted(e["issue"] for e in events if e["event"] == "finished") == sorted(keys)
    # Each issue's agent started once, and each issue has one run record.
    assert sorted(p.name for p in marks.iterdir()) == [str(n) for n in range(4)]
    for path in marks.iterdir():
        assert [line.split()[0] for line in path.read_text().splitlines()] == ["start", "end"]
    assert sorted(r.issue for r in auto_project.records()) == sorted(keys)
    assert {auto_project.issue(k).status for k in keys} == {Status.REVIEW}


def test_a_watch_that_loses_the_claim_race_says_the_issue_was_taken_and_by_whom(
    auto_project: AutoProject, beflow, beflow_process, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two watchers on one project both see an issue ready; the other one claims it first (it is started, and
    holds the claim, between this watch's look at the tracker and its claim). This one says the issue was taken,
    by whom, and runs nothing; the other one runs it, and says `stopped` when SIGTERM stops it."""
    auto_project.configure(watch=FAST)
    marks = tmp_path / "marks.log"
    key = auto_project.new_issue("sleep 60", f"mark {marks}", title="Raced")
    looked = LocalTracker.ready
    other: list[subprocess.Popen[str]] = []

    def ready_then_outrun(tracker: LocalTracker) -> list[Issue]:
        listed = looked(tracker)
        if listed and not other:  # the race: the other watcher takes the issue now
            other.append(beflow_process("watch", cwd=auto_project.directory))
            eventually(lambda: tracker.holder(key) is not None, "the other watcher's claim", alive=other[0])
        return listed

    monkeypatch.setattr(LocalTracker, "ready", ready_then_outrun)
    loser = beflow("watch", "--once")
    (winner,) = other
    wait_for(marks)
    winner.send_signal(signal.SIGTERM)
    _, said = winner.communicate(timeout=60)

    assert loser.exit_code == 0, loser.stderr
    (line,) = [line for line in loser.stderr.splitlines() if " skipped " in line]
    assert re.search(rf" skipped +{key} +reason=taken by another watcher: issue {key} is claimed by beflow ", line)
    assert f"(pid {winner.pid} on " in line  # who took it, from its claim
    assert re.search(rf" dispatched +{key} ", said) and said.strip().splitlines()[-1] == "beflow: stopped", said
    assert winner.returncode == 130
    assert [r.outcome for r in auto_project.records()] == ["cancelled"]  # one run: the winner's


# -- signals ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signals", [["SIGTERM"], ["SIGINT", "SIGINT"]], ids=["sigterm", "sigint-twice"])
def test_a_signal_mid_run_cancels_restores_records_requeues_and_exits_130(
    auto_project: AutoProject,
    beflow_process,
    tmp_path: Path,
    signals: list[str],
    no_leftover_processes: None,
) -> None:
    auto_project.configure(watch=FAST)
    marks = tmp_path / "marks.log"
    key = auto_project.new_issue("write partial.txt half", "sleep 60", f"mark {marks}")

    process = beflow_process("watch", "--json", cwd=auto_project.directory)
    wait_for(marks)
    record = auto_project.only_record()
    worktree = Path(record.worktree or "")
    assert (worktree / ACPXRC).exists()  # injected while the agent runs
    for name in signals:
        process.send_signal(getattr(signal, name))
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 130, stderr
    # A watch is a service: stopped by a signal, it says so — no error (`--once` is interrupted: below).
    assert stderr.strip().splitlines()[-1] == "beflow: stopped" and "error" not in stderr, stderr
    events = events_of(stdout)
    assert [e["event"] for e in events] == ["dispatched", "stopping", "finished"]
    assert events[-1]["outcome"] == "cancelled"
    # Nothing managed is left: no journal entry, no .acpxrc.json (the worktree is gone, its work on the branch).
    assert not journal_dir().exists() or list(journal_dir().iterdir()) == []
    assert not (worktree / ACPXRC).exists()
    assert not worktree.exists()
    assert auto_project.branch_files(f"beflow/{key}")["partial.txt"] == "half"
    record = auto_project.only_record()
    assert record.outcome == "cancelled" and record.stop_reason == f"cancelled by {signals[0]}"
    assert auto_project.issue(key).status == Status.READY  # for the next watch
    # (no agent or acpx process is left: the no_leftover_processes fixture checks it)


def test_a_watcher_stopped_before_any_issue_is_ready_exits_130(auto_project: AutoProject, beflow_process) -> None:
    auto_project.configure(watch=FAST)
    # A record a killed beflow left running: the watcher's first tick closes it, which shows that it is watching.
    killed = subprocess.Popen([sys.executable, "-c", "pass"])
    killed.wait()
    left = RunRecord(
        id="20260101-000000-9-dead",
        issue="9",
        mode="watch",
        agent="x",
        started_at=dt.datetime.now(dt.UTC),
        pid=killed.pid,
    )
    auto_project.runs.create(left, "")
    process = beflow_process("watch", "--json", cwd=auto_project.directory)
    eventually(lambda: auto_project.runs.get(left.id).outcome != "running", "the watcher ticked", alive=process)
    process.send_signal(signal.SIGTERM)
    try:
        stdout, _ = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:  # pragma: no cover - a hang is the failure
        pytest.fail("beflow watch did not stop on SIGTERM")
    assert process.returncode == 130
    assert [e["event"] for e in events_of(stdout)] == ["stopping"]


def test_a_once_watch_stopped_mid_run_is_an_interruption_not_a_stopped_service(
    auto_project: AutoProject, beflow_process, tmp_path: Path, no_leftover_processes: None
) -> None:
    """`--once` is a one-shot command: a signal interrupts it, and it says so as the error it is."""
    auto_project.configure(watch=FAST)
    marks = tmp_path / "marks.log"
    auto_project.new_issue("sleep 60", f"mark {marks}")
    process = beflow_process("watch", "--once", cwd=auto_project.directory)
    wait_for(marks)

    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)

    assert process.returncode == 130
    assert "error: interrupted by SIGTERM" in stderr and "beflow: stopped" not in stderr, stderr


# -- the live view ----------------------------------------------------------------------------------------------


def test_the_live_view_shows_running_runs_the_queue_and_backoffs(auto_project: AutoProject) -> None:
    waiting = auto_project.issue(auto_project.new_issue("say hi", title="Waiting its turn"))
    now = time.time()

    async def running() -> Running:  # a cancel scope belongs to an event loop
        return Running("7", 2, anyio.CancelScope(), auto_project.tracker, started=now - 42, latest="editing src/app.py")

    snapshot = Snapshot(
        running=[anyio.run(running)],
        queue=[waiting],
        backoffs=[Backoff("9", 3, now + 65, "the agent reported an error: boom")],
        recent=[],
        tick=5,
        next_tick=now + 20,
    )
    console = Console(width=160, record=True, color_system=None)

    console.print(render(snapshot, concurrency=2))
    text = console.export_text()

    assert "running (1/2)" in text
    assert "42s" in text and "editing src/app.py" in text
    assert "queue (1)" in text and "Waiting its turn" in text
    assert "backing off" in text and "the agent reported an error: boom" in text
    assert "tick 5" in text


def test_event_lines_say_the_figures_in_words_and_json_keeps_them_as_they_are() -> None:
    from beflow.cli.lines import details

    used = {"runs": 2, "reported": 1, "tokens": 1234, "cost": {"USD": 0.02}}
    finished = WatchEvent.of(
        "finished", "7", run="r1", outcome="failed", reason="boom", usage={"total_tokens": 1234}, watch_used=used
    )
    assert details(finished) == "run=r1, outcome=failed, reason=boom — used: 1,234 tokens — the watch so far: " + (
        "1,234 tokens, 0.02 USD over 2 runs"
    )
    assert finished.to_json()["watch_used"] == used  # --json: as it was
    stopping = WatchEvent.of("stopping", running=1, watch_used={"runs": 1, "reported": 0, "tokens": 0, "cost": {}})
    assert details(stopping) == "running=1 — the watch so far: no usage reported over 1 run"
    cleared = WatchEvent.of("budget_cleared", message="dispatching again", spent=0.5, limit=5.0, currency="USD")
    assert details(cleared) == "message=dispatching again — today 0.50 of 5 USD"
    reached = WatchEvent.of("budget_reached", message="5.10 USD spent on 2026-12-01, ...", spent=5.1, limit=5.0)
    assert details(reached) == "message=5.10 USD spent on 2026-12-01, ..."  # (its message has the figures)
    assert details(WatchEvent.of("dispatched", "7", attempt=1)) == "attempt=1"


def test_the_live_view_shows_what_runs_use_and_a_day_budget_that_holds_dispatching(auto_project: AutoProject) -> None:
    from beflow.guardrails import DayBudget, Totals, Usage

    now = time.time()

    async def running() -> Running:
        return Running("7", 1, anyio.CancelScope(), auto_project.tracker, started=now - 5, latest="thinking")

    run = anyio.run(running)
    run.usage = Usage(context_used=12_000, context_peak=12_000, cost=0.5, currency="USD", updates=3)
    started = dt.datetime.now(dt.UTC)
    done = RunRecord(id="20261201-101010-6-abcd", issue="6", mode="watch", agent="a", started_at=started)
    done.usage = Usage(total_tokens=34_000, cost=1.25, currency="USD", updates=2)
    done.close("succeeded", "done")
    silent = RunRecord(id="20261201-101011-5-abcd", issue="5", mode="watch", agent="a", started_at=started)
    silent.close("failed", "boom")
    snapshot = Snapshot(
        running=[run],
        queue=[],
        backoffs=[],
        recent=[done, silent],
        tick=2,
        next_tick=now + 20,
        used=Totals(runs=4, reported=3, tokens=48_000, cost={"USD": 3.25}),
        budget=DayBudget(spent=3.75, limit=3, currency="USD", day=dt.date(2026, 12, 1)),
    )
    console = Console(width=200, record=True, color_system=None)

    console.print(render(snapshot, concurrency=2))
    text = console.export_text()

    assert "usage" in text and "12.0k tok 0.50 USD" in text
    # The recent runs say what each used, `-` for one whose agent reported nothing.
    assert re.search(r"6\s+succeeded\s+34\.0k tok 1\.25 USD\s+20261201-101010-6-abcd", text), text
    assert re.search(r"5\s+failed\s+-\s+20261201-101011-5-abcd", text), text
    assert "used: 48,000 tokens, 3.25 USD over 4 runs; today 3.75 of 3 USD (limits.cost_per_day)" in text
    assert "not dispatching: 3.75 USD spent on 2026-12-01, limits.cost_per_day is 3 USD" in text
