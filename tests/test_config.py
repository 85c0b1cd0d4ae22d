"""``.beflow/config.json``: discovery, the project directory, the defaults and the documented
example."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pydantic
import pytest

from beflow import ACPX_VERSION
from beflow.config import (
    AfterRun,
    Config,
    GitHubCodeHostSettings,
    GitHubTrackerSettings,
    Hook,
    LocalTrackerSettings,
    Mcp,
    NoCodeHostSettings,
    Watch,
    Worktrees,
    find_config,
    load_config_file,
    load_project,
)
from beflow.errors import ConfigError
from beflow.paths import beflow_home
from tests.conftest import REPO_ROOT
from tests.support.projects import config_file

EXAMPLE = REPO_ROOT / "config.example.json"
TEMPLATE = REPO_ROOT / "beflow" / "templates" / "config.example.json"


def write_config(directory: Path, agent: str, name: str | None = None) -> Path:
    """``directory/name``, else the project config of ``directory`` (``.beflow/config.json``)."""
    path = directory / name if name else config_file(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'{{"agent": "{agent}"}}\n')
    return path


# --- discovery -------------------------------------------------------------------------------------------------


def test_the_config_option_comes_first(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = write_config(tmp_path / "elsewhere", "named", name="ci.json")
    monkeypatch.setenv("BEFLOW_CONFIG", str(write_config(tmp_path / "env", "env", name="ci.json")))
    write_config(repo, "local")

    project = load_project(named)

    assert project.config.agent == "named"
    assert project.config_path == named
    assert project.directory == named.parent


def test_beflow_config_comes_before_the_current_directory(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from_env = write_config(tmp_path / "env", "env", name="ci.json")
    monkeypatch.setenv("BEFLOW_CONFIG", str(from_env))
    write_config(repo, "local")

    project = load_project()

    assert project.config.agent == "env"
    assert project.directory == from_env.parent


def test_a_relative_beflow_config_is_relative_to_the_current_directory(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(repo / "conf", "relative", name="beflow.json")
    monkeypatch.setenv("BEFLOW_CONFIG", "conf/beflow.json")

    assert load_project().config.agent == "relative"


def test_the_nearest_project_config_wins(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(repo, "top")
    app = repo / "packages" / "app"
    write_config(app, "app")
    (app / "src").mkdir()
    monkeypatch.chdir(app / "src")

    project = load_project()

    assert project.config.agent == "app"
    assert project.config_path == app / ".beflow" / "config.json"
    assert project.directory == app
    assert project.state_dir == app / ".beflow"


def test_an_application_config_json_at_the_root_is_never_read(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (repo / "config.json").write_text('{"database": {"url": "postgres://localhost/app"}, "debug": true}\n')
    sub = repo / "src"
    sub.mkdir()
    (sub / "config.json").write_text('{"port": 8080}\n')
    monkeypatch.chdir(sub)

    assert load_project().config == Config()

    write_config(repo, "claude")

    assert load_project().config.agent == "claude"


def test_no_project_config_above_the_git_top_level_is_used(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(tmp_path, "outside")  # tmp_path holds the repository: above its top level
    assert find_config() is None

    plain = tmp_path / "plain" / "deeper"
    plain.mkdir(parents=True)
    monkeypatch.chdir(plain)  # outside git: the current directory alone

    assert find_config() is None
    assert load_project().directory == plain


def test_a_named_project_config_belongs_to_the_directory_holding_its_beflow_folder(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    named = write_config(other, "other")

    project = load_project(named)

    assert project.config_path == other / ".beflow" / "config.json"
    assert project.directory == other


def test_the_git_top_level_is_found_from_a_subdirectory(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(repo, "top")
    sub = repo / "src" / "deep"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)

    project = load_project()

    assert project.config.agent == "top"
    assert project.config_path == config_file(repo)
    assert project.directory == repo
    assert project.state_dir == repo / ".beflow"


def test_no_file_means_defaults_and_the_git_top_level(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sub = repo / "src"
    sub.mkdir()
    monkeypatch.chdir(sub)

    project = load_project()

    assert project.config_path is None
    assert project.config == Config()
    assert project.directory == repo


def test_outside_git_without_a_file_the_project_is_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)

    assert find_config() is None
    assert load_project().directory == plain


def test_a_symlinked_config_belongs_to_the_directory_of_the_link(repo: Path, tmp_path: Path) -> None:
    shared = write_config(tmp_path / "dotfiles", "shared", name="beflow.json")
    config_file(repo).symlink_to(shared)
    (repo / "src").mkdir()

    project = load_project(cwd=repo / "src")

    assert project.config.agent == "shared"
    assert project.directory == repo
    assert load_project(EXAMPLE).directory == REPO_ROOT


@pytest.mark.parametrize("source", ["--config", "BEFLOW_CONFIG"])
def test_a_named_file_must_exist(repo: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    write_config(repo, "local")  # not a fallback for a file the user named
    missing = repo / "nope.json"
    if source == "BEFLOW_CONFIG":
        monkeypatch.setenv("BEFLOW_CONFIG", str(missing))

    with pytest.raises(ConfigError) as caught:
        load_project(missing if source == "--config" else None)

    assert str(missing) in caught.value.message
    assert source in caught.value.message
    assert caught.value.exit_code == 2


def test_json5_comments_and_trailing_commas_are_fine(repo: Path) -> None:
    config_file(repo).write_text(
        """
        // the agent
        {
          agent: 'claude',  /* unquoted keys, single quotes */
          watch: { interval: 5, },
        }
        """
    )

    config = load_project().config

    assert config.agent == "claude"
    assert config.watch.interval == 5


# --- defaults ----------------------------------------------------------------------------------------------------


def test_defaults_are_those_of_the_design() -> None:
    config = Config()

    assert config.agent == "codex"
    assert config.acpx is None
    assert config.permissions == "approve-all"
    assert config.timeout == 3600
    assert config.tracker == LocalTrackerSettings(kind="local", dir=".beflow/issues")
    assert config.worktrees == Worktrees(dir=None, base="HEAD", include=[])
    assert all(config.hooks.get(name) is None for name in ("after_create", "before_run", "after_run", "before_remove"))
    assert config.after_run == AfterRun(commit=True, comment=True, pull_request=False)
    assert config.prompt is None
    assert config.watch == Watch(interval=30, concurrency=2, max_attempts=3, backoff=10, backoff_max=300)
    assert config.open == {}
    assert config.mcp == Mcp.model_validate({"enabled": False, "self": False})
    assert config.model_dump(by_alias=True)["mcp"] == {"enabled": False, "self": False}
    # Five minutes of silence and a run is stalled; no budget unless one is set.
    assert config.limits.stall == 300
    assert (config.limits.cost_per_run, config.limits.tokens_per_run, config.limits.cost_per_day) == (None, None, None)
    # Runs are sandboxed where the sandbox starts on the machine (beflow.sandbox.choice).
    assert config.sandbox.enabled == "auto"


@pytest.mark.parametrize("enabled", ["auto", True, False])
def test_the_sandbox_is_auto_true_or_false(repo: Path, enabled: object) -> None:
    path = repo / "config.json"
    path.write_text(json.dumps({"sandbox": {"enabled": enabled}}))
    assert load_config_file(path).sandbox.enabled == enabled


def test_acpx_is_the_one_on_path_else_the_pinned_one_through_npx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    assert Config().acpx_argv() == ["npx", "-y", f"acpx@{ACPX_VERSION}"]

    fake = bin_dir / "acpx"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    assert Config().acpx_argv() == ["acpx"]

    assert Config(acpx=["node", "/opt/acpx.js"]).acpx_argv() == ["node", "/opt/acpx.js"]


def test_worktrees_live_under_beflow_home_by_default(repo: Path) -> None:
    worktrees = load_project().worktrees_dir

    assert worktrees.is_relative_to(beflow_home() / "worktrees")
    assert not worktrees.is_relative_to(repo)


def test_a_tracker_without_kind_is_the_local_one(repo: Path) -> None:
    config_file(repo).write_text('{"tracker": {"dir": "issues"}}')

    project = load_project()

    assert project.config.tracker == LocalTrackerSettings(dir="issues")
    assert project.tracker_dir == repo / "issues"


def test_a_github_tracker_and_union_values_load(repo: Path) -> None:
    config_file(repo).write_text(
        """{
          "agent": {"command": "python agent.py"},
          "tracker": {"kind": "github", "repo": "octo/hello", "labels": ["beflow"]},
          "hooks": {"after_create": "npm ci", "after_run": {"command": "make lint", "timeout": 5}},
          "timeout": null,
        }"""
    )

    config = load_project().config

    assert config.agent_label() == "python agent.py"
    assert config.tracker == GitHubTrackerSettings(kind="github", repo="octo/hello", labels=["beflow"])
    assert config.hooks.get("after_create") == Hook(command="npm ci", timeout=60)
    assert config.hooks.get("after_run") == Hook(command="make lint", timeout=5)
    assert config.timeout is None


def test_the_code_host_is_the_one_named_else_the_one_the_tracker_implies(repo: Path) -> None:
    github = {"kind": "github", "repo": "octo/hello", "api_url": "https://ghe.example.com/api/v3", "token_env": "GH"}
    implied = Config.model_validate({"tracker": github}).code_host_settings()
    api = github["api_url"]
    assert implied == GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=api, token_env="GH")
    assert Config().code_host_settings() == NoCodeHostSettings(kind="none")
    named = {"kind": "github", "repo": "octo/code", "token_env": "CODE_TOKEN"}
    assert Config.model_validate({"code_host": named}).code_host_settings().repo == "octo/code"  # type: ignore[union-attr]
    none = Config.model_validate({"tracker": github, "code_host": {"kind": "none"}})
    assert none.code_host_settings() == NoCodeHostSettings(kind="none")


def test_a_code_host_of_the_trackers_kind_takes_what_it_leaves_out_from_the_tracker() -> None:
    from beflow.config import GitLabCodeHostSettings

    gitlab = {"kind": "gitlab", "project": "acme/widgets", "url": "https://gitlab.example.com", "token_env": "GL"}
    named = Config.model_validate({"tracker": gitlab, "code_host": {"kind": "gitlab"}}).code_host_settings()
    assert named == GitLabCodeHostSettings(
        kind="gitlab", project="acme/widgets", url="https://gitlab.example.com", token_env="GL"
    )
    other = {"kind": "gitlab", "project": "acme/code"}
    said = Config.model_validate({"tracker": gitlab, "code_host": other}).code_host_settings()
    assert said == GitLabCodeHostSettings(
        kind="gitlab", project="acme/code", url="https://gitlab.example.com", token_env="GL"
    )
    github = {"kind": "github", "repo": "octo/hello"}
    elsewhere = Config.model_validate({"tracker": gitlab, "code_host": github}).code_host_settings()
    assert elsewhere == GitHubCodeHostSettings(kind="github", repo="octo/hello")  # another kind: nothing taken


@pytest.mark.parametrize(
    ("code_host", "said"),
    [
        ({"kind": "gitlab", "project": "no-group"}, "code_host.project"),
        ({"kind": "bitbucket"}, "code_host.kind"),
        ({"kind": "github", "repo": "hello"}, 'code_host.repo: expected "owner/name"'),
        ({"kind": "github", "api_url": "ftp://x"}, "code_host.api_url: expected an http(s) URL"),
        ({"kind": "github", "token_env": "no spaces"}, "code_host.token_env"),
        ({"kind": "github", "labels": ["x"]}, "code_host.labels"),
        ({"kind": "none", "repo": "octo/hello"}, "code_host.repo"),
    ],
)
def test_a_bad_code_host_is_refused_naming_the_file_and_the_field(repo: Path, code_host: object, said: str) -> None:
    path = config_file(repo)
    path.write_text(json.dumps({"code_host": code_host}))
    with pytest.raises(ConfigError) as raised:
        load_config_file(path)
    assert str(path) in raised.value.message and said in raised.value.message, raised.value.message


def test_a_days_budget_on_a_fleet_is_refused_naming_the_file_and_the_field(repo: Path) -> None:
    """The fleet's dispatcher counts no day's spending: a cost_per_day it would never hold is a config error."""
    path = config_file(repo)
    fleet = {"engine": {"kind": "temporal"}, "limits": {"cost_per_run": 2, "tokens_per_run": 10**6}}
    path.write_text(json.dumps(fleet, indent=2))
    assert load_config_file(path).limits.cost_per_run == 2  # per-run budgets hold on every worker

    path.write_text(json.dumps({**fleet, "limits": {"cost_per_day": 10}}, indent=2))
    with pytest.raises(ConfigError) as raised:
        load_config_file(path)

    message = raised.value.message
    assert message.startswith(f"{path}:") and "limits.cost_per_day" in message, message
    assert "does not hold a day's budget" in message and "limits.cost_per_run" in message
    path.write_text(json.dumps({"limits": {"cost_per_day": 10}}))
    assert load_config_file(path).limits.cost_per_day == 10  # the embedded engine holds it


# --- the example --------------------------------------------------------------------------------------------------


def test_the_example_at_the_repository_root_is_the_packaged_template() -> None:
    assert EXAMPLE.is_symlink()
    assert EXAMPLE.resolve() == TEMPLATE.resolve()


def test_the_example_loads_and_holds_the_defaults() -> None:
    assert load_config_file(EXAMPLE) == Config()


def _keys(model: type[pydantic.BaseModel]) -> set[str]:
    """Every key a config file can hold, through nested models and unions of models."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        keys.add(field.alias or name)
        pending = [field.annotation]
        while pending:
            annotation = pending.pop()
            if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
                keys |= _keys(annotation)
            else:
                pending.extend(typing.get_args(annotation))
    return keys


