"""The one subprocess helper: output, exit codes, timeouts and cancellation that stop the whole process group."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import anyio
import psutil
import pytest

from beflow.errors import ToolMissingError
from beflow.system import interrupts, pipes, proc

#: Short grace periods keep these tests fast; the behaviour is the same with the default.
GRACE = 0.3


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie nobody reaped (which cannot run any more)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def spawner(pid_file: Path, *, ignore_term: bool) -> list[str]:
    """A child that starts a grandchild (`sleep`), writes both pids, says "ready" and waits."""
    return python(
        f"""
        import os, signal, subprocess, time
        if {ignore_term}:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)  # inherited by the grandchild too
        grandchild = subprocess.Popen(["sleep", "60"])
        open({str(pid_file)!r}, "w").write(f"{{os.getpid()}} {{grandchild.pid}}")
        print("ready", flush=True)
        time.sleep(60)
        """
    )


def pids_of(pid_file: Path) -> list[int]:
    """The child's and the grandchild's pid."""
    return [int(pid) for pid in pid_file.read_text().split()]


@pytest.mark.anyio
async def test_output_is_captured_separately() -> None:
    result = await proc.run(["sh", "-c", "echo out; echo err >&2; exit 0"])

    assert (result.stdout, result.stderr) == (b"out\n", b"err\n")
    assert result.ok
    assert result.describe() == "exit 0"


@pytest.mark.anyio
async def test_input_is_passed_on_stdin() -> None:
    result = await proc.run(["cat"], stdin=b"hello\n")

    assert result.stdout == b"hello\n"


@pytest.mark.anyio
async def test_input_and_output_larger_than_a_pipe_do_not_deadlock() -> None:
    data = b"x" * 1_000_000  # the child writes back before it has read everything

    result = await proc.run(["cat"], stdin=data, timeout=30)

    assert result.stdout == data
    assert not result.timed_out


@pytest.mark.anyio
async def test_input_the_child_does_not_read_is_not_an_error() -> None:
    result = await proc.run(["true"], stdin=b"x" * 1_000_000)

    assert result.ok


@pytest.mark.anyio
async def test_lines_are_streamed_as_they_arrive() -> None:
    out_lines: list[bytes] = []
    err_lines: list[bytes] = []

    async def on_stderr(lines: bytes) -> None:  # async handlers are awaited
        err_lines.extend(lines.split(b"\n"))

    result = await proc.run(
        ["sh", "-c", "printf 'one\\ntwo\\n'; echo problem >&2; printf 'no newline'"],
        on_stdout=lambda lines: out_lines.extend(lines.split(b"\n")),
        on_stderr=on_stderr,
    )

    assert out_lines == [b"one", b"two", b"no newline"]
    assert err_lines == [b"problem"]
    assert result.stdout == b"one\ntwo\nno newline"  # streamed output is captured too


@pytest.mark.anyio
async def test_a_line_that_comes_in_parts_reaches_the_handler_whole_with_the_lines_of_its_read() -> None:
    batches: list[bytes] = []
    script = "printf 'pa'; sleep 0.3; printf 'rt'; sleep 0.3; printf 's\\nnext\\nand '; sleep 0.3; printf 'end\\n'"

    await proc.run(["sh", "-c", script], on_stdout=batches.append)

    assert b"\n".join(batches).split(b"\n") == [b"parts", b"next", b"and end"]
    assert batches[0].startswith(b"parts\nnext")  # the line that ended in a read, with the one it brought whole


@pytest.mark.anyio
async def test_a_child_that_prints_line_by_line_is_read_in_a_few_wake_ups_through_a_roomy_pipe() -> None:
    """acpx relays thousands of messages a write each: beflow reads what a pipe gathered meanwhile (a wake-up of
    the event loop costs more than the lines it brings), and the pipe has room for it (the child never waits)."""
    child = (
        "import fcntl, os, sys, time\n"
        "os.write(1, b'%d\\n' % fcntl.fcntl(1, fcntl.F_GETPIPE_SZ))\n"
        "for i in range(4000):\n"
        "    os.write(1, b'{\"line\": %d}\\n' % i)\n"
        "    if i % 10 == 0: time.sleep(0.002)\n"
    )
    reads: list[bytes] = []

    await proc.run([sys.executable, "-c", child], on_stdout=reads.append)

    lines = b"\n".join(reads).split(b"\n")
    assert int(lines[0]) == pipes.PIPE_SIZE and len(lines) == 4001
    assert len(reads) < 60  # (a read a write would be 4,001)


@pytest.mark.anyio
async def test_a_synchronous_run_called_from_within_the_event_loop_runs_the_child_all_the_same() -> None:
    # As a code host opened by a running command does for `gh auth token`.
    result = proc.run_sync(["sh", "-c", "echo token"], timeout=15)

    assert result.ok and result.stdout == b"token\n"


@pytest.mark.anyio
async def test_a_failing_line_handler_raises_its_own_exception() -> None:
    def reject(lines: bytes) -> None:
        raise ValueError(f"bad lines {lines!r}")

    with pytest.raises(ValueError, match="bad line"):
        await proc.run(["echo", "hi"], on_stdout=reject)


@pytest.mark.parametrize("code", [1, 3, 127])
@pytest.mark.anyio
async def test_exit_codes_are_reported(code: int) -> None:
    result = await proc.run(["sh", "-c", f"exit {code}"])

    assert result.returncode == code
    assert not result.ok
    assert result.describe() == f"exit {code}"


@pytest.mark.anyio
async def test_a_death_by_signal_is_described() -> None:
    result = await proc.run(["sh", "-c", "kill -9 $$"])

    assert result.returncode == -signal.SIGKILL
    assert result.describe() == "killed by SIGKILL"


@pytest.mark.anyio
async def test_the_working_directory_and_extra_environment_are_used(tmp_path: Path) -> None:
    result = await proc.run(["sh", "-c", 'pwd; echo "$GREETING"'], cwd=tmp_path, env={"GREETING": "hi"})

    assert result.stdout.decode().splitlines() == [str(tmp_path), "hi"]


@pytest.mark.anyio
async def test_a_missing_program_is_a_tool_missing_error() -> None:
    with pytest.raises(ToolMissingError, match="no-such-program-xyz: command not found"):
        await proc.run(["no-such-program-xyz", "--version"])


@pytest.mark.anyio
async def test_a_file_that_is_not_executable_is_a_tool_missing_error(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")

    with pytest.raises(ToolMissingError, match="not executable"):
        await proc.run([str(script)])


@pytest.mark.anyio
async def test_a_timeout_is_reported_and_stops_the_whole_group(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    result = await proc.run(spawner(pids, ignore_term=False), timeout=2, grace=GRACE)

    assert result.timed_out
    assert not result.ok
    assert result.describe() == "timed out"
    assert result.stdout == b"ready\n"  # what came before the timeout is kept
    assert result.returncode == -signal.SIGTERM
    assert not any(alive(pid) for pid in pids_of(pids))


@pytest.mark.anyio
async def test_a_group_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    pids = tmp_path / "pids"

    result = await proc.run(spawner(pids, ignore_term=True), timeout=2, grace=GRACE)

    assert result.timed_out
    assert result.returncode == -signal.SIGKILL
    assert not any(alive(pid) for pid in pids_of(pids))


@pytest.mark.anyio
async def test_cancellation_stops_the_whole_group_and_propagates(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    started: list[int] = []

    with anyio.CancelScope() as scope:

        def on_stdout(lines: bytes) -> None:
            if b"ready" in lines.split(b"\n"):
                scope.cancel()  # as an interrupt or a caller's deadline would

        await proc.run(spawner(pids, ignore_term=True), on_stdout=on_stdout, grace=GRACE)
        started.append(1)  # never reached: the cancellation propagates out of run()

    assert scope.cancelled_caught
    assert not started
    assert not any(alive(pid) for pid in pids_of(pids))


@pytest.mark.anyio
async def test_cancelling_a_child_in_beflows_own_group_stops_what_it_started(tmp_path: Path) -> None:
    """A native client shares beflow's process group (so that Ctrl-C is the client's); cancelling it must still
    stop its children, which the group signal cannot reach without hitting beflow."""
    pids = tmp_path / "pids"

    with anyio.move_on_after(60) as scope:

        async def cancel_when_ready() -> None:
            while not pids.exists() or not pids.read_text():
                await anyio.sleep(0.02)
            scope.cancel()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancel_when_ready)
            await proc.run(spawner(pids, ignore_term=True), own_group=False, grace=GRACE)

    assert not any(alive(pid) for pid in pids_of(pids))


@pytest.mark.anyio
async def test_what_a_child_leaves_running_is_stopped_when_it_exits(tmp_path: Path) -> None:
    # `sleep &` keeps the output pipe open: without stopping it, run() would wait for it.
    result = await proc.run(["sh", "-c", "sleep 60 & echo $!"], timeout=30, grace=GRACE)

    assert result.ok
    assert not alive(int(result.stdout))


def test_run_sync_runs_from_synchronous_code() -> None:
    result = proc.run_sync(["echo", "sync"])

    assert result.stdout == b"sync\n"


@pytest.mark.anyio
async def test_a_second_signal_cuts_the_grace_period_short(tmp_path: Path) -> None:
    """The user pressed Ctrl-C again: a child that ignores SIGTERM is killed now, not after the grace period."""
    pids = tmp_path / "pids"
    process = await anyio.open_process(spawner(pids, ignore_term=True), start_new_session=True)
    try:
        while not pids.exists() or not pids.read_text():
            await anyio.sleep(0.02)
        interrupts.state.forced = True
        with anyio.fail_after(30):  # the grace is 600 s: only a forced stop ends in time
            await proc.stop_group(process.pid, grace=600, leader=process)
    finally:
        interrupts.state.forced = False
        await process.aclose()

    assert not any(alive(pid) for pid in pids_of(pids))


def test_output_kept_in_the_result_is_the_last_part_only_and_long_lines_reach_handlers_in_pieces() -> None:
    pieces: list[int] = []
    result = proc.run_sync(
        ["sh", "-c", "head -c 20000000 /dev/zero; echo; echo end"],
        on_stdout=lambda lines: pieces.extend(map(len, lines.split(b"\n"))),
    )
    assert result.ok and len(result.stdout) == proc.MAX_CAPTURE and result.stdout.endswith(b"\nend\n")
    assert pieces == [pipes.MAX_LINE, pipes.MAX_LINE, 20000000 - 2 * pipes.MAX_LINE, 3]


# --- shell command lines (hooks) -----------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_shell_command_keeps_its_output_and_exit_status() -> None:
    result = await proc.run(proc.shell("echo out; echo err >&2; exit 3"))

    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")


@pytest.mark.anyio
async def test_what_a_command_started_in_a_session_of_its_own_is_stopped_when_it_ends(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    command = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & while [ ! -s {pid_file} ]; do sleep 0.01; done"

    result = await proc.run(proc.shell(command), stop_escaped=True, grace=1)

    assert result.ok
    assert not alive(int(pid_file.read_text()))


@pytest.mark.anyio
async def test_without_stop_escaped_a_process_in_its_own_session_is_left_alone(tmp_path: Path) -> None:
    # Stopping what left the group is asked for per run (hooks do), not done to every child.
    pid_file = tmp_path / "pid"
    command = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & while [ ! -s {pid_file} ]; do sleep 0.01; done"

    await proc.run(proc.shell(command), grace=1)

    pid = int(pid_file.read_text())
    try:
        assert alive(pid)
    finally:
        os.kill(pid, signal.SIGKILL)
