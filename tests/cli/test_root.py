"""The root command: version, help, exit codes and the one top-level error handler."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import click
import psutil
import pytest

from beflow import __version__
from beflow.cli import cli
from beflow.errors import BeflowError, ConfigError, Interrupted, NotFoundError
from tests.support.projects import config_file


@pytest.fixture
def failing_command() -> Iterator[Callable[[BaseException], str]]:
    """Registers a hidden command that raises the given exception, as a command's core code would."""
    added: list[str] = []

    def register(exc: BaseException) -> str:
        @click.command("fail-now", hidden=True)
        def fail_now() -> None:
            raise exc

        cli.add_command(fail_now)
        added.append("fail-now")
        return "fail-now"

    yield register
    for name in added:
        cli.commands.pop(name, None)


# --- version and help -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(beflow, flag: str) -> None:
    result = beflow(flag)

    assert (result.exit_code, result.stdout) == (0, f"beflow {__version__}\n")


def test_python_dash_m_beflow_works(beflow_process) -> None:
    process = beflow_process("--version")
    stdout, _ = process.communicate(timeout=60)

    assert (process.returncode, stdout) == (0, f"beflow {__version__}\n")


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_the_commands_with_an_example(beflow, flag: str) -> None:
    result = beflow(flag)

    assert result.exit_code == 0
    assert "Usage: beflow [--config PATH] COMMAND [ARGS]..." in result.stdout
    assert "--config" in result.stdout
    assert "  init " in result.stdout and "  doctor " in result.stdout
    assert "Example:" in result.stdout


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every command and subcommand, the hidden mode commands (`--auto`, ...) included: they are loaded lazily."""
    found = []
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, f"command {name} does not load"
        found.append((*prefix, name))
        if isinstance(command, click.Group):
            found.extend(_commands(command, (*prefix, name)))
    return found


@pytest.mark.parametrize("path", _commands(cli), ids=" ".join)
def test_every_command_has_help_with_an_example(beflow, path: tuple[str, ...]) -> None:
    result = beflow(*path, "--help")

    assert result.exit_code == 0
    assert "Example" in result.stdout, f"`beflow {' '.join(path)} --help` has no example"


@pytest.mark.parametrize("path", _commands(cli), ids=" ".join)
def test_help_on_80_columns_cuts_no_summary_splits_no_word_and_describes_every_option(
    beflow, monkeypatch: pytest.MonkeyPatch, path: tuple[str, ...]
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None
        command = found

    text = beflow(*path, "--help").stdout

    # `[KEYS]...` and `OP,...` say "more of them", not "cut short".
    assert "..." not in re.sub(r"\[?[A-Z]+\]?,?\.\.\.", "", text)
    usage = text.split("\n\n")[0]
    assert "|" not in usage, "choices belong in the help text, not a usage line that wraps mid-word"
    if command.epilog:
        for line in command.epilog.replace("\b\n", "").splitlines():
            assert line.strip() in text, f"the example {line.strip()!r} was rewrapped"
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden and param.name not in ("help", "version"):
            assert param.help, f"{param.opts[0]} of `beflow {' '.join(path)}` has no description"


def test_the_root_usage_and_its_option_name_the_config_alike(beflow) -> None:
    text = beflow("--help").stdout

    assert "Usage: beflow [--config PATH] COMMAND" in text
    assert "  --config PATH  " in text


@pytest.mark.parametrize(
    ("args", "suggestion"),
    [
        (["--atend", "7"], "Error: No such option '--atend'. Did you mean '--attend'?"),
        (["--confg", "x", "doctor"], "Error: No such option '--confg'. Did you mean '--config'?"),
        (["isues"], "Error: No such command 'isues'. Did you mean 'issues'?"),
        (["issues", "lst"], "Error: No such command 'lst'. Did you mean 'list'?"),
        (["runs", "shwo", "latest"], "Error: No such command 'shwo'. Did you mean 'show'?"),
    ],
)
def test_a_typo_gets_a_did_you_mean(repo: Path, beflow, args: list[str], suggestion: str) -> None:
    result = beflow(*args)

    assert result.exit_code == 2
    assert suggestion in result.stderr


# --- exit codes ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["no-such-command"], ["doctor", "--no-such-option"], ["--config"]])
def test_bad_usage_exits_2(beflow, args: list[str]) -> None:
    result = beflow(*args)

    assert result.exit_code == 2
    assert "Error:" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_command_shows_the_usage(beflow) -> None:
    result = beflow()

    assert result.exit_code == 2
    assert "Usage: beflow" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BeflowError("the run failed"), 1),
        (NotFoundError("no issue 7"), 1),
        (ConfigError("config.json:3: timeout: expected a number"), 2),
        (Interrupted("SIGTERM"), 130),
    ],
)
def test_an_expected_error_is_one_message_with_its_exit_code(
    beflow, failing_command, error: BeflowError, code: int
) -> None:
    result = beflow(failing_command(error))

    assert result.exit_code == code
    assert result.stderr == f"error: {error.message}\n"
    assert result.stdout == ""


def test_an_expected_error_shows_every_line_and_its_fix(beflow, failing_command) -> None:
    error = ConfigError("c.json:1: agnt: unknown key\nc.json:2: timeout: expected a number", fix="Edit c.json.")

    result = beflow(failing_command(error))

    assert result.stderr.splitlines() == [
        "error: c.json:1: agnt: unknown key",
        "c.json:2: timeout: expected a number",
        "fix: Edit c.json.",
    ]


def test_markup_in_messages_is_printed_as_is(beflow, failing_command) -> None:
    result = beflow(failing_command(BeflowError("labels [bold] and [/] stay")))

    assert result.stderr == "error: labels [bold] and [/] stay\n"


def test_an_unexpected_error_writes_the_traceback_to_a_log(beflow, failing_command, isolated_home: Path) -> None:
    result = beflow(failing_command(RuntimeError("boom")))

    assert result.exit_code == 1
    assert "Traceback" not in result.stderr
    assert "beflow failed unexpectedly: RuntimeError: boom" in result.stderr
    logs = list((isolated_home / "logs").glob("crash-*.log"))
    assert len(logs) == 1
    assert str(logs[0]) in result.stderr
    text = logs[0].read_text()
    assert text.startswith("Traceback (most recent call last):")
    assert "RuntimeError: boom" in text
    assert logs[0].stat().st_mode & 0o077 == 0  # tracebacks can hold private details


def test_two_crashes_keep_two_logs(beflow, failing_command, isolated_home: Path) -> None:
    command = failing_command(ValueError("again"))

    beflow(command)
    beflow(command)

    assert len(list((isolated_home / "logs").glob("crash-*.log"))) == 2


def test_when_the_log_cannot_be_written_the_traceback_is_printed(
    beflow, failing_command, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    monkeypatch.setenv("BEFLOW_HOME", str(blocked))

    result = beflow(failing_command(RuntimeError("boom")))

    assert result.exit_code == 1
    assert "Traceback (most recent call last):" in result.stderr
    assert "could not write the log" in result.stderr


def test_ctrl_c_exits_130(beflow, failing_command) -> None:
    result = beflow(failing_command(KeyboardInterrupt()))

    assert result.exit_code == 130
    assert result.stderr.strip() == "interrupted"


def test_ctrl_c_in_a_real_process_stops_its_children_and_exits_130(repo: Path, tmp_path: Path, beflow_process) -> None:
    # doctor probes acpx; this one hangs with a child of its own, so the probe is still running at the Ctrl-C. The
    # Ctrl-C comes the moment the child exists, which may be before beflow has finished starting it: it must work
    # then too. Nothing here waits for a duration: the per-test timeout bounds a hang.
    pids = tmp_path / "pids"
    acpx = tmp_path / "slow-acpx"
    acpx.write_text(f"#!/bin/sh\nsleep 3600 &\necho $$ $! > {pids}.tmp && mv {pids}.tmp {pids}\nwait\n")
    acpx.chmod(0o755)
    config_file(repo).write_text(json.dumps({"acpx": [str(acpx)]}))
    process = beflow_process("doctor", cwd=repo)
    while not pids.exists():
        assert process.poll() is None, process.communicate()
        time.sleep(0.001)

    process.send_signal(signal.SIGINT)
    try:
        _, stderr = process.communicate()
        left = [pid for pid in map(int, pids.read_text().split()) if _alive(pid)]
    finally:
        for pid in map(int, pids.read_text().split()):  # whatever happened, nothing of this test runs on
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    assert process.returncode == 130
    assert "interrupted" in stderr
    assert "Traceback" not in stderr
    assert left == [], f"{left} were left running"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def test_an_unexpected_error_in_a_real_process_prints_no_traceback(isolated_home: Path) -> None:
    process = subprocess.run(
        [sys.executable, "-c", "from beflow.cli.common import guarded; guarded(lambda: 1 / 0)"],
        capture_output=True,
        text=True,
    )

    assert process.returncode == 1
    assert "ZeroDivisionError: division by zero" in process.stderr
    assert "Traceback" not in process.stderr
    assert len(list((isolated_home / "logs").glob("crash-*.log"))) == 1


def test_the_modes_are_named_as_typed_in_usage_errors(beflow) -> None:
    result = beflow("--auto", "--limit", "0")

    assert result.exit_code == 2
    assert "Usage: beflow --auto [OPTIONS] [KEYS]..." in result.stderr


def test_two_modes_at_once_is_bad_usage(beflow) -> None:
    result = beflow("--auto", "--attend", "1")

    assert result.exit_code == 2
    assert "--auto and --attend are two modes: choose one" in result.stderr
