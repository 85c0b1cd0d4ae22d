"""``beflow doctor`` from the command line: one line a check, a fix for anything wrong, exit 1 when something is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from beflow import ACPX_VERSION
from tests.support.projects import UNSANDBOXED, config_file


def write_config(repo: Path, config: dict[str, object] | str) -> Path:
    """The project's config: an object, with the sandbox pinned off (tests/sandbox/test_doctor.py is about it), or a
    file's text as it is."""
    path = config_file(repo)
    path.write_text(config if isinstance(config, str) else json.dumps({"sandbox": UNSANDBOXED, **config}))
    return path


def check_lines(stdout: str, name: str) -> list[str]:
    """The lines of one check: its own and its fix."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line[2:].startswith(f"{name}: "))
    return lines[start : start + 1] + [line for line in lines[start + 1 : start + 2] if line.startswith("    fix:")]


@pytest.fixture
def no_sandbox_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A machine where the sandbox cannot start, for the tests of a project with no config (or ``beflow init``'s):
    the default ``"auto"`` then runs unsandboxed, and doctor's sandbox line is a warning whatever this machine's
    network reaches (tests/sandbox/test_doctor.py checks the sandbox where it starts)."""
    fake = tmp_path / "no-bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("BEFLOW_BWRAP", str(fake))


@pytest.fixture
def acpx_on_path(acpx_bin: Path, monkeypatch: pytest.MonkeyPatch, codex_is_the_test_agent: Path) -> None:
    """The pinned acpx found on PATH, for configs that do not name one (never a download through npx), and the
    default agent ``codex`` played by the test agent."""
    monkeypatch.setenv("PATH", f"{acpx_bin.parent}{os.pathsep}{os.environ['PATH']}")


def test_all_good_exits_0(repo: Path, beflow, acpx_bin: Path, codex_is_the_test_agent: Path) -> None:
    config = write_config(repo, {"acpx": [str(acpx_bin)]})

    result = beflow("doctor")

    assert result.exit_code == 0, result.stdout
    lines = result.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:4]] == ["✓ git", "✓ node", "✓ acpx", "✓ config"]
    assert f"✓ acpx: {ACPX_VERSION} via `{acpx_bin}`" in lines
    assert f"✓ config: {config}" in lines
    assert check_lines(result.stdout, "agent")[0].startswith("✓ agent: codex started and opened a session in ")
    assert (
        lines[-1] == "✓ sandbox: off (sandbox.enabled is false): an agent runs as you, unconfined (beflow docs safety)"
    )
    assert "fix:" not in result.stdout


def test_no_config_is_a_warning_not_a_failure(repo: Path, beflow, acpx_on_path: None, no_sandbox_here: None) -> None:
    result = beflow("doctor")

    assert result.exit_code == 0
    assert f"! config: no .beflow/config.json: defaults for {repo}" in result.stdout
    assert "    fix: Run `beflow init`." in result.stdout
    assert check_lines(result.stdout, "sandbox")[0] == (
        '! sandbox: off ("auto", and the sandbox cannot start here: bwrap: No permissions to create a new namespace): '
        "runs are not sandboxed"
    )


def test_a_missing_acpx_exits_1_with_a_fix(repo: Path, beflow) -> None:
    write_config(repo, {"acpx": ["/nonexistent/acpx"]})

    result = beflow("doctor")

    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    failing = lines.index("✗ acpx: '/nonexistent/acpx' is not installed (not found)")
    assert lines[failing + 1].startswith("    fix: Install it, or set `acpx` in ")


def test_a_broken_config_exits_1_and_the_other_checks_still_run(repo: Path, beflow, acpx_on_path: None) -> None:
    config = write_config(repo, '{\n  "permissions": "all",\n}')

    result = beflow("doctor")

    assert result.exit_code == 1
    assert result.stdout.startswith("✓ git: ")
    assert "\n✓ node: " in result.stdout
    assert "\n✓ acpx: " in result.stdout
    assert f"✗ config: {config}:2: permissions: expected 'approve-all', 'approve-reads' or 'deny-all'" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr


def test_the_config_option_is_checked(repo: Path, beflow, acpx_on_path: None) -> None:
    result = beflow("--config", "nope.json", "doctor")

    assert result.exit_code == 1
    assert f"✗ config: {repo / 'nope.json'}: no such config file (named by --config)" in result.stdout


def test_json_output(repo: Path, beflow, acpx_bin: Path) -> None:
    write_config(repo, {"acpx": ["/nonexistent/acpx"]})

    result = beflow("doctor", "--json")

    assert result.exit_code == 1
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    assert list(checks)[:4] == ["git", "node", "acpx", "config"]
    assert set(checks["acpx"]) == {"name", "ok", "detail", "fix", "warning"}
    assert checks["acpx"]["ok"] is False and checks["acpx"]["fix"]
    assert checks["git"]["ok"] is True