def test_the_example_documents_every_key() -> None:
    text = EXAMPLE.read_text()
    keys = _keys(Config)
    assert {"agent", "command", "repo", "token_env", "pull_request", "draft", "lease", "self", "backoff_max"} <= keys

    undocumented = sorted(key for key in keys if f'"{key}"' not in text)

    assert not undocumented, f"config.example.json does not mention {undocumented}"


def test_the_example_never_says_that_a_setting_does_nothing(repo: Path) -> None:
    from beflow.run import preflight

    text = EXAMPLE.read_text()
    path = config_file(repo)
    path.write_text(json.dumps({"after_run": {"pull_request": True}}))

    assert "does nothing" not in text
    assert "`pull_request` (needs a code host)" in text
    with pytest.raises(ConfigError, match="need a code host"):
        preflight.check(load_project(path))


def test_the_docs_document_every_key() -> None:
    text = (REPO_ROOT / "docs" / "config.md").read_text()

    undocumented = sorted(key for key in _keys(Config) if f"`{key}`" not in text)

    assert not undocumented, f"docs/config.md does not mention {undocumented}"


def test_every_example_in_the_docs_is_a_valid_config(tmp_path: Path) -> None:
    text = (REPO_ROOT / "docs" / "config.md").read_text()
    examples = re.findall(r"```json5\n(.*?)```", text, flags=re.DOTALL)
    assert len(examples) > 10

    for index, example in enumerate(examples):
        path = tmp_path / f"example-{index}.json"
        path.write_text(example)
        load_config_file(path)  # raises, naming the example's line, if it is not valid


