"""The repository guard beyond the git directory's own files: the user's global git config (whose hooks and
commands the next run's `git worktree add` would run), submodules' git directories, other worktrees'
``config.worktree``, and ``--open``'s native client. Each run is beflow as a real process, the pinned acpx and the
test agent (docs/safety.md, "Your repository's git")."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.faults.test_users_git import git_dir_state, tampering
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow

SAID = "which a run must not touch; beflow put them back"


def test_an_agent_that_plants_hooks_in_the_global_git_config_is_put_back_and_the_next_run_runs_none(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    gitconfig = Path(os.environ["GIT_CONFIG_GLOBAL"])
    before = gitconfig.read_bytes()
    marker, hooks = tmp_path / "planted-ran", tmp_path / "planted-hooks"
    # One run after the other, in one watch: the second's `worktree add` comes after the first agent's work.
    auto_project.configure(watch={"concurrency": 1, "interval": 0.2})
    hostile = auto_project.new_issue(
        "write notes.txt hi\\n",
        f"run mkdir -p {hooks} && printf '#!/bin/sh\\\\necho \"$0\" >> {marker}\\\\n' > {hooks}/post-checkout",
        f"run chmod +x {hooks}/post-checkout && git config --global core.hooksPath {hooks}",
        f"run git config --global core.fsmonitor {hooks}/post-checkout",
        title="hostile",
        priority=1,
    )
    innocent = auto_project.new_issue("write other.txt hi\\n", title="innocent", priority=2)

    watching = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "watch"],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not [r for r in auto_project.records(innocent) if r.outcome != "running"]:
        assert watching.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)
    watching.send_signal(signal.SIGTERM)
    stdout, stderr = watching.communicate(timeout=60)

    assert gitconfig.read_bytes() == before  # byte for byte
    assert (hooks / "post-checkout").exists()  # the agent did plant it
    assert not marker.exists(), marker.read_text()  # and the next run's `git worktree add` ran none of it
    first, second = (auto_project.records(key)[0] for key in (hostile, innocent))
    assert first.outcome == "failed" and first.commit is None and first.permanent
    assert first.git_restored == [str(gitconfig)]
    assert f"the agent changed your global git config {gitconfig}, {SAID}" in (first.stop_reason or "")
    assert f"beflow/{hostile}" not in auto_project.branches()
    assert f"your global git config {gitconfig}, {SAID}" in stdout + stderr  # on the terminal
    assert second.outcome == "succeeded", second.stop_reason
    assert auto_project.branch_files(f"beflow/{innocent}")["other.txt"] == "hi\n"


def test_submodules_git_directories_and_other_worktrees_config_are_put_back_and_not_published(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    library = tmp_path / "library"
    library.mkdir()
    git(library, "init", "-q", "-b", "main")
    git(library, "commit", "-q", "--allow-empty", "-m", "lib")
    repo = auto_project.directory
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    git(repo, "commit", "-q", "-m", "a submodule")
    users = tmp_path / "users-worktree"  # the user's own linked worktree
    git(repo, "worktree", "add", "-q", "--detach", str(users))
    worktree_config = repo / ".git" / "worktrees" / users.name / "config.worktree"
    worktree_config.write_text("[core]\n\tbare = false\n")
    module = repo / ".git" / "modules" / "lib"
    guarded = [module / "config", worktree_config, *sorted((module / "hooks").iterdir()), module / "info" / "exclude"]
    before = {path: path.read_bytes() for path in guarded}
    common = "$(git rev-parse --git-common-dir)"
    key = auto_project.new_issue(
        "write notes.txt hi\\n",
        f"run git config --file {common}/modules/lib/config core.hooksPath /tmp/planted",
        f"run printf '#!/bin/sh\\\\nexit 0\\\\n' > {common}/modules/lib/hooks/post-checkout",
        f"run echo '* filter=evil' > {common}/modules/lib/info/attributes",
        f"run git config --file {common}/worktrees/{users.name}/config.worktree core.fsmonitor /tmp/planted",
    )

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 1, done.stdout + done.stderr
    assert {path: path.read_bytes() for path in guarded} == before
    assert not (module / "hooks" / "post-checkout").exists() and not (module / "info" / "attributes").exists()
    record = auto_project.only_record()
    assert record.outcome == "failed" and record.commit is None
    assert set(record.git_restored) == {
        "modules/lib/config",
        "modules/lib/hooks/post-checkout",
        "modules/lib/info/attributes",
        f"worktrees/{users.name}/config.worktree",
    }
    assert f"beflow/{key}" not in auto_project.branches()
    assert SAID in done.stdout + done.stderr


def test_the_same_in_open(auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None) -> None:
    before = git_dir_state(auto_project.directory)
    client = tmp_path / "client.sh"  # the native client, as a hostile agent in it would act
    client.write_text("\n".join(tampering(auto_project)) + "\n")
    auto_project.configure(open={"default": ["sh", str(client), "{prompt}"]})
    key = auto_project.new_issue("write notes.txt hi\\n")

    done = beflow_run(auto_project, "--open", key)

    assert done.code == 1, done.stdout + done.stderr  # the client exited 0; the run failed all the same
    assert git_dir_state(auto_project.directory) == before
    record = auto_project.only_record()
    assert record.outcome == "failed" and SAID in (record.stop_reason or "")
    assert "config" in record.git_restored and "hooks/pre-push" in record.git_restored
    assert SAID in done.stdout + done.stderr
    assert auto_project.issue(key).status != Status.REVIEW
