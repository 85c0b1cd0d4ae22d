"""``POST /hooks/{github,gitlab,linear}`` on the real server: a verified delivery of the project's forge wakes the
watch, with no token of beflow's; every refused one is answered with its status, counted in the health the state
shows, and wakes nothing; the Host check holds; a body past the limit is cut off as it comes."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.run.session_reporter import SessionReporter
from beflow.web.guard import TOKEN_ENV, Bind
from beflow.web.live import Hub, WatchSource
from beflow.web.serving import Serving, beside
from beflow.web.webhooks import MAX_BODY
from tests.run.test_session_reporter import Told
from tests.support.github import NAME, OWNER, FakeGitHub
from tests.support.github import TOKEN as GITHUB_TOKEN
from tests.support.gitlab import FakeGitLab
from tests.support.gitlab_projects import ENV as GITLAB_ENV
from tests.support.projects import AutoProject, config_file
from tests.support.waiting import eventually
from tests.web.test_stopping import url_of
from tests.web.test_webhooks import (
    SECRET,
    github_headers,
    github_issue_labeled,
    gitlab_headers,
    gitlab_issue_hook,
    jira_headers,
    jira_issue_updated,
    linear_headers,
    linear_issue_update,
    linear_session_prompted,
)

TOKEN = "t" * 20 + "-secret-token"
SECRET_ENV = {
    "github": "TEST_GITHUB_HOOK_SECRET",
    "gitlab": "TEST_GITLAB_HOOK_SECRET",
    "linear": "TEST_LINEAR_HOOK",
    "jira": "TEST_JIRA_HOOK",
}


class Woken(WatchSource):
    """A watch's source that says when the server would wake the watch (and reads no state: none is running)."""

    def __init__(self, project: Path) -> None:
        loaded = load_project(config_file(project))
        dispatcher = SimpleNamespace(project=loaded, tracker=open_tracker(loaded), wakeup=None)
        super().__init__(dispatcher, Hub())  # type: ignore[arg-type]
        self.woken: list[str] = []

    def hooked(self, forge: str) -> None:
        self.woken.append(forge)


@pytest.fixture(autouse=True)
def secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    for name in SECRET_ENV.values():
        monkeypatch.setenv(name, SECRET)


def project_on(repo: Path, secret_env: dict[str, str], **config: Any) -> Path:
    """The test repository as a project whose code host is GitHub (its forge), with the webhook secrets named."""
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    settings = {"code_host": {"kind": "github", "repo": "acme/widgets"}, "webhooks": {"secret_env": secret_env}}
    config_file(repo).write_text(json.dumps({**settings, **config}) + "\n")
    return repo


@contextmanager
def serving(project: Path, host: str = "127.0.0.1") -> Iterator[tuple[Serving, Woken, httpx.Client]]:
    source = Woken(project)
    with beside(load_project(config_file(project)), Bind(host, 0), Hub(), source) as served:
        http = httpx.Client(base_url=f"http://127.0.0.1:{served.bind.port}", timeout=10)
        with http:
            yield served, source, http


def webhooks_health(http: httpx.Client) -> dict[str, Any]:
    state = http.get("/api/v1/state", headers={"Authorization": f"Bearer {TOKEN}"})
    assert state.status_code == 200, state.text
    health: dict[str, Any] = state.json()["health"]["webhooks"]
    return health


def test_a_signed_delivery_of_the_projects_forge_wakes_the_watch_with_no_token_off_loopback(repo: Path) -> None:
    project = project_on(repo, SECRET_ENV)
    with serving(project, host="0.0.0.0") as (served, source, http):
        assert served.policy.token_required
        body = github_issue_labeled()

        answer = http.post("/hooks/github", content=body, headers=github_headers(body))

        assert answer.status_code == 202, answer.text
        assert source.woken == ["github"]
        assert webhooks_health(http) == {"woke": 1, "ignored": 0, "refused": {}}
        # beflow's own routes still need the token
        assert http.post("/api/v1/refresh").status_code == 401


