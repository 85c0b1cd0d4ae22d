"""A run that is stopped keeps what its agent reported it used: cancelled by a signal or from the API, its record has
it; killed outright, the next command reads it back from the run's transcript. Either way ``limits.cost_per_day``
counts it, as it counts a run that finished."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
from typing import Any

import httpx

from beflow.guardrails import Usage
from beflow.records.record import RunRecord
from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

#: What the agent reports before it goes quiet: 1,000 tokens in context, 0.50 USD spent.
REPORTS = "usage 1000 200000 0.5 USD"
WATCH = {"interval": 0.1, "concurrency": 1, "max_attempts": 1}


def reported(project: AutoProject, process: subprocess.Popen[str]) -> RunRecord:
    """The running run, once its transcript holds the agent's usage report."""

    def found() -> RunRecord | None:
        for record in project.records():
            transcript = project.run_dir(record) / "transcript.jsonl"
            if transcript.exists() and b'"usage_update"' in transcript.read_bytes():
                return record
        return None

    return eventually(found, "the agent reported its usage", alive=process)


def assert_kept(usage: Usage | None) -> None:
    assert usage is not None, "the record lost its usage"
    assert (usage.cost, usage.currency, usage.context_used) == (0.5, "USD", 1000)


def assert_the_day_counts_it(project: AutoProject) -> None:
    """A watch with a day budget below what the stopped run spent dispatches nothing."""
    waiting = project.new_issue("write b.txt x", title="next")
    project.configure(limits={"cost_per_day": 0.4, "currency": "USD"})
    done = beflow_run(project, "watch", "--once", "--json")
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert [e["event"] for e in events if e["event"] in ("dispatched", "budget_reached")] == ["budget_reached"], (
        done.stdout + done.stderr
    )
    (reached,) = [e for e in events if e["event"] == "budget_reached"]
    assert reached["spent"] == 0.5
    assert project.issue(waiting).status == Status.READY


def test_a_run_stopped_by_sigterm_records_its_usage_and_the_day_counts_it(
    auto_project: AutoProject, beflow_process: Any, no_leftover_processes: None
) -> None:
    auto_project.configure(watch=WATCH)
    key = auto_project.new_issue(REPORTS, "sleep 60", title="long")
    process = beflow_process("watch", "--json", cwd=auto_project.directory)
    reported(auto_project, process)

    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=60)

    assert process.returncode == 130, stderr
    record = auto_project.only_record()
    assert record.outcome == "cancelled"
    assert_kept(record.usage)
    finished = [json.loads(line) for line in stdout.splitlines()][-1]
    assert finished["event"] == "finished" and finished["usage"]["cost"] == 0.5
    assert auto_project.issue(key).status == Status.READY
    assert_the_day_counts_it(auto_project)


def test_a_killed_runs_record_is_closed_with_the_usage_its_transcript_holds(
    auto_project: AutoProject, beflow_process: Any, no_leftover_processes: None
) -> None:
    auto_project.configure(watch=WATCH)
    auto_project.new_issue(REPORTS, "sleep 60", title="long")
    process = beflow_process("watch", "--json", cwd=auto_project.directory)
    running = reported(auto_project, process)

    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert auto_project.runs.get(running.id).outcome == "running"  # (nothing of beflow's closed it)
    assert beflow_run(auto_project, "runs", "list").code == 0  # the next command closes it

    record = auto_project.only_record()
    assert record.outcome == "cancelled" and "was killed before the run finished" in (record.stop_reason or "")
    assert_kept(record.usage)
    assert_the_day_counts_it(auto_project)


def test_a_run_cancelled_from_the_api_records_its_usage_and_the_day_counts_it(
    auto_project: AutoProject, beflow_process: Any, no_leftover_processes: None
) -> None:
    from beflow.web.guard import TOKEN_ENV

    token = "u" * 24
    auto_project.configure(watch=WATCH, http={"actions": True})
    auto_project.new_issue(REPORTS, "sleep 60", title="long")
    process = beflow_process("watch", "--json", "--http", "0", cwd=auto_project.directory, env={TOKEN_ENV: token})
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # type: ignore[union-attr]
    url = eventually(
        lambda: next((m.group(1) for line in list(said) if (m := re.search(r"serving (http://\S+?)/ ", line))), None),
        "the watch said where it serves",
        alive=process,
    )
    run = reported(auto_project, process).id

    done = httpx.post(f"{url}/api/v1/runs/{run}/cancel", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert done.status_code == 200, done.text
    record = eventually(
        lambda: (r := auto_project.runs.get(run)).finished and r, "the run ended", timeout=60, alive=process
    )
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=60)

    assert record.outcome == "cancelled"
    assert_kept(record.usage)
    assert_the_day_counts_it(auto_project)
