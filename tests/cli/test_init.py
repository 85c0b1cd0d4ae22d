"""``beflow init`` from the command line."""

from __future__ import annotations

from pathlib import Path

from beflow.ops.scaffold import example_config
from tests.conftest import git
from tests.support.projects import config_file


def test_init_writes_the_project_config_at_the_git_top_level(repo: Path, beflow, monkeypatch) -> None:
    sub = repo / "src"
    sub.mkdir()
    monkeypatch.chdir(sub)

    result = beflow("init")

    assert result.exit_code == 0, result.stderr
    assert f"Wrote {repo / '.beflow' / 'config.json'}" in result.stdout
    assert "beflow doctor" in result.stdout
    assert 'sandboxed where the sandbox starts on this machine ("sandbox": {"enabled": "auto"})' in result.stdout
    assert config_file(repo).read_text() == example_config()
    assert '"enabled": "auto"' in example_config()
    assert not config_file(sub).exists()


def test_init_refuses_to_overwrite_without_force(repo: Path, beflow) -> None:
    config = config_file(repo)
    config.write_text("{agent: 'mine'}")

    result = beflow("init")

    assert result.exit_code == 2  # a usage error, as the README's exit codes say: nothing was changed
    assert result.stderr.splitlines() == [
        f"error: {config} already exists; nothing was changed",
        "fix: Pass --force to overwrite it.",
    ]
    assert config.read_text() == "{agent: 'mine'}"


def test_init_force_overwrites(repo: Path, beflow) -> None:
    config_file(repo).write_text("{agent: 'mine'}")

    result = beflow("init", "--force")

    assert result.exit_code == 0
    assert f"Overwrote {repo / '.beflow' / 'config.json'}" in result.stdout
    assert config_file(repo).read_text() == example_config()


def test_init_in_a_named_directory(tmp_path: Path, beflow) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")

    result = beflow("init", "--dir", str(project))

    assert result.exit_code == 0
    assert (project / ".beflow" / "config.json").is_file()
    assert (project / ".beflow" / ".gitignore").is_file()


def test_beflow_state_never_shows_in_git_status(repo: Path, beflow) -> None:
    beflow("init")
    run = repo / ".beflow" / "runs" / "20240101-issue-1"
    run.mkdir(parents=True)
    (run / "record.json").write_text("{}")
    (run / "acpx.log").write_text("log")
    issues = repo / ".beflow" / "issues"
    issues.mkdir()
    (issues / "1-first.md").write_text("# first\n")

    status = git(repo, "status", "--porcelain", "--untracked-files=all").splitlines()

    assert sorted(status) == ["?? .beflow/config.json", "?? .beflow/issues/1-first.md"]


def test_init_has_help_with_an_example(beflow) -> None:
    result = beflow("init", "--help")

    assert result.exit_code == 0
    assert "Example:" in result.stdout and "--force" in result.stdout


def test_init_writes_the_file_named_by_config(repo: Path, beflow) -> None:
    result = beflow("--config", "ci.json", "init")

    assert result.exit_code == 0, result.stderr
    assert f"Wrote {repo / 'ci.json'}" in result.stdout
    assert "beflow --config ci.json doctor" in result.stdout
    assert (repo / "ci.json").read_text() == example_config()
    assert not config_file(repo).exists()


def test_init_puts_the_state_next_to_the_file_named_by_config(repo: Path, beflow) -> None:
    result = beflow("--config", "ci/beflow.json", "init")

    assert result.exit_code == 0, result.stderr
    assert (repo / "ci" / "beflow.json").read_text() == example_config()
    assert (repo / "ci" / ".beflow" / ".gitignore").is_file()


def test_init_refuses_to_overwrite_the_file_named_by_config_without_force(repo: Path, beflow) -> None:
    config = repo / "ci.json"
    config.write_text("{agent: 'mine'}")

    refused = beflow("--config", "ci.json", "init")

    assert refused.exit_code == 2
    assert refused.stderr.splitlines()[0] == f"error: {config} already exists; nothing was changed"
    assert config.read_text() == "{agent: 'mine'}"

    forced = beflow("--config", "ci.json", "init", "--force")

    assert forced.exit_code == 0
    assert f"Overwrote {config}" in forced.stdout
    assert config.read_text() == example_config()


def test_init_refuses_both_config_and_dir(repo: Path, beflow) -> None:
    result = beflow("--config", "ci.json", "init", "--dir", str(repo))

    assert result.exit_code == 2
    assert "--config and --dir" in result.stderr
    assert not (repo / "ci.json").exists()


def test_init_leaves_an_application_config_json_alone(repo: Path, beflow) -> None:
    application = repo / "config.json"
    application.write_text('{"database": "postgres://localhost/app"}\n')

    result = beflow("init")

    assert result.exit_code == 0, result.stderr
    assert f"Wrote {repo / '.beflow' / 'config.json'}" in result.stdout
    assert application.read_text() == '{"database": "postgres://localhost/app"}\n'
    assert beflow("issues", "list").exit_code == 0  # the application's keys are not beflow's


def test_init_outside_a_git_repository_refuses_and_writes_nothing(tmp_path: Path, beflow, monkeypatch) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    monkeypatch.chdir(plain)

    result = beflow("init")

    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"error: {plain} is not inside a git repository; nothing was written",
        f"fix: Make it one first: cd {plain} && git init && git add -A && git commit -m 'first commit'",
    ]
    assert list(plain.iterdir()) == []
    assert "git-ignored" not in result.stdout
