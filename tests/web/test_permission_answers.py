"""A permission request the run's policy leaves to a person (docs/questions.md#permissions), end to end: the real
acpx fails the turn on it, the issue waits ``blocked`` with the request as its question, a person answers
``allow once`` on the issue's page in a real browser, and the watch resumes the agent's session with that one request
allowed — another request of the resumed turn is not, and becomes the next question."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import anyio
import pytest

from beflow.trackers import Status
from beflow.web.guard import TOKEN_ENV
from tests.support.projects import AutoProject
from tests.watch.test_dispatcher import fast, watching
from tests.web.conftest import REPO_ROOT
from tests.web.test_http import TOKEN, serving

ANSWER = "allow once\n\nacp-test: ask other.txt no\nacp-test: ask granted.txt yes"


@pytest.mark.slow
def test_answer_a_permission_on_the_page_and_the_turn_goes_on_with_that_request_alone_allowed(
    auto_project: AutoProject, browser_modules: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    permissions = {"mode": "approve-reads", "undecided": "ask"}
    auto_project.configure(permissions=permissions, watch=fast(max_attempts=1), http={"actions": True})
    key = auto_project.new_issue("write before.txt 1", "ask granted.txt yes")
    seen: dict[str, object] = {}

    def answer_on_the_page() -> None:
        with serving(auto_project.directory) as (served, _):
            driver = subprocess.run(
                ["node", str(REPO_ROOT / "tests" / "support" / "answering.mjs"), str(browser_modules),
                 f"http://127.0.0.1:{served.bind.port}", TOKEN, key, ANSWER],
                capture_output=True,
                text=True,
                timeout=300,
            )  # fmt: skip
        seen["driver"] = driver.stdout.splitlines()[-1] if driver.stdout else driver.stderr

    async def scenario() -> None:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("finished", key)))  # (its lane given back: then said)
            seen["status"] = auto_project.issue(key).status
            seen["running"] = [r.key for r in watch.dispatcher.snapshot().running]
            await anyio.to_thread.run_sync(answer_on_the_page)
            await watch.until(lambda: len([r for r in auto_project.records(key) if r.finished]) == 2)

    anyio.run(scenario)

    said = json.loads(str(seen["driver"]))
    assert "error" not in said and said["pageerrors"] == [], said
    assert said["choices"] == ["allow once", "deny"] and said["said"] == "done"
    assert said["question"].startswith("The agent asks permission for: Write granted.txt (edit)")
    assert seen["status"] == Status.BLOCKED and seen["running"] == []  # while the question waits, no turn is live
    resumed, asked = auto_project.records(key)
    assert asked.outcome == "asked" and asked.question is not None and asked.question.permission is not None
    assert asked.question.permission.grant == "Write granted.txt" and asked.attempt == resumed.attempt == 1
    assert "A\tbefore.txt" in asked.changed_files and not any("granted" in f for f in asked.changed_files)
    # The same session went on: the request allowed, once by its title; another one is the next question.
    assert resumed.answer is not None and resumed.answer.text.startswith("allow once")
    assert resumed.resumed_session == asked.session is not None
    assert "A\tgranted.txt" in resumed.changed_files, resumed.model_dump_json(indent=1)
    assert not any("other" in f for f in resumed.changed_files)
    assert resumed.outcome == "asked" and resumed.question is not None and resumed.question.permission is not None
    assert resumed.question.permission.title == "Write other.txt"
    assert auto_project.issue(key).status == Status.BLOCKED
    questions = [c.text for c in auto_project.issue(key).comments if "beflow:question" in c.text]
    assert len(questions) == 2 and "1. allow once" in questions[0] and "2. deny" in questions[0]