@pytest.mark.parametrize(
    ("permissions", "error"),
    [
        ({"mode": "approve-all", "undecided": "ask"}, r'permissions: .*undecided: "ask" needs mode "approve-reads"'),
        ({"mode": "approve-reads", "escalate": ["--approve-all"]}, r"permissions\.escalate\.0: expected text"),
        ({"mode": "approve-reads", "ask": ["edit"]}, r"permissions\.ask: unknown key"),
        ({"escalate": ["edit"]}, r"permissions\.mode"),
        ("approve-some", r"permissions: expected 'approve-all', 'approve-reads' or 'deny-all' or an object"),
    ],
)
def test_a_permissions_setting_that_is_wrong_is_named_with_its_file_and_key(
    tmp_path: Path, permissions: object, error: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"permissions": permissions}))

    with pytest.raises(ConfigError, match=error) as refused:
        load_config_file(path)
    assert str(path) in refused.value.message


def test_the_permissions_string_is_the_object_with_its_mode_and_undecided_requests_denied(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"permissions": "approve-reads"}')
    policy = load_config_file(path).permission_policy
    assert (policy.mode, policy.escalate, policy.undecided, policy.asks) == ("approve-reads", [], "deny", False)


def test_mcp_self_is_only_spelled_self(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"mcp": {"self_server": true}}')

    with pytest.raises(ConfigError, match=r"mcp\.self_server: unknown key"):
        load_config_file(path)


