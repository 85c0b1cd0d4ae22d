"""After an agent, the user's repository is not trusted: beflow's push goes only where beflow resolved, and no git
command beflow runs starts a hook or a configured command (real git, real hooks that would leave a marker)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from beflow.errors import BeflowError
from beflow.repository import commits, git, leaks, remote, status, worktrees
from tests.conftest import git as run_git


@pytest.fixture
def remotes(repo: Path) -> tuple[Path, Path]:
    """``origin``, a bare repository the push must reach, and ``evil``, one that must never receive it."""
    origin, evil = repo.parent / "origin.git", repo.parent / "evil.git"
    for bare in (origin, evil):
        run_git(repo.parent, "init", "-q", "--bare", str(bare))
    run_git(repo, "remote", "add", "origin", str(origin))
    run_git(repo, "branch", "beflow/1")
    return origin, evil


def refs(bare: Path) -> str:
    return run_git(bare, "for-each-ref", "--format=%(refname)")


@pytest.mark.parametrize(
    "redirect",
    [
        ["remote.origin.pushurl", "{evil}"],
        ["url.{evil}.insteadOf", "{origin}"],
        ["url.{evil}.pushInsteadOf", "{origin}"],
        ["remote.{origin}.pushurl", "{evil}"],  # a remote named as the URL itself
        ["--global", "url.{evil}.pushInsteadOf", "{origin}"],
    ],
)
def test_the_push_goes_to_the_url_beflow_resolved_whatever_the_config_says(
    repo: Path, remotes: tuple[Path, Path], redirect: list[str]
) -> None:
    origin, evil = remotes
    url = remote.remote_url(repo, "origin", push=True)
    assert url == str(origin)
    run_git(repo, "config", *[part.format(origin=origin, evil=evil) for part in redirect])
    commit = run_git(repo, "rev-parse", "beflow/1").strip()

    remote.push(repo, url, commit, "beflow/1")

    assert refs(origin) == "refs/heads/beflow/1\n"
    assert refs(evil) == ""


def test_the_push_runs_no_hook_and_no_configured_ssh(repo: Path, remotes: tuple[Path, Path]) -> None:
    origin, _ = remotes
    marker = repo.parent / "marker"
    hook = repo / ".git" / "hooks" / "pre-push"
    hook.write_text(f"#!/bin/sh\nenv > {marker}\n")
    hook.chmod(0o755)
    elsewhere = repo.parent / "hooks"
    elsewhere.mkdir()
    (elsewhere / "pre-push").write_text(hook.read_text())
    (elsewhere / "pre-push").chmod(0o755)
    run_git(repo, "config", "--global", "core.hooksPath", str(elsewhere))
    commit = run_git(repo, "rev-parse", "beflow/1").strip()

    remote.push(repo, str(origin), commit, "beflow/1")

    assert refs(origin) == "refs/heads/beflow/1\n"
    assert not marker.exists()


def test_a_push_that_is_not_a_fast_forward_is_refused(repo: Path, remotes: tuple[Path, Path]) -> None:
    origin, _ = remotes
    first = run_git(repo, "rev-parse", "beflow/1").strip()
    remote.push(repo, str(origin), first, "beflow/1")
    (repo / "other.txt").write_text("x\n")
    run_git(repo, "add", "other.txt")
    run_git(repo, "commit", "-q", "--amend", "-m", "rewritten")
    rewritten = run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "reset", "-q", "--hard", first)
    run_git(repo, "branch", "-f", "beflow/1", rewritten)

    with pytest.raises(BeflowError, match=r"git push .* failed"):
        remote.push(repo, str(origin), rewritten, "beflow/1")
    assert run_git(origin, "rev-parse", "beflow/1").strip() == first


def planted(repo: Path, marker: Path) -> None:
    """Everything an agent can plant that git would run: hooks (the repository's and a hooksPath of the global
    config), an fsmonitor, a clean filter named by a .gitattributes, a textconv and an external diff."""
    script = f'#!/bin/sh\necho "$0 $*" >> {marker}\nenv >> {marker}\ncat\n'
    hooks = repo.parent / "planted-hooks"
    hooks.mkdir(exist_ok=True)
    for directory in (repo / ".git" / "hooks", hooks):
        for name in (
            "pre-commit",
            "prepare-commit-msg",
            "commit-msg",
            "post-commit",
            "reference-transaction",
            "post-rewrite",
            "pre-auto-gc",
            "post-checkout",
            "pre-push",
            "fsmonitor-watchman",
        ):
            (directory / name).write_text(script)
            (directory / name).chmod(0o755)
    tool = repo.parent / "tool"
    tool.write_text(script)
    tool.chmod(0o755)
    run_git(repo, "config", "--global", "core.hooksPath", str(hooks))
    run_git(repo, "config", "core.fsmonitor", str(tool))
    run_git(repo, "config", "filter.evil.clean", str(tool))
    run_git(repo, "config", "filter.evil.required", "true")
    run_git(repo, "config", "--global", "filter.also.process", str(tool))
    run_git(repo, "config", "diff.evil.textconv", str(tool))
    run_git(repo, "config", "diff.external", str(tool))
    run_git(repo, "config", "commit.gpgSign", "true")
    run_git(repo, "config", "gpg.program", str(tool))
    run_git(repo, "config", "gc.auto", "1")


def test_no_git_command_after_an_agent_runs_a_hook_or_a_configured_command(repo: Path, tmp_path: Path) -> None:
    tree = worktrees.create_worktree(git.open_repo(repo), tmp_path / "wt" / "1", "beflow/1", "HEAD")
    marker = tmp_path / "marker"
    planted(repo, marker)
    (tree.path / ".gitattributes").write_text("*.txt filter=evil diff=evil\n*.md filter=also\n")
    (tree.path / "notes.txt").write_text("the agent's work\n")
    os.environ["BEFLOW_PROBE_SECRET"] = "probe-secret-value"
    try:
        with git.distrusting():
            commit = commits.commit_all(tree.path, "work")
            assert commit is not None
            assert leaks.find_leaks(tree.path, tree.base_commit, commit, [b"nothing"], managed=True) == []
            commits.publish(tree.path, tree.branch, commit, None, "run")
            assert status.changed_files(tree.path, tree.base_commit, commit) == ["A\t.gitattributes", "A\tnotes.txt"]
            assert "the agent's work" in status.diff(tree.path, tree.base_commit, commit)
            assert not status.is_dirty(tree.path)
            status.checkout_status(tree.path)
            commits.uncommit(tree.path, tree.base_commit)
            worktrees.remove_worktree(git.open_repo(repo), tree.path)
    finally:
        del os.environ["BEFLOW_PROBE_SECRET"]
    assert not marker.exists(), marker.read_text()[:2000]
    # Committed as it is: the planted clean filter did not run.
    assert run_git(repo, "show", f"{commit}:notes.txt") == "the agent's work\n"


def test_outside_an_agents_run_the_users_hooks_still_run(repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)
    worktrees.create_worktree(git.open_repo(repo), tmp_path / "wt" / "1", "beflow/1", "HEAD")
    assert marker.exists()


def test_the_settings_reach_the_git_that_git_starts_in_a_submodule(repo: Path, tmp_path: Path) -> None:
    library = tmp_path / "library"
    library.mkdir()
    run_git(library, "init", "-q", "-b", "main")
    (library / "lib.txt").write_text("lib\n")
    run_git(library, "add", "lib.txt")
    run_git(library, "commit", "-q", "-m", "lib")
    run_git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib")
    run_git(repo, "commit", "-q", "-m", "with a submodule")
    marker = tmp_path / "marker"
    tool = tmp_path / "tool"
    tool.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\n')
    tool.chmod(0o755)
    # Planted in the submodule's own config, which `git status` of the superproject reaches by starting a git there.
    run_git(repo / "lib", "config", "core.fsmonitor", str(tool))
    (repo / "lib" / "lib.txt").write_text("changed\n")

    with git.distrusting():
        assert status.checkout_status(repo)["lib"].strip() == "M"
    assert not marker.exists()


def test_credentials_in_the_url_are_never_in_a_git_argv_nor_in_the_error(
    repo: Path, remotes: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = shutil.which("git")
    assert real is not None
    wrapper, log = tmp_path / "git-wrapper", tmp_path / "argv.log"
    wrapper.mkdir()
    (wrapper / "git").write_text(f'#!/bin/sh\necho "$@" >> "{log}"\nexec "{real}" "$@"\n')
    (wrapper / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper}{os.pathsep}{os.environ['PATH']}")
    commit = run_git(repo, "rev-parse", "beflow/1").strip()

    # /proc/<pid>/cmdline is readable by every user: a password in the URL must not be there (port 1: refused).
    with pytest.raises(BeflowError) as raised:
        remote.push(repo, "https://someone:s3cret-password@127.0.0.1:1/octo/hello.git", commit, "beflow/1")

    assert "s3cret-password" not in str(raised.value)
    assert "https://127.0.0.1:1/octo/hello.git" in str(raised.value)
    assert "push" in log.read_text() and "s3cret-password" not in log.read_text()


@pytest.mark.parametrize(
    "redirect",
    [["url.{evil}.insteadOf", "{origin}"], ["--global", "url.{evil}.insteadOf", "{origin}"]],
)
def test_a_rounds_fetch_reads_the_branch_from_the_url_beflow_resolved_and_runs_no_hook(
    repo: Path, remotes: tuple[Path, Path], redirect: list[str]
) -> None:
    origin, evil = remotes
    first = run_git(repo, "rev-parse", "beflow/1").strip()
    remote.push(repo, str(origin), first, "beflow/1")
    # Another machine pushed a round on top; the evil remote has a branch of the same name.
    other = repo.parent / "other"
    run_git(repo.parent, "clone", "-q", "--branch", "beflow/1", str(origin), str(other))
    run_git(other, "-c", "user.name=o", "-c", "user.email=o@o", "commit", "-q", "--allow-empty", "-m", "round")
    run_git(other, "push", "-q", "origin", "beflow/1")
    theirs = run_git(other, "rev-parse", "HEAD").strip()
    run_git(other, "push", "-q", str(evil), "HEAD:refs/heads/beflow/1")
    run_git(evil, "update-ref", "refs/heads/beflow/1", first)
    run_git(repo, "config", *[part.format(origin=origin, evil=evil) for part in redirect])
    marker = repo.parent / "marker"
    for name in ("reference-transaction", "post-checkout"):
        hook = repo / ".git" / "hooks" / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        hook.chmod(0o755)

    assert remote.fetch(repo, str(origin), "beflow/1") == theirs
    assert remote.fetch(repo, str(origin), "beflow/none") is None

    assert run_git(repo, "cat-file", "-t", theirs).strip() == "commit"  # its objects are here now
    assert run_git(repo, "rev-parse", "beflow/1").strip() == first  # and no branch moved
    assert not marker.exists()
