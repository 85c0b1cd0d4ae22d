"""Steering from the API (``http.actions``): a new issue, a retry, a status a person may choose, a priority (the
queue's order), a cancel — each through the operations registry — and who may ask: the server's own page with its
token, a script with the token and no Origin, never another Origin, never without the token, never with actions
off; each refusal says why and changes nothing."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.ops import questions
from beflow.records.record import Question, RunRecord, new_run_id
from beflow.records.store import RunStore
from beflow.trackers.issue import Status, utc_now
from beflow.web.guard import COOKIE, TOKEN_ENV
from tests.support.projects import AutoProject, config_file
from tests.support.waiting import eventually
from tests.web.conftest import REPO_ROOT, drive
from tests.web.test_dashboard import Watch
from tests.web.test_http import client, serving

TOKEN = "s" * 20 + "-steering-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def steered(repo: Path, actions: bool = True) -> str:
    """A project with three issues (1 failed, 2 in progress, 3 ready) and issue 2's run, still going; its id."""
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text(json.dumps({"http": {"actions": actions}}) + "\n")
    tracker = open_tracker(load_project(config_file(repo)))
    tracker.create("Failed one", "it failed", status=Status.READY)
    tracker.set_status("1", Status.IN_PROGRESS)
    tracker.set_status("1", Status.FAILED, note="the agent gave up")
    tracker.create("Second", "")
    tracker.create("Third", "")
    tracker.set_status("2", Status.IN_PROGRESS)
    running = RunRecord(id=new_run_id("2"), issue="2", mode="auto", agent="a", started_at=utc_now(), title="Second")
    RunStore(repo).create(running, "prompt")
    return running.id


def issues(repo: Path) -> list[tuple[str, str, int, str, int]]:
    """Every issue as it is: key, status, priority, title, comments."""
    tracker = open_tracker(load_project(config_file(repo)))
    return [
        (i.key, i.status.value, i.priority, i.title, len(i.comments))
        for i in (tracker.get(row.key) for row in tracker.listing().issues)
    ]


#: Every action, as (path, body) for a run id.
ACTIONS: dict[str, Callable[[str], tuple[str, dict[str, Any] | None]]] = {
    "new": lambda run: ("/api/v1/issues", {"title": "From the page", "priority": 0}),
    "retry": lambda run: ("/api/v1/issues/1/retry", None),
    "status": lambda run: ("/api/v1/issues/3/status", {"status": "open", "note": "later"}),
    "priority": lambda run: ("/api/v1/issues/3/priority", {"priority": 0}),
    "cancel": lambda run: (f"/api/v1/runs/{run}/cancel", None),
}


def post(http: httpx.Client, action: str, run: str, **headers: str) -> httpx.Response:
    path, body = ACTIONS[action](run)
    return http.post(path, json=body, headers=headers)


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_action_is_refused_without_the_token_with_a_wrong_one_or_from_another_origin_and_changes_nothing(
    repo: Path, action: str
) -> None:
    run = steered(repo)
    before = issues(repo)
    with serving(repo) as (served, _), client(served) as http:
        own = f"http://127.0.0.1:{served.bind.port}"
        refusals = {
            "no token": post(http, action, run, Origin=own),
            "a wrong token": post(http, action, run, Origin=own, Authorization="Bearer " + "w" * 30),
            "a wrong cookie": post(http, action, run, Origin=own, Cookie=f"{COOKIE}={'w' * 30}"),
            "another origin": post(http, action, run, Origin="http://evil.example", **BEARER),
            "another port": post(http, action, run, Origin="http://127.0.0.1:1", **BEARER),
            "an opaque origin": post(http, action, run, Origin="null", **BEARER),
            "a cross-site fetch": post(http, action, run, **{"Sec-Fetch-Site": "cross-site"}, **BEARER),
            "a same-site fetch": post(http, action, run, **{"Sec-Fetch-Site": "same-site"}, **BEARER),
            # A browser adds the cookie by itself; without the page's Origin it never acts (a form of another
            # site's page in an old browser, a request a page cannot say where it comes from).
            "the cookie and no origin": post(http, action, run, Cookie=f"{COOKIE}={TOKEN}"),
        }
        said = {why: (answer.status_code, answer.json()["error"]["code"]) for why, answer in refusals.items()}
        assert said == {
            "no token": (401, "unauthorized"),
            "a wrong token": (401, "unauthorized"),
            "a wrong cookie": (401, "unauthorized"),
            "another origin": (403, "bad_origin"),
            "another port": (403, "bad_origin"),
            "an opaque origin": (403, "bad_origin"),
            "a cross-site fetch": (403, "bad_origin"),
            "a same-site fetch": (403, "bad_origin"),
            "the cookie and no origin": (403, "bad_origin"),
        }
        assert refusals["no token"].headers["www-authenticate"].startswith('Bearer realm="beflow"')
        cookie_only = refusals["the cookie and no origin"].json()["error"]["message"]
        assert "(no Origin) takes the token in Authorization" in cookie_only
        assert all(answer.json()["error"]["fix"] for answer in refusals.values())
    assert issues(repo) == before


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_action_is_refused_while_actions_are_off_and_changes_nothing(repo: Path, action: str) -> None:
    run = steered(repo, actions=False)
    before = issues(repo)
    with serving(repo) as (served, _), client(served) as http:
        own = f"http://127.0.0.1:{served.bind.port}"
        answer = post(http, action, run, Origin=own, **BEARER)
        assert (answer.status_code, answer.json()["error"]["code"]) == (403, "actions_off")
        assert answer.json()["error"]["fix"] == 'Set "http": {"actions": true} in the config.'
        assert http.get("/api/v1/state").json()["actions"] is False
    assert issues(repo) == before


