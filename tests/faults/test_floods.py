"""Output floods: a hook (or acpx) that prints without end is streamed to its log up to a limit, with a note, and
beflow's memory stays flat — measured on the real process with psutil, never by timing. A file of the run's record
that an agent turned into an endless source (a link to /dev/zero, a FIFO) is refused, never read or waited on."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from beflow.run.workspace import HOOK_LOG_LIMIT
from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject

#: What the hook prints: 300 MB of 1 KB lines, then 300 MB without a single newline.
FLOOD = "yes \"$(printf '%01000d' 0)\" | head -c 300000000; head -c 300000000 /dev/zero"
FLOOD_BYTES = 600_000_000


def test_a_flooding_hook_is_capped_in_its_log_and_beflows_memory_stays_flat(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    auto_project.configure(hooks={"after_create": {"command": FLOOD, "timeout": 600}})
    key = auto_project.new_issue("write hello.txt hi\\n")
    process = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", key],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    watched = psutil.Process(process.pid)
    peak = 0
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=600)

    assert process.returncode == 0, stderr.decode()
    # Before: every byte was buffered (7.8 GB for a `yes` hook). Now: the interpreter and a bounded buffer.
    assert peak < 250 * 2**20 < FLOOD_BYTES, f"peak RSS {peak / 2**20:.0f} MiB"
    record = auto_project.only_record()
    log = (auto_project.run_dir(record) / "hooks" / "after_create.log").read_bytes()
    assert len(log) < HOOK_LOG_LIMIT + 4096
    assert b"[beflow: output beyond" in log and b"more bytes]" in log
    assert log.rstrip().endswith(b"s]") and b"[exit 0 after" in log
    assert record.outcome == "succeeded" and auto_project.issue(key).status == Status.REVIEW


#: Beyond this, beflow is reading what has no end: it is stopped, and the test fails.
MEMORY_CEILING = 400 * 2**20
#: A beflow still going after this long is waiting on what never comes: it is stopped, and the test fails.
HANG = 180


def run_watched(project: AutoProject, *args: str) -> tuple[int, str, int]:
    """``beflow ARGS`` to its end, its peak memory watched: the exit code, stderr and the peak (in bytes). A beflow
    past :data:`MEMORY_CEILING` or :data:`HANG` is killed (the test then fails on it)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(project.config_path), *args],
        cwd=project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    watched = psutil.Process(process.pid)
    peak = 0
    deadline = time.monotonic() + HANG
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        if peak > MEMORY_CEILING or time.monotonic() > deadline:
            process.kill()
            break
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=60)
    return process.returncode, stderr.decode(), peak


@pytest.mark.parametrize("planted", ["link to /dev/zero", "fifo"])
def test_a_progress_file_the_agent_made_endless_is_refused_and_the_run_ends(
    auto_project: AutoProject, planted: str, no_leftover_processes: None
) -> None:
    auto_project.configure(sandbox={"enabled": False})  # the agent can write the project's run records
    runs = auto_project.directory / ".beflow" / "runs"
    make = "ln -s /dev/zero" if planted == "link to /dev/zero" else "mkfifo"
    key = auto_project.new_issue(
        f'run for d in {runs}/*/; do rm -f "$d/progress.jsonl"; {make} "$d/progress.jsonl"; done',
        "sleep 1.5",  # beflow looks at the progress file meanwhile (every 0.5 s)
        "write hello.txt hi\\n",
    )

    code, stderr, peak = run_watched(auto_project, "--auto", key)

    # Before: 1.7 GB in 3 s through the link; the FIFO held the event loop for ever, past the timeout.
    assert peak < MEMORY_CEILING, f"peak RSS {peak / 2**20:.0f} MiB"
    assert code == 0, stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.progress == []
    assert auto_project.issue(key).status == Status.REVIEW
    shown = beflow_run(auto_project, "runs", "show", "latest", timeout=60)  # no later command waits on it either
    assert shown.code == 0 and "succeeded" in shown.stdout
