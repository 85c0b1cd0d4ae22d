"""Secrets never reach git: whatever the agent commits during the run, and whatever fails while the file is put
back, no commit of any branch beflow writes holds a byte of what it injected."""

from __future__ import annotations

from pathlib import Path

from beflow.trackers import Status
from tests.faults.conftest import beflow_run, secrets_in_files, secrets_in_history
from tests.support.projects import AutoProject, git


def test_an_agent_that_commits_everything_itself_commits_its_work_and_never_the_injected_file(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    key = auto_project.new_issue("write hello.txt hi\\n", "run git add -A && git commit -q -m agent-commit")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded"
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "hello.txt": "hi\n"}
    assert record.commit == git(auto_project.directory, "rev-parse", "beflow/1").strip()
    assert record.changed_files == ["A\thello.txt"]
    assert secrets_in_history(auto_project.directory) == []
    assert secrets_in_files(auto_project.directory / ".beflow") == []


def test_an_agent_that_forces_the_injected_file_into_a_commit_does_not_move_the_branch(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    # Sneaky the first time only: the next run, in the kept worktree, finds hello.txt there already.
    key = auto_project.new_issue(
        "run [ -e hello.txt ] || (git add -f .acpxrc.json && git commit -q -m sneaky)", "write hello.txt hi\\n"
    )

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 1
    record = auto_project.only_record()
    assert record.outcome == "failed"
    assert ".acpxrc.json" in (record.stop_reason or "") and "beflow/1 was not updated" in (record.stop_reason or "")
    assert "beflow/1" not in auto_project.branches()
    assert record.commit is None and record.worktree_kept
    # The agent's work is kept as uncommitted changes; the managed file is back to what it was (absent).
    worktree = Path(record.worktree or "")
    assert (worktree / "hello.txt").read_text() == "hi\n"
    assert not (worktree / ".acpxrc.json").exists()
    assert git(worktree, "status", "--porcelain").split() == ["??", "hello.txt"]
    assert secrets_in_history(auto_project.directory) == []
    assert auto_project.issue(key).status == Status.FAILED

    # The next run of the issue starts from the kept worktree and delivers the work.
    auto_project.tracker.set_status(key, Status.READY)
    again = beflow_run(auto_project, "--auto", key)
    assert again.code == 0, again.stderr
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "hello.txt": "hi\n"}
    assert secrets_in_history(auto_project.directory) == []


def test_when_the_file_cannot_be_put_back_nothing_is_committed(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    # A tracked .acpxrc.json, which beflow's commit would stage; the after_run hook edits it (so the restore saves
    # that version aside first) and makes the saved/ folder impossible to create: the restore fails.
    (auto_project.directory / ".acpxrc.json").write_text('{"ttl": 5}\n')
    git(auto_project.directory, "add", ".acpxrc.json")
    git(auto_project.directory, "commit", "-q", "-m", "acpx settings")
    auto_project.configure(hooks={"after_run": 'echo " " >> .acpxrc.json; printf x > "$BEFLOW_HOME/saved"'})
    key = auto_project.new_issue("write hello.txt hi\\n")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 1
    record = auto_project.only_record()
    assert "could not be put back" in (record.stop_reason or "")
    assert "beflow/1" not in auto_project.branches() and record.commit is None
    assert secrets_in_history(auto_project.directory) == []
    assert secrets_in_files(auto_project.directory / ".beflow") == []


def test_a_path_the_agent_writes_is_no_secret_though_beflows_own_server_gets_it(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    # beflow's own MCP server gets BEFLOW_HOME in its env; the worktree lives under it, so agents write it often.
    auto_project.configure(mcp={"enabled": True, "self": True})
    key = auto_project.new_issue('run pwd > where.txt && echo "$BEFLOW_HOME" >> where.txt')

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr
    assert auto_project.only_record().outcome == "succeeded"
    assert "where.txt" in auto_project.branch_files("beflow/1")
    assert secrets_in_history(auto_project.directory) == []
