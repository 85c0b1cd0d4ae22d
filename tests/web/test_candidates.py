"""Best of N on the issue's page (docs/dashboard.md#best-of-n): the candidates side by side — lane and outcome,
agent, checks, cost, time, lines changed, each diff from the commits their runs recorded (highlighted, escaped,
masked) — the verdict with the reviewer's reason, and (``attempts.confirm``) the person's choice through
``POST /api/v1/issues/{key}/confirm`` (``candidate.confirm``), behind ``http.actions``, the token and the page's own
origin. In process, from records written here; one short real-browser test."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.ops import questions
from beflow.records.record import CandidateRow, Question, ReviewerChoice, RunRecord
from beflow.records.store import RunStore
from beflow.trackers.issue import Status, utc_now
from beflow.web.guard import TOKEN_ENV
from tests.conftest import git
from tests.support.projects import config_file
from tests.web.conftest import drive
from tests.web.test_http import client, serving

TOKEN = "b" * 20 + "-best-of-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def _commit(repo: Path, branch: str, text: str) -> str:
    git(repo, "checkout", "-qb", branch, "main")
    (repo / "app.py").write_text(text)
    git(repo, "commit", "-qam", branch)
    git(repo, "checkout", "-q", "main")
    return git(repo, "rev-parse", branch).strip()


def judged(repo: Path, *, confirming: bool) -> tuple[str, RunRecord]:
    """Issue 1 judged among three candidates: c1 passed (the judge's choice), c2 failed its check, c3 committed
    nothing; their runs' records beside the judged run's. ``confirming``: it waits for a person (blocked)."""
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text(json.dumps({"http": {"actions": True}, "attempts": {"confirm": confirming}}))
    tracker = open_tracker(load_project(config_file(repo)))
    key = tracker.create("Make the app say hi", "").key
    tracker.set_status(key, Status.IN_PROGRESS)
    (repo / "app.py").write_text("import os\n")
    git(repo, "add", "app.py")
    git(repo, "commit", "-qm", "app")
    base = git(repo, "rev-parse", "HEAD").strip()
    one = _commit(repo, f"beflow-attempts/{key}/c1", "import os\nprint('<b>hi</b>')\n")
    two = _commit(repo, f"beflow-attempts/{key}/c2", f"import os\nsecret = '{TOKEN}'\n")
    store, start = RunStore(repo), utc_now()
    judge = RunRecord(
        id=f"20260101-000000-{key}-judg", issue=key, mode="watch", agent="best of 3: codex", started_at=start, best_of=3
    )
    rows = []
    for n, commit, passed in ((1, one, 1), (2, two, 0), (3, None, 0)):
        own = RunRecord(
            id=f"20260101-000001-{key}-c{n}",
            issue=key,
            mode="watch",
            agent="codex" if n != 2 else "<i>claude</i>",
            started_at=start + dt.timedelta(seconds=n),
            candidate=n,
            set_of=judge.id,
            branch=f"beflow-attempts/{key}/c{n}",
            base_commit=base,
            commit=commit,
            lines_changed=1 if commit else None,
        )
        own.close("succeeded" if commit else "failed", "done" if commit else "the agent <b>crashed</b>")
        store.create(own, "prompt")
        store.save(own)
        rows.append(
            CandidateRow(
                candidate=n,
                run_id=own.id,
                agent=own.agent,
                branch=own.branch,
                outcome=own.outcome,
                base_commit=base,
                commit=commit,
                checks_passed=passed,
                checks_total=1,
                lines_changed=own.lines_changed,
                cost=0.25 * n,
                currency="USD",
                duration=2.0 * n,
                chosen=n == 1,
            )
        )
    judge.candidates = rows
    judge.review = ReviewerChoice(candidate=1, reason="c1 is <script>alert(1)</script> tidier")
    if confirming:
        judge.question = Question(text="Which one?", choices=["c1", "c2", "c3"], asked=utc_now())
        judge.close("asked", "candidate 1 chosen; waiting for a person to confirm it or choose another")
        tracker.set_status(key, Status.BLOCKED, note="the question")
    else:
        judge.close("succeeded", "candidate 1 chosen by the reviewer")
        tracker.set_status(key, Status.REVIEW)
    store.create(judge, "prompt")
    store.save(judge)
    return key, judge


def test_the_page_shows_the_candidates_side_by_side_with_their_diffs_escaped_and_masked(repo: Path) -> None:
    key, judge = judged(repo, confirming=False)
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        best = http.get(f"/api/v1/issues/{key}").json()["best_of"]
        page = http.get(f"/issues/{key}").text

    assert (best["run"], best["count"], best["reviewer"]) == (judge.id, 3, 1)
    assert [(c["candidate"], c["outcome"], c["passes"], c["chosen"]) for c in best["candidates"]] == [
        (1, "succeeded", True, True),
        (2, "succeeded", False, False),
        (3, "failed", False, False),
    ]
    columns = page.split('<article class="candidate')[1:]
    assert len(columns) == 3 and columns[0].startswith(' chosen" data-candidate="1"')
    assert '<dd class="checks">1/1</dd>' in columns[0] and '<dd class="checks">0/1</dd>' in columns[1]
    assert "0.75 USD" in columns[2] and "not run" in columns[2] and "no commit" in columns[2]
    # The agents' words and the diffs are text: escaped, highlighted, the server's token masked.
    assert "&lt;b&gt;hi&lt;/b&gt;" in columns[0] and '<span class="t-key">print</span>' not in columns[1]
    assert "<b>hi</b>" not in page and "<script>alert" not in page and "&lt;script&gt;alert(1)" in page
    assert TOKEN not in page and 'secret = <span class="t-str">&#39;••••&#39;</span>' in columns[1]
    assert "&lt;i&gt;claude&lt;/i&gt;" in columns[1]
    assert "the agent &lt;b&gt;crashed&lt;/b&gt;" in columns[2]
    assert 'id="confirm"' not in page  # (nothing waits for a person)


def test_a_person_overrides_the_choice_from_the_page_only_with_the_token_from_its_origin_and_anyway(
    repo: Path,
) -> None:
    key, judge = judged(repo, confirming=True)
    path = f"/api/v1/issues/{key}/confirm"
    with serving(repo) as (served, _), client(served) as http:
        own = f"http://127.0.0.1:{served.bind.port}"
        page = http.get(f"/issues/{key}", headers=BEARER).text
        assert 'id="confirm"' in page and 'id="answer"' not in page  # (the judge's question, not an agent's)
        assert '<option value="1" selected>c1 (the judge\'s)</option>' in page and 'value="3"' not in page
        assert http.post(path, json={"candidate": 2}, headers={"Origin": own}).status_code == 401
        other = {"Origin": "http://evil.example", **BEARER}
        assert http.post(path, json={"candidate": 2, "anyway": True}, headers=other).status_code == 403
        refused = http.post(path, json={"candidate": 2}, headers={"Origin": own, **BEARER})
        assert refused.status_code == 400 and "did not pass" in refused.json()["error"]["message"]
        nothing = http.post(path, json={"candidate": 3, "anyway": True}, headers={"Origin": own, **BEARER})
        assert nothing.status_code == 400 and "committed nothing" in nothing.json()["error"]["message"]
        done = http.post(
            path, json={"candidate": 2, "anyway": True, "note": "flaky"}, headers={"Origin": own, **BEARER}
        )
        assert done.status_code == 200, done.text
        assert (done.json()["operation"], done.json()["result"]["run"]) == ("candidate.confirm", judge.id)
    tracker = open_tracker(load_project(config_file(repo)))
    answer = questions.answer_of(tracker, tracker.get(key), judge)
    assert answer is not None and answer.text == "c2 anyway\n\nflaky"  # what the watch's next look proposes


def test_while_the_candidates_run_each_shows_its_lane_and_those_without_one_wait(repo: Path) -> None:
    key, judge = judged(repo, confirming=False)
    store = RunStore(repo)
    running = judge.model_copy(update={"id": f"20260102-000000-{key}-judg", "outcome": "running", "candidates": []})
    running.started_at = running.started_at + dt.timedelta(days=1)
    running.finished_at = None
    store.create(running, "prompt")
    lane = RunRecord(
        id=f"20260102-000001-{key}-c1",
        issue=key,
        mode="watch",
        agent="codex",
        started_at=running.started_at + dt.timedelta(seconds=1),
        candidate=1,
        set_of=running.id,
    )
    store.create(lane, "prompt")
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        best = http.get(f"/api/v1/issues/{key}").json()["best_of"]

    assert best["run"] == running.id and best["outcome"] == "running"
    assert [(c["candidate"], c["run"], c["outcome"]) for c in best["candidates"]] == [
        (1, lane.id, "running"),
        (2, None, "waiting for a lane"),
        (3, None, "waiting for a lane"),
    ]


@pytest.mark.slow
def test_a_person_chooses_a_candidate_on_its_page_in_a_real_browser(repo: Path, browser_modules: Path) -> None:
    key, judge = judged(repo, confirming=True)
    with serving(repo) as (served, _):
        url = f"http://127.0.0.1:{served.bind.port}"
        seen = drive(browser_modules, "choosing.mjs", url, TOKEN, key, "2")
    assert seen["columns"] == [["c1", "1/1"], ["c2", "0/1"], ["c3", "not run"]]
    assert seen["files"] == 2 and seen["said"] == "done"
    tracker = open_tracker(load_project(config_file(repo)))
    answer = questions.answer_of(tracker, tracker.get(key), judge)
    assert answer is not None and answer.text == "c2 anyway"
