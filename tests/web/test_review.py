"""The review of an issue's branch on the dashboard: ``GET``/``POST /api/v1/issues/{key}/review`` (``review.show``,
``review.comment``, behind ``http.actions``, the token and the page's own origin) and the issue's page, which shows the
diff file by file, highlighted and escaped, each comment under its line and its answer once a round gave one."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest

from beflow.records.reviews import PageReviews
from beflow.trackers import Status
from beflow.web.guard import TOKEN_ENV
from tests.conftest import git
from tests.ops.test_reviews import in_review
from tests.support.projects import AutoProject, config_file
from tests.web.conftest import REPO_ROOT
from tests.web.test_dashboard import Watch
from tests.web.test_http import client, serving

TOKEN = "r" * 20 + "-review-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def token_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


def reviewed(repo: Path, actions: bool = True) -> None:
    config_file(repo).write_text(json.dumps({"http": {"actions": actions}}) + "\n")
    in_review(repo)


def test_a_comment_from_the_api_is_kept_and_the_page_shows_it_under_its_line_then_its_answer(repo: Path) -> None:
    reviewed(repo)
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        shown = http.get("/api/v1/issues/1/review").json()
        (change,) = shown["diff"]["files"]
        assert (shown["branch"], change["path"], change["added"]) == ("beflow/1", "app.py", 2)
        lines = [(line["kind"], line["new"], line["text"]) for line in change["hunks"][0]["lines"]]
        assert ("add", 2, "print('<b>y</b>')") in lines

        done = http.post("/api/v1/issues/1/review", json={"path": "app.py", "line": 2, "body": "*no* markup"})
        assert done.status_code == 200, done.text
        assert (done.json()["operation"], done.json()["result"]["comment"]["line"]) == ("review.comment", 2)
        wrong = http.post("/api/v1/issues/1/review", json={"path": "app.py", "line": 99, "body": "x"})
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (400, "usage")
        extra = http.post("/api/v1/issues/1/review", json={"body": "x", "side": "left"})
        assert extra.status_code == 400 and extra.json()["error"]["message"].startswith("review: side: ")

        page = http.get("/issues/1").text
        # The branch's text is text: its markup escaped, its tokens marked; the line's comment right under it.
        assert "<b>y</b>" not in page and "&lt;b&gt;y&lt;/b&gt;" in page
        assert '<span class="t-key">import</span> os' in page
        row = page.index('data-line="2"')
        assert page.index('data-comment="1"') > row and page.index('data-comment="1"') < page.index('data-line="3"')
        assert '<button type="button" class="at" data-path="app.py" data-line="2"' in page
        assert "<em>no</em> markup" in page and "waiting for a review round" in page
        assert 'id="review-form"' in page

        (piece,) = PageReviews(repo).gather("1", "beflow/1").pieces
        PageReviews(repo).reply(piece, "beflow answered this in review round 1: changed `app.py`.")
        page = http.get("/issues/1").text
        assert 'data-answered="yes"' in page and "<code>app.py</code>" in page
        assert "waiting for a review round" not in page


def test_a_comment_whose_line_the_branch_no_longer_shows_stays_in_sight(repo: Path) -> None:
    reviewed(repo)
    PageReviews(repo).add("1", author="alice", body="about line three", commit="0" * 40, path="app.py", line=3)
    git(repo, "checkout", "-q", "beflow/1")
    (repo / "app.py").write_text("import os\nprint('x')\n")
    (repo / "other.py").write_text("x = 1\n")
    git(repo, "add", "app.py", "other.py")
    git(repo, "commit", "-qm", "back")
    git(repo, "checkout", "-q", "main")
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        page = http.get("/issues/1").text
        assert "On the whole change" in page and "about line three" in page


def test_a_review_comment_needs_actions_on_the_token_and_the_pages_own_origin_and_a_refusal_keeps_nothing(
    repo: Path,
) -> None:
    reviewed(repo)
    body = {"body": "x"}
    with serving(repo) as (served, _), client(served) as http:
        own = f"http://127.0.0.1:{served.bind.port}"
        assert http.post("/api/v1/issues/1/review", json=body, headers={"Origin": own}).status_code == 401
        other = http.post("/api/v1/issues/1/review", json=body, headers={"Origin": "http://evil.example", **BEARER})
        assert (other.status_code, other.json()["error"]["code"]) == (403, "bad_origin")
        page = http.get("/issues/1").text
        assert 'id="review-form"' in page
    config_file(repo).write_text("{}\n")
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        off = http.post("/api/v1/issues/1/review", json=body)
        assert (off.status_code, off.json()["error"]["code"]) == (403, "actions_off")
        page = http.get("/issues/1").text
        assert 'id="review-form"' not in page and 'class="at"' not in page and "app.py" in page
    assert PageReviews(repo).read("1").comments == []


def test_an_issue_without_a_branch_shows_no_change_and_its_review_says_none(repo: Path) -> None:
    reviewed(repo)
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        assert http.get("/api/v1/issues/2/review").json()["diff"] is None
        page = http.get("/issues/2")
        assert page.status_code == 200 and 'id="review"' not in page.text
        refused = http.post("/api/v1/issues/2/review", json={"body": "x"})
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "conflict")


def test_the_review_answers_in_the_shape_its_openapi_document_gives(repo: Path) -> None:
    import jsonschema

    reviewed(repo)
    with serving(repo) as (served, _), client(served, **BEARER) as http:
        document = http.get("/api/v1/openapi.json").json()
        shown = http.get("/api/v1/issues/1/review").json()
        jsonschema.validate(shown, {"$ref": "#/components/schemas/ReviewView", "components": document["components"]})


REVIEW = REPO_ROOT / "tests" / "support" / "review.mjs"


@pytest.mark.slow
def test_a_person_comments_a_line_on_the_page_a_round_runs_and_the_page_shows_it_answered(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow, beflow_process, browser_modules: Path, tmp_path: Path
) -> None:
    auto_project.configure(watch={"interval": 0.2, "concurrency": 1}, http={"actions": True}, feedback={"settle": 0.1})
    key = auto_project.new_issue("write hello.txt hi", title="the reviewed one")
    assert beflow("--auto", key).exit_code == 0 and auto_project.issue(key).status == Status.REVIEW
    process = beflow_process("watch", "--json", "--http", "0", cwd=auto_project.directory, env={TOKEN_ENV: TOKEN})
    watching = Watch(process)
    threading.Thread(target=lambda: watching.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # type: ignore[union-attr]
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    body = "say bye instead\nacp-test: write hello.txt bye"
    driver = subprocess.run(
        ["node", str(REVIEW), str(browser_modules), watching.url, TOKEN, key, "hello.txt", "1", body, str(artifacts)],
        capture_output=True,
        text=True,
        timeout=400,
    )
    seen = json.loads(driver.stdout.splitlines()[-1])
    if "error" in seen:
        pytest.fail(f"{json.dumps(seen)}\n{driver.stderr}\n{''.join(watching.stderr[-20:])}")
    assert seen["pageerrors"] == [] and seen["dialogs"] == []
    assert seen["files"] == ["hello.txt"] and seen["transcript"] > 0
    assert seen["picked"] == ["hello.txt", "1"]
    assert (seen["said"], seen["cleared"], seen["underItsLine"]) == ("done", "", True)
    assert seen["waiting"] == "waiting for a review round"
    # The round ran on the same branch, answered the page's comment, and the page said so in place.
    first, second = reversed(auto_project.records(key))
    assert second.round == 1 and [piece.id for piece in second.feedback] == ["page:1"]
    assert auto_project.branch_files(first.branch or "")["hello.txt"] == "bye"
    assert seen["answer"].startswith("beflow answered this in review round 1") and "hello.txt" in seen["answer"]
    assert seen["layout"] == {"broken": [], "width": 390}
    assert {"commented", "answered", "review-390"} <= {p.stem for p in artifacts.iterdir()}
