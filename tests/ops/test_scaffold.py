"""``init_project``: the example config and beflow's state kept out of git."""

from __future__ import annotations

from pathlib import Path

import pytest

from beflow.config import Config, load_config_file
from beflow.errors import BeflowError
from beflow.ops.scaffold import example_config, init_project
from tests.conftest import REPO_ROOT, git
from tests.support.projects import config_file


def test_the_example_config_is_the_documented_one() -> None:
    assert example_config() == (REPO_ROOT / "config.example.json").read_text()


def test_init_writes_the_example_and_ignores_state(repo: Path) -> None:
    result = init_project(repo)

    assert result.config_path == config_file(repo)
    assert not result.overwritten
    assert result.config_path.read_text() == example_config()
    assert load_config_file(result.config_path) == Config()
    assert result.state_dir == repo / ".beflow"
    assert (result.state_dir / ".gitignore").is_file()


def test_init_never_overwrites_without_force(repo: Path) -> None:
    config = config_file(repo)
    config.write_text('{"agent": "mine"}')

    with pytest.raises(BeflowError) as caught:
        init_project(repo)

    assert caught.value.exit_code == 2  # a usage error: nothing was changed
    assert str(config) in caught.value.message and "nothing was changed" in caught.value.message
    assert caught.value.fix == "Pass --force to overwrite it."
    assert config.read_text() == '{"agent": "mine"}'
    assert not (repo / ".beflow" / ".gitignore").exists()


def test_init_with_force_overwrites(repo: Path) -> None:
    config_file(repo).write_text('{"agent": "mine"}')

    result = init_project(repo, force=True)

    assert result.overwritten
    assert config_file(repo).read_text() == example_config()


def test_only_the_issues_of_the_state_directory_show_in_git_status(repo: Path) -> None:
    init_project(repo)
    state = repo / ".beflow"
    for name in ("runs/2024-01-01-issue-1/record.json", "runs/x/log.txt", "locks/repo.lock", "cache.json"):
        (state / name).parent.mkdir(parents=True, exist_ok=True)
        (state / name).write_text("{}")
    (state / "issues").mkdir()
    (state / "issues" / "1-fix-the-bug.md").write_text("---\ntitle: Fix the bug\n---\n")

    status = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()

    assert sorted(status) == ["?? .beflow/config.json", "?? .beflow/issues/1-fix-the-bug.md"]
