"""The user's repository's git stays the user's: an agent that redirects the push, plants hooks and configured
commands, or rewrites the shared git directory achieves nothing (docs/safety.md, "Your repository's git")."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from beflow.trackers import Status
from tests.faults.conftest import beflow_run
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject, git


@pytest.fixture
def hosted(auto_project: AutoProject, github: FakeGitHub) -> AutoProject:
    """The project on the fake GitHub with pull requests on; ``origin`` is a bare repository the push must reach,
    and ``evil.git`` one that must never receive anything."""
    parent = auto_project.directory.parent
    git(parent, "clone", "-q", "--bare", str(auto_project.directory), str(parent / "origin.git"))
    git(parent, "init", "-q", "--bare", str(parent / "evil.git"))
    git(auto_project.directory, "remote", "add", "origin", str(parent / "origin.git"))
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url}, after_run={"pull_request": True}
    )
    return auto_project


def origin(project: AutoProject) -> Path:
    return project.directory.parent / "origin.git"


def evil(project: AutoProject) -> Path:
    return project.directory.parent / "evil.git"


def heads(bare: Path) -> list[str]:
    return git(bare, "for-each-ref", "--format=%(refname)", "refs/heads/beflow").split()


def with_token(**extra: str) -> dict[str, str]:
    return {"GITHUB_TOKEN": TOKEN, **extra}


def git_dir_state(directory: Path) -> dict[str, tuple[int, bytes | str | None]]:
    """Every guarded path of the repository's git directory: its mode and bytes (a symlink: its target)."""
    root = directory / ".git"
    state: dict[str, tuple[int, bytes | str | None]] = {}
    for name in ("config", "config.worktree", "hooks", "info", "objects/info/alternates"):
        for path in [root / name, *sorted((root / name).rglob("*"))] if (root / name).exists() else []:
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                state[str(path.relative_to(root))] = (info.st_mode, os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                state[str(path.relative_to(root))] = (info.st_mode, None)
            else:
                state[str(path.relative_to(root))] = (info.st_mode, path.read_bytes())
    return state


def included_config() -> Path:
    """A file the user's global git config includes (``include.path``): beflow guards the global config files, not
    what they include, so the agent's changes there outlive its run and only beflow's own git can ignore them."""
    extra = Path(os.environ["HOME"]) / "included.gitconfig"
    extra.write_text("")
    with open(os.environ["GIT_CONFIG_GLOBAL"], "a") as config:
        config.write(f"[include]\n\tpath = {extra}\n")
    return extra


def test_a_push_redirected_by_the_agent_still_goes_to_origin_and_nowhere_else(
    hosted: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    # A file the user's global config includes is outside what beflow guards: the agent's rewrites there outlive
    # the run, and only the push itself can ignore them.
    to, away, extra = origin(hosted), evil(hosted), included_config()
    github.add_issue(
        "Add notes",
        labels=["beflow", "beflow:ready"],
        body="\n".join(
            [
                "acp-test: write notes.txt hi\\n",
                f"acp-test: run git config --file {extra} url.{away}.pushInsteadOf {to}",
                f"acp-test: run git config --file {extra} url.{away}.insteadOf {to}",
            ]
        ),
    )

    done = beflow_run(hosted, "--auto", "1", env=with_token())

    assert done.code == 0, done.stderr
    record = hosted.only_record()
    assert record.outcome == "succeeded" and record.pull_request
    assert git(to, "rev-parse", "refs/heads/beflow/1").strip() == record.commit
    assert heads(away) == []
    assert TOKEN not in done.stdout + done.stderr


def test_hooks_and_commands_the_agent_plants_never_run_in_beflows_git(
    hosted: AutoProject, github: FakeGitHub, tmp_path: Path, no_leftover_processes: None
) -> None:
    marker = tmp_path / "planted-ran"
    hooks = tmp_path / "planted-hooks"
    tool = tmp_path / "planted-tool"
    extra = included_config()  # planted where the global config includes it: it outlives the run
    script = f'#!/bin/sh\\necho "$0 $*" >> {marker}\\nenv >> {marker}\\ncat\\n'
    names = "pre-commit post-commit reference-transaction pre-push pre-auto-gc post-checkout post-index-change"
    plant = [
        f"mkdir -p {hooks} && printf '{script}' > {tool} && chmod +x {tool}",
        f"for h in {names}; do cp {tool} {hooks}/$h; done",
        f"git config --file {extra} core.hooksPath {hooks}",
        f"git config --file {extra} core.fsmonitor {tool}",
        f"git config --file {extra} filter.evil.clean {tool} && git config --file {extra} filter.evil.required true",
        f"git config --file {extra} filter.also.process {tool}",
        f"git config --file {extra} diff.external {tool}",
        f"git config --file {extra} commit.gpgSign true && git config --file {extra} gpg.program {tool}",
        "printf '*.txt filter=evil\\n*.md filter=also\\n' > .gitattributes",
    ]
    body = ["acp-test: write notes.txt the agent's work\\n", *[f"acp-test: run {line}" for line in plant]]
    github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="\n".join(body))

    done = beflow_run(hosted, "--auto", "1", env=with_token())

    assert done.code == 0, done.stderr
    assert (tool).exists()  # the agent did plant them
    assert not marker.exists(), marker.read_text()[:3000]
    record = hosted.only_record()
    assert record.outcome == "succeeded"
    assert git(origin(hosted), "rev-parse", "refs/heads/beflow/1").strip() == record.commit
    # Committed as the agent left it: no planted filter ran on it.
    assert git(hosted.directory, "show", f"{record.commit}:notes.txt") == "the agent's work\n"


def test_a_run_that_changed_nothing_runs_no_planted_hook_while_its_fresh_branch_is_deleted(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    # A run that ends without work deletes the branch it made (`git update-ref -d`): a reference-transaction hook
    # the agent planted where the user's global config includes it would run there, after the agent, with beflow's
    # environment.
    marker, hooks, extra = tmp_path / "planted-ran", tmp_path / "planted-hooks", included_config()
    plant = [
        f"mkdir -p {hooks} && printf '#!/bin/sh\\necho \"$0 $*\" >> {marker}\\ncat\\n' > {hooks}/reference-transaction",
        f"chmod +x {hooks}/reference-transaction && git config -f {extra} core.hooksPath {hooks}",
    ]
    auto_project.new_issue(*(f"run {line}" for line in plant), title="Look only")

    done = beflow_run(auto_project, "--auto", "1")

    assert done.code == 0, done.stderr
    record = auto_project.only_record()
    assert record.outcome == "no_changes", record.stop_reason
    assert (hooks / "reference-transaction").exists()  # the agent did plant it
    assert "beflow/1" not in git(auto_project.directory, "branch", "--list", "beflow/1")  # the branch went
    assert not marker.exists(), marker.read_text()[:3000]


def tampering(project: AutoProject) -> list[str]:
    """Directives that change every guarded part of the repository's git directory, from the worktree."""
    away = evil(project)
    common = "$(git rev-parse --git-common-dir)"
    return [
        f"git config remote.origin.pushurl {away}",
        f"git config --add url.{away}.pushInsteadOf {origin(project)}",
        f"printf '#!/bin/sh\\nexit 0\\n' > {common}/hooks/pre-push && chmod +x {common}/hooks/pre-push",
        f"rm {common}/hooks/pre-commit.sample",
        f"chmod 777 {common}/hooks/pre-rebase.sample",
        f"mkdir -p {common}/hooks/nested && echo x > {common}/hooks/nested/file",
        f"echo '*.secret' >> {common}/info/exclude && echo '* filter=x' > {common}/info/attributes",
        f"ln -s /etc/passwd {common}/info/link",
    ]


def test_an_agent_that_changes_the_repositorys_git_directory_is_put_back_and_not_published(
    hosted: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    before = git_dir_state(hosted.directory)
    assert "hooks/pre-commit.sample" in before  # git's samples: one is deleted, one made world-writable
    body = ["acp-test: write notes.txt hi\\n", *[f"acp-test: run {line}" for line in tampering(hosted)]]
    github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="\n".join(body))

    done = beflow_run(hosted, "--auto", "1", env=with_token())

    assert done.code == 1
    assert git_dir_state(hosted.directory) == before  # byte for byte, modes, deleted and added files
    record = hosted.only_record()
    assert record.outcome == "failed" and record.commit is None and record.pull_request is None
    assert record.permanent  # a watch does not hand the issue to an agent again by itself
    assert {"config", "hooks/pre-push", "hooks/pre-commit.sample", "hooks/pre-rebase.sample"} <= set(
        record.git_restored
    )
    assert {"hooks/nested", "hooks/nested/file", "info/exclude", "info/attributes", "info/link"} <= set(
        record.git_restored
    )
    assert "which a run must not touch; beflow put them back" in (record.stop_reason or "")
    assert "beflow/1 was not updated" in (record.stop_reason or "")
    assert "which a run must not touch; beflow put them back" in done.stderr + done.stdout  # on the terminal
    assert heads(origin(hosted)) == [] and heads(evil(hosted)) == []
    assert github.pulls == {}
    assert "beflow/1" not in hosted.branches()
    worktree = Path(record.worktree or "")
    assert (worktree / "notes.txt").read_text() == "hi\n"  # the work is kept, uncommitted, for a person
    assert "beflow:failed" in github.issue_labels(1)
    shown = beflow_run(hosted, "runs", "show", record.id, env=with_token())
    assert "git put back: config, " in shown.stdout


def test_the_same_in_attend(auto_project: AutoProject, no_leftover_processes: None) -> None:
    before = git_dir_state(auto_project.directory)
    key = auto_project.new_issue(*[f"run {line}" for line in tampering(auto_project)])

    done = beflow_run(auto_project, "--attend", key)

    assert done.code == 1
    assert git_dir_state(auto_project.directory) == before
    record = auto_project.only_record()
    assert record.outcome == "failed"
    assert "config" in record.git_restored and "hooks/pre-push" in record.git_restored
    assert "which a run must not touch; beflow put them back" in done.stderr + done.stdout
    assert auto_project.issue(key).status != Status.REVIEW


def test_a_beflow_killed_while_the_agent_has_changed_the_git_directory_is_put_back_by_the_next_command(
    auto_project: AutoProject, tmp_path: Path
) -> None:
    before = git_dir_state(auto_project.directory)
    changed = tmp_path / "changed"
    key = auto_project.new_issue(
        *[f"run {line}" for line in tampering(auto_project)], f"run touch {changed}", "sleep 60"
    )
    started = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", key],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not changed.exists():
        assert started.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    assert git_dir_state(auto_project.directory) != before
    tree = [started.pid, *(child.pid for child in psutil.Process(started.pid).children(recursive=True))]
    for pid in tree:  # beflow, acpx and the agent, all at once: nothing gets to clean up
        os.kill(pid, signal.SIGKILL)
    started.wait()

    done = beflow_run(auto_project, "restore")

    assert done.code == 0, done.stderr
    assert "put back config" in done.stdout and "which was killed" in done.stdout
    assert git_dir_state(auto_project.directory) == before
    assert beflow_run(auto_project, "restore").stdout.strip() == "Nothing to restore."


def test_while_another_beflows_agent_has_changed_the_config_a_run_runs_none_of_it_and_both_runs_fail(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    before = git_dir_state(auto_project.directory)
    marker, tampered, release = tmp_path / "planted-ran", tmp_path / "tampered", tmp_path / "release"
    hooks = tmp_path / "planted-hooks"
    hostile = auto_project.new_issue(
        f"run mkdir -p {hooks} && printf '#!/bin/sh\\\\nenv >> {marker}\\\\n' > {hooks}/post-checkout",
        f"run chmod +x {hooks}/post-checkout && git config core.hooksPath {hooks} && touch {tampered}",
        f"run while [ ! -e {release} ]; do sleep 0.1; done",
        title="hostile",
    )
    innocent = auto_project.new_issue("write notes.txt hi\\n", title="innocent")
    first = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", hostile],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not tampered.exists():
        assert first.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)

    # A second beflow, while the first one's agent holds the planted core.hooksPath in the shared config.
    second = beflow_run(auto_project, "--auto", innocent)
    release.touch()
    first.communicate(timeout=60)

    assert not marker.exists(), marker.read_text()[:2000]  # its `git worktree add` ran no planted hook
    assert git_dir_state(auto_project.directory) == before
    # Either agent may have done it, as far as beflow can tell: neither run is delivered.
    records = {r.issue: r for r in auto_project.records()}
    assert records[innocent].outcome == "failed" and records[innocent].git_restored == ["config"]
    assert records[hostile].outcome == "failed" and records[hostile].git_restored == ["config"], first.returncode
    assert second.code == 1
    assert auto_project.branches() == ["main"]
