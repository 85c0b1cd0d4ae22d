"""The pages read as a person reads them, in a real headless Chromium: an issue's Markdown rendered and every
hostile payload in it (and in a title, a branch name, an agent's line) inert; the run's fields in words; tables
that never break a short token at 390 px and 1366 px; an issue's and a run's page live; empty sections hidden;
and, when the server stops, a page that says so and asks again less and less often."""

from __future__ import annotations

import itertools
import json
import subprocess
from pathlib import Path

import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.records.record import ProgressNote, RunRecord, new_run_id
from beflow.records.reviews import PageReviews
from beflow.records.store import RunStore
from beflow.trackers.issue import Status, utc_now
from beflow.web.guard import TOKEN_ENV
from tests.conftest import git
from tests.support.projects import config_file
from tests.web.conftest import REPO_ROOT
from tests.web.test_http import serving

pytestmark = pytest.mark.slow

DRIVER = REPO_ROOT / "tests" / "support" / "reading.mjs"
EVIL = "https://evil.example"
BODY = f"""# The plan

Some **bold** words and [a link](https://example.org/page).

<script>window.__pwned = 'body script'; alert('body')</script>
<img src="{EVIL}/img.png" onerror="alert('img')">
<svg onload="alert('svg')"></svg>
<iframe src="{EVIL}/frame"></iframe>
[click me](javascript:alert('js')) [data](data:text/html,<script>alert(1)</script>)
[entity](&#106;avascript:alert('entity'))

![tracker pixel]({EVIL}/pixel.png)

<span style="display:none">hidden words</span>
<style>body {{ display: none }}</style>
<a href="{EVIL}/" onclick="alert('click')">anchor</a>
"""
COMMENT = f"<details open ontoggle=alert('toggle')>x</details> <b onmouseover=alert(1)>b</b> ![]({EVIL}/c.png)"
TITLE = f"<img src={EVIL}/t.png onerror=alert('title')><script>alert('t')</script>"
BRANCH = "beflow/<img src=x onerror=alert('branch')>"


def hostile_project(repo: Path) -> tuple[str, str, str]:
    """An issue whose title, body and comment are hostile, with a failed run, another still running (hostile
    branch, reason and agent line), and a few more for the tables; and an issue in review whose branch changes a
    file, with a page comment on one of its lines (the review's page)."""
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    tracker = open_tracker(load_project(config_file(repo)))
    key = tracker.create(TITLE, BODY, status=Status.OPEN).key
    tracker.comment(key, COMMENT, "mallory")
    review = tracker.create("A plain issue with a title long enough to wrap on a phone's narrow screen").key
    tracker.set_status(review, Status.IN_PROGRESS)
    tracker.set_status(review, Status.REVIEW)
    git(repo, "checkout", "-qb", f"beflow/{review}")
    (repo / "app.py").write_text("def total(values):\n    return sum(values)  # an empty list: 0\n" + "x = 1\n" * 3)
    git(repo, "add", "app.py")
    git(repo, "commit", "-qm", "work")
    git(repo, "checkout", "-q", "-")
    PageReviews(repo).add(review, author="ann", body="and a **None**?", commit="0" * 40, path="app.py", line=2)
    store = RunStore(repo)
    for n in range(3):
        done = RunRecord(id=new_run_id(key), issue=key, mode="auto", agent="a", started_at=utc_now(), title=TITLE)
        store.create(done, "prompt")
        done.finished_at, done.duration, done.outcome = utc_now(), 42.0 + n, "failed"
        done.stop_reason = "the agent failed: " + "a long reason that goes on " * 5
        done.branch = BRANCH
        store.write(done.id, "run.json", done.model_dump_json())
    running = RunRecord(id=new_run_id(key), issue=key, mode="auto", agent="a", started_at=utc_now(), title=TITLE)
    running.branch, running.worktree = BRANCH, str(repo / ".beflow" / "worktrees" / key)
    running.changed_files = [str(repo / "src" / "app.py")]
    running.resume_note = "no earlier session: " + "x" * 400
    store.create(running, "prompt")
    agent_line = {
        "jsonrpc": "2.0",
        "method": "session/update",
        "params": {
            "sessionId": "s",
            "update": {
                "sessionUpdate": "agent_message_chunk",
                "content": {
                    "type": "text",
                    "text": f"<img src={EVIL}/a.png onerror=alert('agent')> edited {running.worktree}/src/app.py",
                },
            },
        },
    }
    store.write(running.id, "transcript.jsonl", json.dumps(agent_line) + "\n")
    return key, running.id, review