@pytest.mark.parametrize(
    ("webhooks", "error"),
    [
        ({"secret_env": {"bitbucket": "SECRET"}}, r"webhooks\.secret_env\.bitbucket: unknown key"),
        ({"secret_env": {"github": "not a name"}}, r"webhooks\.secret_env\.github"),
        ({"secret": "inline"}, r"webhooks\.secret: unknown key"),
    ],
)
def test_a_webhooks_setting_that_is_wrong_is_named(tmp_path: Path, webhooks: dict[str, object], error: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"webhooks": webhooks}))

    with pytest.raises(ConfigError, match=error):
        load_config_file(path)


def test_webhooks_act_for_the_forges_of_the_tracker_and_the_code_host(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    forges = {
        json.dumps({}): set(),
        json.dumps({"tracker": {"kind": "github", "repo": "a/b"}}): {"github"},
        json.dumps({"tracker": {"kind": "gitlab", "project": "a/b"}}): {"gitlab"},
        json.dumps({"tracker": {"kind": "linear", "team": "ENG"}, "code_host": {"kind": "github"}}): {
            "linear",
            "github",
        },
    }
    for text, expected in forges.items():
        path.write_text(text)
        assert load_config_file(path).webhook_forges() == expected, text


def test_triggers_default_to_the_label_alone_and_label_false_is_refused_by_a_tracker_that_marks_nothing(
    tmp_path: Path,
) -> None:
    from beflow.app import open_tracker
    from beflow.config import Config, Project

    assert Config().triggers.model_dump() == {"label": True, "mention": False, "assign": False}
    path = tmp_path / "config.json"
    path.write_text('{\n  "triggers": {\n    "label": false,\n    "mention": true\n  }\n}\n')
    config = load_config_file(path)
    assert config.triggers.label is False  # (the config says what it wants; the tracker decides whether it can)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigError) as caught:
        open_tracker(Project(config=config, config_path=path, directory=tmp_path))  # the local tracker
    message = caught.value.message
    assert message.startswith(f"{path}:3: triggers.label: false") and "local tracker" in message, message
    assert "triggers" in (caught.value.fix or "") and caught.value.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing changed


def test_attempts_count_defaults_to_the_agents_and_may_not_pass_max() -> None:
    attempts = Config.model_validate({"attempts": {"agents": ["codex", {"command": "x"}]}}).attempts

    assert attempts.configured() == 2
    assert attempts.agent_of(3, "claude") == "codex"
    assert Config().attempts.configured() == 1
    assert Config().attempts.agent_of(2, "claude") == "claude"
    with pytest.raises(ValueError, match=r"count \(5\) is more than max \(4\)"):
        Config.model_validate({"attempts": {"count": 5}})