def test_every_refused_delivery_is_answered_counted_and_wakes_nothing(repo: Path) -> None:
    project = project_on(repo, {"github": SECRET_ENV["github"]})
    with serving(project) as (_, source, http):
        body = github_issue_labeled()
        headers = github_headers(body, delivery="first")
        unsigned = {k: v for k, v in headers.items() if k != "x-hub-signature-256"}
        assert http.post("/hooks/github", content=body, headers=unsigned).status_code == 401
        forged = github_headers(body.replace(b"octocat", b"mallory"))  # signed over another body
        answer = http.post("/hooks/github", content=body, headers=forged)
        assert (answer.status_code, answer.json()["error"]["code"]) == (401, "bad_signature")
        assert http.post("/hooks/github", content=body, headers=headers).status_code == 202
        replayed = http.post("/hooks/github", content=body, headers=headers)
        assert (replayed.status_code, replayed.json()["error"]["code"]) == (409, "replayed")
        # GitLab's secret is not configured: its route is off, whatever is sent
        off = http.post("/hooks/gitlab", content=gitlab_issue_hook(), headers=gitlab_headers())
        assert (off.status_code, off.json()["error"]["code"]) == (403, "off")

        assert source.woken == ["github"]  # the one good delivery, once
        assert webhooks_health(http) == {
            "woke": 1,
            "ignored": 0,
            "refused": {"unsigned": 1, "bad_signature": 1, "replayed": 1, "off": 1},
        }
        page = http.get("/").text  # the health panel says so too
        assert "1 woke the watch, 0 ignored, refused: bad_signature 1, off 1, replayed 1, unsigned 1" in page


def test_an_oversized_delivery_is_cut_off_declared_or_streamed(repo: Path) -> None:
    project = project_on(repo, SECRET_ENV)
    with serving(project) as (_, source, http):
        big = b"{" + b" " * MAX_BODY + b"}"
        declared = http.post("/hooks/github", content=big, headers=github_headers(big))
        assert (declared.status_code, declared.json()["error"]["code"]) == (413, "too_large")

        def chunks() -> Iterator[bytes]:  # no Content-Length: the body is counted as it comes
            for _ in range(64):
                yield b" " * (64 * 1024)

        streamed = http.post("/hooks/github", content=chunks(), headers=github_headers(b""))
        assert streamed.status_code == 413
        assert source.woken == []
        assert webhooks_health(http)["refused"] == {"too_large": 2}


def test_a_delivery_of_a_forge_the_project_does_not_use_is_verified_then_ignored(repo: Path) -> None:
    project = project_on(repo, SECRET_ENV)  # (GitHub is its code host; its tracker is local)
    with serving(project) as (_, source, http):
        body = linear_issue_update(sent=time.time())
        assert http.post("/hooks/linear", content=body, headers=linear_headers(body)).status_code == 202
        gitlab = http.post("/hooks/gitlab", content=gitlab_issue_hook(), headers=gitlab_headers(token="wrong"))
        assert gitlab.status_code == 401  # (a forge it does not use is still verified: nothing is told for free)
        ping = b'{"zen": "Keep it logically awesome.", "hook_id": 1}'
        assert http.post("/hooks/github", content=ping, headers=github_headers(ping, "ping")).status_code == 202

        assert source.woken == []
        assert webhooks_health(http) == {"woke": 0, "ignored": 2, "refused": {"bad_signature": 1}}


def test_the_host_check_holds_for_webhooks(repo: Path) -> None:
    project = project_on(repo, SECRET_ENV)
    with serving(project) as (_, source, http):
        body = github_issue_labeled()
        answer = http.post("/hooks/github", content=body, headers={**github_headers(body), "Host": "evil.example"})
        assert (answer.status_code, answer.json()["error"]["code"]) == (421, "bad_host")
        assert source.woken == []


def test_the_webhook_secrets_are_withheld_from_the_agent_and_masked(repo: Path) -> None:
    from beflow.agent.agent_env import held_secrets, tracker_secrets

    config = load_project(config_file(project_on(repo, SECRET_ENV))).config
    withheld, _ = tracker_secrets(config)
    assert set(SECRET_ENV.values()) <= set(withheld)
    assert SECRET in held_secrets(config, os.environ)


