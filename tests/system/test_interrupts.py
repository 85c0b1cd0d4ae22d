"""Signals become cancellation: the work's cleanup runs, then ``Interrupted``, exit 130 through the CLI handler."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from beflow.errors import Interrupted, NotFoundError
from beflow.system import interrupts
from tests.support.waiting import eventually

# A program that runs work through `interrupts.run` under the CLI's one handler, as every command does. The work
# says "started", waits forever, and records its cleanup; a second signal during the cleanup shortens the grace.
PROGRAM = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import anyio

    from beflow.system import interrupts
    from beflow.cli.common import guarded

    marks = Path(sys.argv[1])

    def mark(text):
        with marks.open("a") as handle:
            handle.write(text + "\\n")

    async def work():
        try:
            mark("started")
            await anyio.sleep_forever()
        finally:
            mark("cleanup")
            with anyio.CancelScope(shield=True):  # cleanup that takes a while, as a process-group stop does
                with anyio.move_on_after(float(sys.argv[2])):
                    while not interrupts.state.forced:
                        await anyio.sleep(0.01)
            mark(f"grace {interrupts.grace(5.0)}")

    sys.exit(guarded(lambda: interrupts.run(work)))
    """
)


def start(tmp_path: Path, cleanup_seconds: float = 0.0) -> tuple[subprocess.Popen[str], Path]:
    program = tmp_path / "program.py"
    program.write_text(PROGRAM)
    marks = tmp_path / "marks"
    process = subprocess.Popen(
        [sys.executable, str(program), str(marks), str(cleanup_seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(marks, "started", process)
    return process, marks


def wait_for(marks: Path, text: str, process: subprocess.Popen[str]) -> None:
    """Until the program wrote ``text``."""
    eventually(lambda: marks.exists() and text in marks.read_text().split("\n"), f"{text!r} came", 30, alive=process)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_runs_the_cleanup_then_exits_130(tmp_path: Path, signum: signal.Signals) -> None:
    process, marks = start(tmp_path)

    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)

    assert process.returncode == 130
    assert marks.read_text().splitlines() == ["started", "cleanup", "grace 5.0"]
    assert f"interrupted by {signum.name}" in stderr
    assert "Traceback" not in stderr


def test_a_second_signal_forces_a_short_grace(tmp_path: Path) -> None:
    process, marks = start(tmp_path, cleanup_seconds=30)

    process.send_signal(signal.SIGINT)
    wait_for(marks, "cleanup", process)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=30)

    assert process.returncode == 130
    assert marks.read_text().splitlines() == ["started", "cleanup", "grace 0.5"]


def test_a_signal_in_process_raises_interrupted_after_the_cleanup() -> None:
    cleaned: list[str] = []

    async def work() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await anyio.sleep_forever()
        finally:
            cleaned.append("done")

    with pytest.raises(Interrupted) as caught:
        interrupts.run(work)

    assert cleaned == ["done"]
    assert caught.value.signal_name == "SIGTERM"
    assert caught.value.exit_code == 130


def test_the_result_is_returned_and_errors_are_raised_as_they_are() -> None:
    async def answer() -> int:
        return 42

    async def missing() -> None:
        raise NotFoundError("no issue 7")

    assert interrupts.run(answer) == 42
    with pytest.raises(NotFoundError, match="no issue 7"):
        interrupts.run(missing)
    assert interrupts.grace(5.0) == 5.0
