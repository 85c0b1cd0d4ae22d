"""The synchronous supervised run (``proc.run_blocking``, ``proc.streaming``): what git's commands go through. The
same supervision as the async run, without an event loop: output, input, timeouts and signals that stop the whole
process group, bounded output."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from beflow.errors import ToolMissingError
from beflow.system import interrupts, proc
from tests.system.test_proc import GRACE, alive, pids_of, python, spawner


def test_output_exit_status_and_input_larger_than_a_pipe() -> None:
    data = b"x" * (3 << 20)
    result = proc.run_blocking(["sh", "-c", "cat; echo said >&2; exit 3"], stdin=data, max_capture=4 << 20)

    assert (result.returncode, len(result.stdout), result.stderr) == (3, len(data), b"said\n")
    assert not result.timed_out and not result.ok and result.describe() == "exit 3"


def test_the_working_directory_and_the_environment_are_the_callers(tmp_path: Path) -> None:
    os.environ["BEFLOW_TEST_BLOCKING_GONE"] = "1"
    try:
        result = proc.run_blocking(
            ["sh", "-c", 'pwd; echo "$EXTRA ${BEFLOW_TEST_BLOCKING_GONE-unset}"'],
            cwd=tmp_path,
            env={"EXTRA": "given"},
            unset=["BEFLOW_TEST_BLOCKING_GONE"],
        )
    finally:
        del os.environ["BEFLOW_TEST_BLOCKING_GONE"]

    assert result.stdout.decode().split("\n") == [str(tmp_path), "given unset", ""]


def test_a_missing_program_is_a_tool_missing_error() -> None:
    with pytest.raises(ToolMissingError, match="command not found"):
        proc.run_blocking(["beflow-no-such-program"])


def test_a_timeout_is_reported_and_stops_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    result = proc.run_blocking(spawner(pids, ignore_term=True), timeout=2, grace=GRACE)

    assert result.timed_out and result.describe() == "timed out"
    assert result.stdout == b"ready\n"  # what came before the timeout is kept
    assert result.returncode == -signal.SIGKILL  # it ignored SIGTERM: killed after the grace period
    assert not any(alive(pid) for pid in pids_of(pids))


def test_what_a_child_leaves_running_in_its_group_is_stopped_when_it_exits() -> None:
    # `sleep &` holds the output pipe open: without stopping it, the run would wait for it.
    started = time.monotonic()
    result = proc.run_blocking(["sh", "-c", "sleep 60 & echo $!"], timeout=30, grace=GRACE)

    assert result.ok and time.monotonic() - started < 10
    assert not alive(int(result.stdout))


def test_a_signal_to_beflow_stops_the_child_a_worker_thread_waits_on(tmp_path: Path) -> None:
    """The child is in a group of its own, which the terminal's Ctrl-C does not reach: beflow's signal handler
    stops what synchronous code waits on."""
    pids = tmp_path / "pids"
    results: list[proc.Completed] = []
    worker = threading.Thread(target=lambda: results.append(proc.run_blocking(spawner(pids, ignore_term=False))))
    worker.start()
    while not pids.exists() or not pids.read_text():
        time.sleep(0.02)

    interrupts._stop_waited_children()  # what the handler of a signal does
    worker.join(30)

    assert results and results[0].returncode == -signal.SIGTERM and not results[0].timed_out
    assert not any(alive(pid) for pid in pids_of(pids))


def test_an_inherited_descriptor_reaches_the_child() -> None:
    read_end, write_end = os.pipe()
    try:
        result = proc.run_blocking(python(f"import os; os.write({write_end}, b'through')"), pass_fds=[write_end])
        os.close(write_end)
        write_end = -1
        assert result.ok and os.read(read_end, 100) == b"through"
        assert proc.run_blocking(python(f"import os; os.fstat({read_end})")).returncode != 0  # not passed: not there
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


def test_output_past_the_cap_keeps_its_end_and_says_so() -> None:
    result = proc.run_blocking(["sh", "-c", "head -c 100000 /dev/zero; echo end"], max_capture=1000)

    assert len(result.stdout) == 1000 and result.stdout.endswith(b"\0end\n")
    assert result.clipped == ("stdout",)
    assert proc.run_blocking(["echo", "short"], max_capture=1000).clipped == ()


def test_a_stream_is_read_as_it_comes_and_its_input_written_as_the_reader_goes() -> None:
    with proc.streaming(["cat"], stdin=True) as stream:
        for word in (b"one", b"two"):
            stream.stdin.write(word + b"\n")
            stream.stdin.flush()
            assert stream.stdout.readline() == word + b"\n"
        done = stream.finish()

    assert done.returncode == 0


def test_a_stream_left_early_is_stopped_with_its_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    with proc.streaming(spawner(pids, ignore_term=False)) as stream:
        assert stream.stdout.readline() == b"ready\n"

    assert stream.process.returncode == -signal.SIGTERM
    assert not any(alive(pid) for pid in pids_of(pids))


def test_a_streams_errors_are_kept_without_blocking_it() -> None:
    flood = python("import sys; sys.stderr.write('e' * 3000000); sys.stderr.flush(); print('out')")
    with proc.streaming(flood, max_capture=10) as stream:
        assert stream.stdout.read() == b"out\n"
        done = stream.finish()

    assert done.returncode == 0 and done.stderr == b"e" * 10
