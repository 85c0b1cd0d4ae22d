"""The push's token is in no process's environment, argv or pipe: git gets it through its credential protocol, from
beflow's helper, which asks beflow over a socket only that git command inherits (a socket, unlike a pipe, cannot be
opened again through ``/proc``). Against a real git server over HTTPS that asks for the credential (``git
http-backend``: tests/support/git_http.py), while the push — or a review round's fetch — is held there, every
process the test can read is searched, as another run's agent would search it (tests/support/proc_scan.py)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from beflow.codehosts.github import GitHubCodeHost
from beflow.config import GitHubCodeHostSettings
from beflow.errors import BeflowError
from beflow.repository import remote
from beflow.trackers.github_api import Api
from tests.faults.conftest import unprivileged
from tests.support import proc_scan
from tests.support.git_http import GitServer, serve
from tests.support.github import FakeGitHub
from tests.support.proc_scan import scan
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

REPO = "octo/hello.git"


def run_git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[GitServer]:
    with serve(tmp_path / "git-server") as running:
        monkeypatch.setenv("GIT_SSL_CAINFO", str(running.ca))  # as a user whose git trusts the host's certificate
        yield running


@pytest.fixture
def token() -> str:
    """A token of this test's own: no other process on the machine holds it by chance."""
    return "ghs_" + secrets.token_hex(18)


def code_host(server: GitServer, token: str) -> GitHubCodeHost:
    """GitHub as the code host, on the server's host (127.0.0.1), with ``token``; ``origin`` is the server."""
    settings = GitHubCodeHostSettings(kind="github", repo="octo/hello", api_url="http://127.0.0.1:1")
    return GitHubCodeHost(settings, "octo/hello", Api("http://127.0.0.1:1", token), server.url(REPO))


def in_a_thread(work: Callable[[], object]) -> tuple[threading.Thread, list[object]]:
    """``work()`` in a thread of its own; the list gets what it returned or raised."""
    outcome: list[object] = []

    def target() -> None:
        try:
            outcome.append(work())
        except BaseException as error:  # handed to the test
            outcome.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("what", ["push", "fetch"])
