"""Output floods: a hook (or acpx) that prints without end is streamed to its log up to a limit, with a note, and
beflow's memory stays flat — measured on the real process with psutil, never by timing."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil

from beflow.trackers import Status
from beflow.workspace import HOOK_LOG_LIMIT
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
