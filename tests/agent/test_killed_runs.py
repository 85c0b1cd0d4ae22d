"""The records of runs whose beflow was killed, closed by the next command with what their agent reported it used,
read back from the run's transcript (:func:`beflow.agent.session.close_killed_runs`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from beflow.agent.session import close_killed_runs
from beflow.guardrails import Usage
from beflow.records.record import RunRecord, now
from beflow.records.store import RunStore


def usage_line(used: int, session_cost: float) -> str:
    """One usage update as acpx relays it."""
    update = {"sessionUpdate": "usage_update", "used": used, "size": 200_000}
    update["cost"] = {"amount": session_cost, "currency": "USD"}  # type: ignore[assignment]
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": update}}
    return json.dumps(message, separators=(",", ":"))


def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def killed_run(store: RunStore, run_id: str, *lines: str, session: str | None = None) -> RunRecord:
    """A record left ``running`` by a killed beflow, with ``lines`` in its transcript."""
    record = RunRecord(id=run_id, issue="7", mode="watch", agent="a", started_at=now(), pid=dead_pid(), session=session)
    store.create(record, "prompt")
    (store.directory(run_id) / "transcript.jsonl").write_text("".join(f"{line}\n" for line in lines))
    return record


def test_a_killed_run_is_closed_with_the_usage_its_transcript_holds(repo: Path) -> None:
    store = RunStore(repo)
    killed_run(store, "20260101-000000-7-aaaa", usage_line(100, 0.1), usage_line(900, 0.25))

    (closed,) = close_killed_runs(store)

    assert closed.outcome == "cancelled"
    usage = store.get(closed.id).usage
    assert usage is not None
    assert (usage.cost, usage.currency, usage.context_used, usage.context_peak) == (0.25, "USD", 900, 900)


def test_a_killed_run_that_resumed_a_session_counts_its_cost_from_the_earlier_runs(repo: Path) -> None:
    store = RunStore(repo)
    earlier = RunRecord(id="20260101-000000-7-0000", issue="7", mode="watch", agent="a", started_at=now())
    earlier.session = "s-1"
    earlier.usage = Usage(cost=0.3, session_cost=0.3, currency="USD", updates=1)
    earlier.close("failed", "it failed")
    store.create(earlier, "prompt")
    killed_run(store, "20260101-000001-7-bbbb", usage_line(500, 0.8), session="s-1")

    close_killed_runs(store)

    usage = store.get("20260101-000001-7-bbbb").usage
    assert usage is not None and (usage.cost, usage.session_cost, usage.earlier_cost) == (0.5, 0.8, 0.3)


def test_a_transcript_that_is_not_the_file_beflow_wrote_is_not_read(repo: Path, tmp_path: Path) -> None:
    store = RunStore(repo)
    record = killed_run(store, "20260101-000000-7-cccc")
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text(usage_line(100, 9.0) + "\n")
    transcript = store.directory(record.id) / "transcript.jsonl"
    transcript.unlink()
    os.symlink(elsewhere, transcript)  # (an agent without the sandbox can write the record's directory)

    (closed,) = close_killed_runs(store)

    assert closed.outcome == "cancelled" and store.get(closed.id).usage is None