# -- a real watch, woken ---------------------------------------------------------------------------------------------


def woken_by_a_webhook(  # type: ignore[no-untyped-def]
    project: AutoProject,
    beflow_process,
    forge: str,
    env: dict[str, str],
    file_ready_issue: Callable[[], None],
    delivery: tuple[bytes, dict[str, str], dict[str, str]],
) -> None:
    """``beflow watch --http`` polling every 600 s: once it has looked at the tracker, a ready issue is filed and
    ``forge`` sends ``delivery`` (a body, its good headers, forged ones). The run starts within the test's wait only
    if the good delivery woke the watch — nothing else wakes it: no run ends, no file of a forge's tracker changes,
    the config stays — and the forged one is refused before it."""
    project.configure(watch={"interval": 600}, webhooks={"secret_env": {forge: SECRET_ENV[forge]}})
    env = {**env, TOKEN_ENV: TOKEN, SECRET_ENV[forge]: SECRET}
    process = beflow_process("watch", "--json", "--http", "0", cwd=project.directory, env=env)
    stderr: list[str] = []
    events: list[dict[str, Any]] = []
    threading.Thread(target=lambda: stderr.extend(process.stderr), daemon=True).start()
    threading.Thread(target=lambda: events.extend(json.loads(line) for line in process.stdout), daemon=True).start()
    url = eventually(lambda: url_of(stderr), "the server said where it serves", alive=process)
    eventually(lambda: f"beflow: webhooks at {url}/hooks/{forge}\n" in stderr, "the server said where webhooks go")

    def ticks() -> int:
        return int(httpx.get(url + "/api/v1/state", timeout=30).json()["totals"]["ticks"])

    eventually(lambda: ticks() >= 1, "the watch's first look at the tracker", alive=process)
    file_ready_issue()
    body, good, forged = delivery

    refused = httpx.post(f"{url}/hooks/{forge}", content=body, headers=forged, timeout=30)
    assert refused.status_code == 401
    assert not [e for e in events if e.get("event") == "dispatched"]

    woke = httpx.post(f"{url}/hooks/{forge}", content=body, headers=good, timeout=30)

    assert woke.status_code == 202, woke.text
    eventually(lambda: any(e.get("event") == "dispatched" for e in events), "the run started", alive=process)
    eventually(lambda: any(e.get("event") == "finished" for e in events), "the run ended", alive=process)
    health = httpx.get(url + "/api/v1/state", timeout=30).json()["health"]["webhooks"]
    assert health == {"woke": 1, "ignored": 0, "refused": {"bad_signature": 1}}
    process.send_signal(signal.SIGINT)
    assert process.wait(30) == 130
    assert SECRET not in "".join(stderr) + json.dumps(events)


@pytest.mark.slow
def test_a_gitlab_webhook_starts_a_ready_issue_at_once_and_a_forged_one_does_nothing(  # type: ignore[no-untyped-def]
    on_gitlab: AutoProject, gitlab: FakeGitLab, beflow_process, no_leftover_processes: None
) -> None:
    def file_ready_issue() -> None:
        gitlab.add_issue("Add notes", labels=["beflow", "beflow:ready"], description="acp-test: write notes.txt first")

    body = gitlab_issue_hook()
    delivery = (body, gitlab_headers(), gitlab_headers(token="not-the-secret"))
    woken_by_a_webhook(on_gitlab, beflow_process, "gitlab", GITLAB_ENV, file_ready_issue, delivery)


@pytest.mark.slow
def test_a_github_webhook_starts_a_ready_issue_at_once_and_a_forged_one_does_nothing(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, github: FakeGitHub, beflow_process, no_leftover_processes: None
) -> None:
    auto_project.configure(tracker={"kind": "github", "repo": f"{OWNER}/{NAME}", "api_url": github.url})

    def file_ready_issue() -> None:
        github.add_issue("Add notes", labels=["beflow", "beflow:ready"], body="acp-test: write notes.txt first")

    body = github_issue_labeled()
    forged = {**github_headers(body), "x-hub-signature-256": "sha256=" + "0" * 64}
    delivery = (body, github_headers(body), forged)
    woken_by_a_webhook(
        auto_project, beflow_process, "github", {"GITHUB_TOKEN": GITHUB_TOKEN}, file_ready_issue, delivery
    )