@pytest.mark.parametrize("who", ["page", "page without its origin", "script"])
@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_the_servers_own_page_acts_with_its_cookie_and_a_script_with_the_token_and_no_origin(
    repo: Path, action: str, who: str
) -> None:
    run = steered(repo)
    before = issues(repo)
    with serving(repo) as (served, _), client(served) as http:
        own = f"http://127.0.0.1:{served.bind.port}"
        cookie = {"Cookie": f"{COOKIE}={TOKEN}", "Sec-Fetch-Site": "same-origin"}
        headers = {
            "page": {"Origin": own, **cookie},
            # (Chromium leaves a same-origin POST's Origin out under the page's Referrer-Policy: no-referrer)
            "page without its origin": cookie,
            "script": BEARER,
        }[who]
        answer = post(http, action, run, **headers)
        assert answer.status_code == 200, answer.text
    assert issues(repo) != before


def test_steering_through_the_registry_new_issue_priority_status_and_retry(repo: Path) -> None:
    run = steered(repo)
    with serving(repo) as (served, _), client(served, **BEARER) as http:

        def queue() -> list[str]:
            return [q["issue"] for q in http.get("/api/v1/state").json()["queue"]]

        assert queue() == ["3"]  # (1 failed; 2 has a run)
        # A new issue, ready and urgent: first in the queue.
        new = http.post("/api/v1/issues", json={"title": "Urgent", "body": "*now*", "labels": ["bug"], "priority": 0})
        assert new.status_code == 200, new.text
        assert new.json()["operation"] == "issue.new"
        created = new.json()["result"]
        assert (created["key"], created["status"], created["priority"], created["labels"]) == ("4", "ready", 0, ["bug"])
        assert queue() == ["4", "3"]
        # The queue's order: a priority moves an issue ahead.
        moved = http.post("/api/v1/issues/3/priority", json={"priority": 0})
        assert moved.json() == {
            "operation": "issue.set_priority",
            "result": {"key": "3", "title": "Third", "previous": 2, "priority": 0},
        }
        assert queue() == ["3", "4"]  # (the same priority: the older first)
        # The statuses a person may choose are the tracker's transitions, and never in_progress.
        assert http.get("/api/v1/issues/1").json()["choices"] == ["ready", "closed"]
        assert http.get("/api/v1/issues/3").json()["choices"] == ["open", "closed"]
        refused = http.post("/api/v1/issues/3/status", json={"status": "in_progress"})
        assert refused.status_code == 400 and "a run's status" in refused.json()["error"]["message"]
        illegal = http.post("/api/v1/issues/1/status", json={"status": "done"})
        assert illegal.status_code == 400
        assert "from failed it can go to: ready, closed" in illegal.json()["error"]["message"]
        # Retry of a failed issue: ready, with a note saying where it came from.
        retried = http.post("/api/v1/issues/1/retry").json()["result"]
        assert (retried["previous"], retried["status"]) == ("failed", "ready")
        assert (
            http.get("/api/v1/issues/1").json()["issue"]["comments"][-1]["text"] == "Retried from beflow's dashboard."
        )
        assert queue() == ["3", "4", "1"]
        # Cancel goes the same way: the run's issue back to open.
        cancelled = http.post(f"/api/v1/runs/{run}/cancel").json()
        assert (cancelled["operation"], cancelled["result"]["status"]) == ("issue.set_status", "open")