def test_init_then_doctor_is_all_good(repo: Path, beflow, acpx_on_path: None, no_sandbox_here: None) -> None:
    assert beflow("init").exit_code == 0

    result = beflow("doctor")

    assert result.exit_code == 0, result.stdout
    assert f"✓ config: {repo / '.beflow' / 'config.json'}" in result.stdout


def test_a_root_config_json_of_an_earlier_beflow_is_not_read_and_doctor_says_how_to_move_it(
    repo: Path, beflow, acpx_on_path: None, no_sandbox_here: None
) -> None:
    (repo / "config.json").write_text('{"agent": "claude", "timeout": 600}')

    result = beflow("doctor")

    assert result.exit_code == 0, result.stdout
    assert f"! config: no .beflow/config.json: defaults for {repo}" in result.stdout
    assert f"! config: {repo / 'config.json'} looks like beflow's but is not read" in result.stdout
    assert f"fix: Move it: cd {repo} && mkdir -p .beflow && mv config.json .beflow/config.json" in result.stdout


def test_an_application_config_json_at_the_root_is_none_of_doctors_business(
    repo: Path, beflow, acpx_on_path: None, no_sandbox_here: None
) -> None:
    (repo / "config.json").write_text('{"agent": "claude", "database": "postgres://localhost/app"}')

    result = beflow("doctor")

    assert "config.json looks like beflow's" not in result.stdout


def test_an_agent_that_is_not_logged_in_fails_with_its_login_command(
    repo: Path, beflow, acpx_on_path: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """doctor starts the agent for real: the test agent (as codex) answers session/new with ACP's auth error."""
    monkeypatch.setenv("ACP_TEST_AUTH", "required")
    write_config(repo, {})

    result = beflow("doctor")

    assert result.exit_code == 1
    assert check_lines(result.stdout, "agent") == [
        "✗ agent: codex is not logged in: Authentication required",
        "    fix: Log in with `codex login` (as the user beflow runs as), then run `beflow doctor` again.",
    ]
    assert not list((Path(os.environ["HOME"]) / ".acpx").glob("sessions/*.json"))


def test_an_agent_that_is_installed_and_logged_in_leaves_no_session_behind(
    repo: Path, beflow, acpx_on_path: None, tmp_path: Path
) -> None:
    write_config(repo, {})

    result = beflow("doctor")

    assert result.exit_code == 0, result.stdout
    assert "✓ agent: codex started and opened a session in " in result.stdout
    assert not list((Path(os.environ["HOME"]) / ".acpx").glob("sessions/*"))


def test_an_agent_that_is_not_installed_says_how_to_install_it(repo: Path, beflow, acpx_bin: Path) -> None:
    write_config(repo, {"acpx": [str(acpx_bin)], "agent": {"command": "no-such-agent-binary --acp"}})

    result = beflow("doctor")

    assert result.exit_code == 1
    assert "✗ runs: " in result.stdout and "'no-such-agent-binary' is not installed" in result.stdout
    assert "✗ agent" not in result.stdout  # said once, by the runs check


def test_an_agent_that_dies_at_start_shows_its_own_words(repo: Path, beflow, acpx_bin: Path, tmp_path: Path) -> None:
    agent = tmp_path / "broken-agent"
    agent.write_text("#!/bin/sh\necho 'config error: missing model name' >&2\nexit 3\n")
    agent.chmod(0o755)
    write_config(repo, {"acpx": [str(acpx_bin)], "agent": {"command": str(agent)}})

    result = beflow("doctor")

    assert result.exit_code == 1
    assert check_lines(result.stdout, "agent") == [
        f"✗ agent: {agent} exited before it started (exit 3): config error: missing model name",
        f"    fix: Run the agent's command by hand to see why: {agent}.",
    ]


def test_every_problem_a_run_would_hit_is_listed_with_its_line_in_the_named_config(
    repo: Path, beflow, acpx_bin: Path, codex_is_the_test_agent: Path
) -> None:
    """With --config c.json, messages and fixes name c.json and the line of each setting; none hides another."""
    named = repo / "c.json"
    config = {"acpx": [str(acpx_bin)], "after_run": {"pull_request": True}, "prompt": "missing.md"}
    named.write_text(json.dumps({**config, "sandbox": UNSANDBOXED}, indent=2))

    result = beflow("--config", "c.json", "doctor")

    assert result.exit_code == 1
    text = result.stdout
    assert "✗ runs: 2 problems:\n" in text
    assert f"  {named}:6: after_run.pull_request: pull requests need a code host" in text
    assert f"  {named}:8: prompt: template file {repo / 'missing.md'} does not exist" in text
    assert f'Name one in "code_host", or remove "pull_request" from "after_run" in {named}.' in text
    assert f"Fix `prompt` in {named}." in text
    assert "config.json" not in text.replace(str(named), "")