def test_a_signed_linear_delivery_within_its_window_wakes_a_watch_on_linear(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LINEAR_API_KEY", "lin_api_" + "k" * 32)
    tracker = {"kind": "linear", "team": "ENG", "api_url": "http://127.0.0.1:9/graphql"}  # (never asked here)
    project = project_on(repo, {"linear": SECRET_ENV["linear"]}, tracker=tracker)
    with serving(project) as (_, source, http):
        body = linear_issue_update(sent=time.time())
        assert http.post("/hooks/linear", content=body, headers=linear_headers(body)).status_code == 202
        stale = linear_issue_update(sent=time.time() - 3600)
        assert http.post("/hooks/linear", content=stale, headers=linear_headers(stale, "another")).status_code == 401

        assert source.woken == ["linear"]
        assert webhooks_health(http) == {"woke": 1, "ignored": 0, "refused": {"stale": 1}}


def test_a_signed_jira_delivery_wakes_a_watch_on_jira_once_and_a_replay_or_forgery_does_nothing(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JIRA_EMAIL", "bot@example.com")
    monkeypatch.setenv("JIRA_API_TOKEN", "ATATT-test")
    tracker = {"kind": "jira", "site": "http://127.0.0.1:9", "project": "WID"}  # (never asked here)
    project = project_on(repo, {"jira": SECRET_ENV["jira"]}, tracker=tracker)
    with serving(project) as (_, source, http):
        body = jira_issue_updated()
        assert http.post("/hooks/jira", content=body, headers=jira_headers(body)).status_code == 202
        assert http.post("/hooks/jira", content=body, headers=jira_headers(body)).status_code == 409  # (Jira's retry)
        forged = {**jira_headers(body, "another"), "x-hub-signature": "sha256=" + "0" * 64}
        assert http.post("/hooks/jira", content=body, headers=forged).status_code == 401
        quiet = jira_issue_updated("worklog_updated")
        assert http.post("/hooks/jira", content=quiet, headers=jira_headers(quiet, "third")).status_code == 202
        assert http.post("/hooks/jira", content=b"x" * ((1 << 20) + 1), headers=jira_headers(b"")).status_code == 413

        assert source.woken == ["jira"]
        assert webhooks_health(http) == {
            "woke": 1,
            "ignored": 1,
            "refused": {"replayed": 1, "bad_signature": 1, "too_large": 1},
        }


def test_a_linear_session_prompted_has_the_running_runs_ask_their_sessions_for_a_stop_at_once(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without webhooks a run asks its session for a stop every few seconds; an ``AgentSessionEvent`` delivery has it
    ask now (and wakes the watch: the prompt may be a follow-up)."""
    monkeypatch.setenv("LINEAR_API_KEY", "lin_api_" + "k" * 32)
    tracker = {"kind": "linear", "team": "ENG", "api_url": "http://127.0.0.1:9/graphql"}  # (never asked here)
    project = project_on(repo, {"linear": SECRET_ENV["linear"]}, tracker=tracker)
    session = Told()
    session.gate.set()
    heard: list[str] = []
    reporter = SessionReporter(session, lambda: heard.append("stop"), stop_every=3600)
    try:
        with serving(project) as (_, source, http):
            body = linear_issue_update(sent=time.time())
            assert http.post("/hooks/linear", content=body, headers=linear_headers(body)).status_code == 202
            assert session.looks == 0  # (an issue's change is no session's)
            session.stop = True
            prompted = linear_session_prompted(sent=time.time())
            headers = linear_headers(prompted, "prompted-1", event="AgentSessionEvent")
            assert http.post("/hooks/linear", content=prompted, headers=headers).status_code == 202
            eventually(lambda: heard == ["stop"], "the stop heard at once")
            assert session.looks == 1 and source.woken == ["linear", "linear"]
    finally:
        reporter.close()