def test_pages_render_markdown_inert_keep_short_tokens_whole_follow_events_and_say_when_the_server_stopped(
    repo: Path,
    browser_modules: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "r" * 24)
    key, run, review = hostile_project(repo)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    tracker = open_tracker(load_project(config_file(repo)))
    store = RunStore(repo)
    with serving(repo) as (served, hub):
        url = f"http://127.0.0.1:{served.bind.port}"
        driver = subprocess.Popen(
            ["node", str(DRIVER), str(browser_modules), url, key, run, review, str(artifacts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert driver.stdin is not None and driver.stdout is not None

        def until(step: str) -> None:
            said = driver.stdout.readline().strip()  # type: ignore[union-attr]
            assert said == step, (said, driver.stderr.read() if driver.stderr else "")

        def go() -> None:
            driver.stdin.write("go\n")  # type: ignore[union-attr]
            driver.stdin.flush()  # type: ignore[union-attr]

        try:
            until("issue-open")  # a comment comes while the issue's page is open
            tracker.comment(key, "a *live* comment", "ann")
            tracker.set_status(key, Status.READY)
            hub.publish({"event": "activity", "issue": key, "run": run, "text": "reading", "time": 0.0})
            hub.publish({"event": "dispatched", "issue": key, "attempt": 1, "time": 0.0})
            go()
            until("run-open")  # the run ends while its page is open
            record = store.get(run)
            record.finished_at, record.outcome, record.stop_reason = utc_now(), "failed", "it failed"
            record.progress = [ProgressNote(time=utc_now(), text="done")]
            store.write(run, "run.json", record.model_dump_json())
            hub.publish({"event": "finished", "issue": key, "run": run, "outcome": "failed", "time": 0.0})
            go()
            until("home-open")
        except BaseException:
            driver.kill()
            raise
    go()  # the server has stopped
    out, err = driver.communicate(timeout=120)
    seen = json.loads(out.splitlines()[-1])
    assert "error" not in seen, (seen, err)
    assert seen["pageerrors"] == []
    # Nothing hostile ran, loaded or asked another origin for anything, on any page, live updates included.
    assert seen["dialogs"] == [] and seen["foreign"] == []
    for name, found in seen.items():
        if name.startswith("markup:"):
            assert found.pop("scripts") in ([], ["/static/dashboard.js"]), name  # the lists have no script
            assert found == {
                "pwned": None,
                "images": 0,
                "frames": 0,
                "handlers": 0,
                "styled": 0,
                "scriptLinks": [],
            }, name
    # The issue's Markdown is rendered; its HTML is shown as characters; an image is a placeholder naming its host.
    issue = seen["issue"]
    assert issue["heading"] == "The plan" and issue["strong"] == "bold"
    assert issue["link"] == "noreferrer noopener nofollow"
    assert issue["placeholders"] == ["[image from evil.example: tracker pixel]", "[image from evil.example]"]
    assert '<span style="display:none">hidden words</span>' in issue["body"]
    assert "[click me](javascript:alert('js'))" in issue["body"]
    assert "<details open ontoggle=alert('toggle')>" in issue["comments"][0]
    # Live: the comment and the status came without a reload; so did the run's end.
    assert seen["issueLive"] == {"comment": "live", "status": "ready"}
    assert seen["runLive"] == "failed: it failed"
    # The run's fields in words, times as times, paths relative to the repository, a long value elided.
    labels = seen["run"]["labels"]
    assert "pid_start" not in labels and "process started" in labels and "started" in labels
    values = seen["run"]["values"]
    assert values["worktree"] == f".beflow/worktrees/{key}" and values["changed_files"] == "src/app.py"
    assert values["branch"] == BRANCH
    assert seen["run"]["agent"] == [f"<img src={EVIL}/a.png onerror=alert('agent')> edited src/app.py"]
    assert len(values["pid_start"]) == len("2026-12-06 14:03:27")
    assert seen["run"]["elided"] == ["… (300 more characters: show all)"]
    assert seen["run"]["whole"] == "no earlier session: " + "x" * 400
    # No short token is broken anywhere on any page, on a phone or a laptop; no page is wider than the window.
    assert {
        f"{name}@{width}" for name in ("home", "issues", "runs", "issue", "run", "review") for width in (390, 1366)
    } == set(seen["layout"])
    assert {page: broken for page, broken in seen["layout"].items() if broken} == {}
    assert all(width <= int(page.split("@")[1]) + 1 for page, width in seen["wide"].items()), seen["wide"]
    assert seen["review"] == {"files": 1, "remarks": 1, "transcript": False}
    # Empty sections say nothing; a server with no watch says what it shows.
    assert seen["home"]["hidden"] == {"queue": False, "held": True, "backoffs": True, "recent": False}
    assert seen["home"]["watch"] == "none: this server shows the issues and the records"
    # Stopped: the page says so, and asks again after growing waits, not every second.
    stopped = seen["stopped"]
    assert stopped["stopped"] == "yes" and stopped["watch"].startswith("stopped: no answer from the server since ")
    waits = stopped["waits"]
    assert len(waits) >= 3 and all(later > earlier for earlier, later in itertools.pairwise(waits)), waits
    assert stopped["connection"].startswith("disconnected: trying again in ")
    shots = {path.name for path in artifacts.iterdir()}
    assert {f"{name}-{width}.png" for name in ("home", "issue", "run", "review") for width in (390, 1366)} <= shots
