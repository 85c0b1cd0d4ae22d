"""Delivery on its own: what a run's worktree holds after its agent → committed, checked, put on its branch and
proposed — or refused, and kept. Real git in a temporary repository, the fake GitHub as the code host; no agent
runs (the end-to-end tests in test_runner.py and tests/faults/ prove the wiring)."""

from __future__ import annotations

import contextlib
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from beflow.codehosts.github import GitHubCodeHost
from beflow.config import GitHubCodeHostSettings
from beflow.repository import git, worktrees
from beflow.run import delivery
from beflow.trackers.claims import ClaimLost
from beflow.trackers.github_api import Api
from tests.conftest import git as run_git
from tests.support.github import TOKEN, FakeGitHub

SECRET = b"sk-delivery-secret-0123456789"


@pytest.fixture
def worktree(repo: Path, tmp_path: Path) -> Iterator[tuple[worktrees.Worktree, Any]]:
    """A run's worktree of ``beflow/1`` (HEAD detached), and the repository's git.Repo."""
    opened = git.open_repo(repo)
    made = worktrees.create_worktree(opened, tmp_path / "worktrees" / "1", "beflow/1", "HEAD")
    try:
        yield made, opened
    finally:
        opened.close()


def job(made: tuple[worktrees.Worktree, Any], **changes: Any) -> delivery.Job:
    tree, opened = made
    defaults: dict[str, Any] = {
        "worktree": tree,
        "directory": Path(opened.working_tree_dir),
        "outcome": "succeeded",
        "reason": "the agent finished",
        "message": "task\n\nbeflow run r1 (succeeded) on issue 1.",
        "needles": [SECRET],
        "run_id": "r1",
    }
    return delivery.Job(**(defaults | changes))


def branches(repo: Path) -> list[str]:
    return run_git(repo, "branch", "--format=%(refname:short)").split()


def branch_files(repo: Path, branch: str) -> dict[str, str]:
    names = run_git(repo, "ls-tree", "-r", "--name-only", branch).split()
    return {name: run_git(repo, "show", f"{branch}:{name}") for name in names}


def test_the_work_is_committed_on_the_branch(repo: Path, worktree: tuple[worktrees.Worktree, Any]) -> None:
    tree = worktree[0]
    (tree.path / "a.txt").write_text("x")

    verdict = delivery.deliver(job(worktree))

    assert (verdict.delivered, verdict.outcome, verdict.worktree_kept) == ("committed", "succeeded", False)
    assert verdict.commit == run_git(repo, "rev-parse", "beflow/1").strip()
    assert verdict.changed_files == ("A\ta.txt",) and verdict.proposed is None


def test_when_the_commit_fails_the_work_is_kept_and_named(repo: Path, worktree: tuple[worktrees.Worktree, Any]) -> None:
    # A nested repository without a commit, which `git add` cannot stage.
    tree = worktree[0]
    (tree.path / "a.txt").write_text("x")
    run_git(tree.path, "init", "-q", "vendor/lib")

    verdict = delivery.deliver(job(worktree))

    assert (verdict.delivered, verdict.outcome, verdict.worktree_kept) == ("failed", "failed", True)
    assert f"the work is kept in {tree.path}" in verdict.reason
    assert (tree.path / "a.txt").read_text() == "x" and verdict.commit is None


def test_when_the_tree_is_dirty_after_the_commit_the_worktree_is_kept_and_named(
    repo: Path, worktree: tuple[worktrees.Worktree, Any]
) -> None:
    # A nested repository with a commit is staged as a gitlink; the file changed inside it stays uncommitted.
    tree = worktree[0]
    (tree.path / "a.txt").write_text("x")
    run_git(tree.path, "init", "-q", "sub")
    run_git(tree.path / "sub", "commit", "-q", "--allow-empty", "-m", "x")
    (tree.path / "sub" / "f").write_text("y\n")

    verdict = delivery.deliver(job(worktree))

    assert verdict.worktree_kept and verdict.dirty and tree.path.is_dir()
    assert f"the worktree is kept (uncommitted changes): {tree.path}" in verdict.reason
    assert verdict.commit is not None and "a.txt" in run_git(repo, "ls-tree", "--name-only", "beflow/1").split()


def test_without_commits_the_changes_stay_in_the_kept_worktree(
    repo: Path, worktree: tuple[worktrees.Worktree, Any]
) -> None:
    tree = worktree[0]
    (tree.path / "c.txt").write_text("changed")

    verdict = delivery.deliver(job(worktree, message=None))

    assert verdict.outcome == "succeeded" and verdict.commit is None and verdict.delivered == "unchanged"
    assert verdict.changed_files == ("??\tc.txt",)
    assert verdict.worktree_kept and "after_run.commit is false" in verdict.reason
    assert (tree.path / "c.txt").read_text() == "changed"