def test_an_actions_body_is_checked_and_a_bad_one_named(repo: Path) -> None:
    steered(repo)
    before = issues(repo)
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        said = {
            body: http.post(path, content=body, headers={"Content-Type": "application/json"}).json()["error"]
            for path, body in (
                ("/api/v1/issues", "{}"),
                ("/api/v1/issues", '{"title": "x", "priority": -1}'),
                ("/api/v1/issues", '{"title": "x", "status": "in_progress"}'),
                ("/api/v1/issues/3/priority", '{"priority": "high"}'),
                ("/api/v1/issues/3/priority", "not json"),
            )
        }
        assert {body: error["code"] for body, error in said.items()} == dict.fromkeys(said, "usage")
        assert said["{}"]["message"].startswith("new: title: ")
        assert said['{"title": "x", "priority": -1}']["message"].startswith("new: priority: ")
        assert said['{"title": "x", "status": "in_progress"}']["message"].startswith("new: status: ")
        assert said['{"priority": "high"}']["message"].startswith("priority: priority: ")
        assert said["not json"]["message"] == 'the body of priority must be JSON: {"priority": …}'
        missing = http.post("/api/v1/issues/99/priority", json={"priority": 1})
        assert missing.status_code == 404
    assert issues(repo) == before


STEERING = REPO_ROOT / "tests" / "support" / "steering.mjs"


