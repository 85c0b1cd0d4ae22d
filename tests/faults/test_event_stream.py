"""``watch --json`` read by a reader that stops reading: the runs go on and finish, what cannot be written is
dropped and counted in the stream once the reader reads again, and SIGTERM stops beflow within seconds."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.projects import AutoProject

#: Appends progress lines to every run of the project, as beflow's MCP server would, thousands of them: more
#: events than any pipe holds.
FLOOD = """
import datetime, json, pathlib, sys
runs = pathlib.Path(sys.argv[1]) / ".beflow" / "runs"
now = datetime.datetime.now(datetime.timezone.utc).isoformat()
line = json.dumps({"time": now, "text": "x" * 300, "actor": "agent"}) + "\\n"
for run in runs.iterdir():
    with open(run / "progress.jsonl", "a") as progress:
        progress.write(line * int(sys.argv[2]))
"""


@dataclass
class Watch:
    process: subprocess.Popen[bytes]
    read_end: int
    read: bytearray = field(default_factory=bytearray)

    def drain(self) -> threading.Thread:
        """Start reading the stream (until beflow closes it)."""

        def run() -> None:
            while chunk := os.read(self.read_end, 65536):
                self.read += chunk

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def events(self) -> list[dict[str, object]]:
        """The events read so far: whole lines only (the drain thread may be half-way through appending one)."""
        whole, _, _ = bytes(self.read).rpartition(b"\n")
        return [json.loads(line) for line in whole.splitlines() if line.strip()]


@pytest.fixture
def stuck_watch(auto_project: AutoProject, tmp_path: Path) -> Iterator[Watch]:
    """``beflow watch --json`` whose stdout is a pipe that is full before beflow writes its first line, and that
    nobody reads until the test says so."""
    flood = tmp_path / "flood.py"
    flood.write_text(FLOOD)
    auto_project.new_issue(f"run {sys.executable} {flood} {auto_project.directory} 4000", "write a.txt a", title="a")
    auto_project.new_issue("write b.txt b", title="b")
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, 1031, 4096)  # F_SETPIPE_SZ: one page
    os.set_blocking(write_end, False)
    with contextlib.suppress(BlockingIOError):
        while True:
            os.write(write_end, b"\n" * 4096)
    os.set_blocking(write_end, True)
    process = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "watch", "--json"],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=write_end,
        stderr=(tmp_path / "watch.stderr").open("wb"),
    )
    os.close(write_end)
    watch = Watch(process, read_end)
    yield watch
    if process.poll() is None:
        process.kill()
        process.wait()
    os.close(read_end)


def wait_for_runs(project: AutoProject, count: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = project.records()
        if len(records) == count and all(r.finished for r in records):
            return
        time.sleep(0.1)
    raise AssertionError(f"the runs did not finish: {[(r.issue, r.outcome) for r in project.records()]}")


def stop(watch: Watch, within: float) -> int:
    started = time.monotonic()
    watch.process.send_signal(signal.SIGTERM)
    code = watch.process.wait(timeout=30)
    assert time.monotonic() - started < within
    return code


def test_runs_finish_and_sigterm_stops_beflow_while_nobody_reads(
    auto_project: AutoProject, no_leftover_processes: None, stuck_watch: Watch
) -> None:
    wait_for_runs(auto_project, 2)
    assert sorted(r.outcome for r in auto_project.records()) == ["succeeded", "succeeded"]
    assert stop(stuck_watch, within=4) == 130


def test_what_was_dropped_is_counted_once_the_reader_reads_again(
    auto_project: AutoProject, no_leftover_processes: None, stuck_watch: Watch
) -> None:
    wait_for_runs(auto_project, 2)
    reader = stuck_watch.drain()
    deadline = time.monotonic() + 10  # the notice comes as soon as the reader has caught up, not with the next event
    while not any(e.get("event") == "notice" for e in stuck_watch.events()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert any(e.get("event") == "notice" for e in stuck_watch.events())
    assert stop(stuck_watch, within=4) == 130
    reader.join(timeout=10)
    events = stuck_watch.events()
    notices = [e for e in events if e.get("event") == "notice"]
    assert notices, [e.get("event") for e in events][-20:]
    dropped = 0
    for notice in notices:
        count, _, rest = str(notice["message"]).partition(" ")
        assert rest in ("events dropped: the reader was not reading", "event dropped: the reader was not reading")
        dropped += int(count)
    # Some of the flood was written, the rest counted; the events of the stall itself (the runs finishing) were
    # dropped with it: the records and the issues say how the runs went.
    progress = sum(1 for e in events if e.get("event") == "progress")
    assert dropped > 0 and 0 < progress < 2 * 4000


def test_the_reader_takes_whole_lines_only_while_the_drain_thread_appends() -> None:
    """The drain thread appends whatever a read gave: a line read half-way is not an event yet."""
    watch = Watch(process=None, read_end=-1)  # type: ignore[arg-type]  # no process: only what was read counts
    watch.read += b'{"event": "progress"}\n{"event": "no'
    assert watch.events() == [{"event": "progress"}]
    watch.read += b'tice"}\n'
    assert watch.events() == [{"event": "progress"}, {"event": "notice"}]