def test_a_run_that_changes_nothing_on_a_branch_with_earlier_work_keeps_the_branch(repo: Path, tmp_path: Path) -> None:
    run_git(repo, "branch", "beflow/1")
    run_git(repo, "worktree", "add", "-q", str(tmp_path / "earlier"), "beflow/1")
    (tmp_path / "earlier" / "first.txt").write_text("1")
    run_git(tmp_path / "earlier", "add", "first.txt")
    run_git(tmp_path / "earlier", "commit", "-q", "-m", "earlier run")
    run_git(repo, "worktree", "remove", str(tmp_path / "earlier"))
    opened = git.open_repo(repo)
    try:
        tree = worktrees.create_worktree(opened, tmp_path / "worktrees" / "1", "beflow/1", "HEAD")
        assert tree.continued
        (tree.path / "first.txt").write_text("1")  # the same content again: nothing new to commit

        verdict = delivery.deliver(job((tree, opened)))
    finally:
        opened.close()

    assert (verdict.outcome, verdict.delivered, verdict.commit) == ("no_changes", "unchanged", None)
    assert branch_files(repo, "beflow/1")["first.txt"] == "1"


def test_a_secret_in_a_commit_of_the_run_is_refused_and_the_work_kept_uncommitted(
    repo: Path, worktree: tuple[worktrees.Worktree, Any]
) -> None:
    # The agent committed a secret itself, under a name of its own, then went on working.
    tree = worktree[0]
    (tree.path / "settings.json").write_bytes(b'{"key": "' + SECRET + b'"}')
    run_git(tree.path, "add", "settings.json")
    run_git(tree.path, "commit", "-q", "-m", "x")
    (tree.path / "hello.txt").write_text("hi\n")

    verdict = delivery.deliver(job(worktree))

    assert (verdict.delivered, verdict.outcome, verdict.commit) == ("refused", "failed", None)
    assert "settings.json" in verdict.reason and "beflow/1 was not updated" in verdict.reason
    # The refusal undoes the agent's commit: it is named for what it was, not by an id nothing names any more.
    assert "; a commit the agent made during the run puts a secret value" in verdict.reason
    assert not re.search(r"commit [0-9a-f]{12}", verdict.reason), verdict.reason
    assert "beflow/1" not in branches(repo) and verdict.worktree_kept
    assert sorted(run_git(tree.path, "status", "--porcelain").split()) == ["??", "??", "hello.txt", "settings.json"]
    assert SECRET.decode() not in run_git(repo, "log", "-p", "--all")


def test_a_secret_left_uncommitted_is_named_as_the_agents_work_not_as_the_commit_beflow_undid(
    repo: Path, worktree: tuple[worktrees.Worktree, Any]
) -> None:
    tree = worktree[0]
    (tree.path / "token.txt").write_bytes(SECRET)

    verdict = delivery.deliver(job(worktree))

    assert verdict.delivered == "refused"
    assert "; the agent's uncommitted work puts a secret value" in verdict.reason
    assert "in token.txt: nothing was committed and beflow/1 was not updated" in verdict.reason
    assert not re.search(r"commit [0-9a-f]{12}", verdict.reason), verdict.reason


def test_a_continued_branch_is_read_whole_from_the_base(repo: Path, tmp_path: Path) -> None:
    # Someone (another run's agent, say) put a secret on the branch between two runs of the issue.
    run_git(repo, "branch", "beflow/1")
    run_git(repo, "worktree", "add", "-q", str(tmp_path / "other"), "beflow/1")
    (tmp_path / "other" / "planted.txt").write_bytes(SECRET)
    run_git(tmp_path / "other", "add", "planted.txt")
    run_git(tmp_path / "other", "commit", "-q", "-m", "planted")
    run_git(repo, "worktree", "remove", str(tmp_path / "other"))
    opened = git.open_repo(repo)
    try:
        tree = worktrees.create_worktree(opened, tmp_path / "worktrees" / "1", "beflow/1", "HEAD")
        (tree.path / "hello.txt").write_text("hi\n")
        before = run_git(repo, "rev-parse", "beflow/1")

        verdict = delivery.deliver(job((tree, opened)))
    finally:
        opened.close()

    assert verdict.delivered == "refused" and "planted.txt" in verdict.reason
    assert run_git(repo, "rev-parse", "beflow/1") == before
    # That commit is still on the branch: it is named, so that a person can find it.
    assert f"; commit {before[:12]} on beflow/1 puts a secret value" in verdict.reason


