"""The checks of ``beflow doctor``: each one line, with a fix for anything wrong."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from beflow import ACPX_VERSION
from beflow.config import Config
from beflow.doctor import Check, check_access, check_acpx, check_config, check_git, check_node, run_checks
from beflow.trackers.base import Finding
from tests.support.projects import config_file


def fake_tool(bin_dir: Path, name: str, script: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


#: The machine's node, found before a test takes PATH away.
NODE = shutil.which("node")


@pytest.fixture
def only_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PATH with git (and sh) but no node, npm or npx."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("git", "sh"):
        found = shutil.which(tool)
        assert found
        (bin_dir / tool).symlink_to(found)
    monkeypatch.setenv("PATH", str(bin_dir))
    return bin_dir


def test_git_and_node_are_found_with_their_versions() -> None:
    git, node = check_git(), check_node()

    assert git.ok and git.detail[0].isdigit()
    assert node.ok and int(node.detail.split(".")[0]) >= 20


def test_a_missing_node_fails_with_a_fix(only_git: Path) -> None:
    node = check_node()

    assert not node.ok
    assert "node: command not found" in node.detail
    assert node.fix and "Install Node.js 22 (22.13 or later)" in node.fix


def test_a_node_older_than_acpx_needs_fails_with_the_ways_to_node_22(only_git: Path) -> None:
    """Node 20 (end of life in April 2026) under an acpx that runs on it: acpx 0.19.1 declares node >=22.13."""
    fake_tool(only_git, "node", "echo v20.20.2")

    node = check_node(Config(acpx=["acpx"]), "c.json")

    assert (node.ok, node.detail) == (
        False,
        "20.20.2 is older than 22.13, which acpx 0.19.1 and agents such as claude need",
    )
    assert node.fix is not None and node.fix.startswith("Install Node.js 22 (22.13 or later): `nvm install 22`")
    pinned = '"npx", "-y", "-p", "node@22.23.3", "-p", "acpx@0.19.1", "--", "env", "-u", "npm_config_package", "acpx"'
    assert f'set "acpx": [{pinned}] in c.json.' in node.fix


def test_an_old_node_is_only_a_warning_where_npx_fetches_node_22_beside_acpx(only_git: Path) -> None:
    fake_tool(only_git, "node", "echo v18.19.0")

    node = check_node(Config())

    fetched = ["-p", "node@22.23.3", "-p", "acpx@0.19.1"]
    assert Config().acpx_argv() == ["npx", "-y", *fetched, "--", "env", "-u", "npm_config_package", "acpx"]
    assert node.ok and node.warning
    assert node.detail.endswith("acpx runs on Node.js 22.23.3, which npx fetches beside it")


def test_the_configured_acpx_is_probed(acpx_bin: Path) -> None:
    acpx = check_acpx(Config(acpx=[str(acpx_bin)]))

    assert acpx.ok and not acpx.warning
    assert acpx.detail == f"{ACPX_VERSION} via `{acpx_bin}`"


def test_another_acpx_release_is_a_warning_with_the_pinned_one_as_fix(tmp_path: Path) -> None:
    other = fake_tool(tmp_path / "bin", "acpx", "echo 0.18.0")

    acpx = check_acpx(Config(acpx=[str(other)]))

    assert acpx.ok and acpx.warning
    assert f"beflow is tested with {ACPX_VERSION}" in acpx.detail
    assert acpx.fix and f"acpx@{ACPX_VERSION}" in acpx.fix


def test_a_missing_acpx_fails_with_a_fix() -> None:
    acpx = check_acpx(Config(acpx=["/nonexistent/acpx"]))

    assert not acpx.ok
    assert acpx.detail == "'/nonexistent/acpx' is not installed (not found)"
    assert acpx.fix and "set `acpx` in .beflow/config.json" in acpx.fix
    assert f'["npx", "-y", "acpx@{ACPX_VERSION}"]' in acpx.fix
    assert f"remove it and `npm install -g acpx@{ACPX_VERSION}`" in acpx.fix


def test_a_broken_acpx_from_path_names_the_pinned_release_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_tool(tmp_path / "bin", "acpx", "exit 1")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")

    acpx = check_acpx(Config())

    assert not acpx.ok
    assert acpx.fix == (
        f"Check that `acpx --version` works; `npm install -g acpx@{ACPX_VERSION}`, "
        "or set `acpx` in .beflow/config.json."
    )


def test_an_acpx_that_fails_shows_its_output(tmp_path: Path) -> None:
    broken = fake_tool(tmp_path / "bin", "acpx", "echo 'Error: cannot find module' >&2; exit 1")

    acpx = check_acpx(Config(acpx=[str(broken)]))

    assert not acpx.ok
    assert "exit 1" in acpx.detail and "cannot find module" in acpx.detail


def test_without_acpx_and_npx_the_fix_says_how_to_get_it(only_git: Path) -> None:
    assert NODE, "node is needed for this test"
    (only_git / "node").symlink_to(NODE)  # Node.js without npm: no npx
    acpx = check_acpx(Config())

    assert not acpx.ok
    assert "npx" in acpx.detail
    assert acpx.fix and f"npm install -g acpx@{ACPX_VERSION}" in acpx.fix


def test_without_node_the_acpx_check_names_node_and_how_to_install_it(only_git: Path) -> None:
    acpx = check_acpx(Config())

    assert (acpx.ok, acpx.detail) == (False, "node: Node.js is not installed (not found on PATH), and acpx runs on it")
    assert acpx.fix and acpx.fix.startswith("Install Node.js 22 (22.13 or later): `nvm install 22`")


def test_no_config_file_is_fine_but_worth_a_look(repo: Path) -> None:
    config, project = check_config(None)

    assert config.ok and config.warning
    assert config.fix == "Run `beflow init`."
    assert project is not None and project.directory == repo


def test_a_broken_config_fails_with_its_message(repo: Path) -> None:
    config_file(repo).write_text('{"agnt": "codex"}')

    config, project = check_config(None)

    assert not config.ok and project is None
    assert f"{repo / '.beflow' / 'config.json'}:1: agnt: unknown key (did you mean 'agent'?)" in config.detail
    # not `beflow init`: it refuses to overwrite the file (or, with --force, destroys it)
    assert config.fix == "Fix the file at the line shown (`beflow docs config` explains every message)."


def test_a_config_with_a_syntax_error_keeps_its_own_fix(repo: Path) -> None:
    config_file(repo).write_text("{ nope")

    config, _ = check_config(None)

    assert not config.ok
    assert config.fix == "Fix the syntax at that line (comments and trailing commas are allowed)."


def test_a_named_config_that_does_not_exist_says_to_fix_the_path(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    by_option, _ = check_config(Path("nope.json"))
    monkeypatch.setenv("BEFLOW_CONFIG", str(repo / "gone.json"))
    by_environment, _ = check_config(None)

    assert not by_option.ok and "no such config file (named by --config)" in by_option.detail
    assert by_option.fix == "Fix the path given to --config."
    assert not by_environment.ok and "no such config file (named by BEFLOW_CONFIG)" in by_environment.detail
    assert by_environment.fix == "Fix the path in BEFLOW_CONFIG, or unset BEFLOW_CONFIG."


def test_a_broken_config_still_lets_the_tool_checks_run(
    repo: Path, acpx_bin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file(repo).write_text("{ nope")
    # The defaults then apply: acpx from PATH (never a download through npx in a test).
    monkeypatch.setenv("PATH", f"{acpx_bin.parent}{os.pathsep}{os.environ['PATH']}")

    checks = run_checks()

    assert [c.name for c in checks][:4] == ["git", "node", "acpx", "config"]
    assert [c.ok for c in checks][:4] == [True, True, True, False]


@pytest.mark.slow  # doctor starts the agent through acpx
def test_doctor_lists_what_an_agent_gets_by_name_never_a_value(
    repo: Path, monkeypatch: pytest.MonkeyPatch, beflow
) -> None:
    config_file(repo).write_text(
        '{"agent": {"command": "my-agent"}, "tracker": {"kind": "github", "repo": "octo/hello", '
        '"api_url": "http://127.0.0.1:9"}, "agent_env": {"pass": ["NPM_TOKEN"], "drop": ["MY_*"]}, '
        '"sandbox": {"enabled": false}}'
    )
    values = {
        "GITHUB_TOKEN": "ghp-value-never-shown-1",
        "AWS_SECRET_ACCESS_KEY": "aws-value-never-shown-2",
        "OPENAI_API_KEY": "sk-value-never-shown-3",
        "NPM_TOKEN": "npm-value-never-shown-4",
        "MY_SETTING": "my-value-never-shown-5",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    from beflow.config import load_project
    from beflow.doctor import check_agent_env

    check = check_agent_env(load_project())

    assert check.ok
    gets, logins, withheld = check.detail.splitlines()
    assert "OPENAI_API_KEY" in gets and "NPM_TOKEN" in gets and "PATH" in gets
    assert "GITHUB_TOKEN" not in gets and "AWS_SECRET_ACCESS_KEY" not in gets
    assert "OPENAI_API_KEY" in logins
    assert "GITHUB_TOKEN (tracker secret)" in withheld
    assert "AWS_SECRET_ACCESS_KEY (drop list)" in withheld
    assert "MY_SETTING (agent_env.drop)" in withheld

    done = beflow("doctor", "--json")
    assert "agent env" in done.stdout
    assert not [value for value in values.values() if value in done.stdout + done.stderr]


def test_a_cost_budget_against_an_agent_whose_runs_report_no_cost_is_a_warning(repo: Path) -> None:
    import datetime as dt
    import json

    from beflow.config import load_project
    from beflow.doctor import check_costs
    from beflow.guardrails import Usage
    from beflow.records.record import RunRecord, new_run_id
    from beflow.records.store import RunStore

    path = config_file(repo)
    path.write_text(json.dumps({"agent": "codex", "limits": {"cost_per_run": 2}}))
    store = RunStore(repo)

    def ran(usage: Usage | None) -> None:
        now = dt.datetime.now(dt.UTC)
        record = RunRecord(id=new_run_id("1"), issue="1", mode="auto", agent="codex", started_at=now)
        record.usage = usage
        record.close("succeeded", "done")
        store.create(record, "prompt")

    for _ in range(3):
        ran(Usage(total_tokens=100, updates=1))
    check = check_costs(load_project(path))
    assert check is not None and check.ok and check.warning
    assert "the last 3 runs of 'codex' reported no cost: limits.cost_per_run held nothing" in check.detail

    path.write_text(json.dumps({"agent": "codex"}))
    assert check_costs(load_project(path)) is None  # no cost budget: nothing to warn of
    path.write_text(json.dumps({"agent": "codex", "limits": {"cost_per_run": 2}}))
    ran(Usage(cost=0.1, currency="USD", updates=1))
    assert check_costs(load_project(path)) is None  # the agent does report its cost


class _Checked:
    """A tracker's or a code host's service that says what beflow may do there."""

    def __init__(self, *findings: Finding) -> None:
        self.findings = list(findings)

    def access_checks(self) -> list[Finding]:
        return self.findings


def test_what_the_tracker_and_the_code_host_find_of_their_service_is_shown_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow import app
    from beflow.config import load_project
    from beflow.trackers.local import LocalTracker

    token = Finding("forge", True, "the token has the api scope")
    push = Finding("forge", False, "@bot may not push", "Give @bot the Developer role.")

    class CheckedTracker(LocalTracker):
        def access_checks(self) -> list[Finding]:
            return [token]

    def tracker(project: Any, claims: Any) -> Any:
        return CheckedTracker(project.tracker_dir, project.directory, claims=claims)

    monkeypatch.setitem(app.TRACKERS, "local", app.TrackerKind(tracker, holds_token=False))
    monkeypatch.setitem(app.CODE_HOSTS, "github", app.CodeHostKind(lambda *_: _Checked(token, push)))  # type: ignore[arg-type,return-value]
    config_file(repo).write_text('{"code_host": {"kind": "github"}, "after_run": {"pull_request": true}}')

    assert check_access(load_project()) == [
        Check("forge", True, "the token has the api scope"),
        Check("forge", False, "@bot may not push", "Give @bot the Developer role."),
    ]


def test_a_tracker_that_cannot_say_what_it_may_do_adds_no_line(repo: Path) -> None:
    from beflow.config import load_project

    assert check_access(load_project()) == []


def test_a_code_host_that_does_not_open_is_a_line_with_its_fix(repo: Path) -> None:
    from beflow.config import load_project

    config_file(repo).write_text('{"code_host": {"kind": "github"}, "after_run": {"pull_request": true}}')

    [host] = check_access(load_project())

    assert (host.name, host.ok) == ("code_host", False)
    assert "code_host.repo: not set, and the checkout has no origin remote" in host.detail
    assert host.fix == 'Set "repo": "owner/name" in the code_host settings.'


def test_doctor_says_whether_the_webhooks_can_be_verified(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import json

    from beflow.config import load_project
    from beflow.doctor import check_webhooks

    path = config_file(repo)
    path.write_text(json.dumps({"code_host": {"kind": "github", "repo": "acme/widgets"}}))
    assert check_webhooks(load_project(path)) is None  # no webhooks: nothing to say

    path.write_text(
        json.dumps(
            {
                "code_host": {"kind": "github", "repo": "acme/widgets"},
                "webhooks": {"secret_env": {"github": "HOOK_SECRET_OF_THE_TEST"}},
            }
        )
    )
    monkeypatch.delenv("HOOK_SECRET_OF_THE_TEST", raising=False)
    unset = check_webhooks(load_project(path))
    assert unset is not None and not unset.ok
    assert "webhooks.secret_env.github names $HOOK_SECRET_OF_THE_TEST, which is not set" in unset.detail

    monkeypatch.setenv("HOOK_SECRET_OF_THE_TEST", "0123456789abcdef0123")
    good = check_webhooks(load_project(path))
    assert good is not None and good.ok and not good.warning
    assert "0123456789abcdef0123" not in good.detail + (good.fix or "")

    monkeypatch.setenv("HOOK_SECRET_OF_THE_TEST", "short")
    path.write_text(
        json.dumps({"webhooks": {"secret_env": {"github": "HOOK_SECRET_OF_THE_TEST"}}})  # local tracker, no code host
    )
    warned = check_webhooks(load_project(path))
    assert warned is not None and warned.ok and warned.warning
    assert "shorter than 16 characters" in warned.detail
    assert "neither the tracker's nor the code host's" in warned.detail
