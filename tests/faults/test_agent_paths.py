"""beflow never reads or writes through a path an agent could have made (docs/safety.md): without the sandbox the
agent can write the project's run records, and its branch fills the next round's worktree. Each attack is the test
agent's own shell command (``run``) in a real ``beflow --auto``, against the user's files in a temporary home."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.faults.conftest import beflow_run, secrets_in_history
from tests.support.projects import AutoProject, git

#: A fake cloud key in the user's home, which nothing may carry into a record, a reason or a comment.
AWS_KEY = "AKIAFAKE0123456789EX wJalrXUtnFEMI/K7MDENG/bPxRfiCYFAKEKEY"


@pytest.fixture
def home() -> Path:
    """The user's home of the test (HOME is a temporary directory), with credentials and a shell profile."""
    path = Path(os.environ["HOME"])
    (path / ".aws-credentials").write_text(f"[default]\naws_secret_access_key = {AWS_KEY}\n")
    (path / ".bashrc").write_text("# the user's own\nexport PATH=$HOME/bin:$PATH\n")
    return path


def unsandboxed(project: AutoProject) -> Path:
    """The project's run records, which an agent without the sandbox can write."""
    project.configure(sandbox={"enabled": False})
    return project.directory / ".beflow" / "runs"


def test_a_stderr_log_linked_to_a_users_file_is_never_read_into_the_reason_the_record_or_the_comment(
    auto_project: AutoProject, home: Path, no_leftover_processes: None
) -> None:
    runs = unsandboxed(auto_project)
    key = auto_project.new_issue(
        f'run for d in {runs}/*/; do ln -sf {home}/.aws-credentials "$d/stderr.log"; done',
        "crash 3",  # a failure whose reason is read from acpx's stderr
    )

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 1, done.stderr
    record = auto_project.only_record()
    assert record.outcome == "failed"
    issue = auto_project.issue(key)
    logs = beflow_run(auto_project, "runs", "logs", "latest")
    shown = beflow_run(auto_project, "runs", "show", "latest", "--json")
    record_files = [
        p.read_text() for p in auto_project.run_dir(record).rglob("*") if p.is_file() and not p.is_symlink()
    ]
    # Before: the key was the run's reason, in run.json and in the comment on the issue.
    for text in [record.stop_reason or "", *record_files, *(c.text for c in issue.comments), done.stdout, done.stderr]:
        assert "FAKEKEY" not in text and "AKIAFAKE" not in text
    for text in (logs.stdout, logs.stderr, shown.stdout):
        assert "FAKEKEY" not in text
    assert "stderr.log was not read" in logs.stdout and "is a symlink" in logs.stdout
    assert (home / ".aws-credentials").read_text().endswith(f"{AWS_KEY}\n")


@pytest.mark.parametrize("planted", ["log linked to ~/.bashrc", "hooks linked to the home directory"])
def test_a_hook_log_the_agent_replaced_is_never_written_through(
    auto_project: AutoProject, home: Path, planted: str, no_leftover_processes: None
) -> None:
    runs = unsandboxed(auto_project)
    auto_project.configure(hooks={"after_run": "echo hook-output-2718"})
    if planted == "log linked to ~/.bashrc":
        attack = f'mkdir -p "$d/hooks" && ln -s {home}/.bashrc "$d/hooks/after_run.log"'
    else:
        attack = f'rm -rf "$d/hooks" && ln -s {home} "$d/hooks"'
    key = auto_project.new_issue(f"run for d in {runs}/*/; do {attack}; done", "write hello.txt hi\\n")
    before = {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()}

    done = beflow_run(auto_project, "--auto", key)

    # Before: the hook's output was appended to ~/.bashrc (or to ~/after_run.log).
    assert {p.name: p.read_bytes() for p in home.iterdir() if p.is_file()} == before
    assert "hook-output-2718" not in (home / ".bashrc").read_text()
    assert done.code == 0, done.stderr
    assert "hook after_run was not run: its log cannot be written" in done.stdout + done.stderr
    assert "is a symlink" in done.stdout + done.stderr
    assert auto_project.only_record().outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_dangling_symlink_the_agent_committed_in_place_of_an_included_file_is_never_written_through(
    auto_project: AutoProject, home: Path, no_leftover_processes: None
) -> None:
    unsandboxed(auto_project)
    (auto_project.directory / ".gitignore").write_text(".env\n")
    git(auto_project.directory, "add", ".gitignore")
    git(auto_project.directory, "commit", "-q", "-m", "ignore .env")
    (auto_project.directory / ".env").write_text("DATABASE_PASSWORD=user-secret-1618\n")
    auto_project.configure(worktrees={"include": [".env"]})
    planted = home / ".profile"  # dangling: the user has none (a login shell would run what is written there)
    key = auto_project.new_issue(
        f"run rm .env && ln -s {planted} .env && git add -f .env && git commit -q -m link && echo committed",
        "write hello.txt hi\\n",
    )
    first = beflow_run(auto_project, "--auto", key)
    assert first.code == 0, first.stderr
    assert git(auto_project.directory, "cat-file", "-p", "beflow/1:.env") == str(planted)  # the link is on the branch
    assert not planted.exists()

    # The next round continues the branch: its worktree holds the link where the user's .env would go.
    assert beflow_run(auto_project, "issues", "set-status", key, "ready").code == 0
    second = beflow_run(auto_project, "--auto", key)

    assert second.code == 0, second.stderr
    assert not planted.exists()  # before: the user's .env was written there, outside the worktree
    assert (auto_project.directory / ".env").read_text() == "DATABASE_PASSWORD=user-secret-1618\n"
    assert [r.outcome for r in auto_project.records()] == ["no_changes", "succeeded"]  # newest first
    assert secrets_in_history(auto_project.directory) == []