def test_work_that_must_not_be_committed_is_refused_before_any_commit(
    repo: Path, worktree: tuple[worktrees.Worktree, Any]
) -> None:
    tree = worktree[0]
    (tree.path / "hello.txt").write_text("hi\n")

    verdict = delivery.deliver(job(worktree, refuse=".acpxrc.json could not be put back", refuse_for_good=True))

    assert (verdict.delivered, verdict.outcome, verdict.permanent) == ("refused", "failed", True)
    assert "could not be put back" in verdict.reason
    assert "beflow/1" not in branches(repo) and verdict.commit is None


def test_a_branch_moved_during_the_run_is_not_moved_again(repo: Path, worktree: tuple[worktrees.Worktree, Any]) -> None:
    tree = worktree[0]
    (tree.path / "a.txt").write_text("x")
    run_git(repo, "branch", "beflow/1")  # someone else made it meanwhile: the compare-and-swap refuses
    theirs = run_git(repo, "rev-parse", "beflow/1")

    verdict = delivery.deliver(job(worktree))

    assert (verdict.delivered, verdict.outcome, verdict.worktree_kept) == ("failed", "failed", True)
    assert "changed during the run" in verdict.reason and f"in {tree.path}" in verdict.reason
    assert run_git(repo, "rev-parse", "beflow/1") == theirs


# -- proposing: the fake GitHub as the code host -------------------------------------------------------------------


@pytest.fixture
def host(repo: Path, github: FakeGitHub) -> Iterator[GitHubCodeHost]:
    origin = repo.parent / "origin.git"
    run_git(repo.parent, "init", "-q", "--bare", str(origin))
    settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url=github.url)
    api = Api(github.url, TOKEN)
    try:
        yield GitHubCodeHost(settings, "octo/hello", api, str(origin))
    finally:
        api.close()


def proposal(host: GitHubCodeHost, **changes: Any) -> delivery.Proposal:
    defaults: dict[str, Any] = {"host": host, "title": "Add a", "body": lambda verdict: f"done: {verdict.commit}"}
    return delivery.Proposal(**(defaults | changes))


def test_a_succeeded_run_is_pushed_and_proposed(
    repo: Path, worktree: tuple[worktrees.Worktree, Any], host: GitHubCodeHost, github: FakeGitHub
) -> None:
    (worktree[0].path / "a.txt").write_text("x")

    verdict = delivery.deliver(job(worktree, proposal=proposal(host)))

    (pull,) = github.pulls.values()
    assert (verdict.proposed, verdict.pull_request) == ("opened", pull["html_url"])
    assert pull["body"] == f"done: {verdict.commit}" and pull["head"]["ref"] == "beflow/1"
    origin = repo.parent / "origin.git"
    assert run_git(origin, "rev-parse", "refs/heads/beflow/1").strip() == verdict.commit
    assert verdict.notices == (f"pull request opened: {pull['html_url']}",)


@pytest.mark.parametrize("outcome", ["failed", "no_changes"])
def test_only_a_succeeded_run_is_proposed(
    worktree: tuple[worktrees.Worktree, Any], host: GitHubCodeHost, github: FakeGitHub, outcome: str
) -> None:
    if outcome == "failed":
        (worktree[0].path / "a.txt").write_text("x")

    verdict = delivery.deliver(job(worktree, outcome=outcome, proposal=proposal(host)))

    assert verdict.proposed is None and not github.pulls and not github.requests("POST")


def test_a_claim_lost_before_the_push_publishes_nothing(
    repo: Path, worktree: tuple[worktrees.Worktree, Any], host: GitHubCodeHost, github: FakeGitHub
) -> None:
    (worktree[0].path / "a.txt").write_text("x")

    @contextlib.contextmanager
    def lost() -> Iterator[None]:
        raise ClaimLost("the claim on issue 1 was taken over by watcher b")
        yield

    verdict = delivery.deliver(job(worktree, proposal=proposal(host, held=lost)))

    assert (verdict.proposed, verdict.outcome) == ("lost", "succeeded")  # committed locally, published nowhere
    assert verdict.claim_lost == "the claim on issue 1 was taken over by watcher b"
    assert "not published" in verdict.reason and not github.pulls
    assert run_git(repo.parent / "origin.git", "for-each-ref") == ""


def test_a_push_that_fails_is_said_and_the_branch_stays_committed(
    repo: Path, worktree: tuple[worktrees.Worktree, Any], host: GitHubCodeHost, github: FakeGitHub
) -> None:
    (worktree[0].path / "a.txt").write_text("x")
    subprocess.run(["rm", "-rf", str(repo.parent / "origin.git")], check=True)

    verdict = delivery.deliver(job(worktree, proposal=proposal(host)))

    assert (verdict.proposed, verdict.outcome, verdict.delivered) == ("failed", "succeeded", "committed")
    assert "the pull request could not be opened: git push" in verdict.reason and not github.pulls
    assert verdict.commit == run_git(repo, "rev-parse", "beflow/1").strip()
