"""Start-up: commands load only what they use, ``--help`` lists every command without importing them, and the
fast exit keeps exit codes and output whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import click
import pytest

from beflow.cli import COMMANDS, MODE_FLAGS, cli
from beflow.trackers import Status
from tests.support.projects import AutoProject

#: Modules a command that does not need them must not load.
HEAVY = ("git", "rich", "jinja2", "yaml", "json5", "pydantic", "filelock", "anyio")


def loaded_by(*args: str, cwd: Path | None = None) -> set[str]:
    """The top-level packages loaded by ``beflow ARGS`` (run in a fresh interpreter, its exit caught)."""
    code = (
        "import sys\n"
        "from beflow.cli import main\n"
        "try:\n"
        f"    main({list(args)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('MODULES', sorted({m.split('.')[0] for m in sys.modules}), file=sys.stderr)\n"
    )
    # An empty temporary directory of its own: a live sandbox of a test beside it would make the start-up's sweep
    # of sandbox scratch directories (rightly) load psutil to ask whether that run's beflow is alive.
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "TMPDIR": tmp}
        command = [sys.executable, "-c", code]
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=True)
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES "))
    return set(json.loads(line.removeprefix("MODULES ").replace("'", '"')))


def test_help_lists_every_command_with_its_own_summary_without_loading_them() -> None:
    ctx = click.Context(cli)
    for name in COMMANDS:
        if name in MODE_FLAGS.values():
            continue
        fresh = click.Context(cli)
        summary = cli.summary_of(fresh, name, 80)  # type: ignore[attr-defined]
        loaded = cli.get_command(ctx, name)
        assert loaded is not None
        assert summary == loaded.get_short_help_str(80), name


def test_help_and_version_load_none_of_the_heavy_libraries() -> None:
    for args in (["--help"], ["--version"]):
        assert loaded_by(*args).isdisjoint(HEAVY), args


def test_damaged_journal_entries_moved_aside_cost_no_command_its_start_up(tmp_path: Path) -> None:
    """What was moved aside is never read again: its folder alone does not load the restore machinery."""
    for journal in ("journal", "git-journal"):
        (Path(os.environ["BEFLOW_HOME"]) / journal / "damaged").mkdir(parents=True)
    assert loaded_by("docs", "mcp", cwd=tmp_path).isdisjoint({"pydantic", "anyio", "psutil"})


def test_listing_issues_as_json_loads_no_terminal_git_or_template_library(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    loaded = loaded_by("issues", "list", "--json", cwd=tmp_path)
    assert loaded.isdisjoint({"git", "rich", "jinja2"})


def test_a_new_issue_into_a_pipe_loads_no_terminal_git_or_template_library(tmp_path: Path) -> None:
    """A script's `issues new` gets the plain line (tests/cli/test_issues.py pins its words) without rich."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    loaded = loaded_by("issues", "new", "Fix the login crash", cwd=tmp_path)
    assert loaded.isdisjoint({"git", "rich", "jinja2"})
    assert (tmp_path / ".beflow" / "issues" / "0001-fix-the-login-crash.md").is_file()


def test_an_idle_watch_into_a_pipe_loads_no_terminal_library(auto_project: AutoProject) -> None:
    """Off a terminal there is no live view: whether stderr is one is asked without loading rich."""
    auto_project.new_issue(title="not ready yet", status=Status.OPEN)
    loaded = loaded_by("--config", str(auto_project.config_path), "watch", "--once", cwd=auto_project.directory)
    assert "rich" not in loaded and "beflow" in loaded


@pytest.mark.slow
@pytest.mark.parametrize(("args", "code", "out"), [(["--version"], 0, "beflow "), (["nonesuch"], 2, "")])
def test_the_fast_exit_keeps_exit_codes_and_output(args: list[str], code: int, out: str, tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "beflow", *args], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == code and done.stdout.startswith(out)


@pytest.mark.slow
def test_the_fast_exit_flushes_long_output_to_a_pipe(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    beflow = [sys.executable, "-m", "beflow"]
    for n in range(40):
        new = [*beflow, "issues", "new", f"issue {n}", "--body", "x" * 2000]
        subprocess.run(new, cwd=tmp_path, check=True, capture_output=True)
    done = subprocess.run([*beflow, "issues", "list", "--json"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0
    assert len(json.loads(done.stdout)["issues"]) == 40