@pytest.mark.slow
def test_a_person_steers_a_running_watch_from_its_page_in_a_real_browser(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow_process, browser_modules: Path, tmp_path: Path
) -> None:
    auto_project.configure(watch={"interval": 0.2, "concurrency": 1}, http={"actions": True})
    marks = tmp_path / "marks.log"
    # Longer than the driver may take on a loaded machine: the page cancels it, not the clock.
    long = auto_project.new_issue("sleep 900", f"mark {marks}", title="the long one", priority=0)
    queued = auto_project.new_issue("say queued", title="queued")
    failed = auto_project.new_issue("say retried", title="the failed one")
    auto_project.tracker.set_status(failed, Status.IN_PROGRESS)
    auto_project.tracker.set_status(failed, Status.FAILED, note="the agent gave up")
    process = beflow_process("watch", "--json", "--http", "0", cwd=auto_project.directory, env={TOKEN_ENV: TOKEN})
    watching = Watch(process)
    threading.Thread(target=lambda: watching.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # type: ignore[union-attr]
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    eventually(marks.exists, "the long run started", alive=process)
    keys = json.dumps({"long": long, "queued": queued, "failed": failed})
    driver = subprocess.run(
        ["node", str(STEERING), str(browser_modules), watching.url, TOKEN, keys, str(artifacts)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    seen = json.loads(driver.stdout.splitlines()[-1])
    if "error" in seen:
        pytest.fail(f"{json.dumps(seen)}\n{driver.stderr}\n{''.join(watching.stderr[-20:])}")
    assert seen["pageerrors"] == [] and seen["dialogs"] == []  # (the token link's cookie: never asked for)
    assert seen["address"] == watching.url + "/"
    # A new issue from the form: filed ready with what the form said, first in the queue.
    filed = seen["filed"]
    assert seen["queueBefore"] == [queued] and seen["queueFiled"] == [filed, queued]
    assert (seen["filedSaid"], seen["formCleared"]) == ("done", "")
    # The controls fit a phone: no short token broken (a priority and its ▲ ▼), nothing wider than the window.
    assert seen["layout"] == {
        "/": {"broken": [], "width": 390},
        f"/issues/{failed}": {"broken": [], "width": 390},
    }
    # The queue's order changed from the page: the queued issue raised ahead of it.
    assert seen["queueReordered"] == [queued, filed]
    # A status a person may choose, and the note as a comment.
    assert seen["choices"] == ["open", "closed"] and seen["failedChoices"] == ["ready", "closed"]
    assert (seen["statusShown"], seen["statusNote"]) == ("open", "not this week")
    # The failed issue retried: ready, in the queue, then run once the lane was free.
    assert (seen["retried"], seen["retryGone"]) == ("ready", True)
    assert seen["queueRetried"] == [filed, failed]
    assert seen["failedRuns"] >= 1
    assert {"filed", "reordered", "moved", "retried-run"} <= {p.stem for p in artifacts.iterdir()}
    # What the tracker holds is what the page said, each change signed by whoever runs the server.
    new = auto_project.issue(filed)
    assert (new.title, new.body, new.labels) == ("Filed from the page", "acp-test: say filed", ["docs", "ui"])
    assert auto_project.issue(queued).status == Status.OPEN and auto_project.issue(queued).priority == 0
    assert auto_project.issue(long).status == Status.OPEN
    assert any(c.text == "Retried from beflow's dashboard." for c in auto_project.issue(failed).comments)
    assert any(r.issue == failed for r in auto_project.runs.records())


def blocked(repo: Path) -> tuple[str, RunRecord]:
    """Issue 4 of :func:`steered`'s project, blocked on its run's question; that run's record."""
    steered(repo)
    tracker = open_tracker(load_project(config_file(repo)))
    key = tracker.create("Pick a colour", "").key
    tracker.set_status(key, Status.IN_PROGRESS)
    asking = RunRecord(id=new_run_id(key), issue=key, mode="watch", agent="a", started_at=utc_now(), title="Pick")
    asking.question = Question(text="Red or <b>blue</b>?", choices=["red", "blue"], asked=utc_now())
    asking.close("asked", "the agent asked a question")
    RunStore(repo).create(asking, "prompt")
    RunStore(repo).save(asking)
    tracker.set_status(key, Status.BLOCKED, note="the question")
    return key, asking


def test_the_page_shows_a_blocked_issues_question_and_answering_it_resumes_through_the_registry(repo: Path) -> None:
    key, asking = blocked(repo)
    tracker = open_tracker(load_project(config_file(repo)))
    with serving(repo) as (served, _), client(served) as http:
        own = f"http://127.0.0.1:{served.bind.port}"
        detail = http.get(f"/api/v1/issues/{key}", headers=BEARER).json()
        assert detail["question"]["text"] == "Red or <b>blue</b>?" and detail["question"]["choices"] == ["red", "blue"]
        page = http.get(f"/issues/{key}", headers=BEARER).text
        assert 'id="answer"' in page and "Red or &lt;b&gt;blue&lt;/b&gt;?" in page and "<li>blue</li>" in page
        path = f"/api/v1/issues/{key}/answer"
        assert http.post(path, json={"text": "blue"}, headers={"Origin": own}).status_code == 401
        assert (
            http.post(path, json={"text": "blue"}, headers={"Origin": "http://evil.example", **BEARER}).status_code
            == 403
        )
        assert http.post(path, json={"txt": "blue"}, headers=BEARER).status_code == 400
        not_blocked = http.post("/api/v1/issues/3/answer", json={"text": "blue"}, headers=BEARER)
        assert not_blocked.status_code == 400 and "waits for no answer" in not_blocked.json()["error"]["message"]
        done = http.post(path, json={"text": "blue"}, headers={"Origin": own, **BEARER})
        assert done.status_code == 200, done.text
        assert (done.json()["operation"], done.json()["result"]["run"]) == ("issue.answer", asking.id)
    issue = tracker.get(key)
    answer = questions.answer_of(tracker, issue, asking)
    assert answer is not None and answer.text == "blue"  # the watch's next look resumes the session with it
    assert [c.text.split("\n")[0] for c in issue.comments] == ["the question", "blue"]


@pytest.mark.slow
def test_a_person_answers_the_agents_question_on_its_page_in_a_real_browser(repo: Path, browser_modules: Path) -> None:
    key, asking = blocked(repo)
    with serving(repo) as (served, _):
        url = f"http://127.0.0.1:{served.bind.port}"
        seen = drive(browser_modules, "answering.mjs", url, TOKEN, key, "Blue, <b>please</b>.")
    assert (seen["question"], seen["choices"], seen["said"]) == ("Red or <b>blue</b>?", ["red", "blue"], "done")
    tracker = open_tracker(load_project(config_file(repo)))
    answer = questions.answer_of(tracker, tracker.get(key), asking)
    assert answer is not None and answer.text == "Blue, <b>please</b>."