def test_while_git_talks_to_the_host_the_token_is_in_no_environment_argv_or_pipe(
    repo: Path, server: GitServer, token: str, what: str
) -> None:
    server.credentials["x-access-token"] = token
    bare = server.bare(REPO, repo)
    commit = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "branch", "beflow/1")
    host = code_host(server, token)
    if what == "push":
        server.hold = {"git-receive-pack"}
        thread, outcome = in_a_thread(lambda: host.push(repo, "beflow/1"))
    else:  # a review round reads the branch as another machine pushed it
        theirs = run_git(bare, "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "pushed elsewhere")
        run_git(bare, "update-ref", "refs/heads/beflow/1", theirs)
        server.hold = {"git-upload-pack"}
        thread, outcome = in_a_thread(lambda: host.fetch(repo, "beflow/1"))
    eventually(server.holding.is_set, f"the {what} reaches the server with its credential")

    gits = [p.pid for p in psutil.Process().children(recursive=True)]
    seen = scan(token.encode(), [os.getpid(), *gits])
    server.released.set()
    thread.join(timeout=120)

    assert seen["found"] == [], seen["found"]
    assert seen["reopened"] == [], seen["reopened"]
    # The scan saw the git that held the token: its environment, its pipes and the socket it got it over.
    assert any(f" {what}" in line or "remote-https" in line for line in seen["environ"]), seen["environ"]
    assert seen["pipes"] and seen["sockets"]
    if what == "push":
        assert outcome == [commit]
        assert run_git(bare, "rev-parse", "refs/heads/beflow/1") == commit
    else:
        assert outcome == [theirs]
        assert run_git(repo, "cat-file", "-t", theirs) == "commit"  # its objects are in the repository now
    # The server took the token, as GitHub does: the user x-access-token with the token as its password.
    assert {s.user for s in server.seen if s.status == 200} == {"x-access-token"}


def test_a_wrong_token_fails_the_push_clearly_and_a_missing_one_too(repo: Path, server: GitServer, token: str) -> None:
    server.credentials["x-access-token"] = token
    bare = server.bare(REPO, repo)
    commit = run_git(repo, "rev-parse", "HEAD")
    run_git(repo, "branch", "beflow/1")
    wrong = "ghs_" + secrets.token_hex(18)

    with pytest.raises(BeflowError) as refused:
        code_host(server, wrong).push(repo, "beflow/1")
    assert "Authentication failed" in str(refused.value) and server.url(REPO) in str(refused.value)
    assert wrong not in str(refused.value)

    with pytest.raises(BeflowError) as none:  # no credential at all: git asks nobody else, and says so
        remote.push(repo, server.url(REPO), commit, "beflow/1")
    assert "terminal prompts disabled" in str(none.value)

    assert subprocess.run(["git", "rev-parse", "--verify", "-q", "refs/heads/beflow/1"], cwd=bare).returncode != 0
    assert code_host(server, token).push(repo, "beflow/1") == commit  # the right one: pushed
    assert run_git(bare, "rev-parse", "refs/heads/beflow/1") == commit


def test_the_helper_gives_the_token_to_its_host_alone(repo: Path, server: GitServer, token: str) -> None:
    """Credentials for another host, port or protocol than the push's are asked for, and none is given: git fails
    without having sent the token."""
    server.credentials["x-access-token"] = token
    server.bare(REPO, repo)
    commit = run_git(repo, "rev-parse", "HEAD")
    for auth in (
        remote.PushAuth(token, f"127.0.0.1:{server.port + 1}"),
        remote.PushAuth(token, "127.0.0.1"),
        remote.PushAuth(token, f"localhost:{server.port}"),
        remote.PushAuth(token, f"127.0.0.1:{server.port}", "http"),
    ):
        with pytest.raises(BeflowError) as refused:
            remote.push(repo, server.url(REPO), commit, "beflow/1", auth)
        assert "terminal prompts disabled" in str(refused.value) and token not in str(refused.value)
    assert server.seen and all(s.user is None for s in server.seen)  # every request came without a credential


def test_an_agent_scanning_proc_while_another_run_pushes_finds_no_token(
    auto_project: AutoProject,
    github: FakeGitHub,
    server: GitServer,
    token: str,
    tmp_path: Path,
    no_leftover_processes: None,
) -> None:
    """Two runs at once on GitHub, no sandbox: one run's agent looks through every process it can read while the
    other run's push is held at the server, past the credential; it finds the token nowhere."""
    github.tokens[token] = "octocat"
    server.credentials["x-access-token"] = token
    server.hold = {"git-receive-pack"}
    bare = server.bare(REPO, auto_project.directory)
    run_git(auto_project.directory, "remote", "add", "origin", server.url(REPO))
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url},
        after_run={"pull_request": True},
        sandbox={"enabled": False},
        timeout=180,
    )
    loot, flag = tmp_path / "loot.json", tmp_path / "push-held"
    github.add_issue("Write notes", labels=["beflow", "beflow:ready"], body="acp-test: write notes.txt hello")
    scan_it = f"{sys.executable} {proc_scan.__file__} {loot} {token.encode().hex()} --after {flag}"
    github.add_issue(
        "Look around",
        labels=["beflow", "beflow:ready"],
        body=f"acp-test: run {scan_it}\nacp-test: write seen.txt looked",
    )
    env = {**os.environ, "GITHUB_TOKEN": token, "GIT_SSL_CAINFO": str(server.ca)}
    argv = [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", "--concurrency", "2"]
    process = subprocess.Popen(
        unprivileged(argv),  # the agent without CAP_SYS_PTRACE, as an ordinary user's
        cwd=auto_project.directory,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(server.holding.is_set, "a run's push reaches the server with its credential", 120, alive=process)
        flag.touch()  # the other run's agent looks now
        eventually(loot.exists, "the other run's agent has looked", 120, alive=process)
        server.released.set()
        out, err = process.communicate(timeout=240)
    finally:
        server.released.set()
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 0, out + err
    seen = json.loads(loot.read_text())
    assert seen["beflow"] != ["0"]  # it found the beflow above it, and looked at everything under it
    assert any(" push " in f" {line} " for line in seen["environ"]), seen["environ"]  # the push was there to read
    assert seen["found"] == [], seen["found"]
    assert seen["reopened"] == [], seen["reopened"]
    assert seen["pipes"] and seen["sockets"]
    # Both runs pushed, with the token, as GitHub takes it.
    assert {run_git(bare, "rev-parse", f"refs/heads/beflow/{n}") for n in (1, 2)} == {
        record.commit for record in auto_project.records()
    }
    assert {s.user for s in server.seen if s.path.endswith("git-receive-pack")} == {"x-access-token"}
