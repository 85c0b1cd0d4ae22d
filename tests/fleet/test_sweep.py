"""A worker's sweep at start of the worktrees a killed worker's runs left: the single-machine path's
(:func:`beflow.agent.session.close_killed_runs`), its git never led by a worktree's ``.git`` file."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from beflow.records.record import RunRecord, now
from beflow.records.store import RunStore
from beflow.repository import git, worktrees
from tests.conftest import git as run_git
from tests.support.projects import AutoProject


class NoneHeld:
    """The fleet's claims, as the service answers when no workflow runs the issues (no service needed)."""

    def held(self, keys: object) -> set[str]:
        return set()


def dead_pid() -> int:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return done.pid


def fingerprint(decoy: Path) -> dict[str, str]:
    """What git would change in ``decoy`` had it run there: its index, HEAD and refs."""
    files = [decoy / ".git" / "index", decoy / ".git" / "HEAD", *sorted((decoy / ".git" / "refs").rglob("*"))]
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest() for f in files if f.is_file()}


def test_the_sweep_never_runs_git_where_a_left_worktrees_git_file_points(
    auto_project: AutoProject, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.app import open_project
    from beflow.config import load_project
    from beflow.fleet import worker as fleet_worker

    repo = auto_project.directory
    auto_project.configure(engine={"kind": "temporal", "address": "127.0.0.1:1", "task_queue": "q"})
    decoy, marker = tmp_path / "decoy", tmp_path / "git-ran-in-the-decoy"
    decoy.mkdir()
    run_git(decoy, "init", "-q", "-b", "main")
    (decoy / "notes.txt").write_text("the user's\n")
    run_git(decoy, "add", "notes.txt")
    run_git(decoy, "-c", "user.name=u", "-c", "user.email=u@example.com", "commit", "-qm", "mine")
    tool = tmp_path / "fsmonitor"
    tool.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    tool.chmod(0o755)
    run_git(decoy, "config", "core.fsmonitor", str(tool))
    (decoy / "notes.txt").write_text("the user's edit\n")  # a change git status would see (and stat)
    before = fingerprint(decoy)

    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = worktrees.worktree_path(tmp_path / "worktrees", "7")
    with git.open_repo(repo) as repository:
        worktrees.create_worktree(repository, path, "beflow/7", "HEAD")
    store = RunStore(repo)
    killed = RunRecord(
        id="r-1", issue="7", mode="watch", agent="a", started_at=now(), pid=dead_pid(), worktree=str(path)
    )
    killed.base_commit = base
    store.create(killed, "prompt")
    (path / ".git").write_text(f"gitdir: {decoy / '.git'}\n")  # the agent's doing

    project = load_project(cwd=repo)
    monkeypatch.setattr(fleet_worker, "fleet_claims", lambda tracker: NoneHeld())
    said = fleet_worker.FleetWorker(project, open_project(project), 1, "w1").sweep()

    assert not marker.exists(), "git ran in the repository the worktree's .git file names"
    assert fingerprint(decoy) == before and (decoy / "notes.txt").read_text() == "the user's edit\n"
    ((key, what),) = said  # git refuses to remove a worktree whose .git does not point back: kept, and said
    assert key == "7" and what.startswith(f"kept {path}: git could not remove it") and path.is_dir()
    (record,) = store.records()
    assert record.worktree_kept and record.outcome != "running"
