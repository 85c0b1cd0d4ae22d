"""The live page of a real ``beflow watch --http`` with the test agent, in a real headless Chromium: a lane
appears when the run starts, its progress lines stream in, the run moves to the recent runs with its outcome, and a
hostile title renders as text. Screenshots are kept in the test's temporary directory (``artifacts/``).

Also the same watch through the API alone: the state has the lane, the event stream carries the run's events."""

from __future__ import annotations

import contextlib
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import jsonschema
import pytest

from beflow.trackers import Status
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow

REPO_ROOT = Path(__file__).resolve().parent.parent.parent
DRIVER = REPO_ROOT / "tests" / "support" / "dashboard.mjs"
HOSTILE = "<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script> \x1b[31mred\x1b[0m " + "y" * 3000


def progress(text: str) -> str:
    return f"mcp-call beflow run_progress {json.dumps({'text': text})}"


@dataclass
class Watch:
    process: subprocess.Popen[str]
    stderr: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        found = eventually(self._url, "the watch said where it serves", alive=self.process)
        return found

    def _url(self) -> str | None:
        for line in list(self.stderr):
            match = re.search(r"serving (http://\S+?)/ ", line)
            if match:
                return match.group(1)
        return None


@pytest.fixture
def watch(auto_project: AutoProject, beflow_process) -> Iterator[Watch]:  # type: ignore[no-untyped-def]
    # (A day budget the usage test passes; the browser test's agent reports no cost.)
    auto_project.configure(
        mcp={"self": True}, watch={"interval": 0.2, "concurrency": 1}, limits={"cost_per_day": 0.3, "currency": "USD"}
    )
    process = beflow_process("watch", "--json", "--http", "0", cwd=auto_project.directory)
    watching = Watch(process)

    def drain(stream: object, into: list[str] | None) -> None:
        for line in stream:  # type: ignore[attr-defined]
            if into is not None:
                into.append(line)

    threading.Thread(target=drain, args=(process.stderr, watching.stderr), daemon=True).start()
    threading.Thread(target=drain, args=(process.stdout, None), daemon=True).start()
    yield watching
    process.terminate()
    process.wait(60)


def test_the_live_page_follows_a_run_in_a_real_browser(
    auto_project: AutoProject, watch: Watch, browser_modules: Path, tmp_path: Path
) -> None:
    key = auto_project.new_issue(
        "usage 1200 100000 0.05 USD",
        progress("reading the code"),
        "say " + "\\n".join(f"line {n}" for n in range(1, 31)),
        "sleep 1",
        progress("tests pass"),
        "sleep 2",
        progress("almost"),
        "sleep 1",
        "write done.txt <svg onload=window.__pwned=3>",
        title=HOSTILE,
        status=Status.OPEN,
    )
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    driver = subprocess.Popen(
        ["node", str(DRIVER), str(browser_modules), watch.url + "/", key, str(artifacts)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "ready", driver.stderr.read() if driver.stderr else ""
        auto_project.tracker.set_status(key, Status.READY)  # the run starts while the page watches
        out, err = driver.communicate(timeout=150)
    finally:
        if driver.poll() is None:
            driver.kill()
    seen = json.loads(out.splitlines()[-1])
    assert "error" not in seen, (seen, err)
    assert seen["steps"] == ["lane", "progress: reading the code", "progress: tests pass", "recent"]
    # The hostile title is text: its markup shows as characters, nothing of it ran, its escapes are gone.
    assert seen["title"].startswith("<img src=x onerror=window.__pwned=1><script>window.__pwned=2</script> red")
    assert "\x1b" not in seen["title"] and "[31m" not in seen["title"]
    assert "… (2,7" in seen["title"] and "more characters: show all)" in seen["title"]  # elided, whole on demand
    assert seen["pwned"] is None and seen["images"] == 0 and seen["scripts"] == ["/static/dashboard.js"]
    assert seen["recentTitle"].startswith("<img src=x")
    assert seen["wide"] <= 390 + 1  # a phone's width, a 3000-character title and all
    assert seen["outcome"] == "succeeded" and seen["back"] == "succeeded"
    assert seen["runPage"].startswith("succeeded") and seen["transcriptLines"] > 0
    assert seen["usage"] == "context 1,200/100,000 · 1,200 tokens · 0.05 USD"  # what the agent reported
    assert seen["healthUsed"] == "1,200 tokens so far in 1 running run"  # the health line agrees with the lane
    assert seen["layout"] == {"390": [], "1366": []}
    # The lane's tail showed its newest line, and kept the reader's place once they scrolled up.
    assert seen["tailShows"] and seen["tailKept"] == 10, seen["tailText"]
    # The run's file edit is a unified diff, its markup text, on a phone's width too.
    assert seen["diffAdded"] == ["+<svg onload=window.__pwned=3>"]
    assert seen["runPwned"] is None and seen["runImages"] == 0 and seen["runWide"] <= 390 + 1
    shots = sorted(path.name for path in artifacts.iterdir())
    assert shots == ["0-idle.png", "1-lane.png", "2-progress.png", "3-recent.png", "4-run.png"]


def test_the_api_of_a_running_watch_shows_its_lane_its_usage_and_streams_its_events(
    auto_project: AutoProject, watch: Watch
) -> None:
    key = auto_project.new_issue(
        "usage 2500 100000 0.40 USD",
        progress("halfway"),
        "sleep 2",
        "write a.txt x",
        "tokens 3000 400",
        title="plain",
        status=Status.OPEN,
    )
    base = watch.url
    with httpx.Client(base_url=base, timeout=30) as http:
        assert http.get("/api/v1/state").json()["health"]["live"] is True
        kinds: list[str] = []
        with http.stream("GET", "/api/v1/events") as events:
            auto_project.tracker.set_status(key, Status.READY)
            assert http.post("/api/v1/refresh").status_code == 202
            lanes: list[dict[str, object]] = []
            components = http.get("/api/v1/openapi.json").json()["components"]
            for line in events.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line.removeprefix("data: "))
                    jsonschema.validate(event, {"$ref": "#/components/schemas/Event", "components": components})
                    kinds.append(event["event"])
                    if event["event"] == "progress" and not lanes:
                        lanes = eventually(
                            lambda: [la for la in http.get("/api/v1/state").json()["lanes"] if la["usage"]],
                            "the lane showed the reported usage",
                        )
                    if event["event"] == "finished" and "outcome" in event:
                        break
        assert "dispatched" in kinds and "progress" in kinds and "usage" in kinds
        (lane,) = lanes
        assert lane["issue"] == key and lane["progress"] == ["halfway"] and lane["title"] == "plain"
        # Only what the agent reported: the context, its window and the cost in its currency (no tokens yet).
        assert lane["usage"] == {
            "context_used": 2500,
            "context_size": 100000,
            "tokens": 2500,
            "input_tokens": None,
            "output_tokens": None,
            "cost": 0.4,
            "currency": "USD",
        }
        # (the run's own `finished` may come before the watch has let go of its lane)
        state = eventually(lambda: (got := http.get("/api/v1/state").json())["lanes"] == [] and got, "the lane ended")
        assert state["recent"][0]["issue"] == key
        used = state["recent"][0]["usage"]
        assert (used["tokens"], used["input_tokens"], used["output_tokens"], used["cost"]) == (3400, 3000, 400, 0.4)
        assert state["totals"]["used"] == {"runs": 1, "reported": 1, "tokens": 3400, "cost": {"USD": 0.4}}
        budget = state["totals"]["budget"]
        assert (budget["spent"], budget["limit"], budget["currency"]) == (0.4, 0.3, "USD")
        run = state["recent"][0]["id"]
        record = http.get(f"/api/v1/runs/{run}").json()
        assert record["outcome"] == "succeeded"
        jsonschema.validate(record, {"$ref": "#/components/schemas/RunRecord", "components": components})
        assert (
            "context 2,500 of 100,000 tokens; 3,400 tokens (3,000 in, 400 out); cost 0.40 USD"
            in http.get(f"/runs/{run}").text
        )
        page = http.get(f"/api/v1/runs/{run}/transcript", params={"limit": 2}).json()
        assert len(page["lines"]) <= 2 and page["total"] >= len(page["lines"])
        jsonschema.validate(page, {"$ref": "#/components/schemas/TranscriptPage", "components": components})
        # The day's budget is spent: the next ready issue waits in the queue, and the state says why.
        waiting = auto_project.new_issue("write b.txt x", title="next")
        held = eventually(
            lambda: (b := http.get("/api/v1/state").json()["totals"]["budget"])["held"] and b, "the budget held"
        )
        assert "limits.cost_per_day is 0.3 USD" in held["message"]
        state = http.get("/api/v1/state").json()
        assert [q["issue"] for q in state["queue"]] == [waiting] and state["lanes"] == []
        # The figures, the hold and the lane are in the shapes the OpenAPI document gives.
        jsonschema.validate(state, {"$ref": "#/components/schemas/State", "components": components})
        jsonschema.validate(lane, {"$ref": "#/components/schemas/Lane", "components": components})
        hold = state["queue"][0]["held"]
        assert hold["check"] == "budget" and "limits.cost_per_day" in hold["message"] and hold["fix"]
        page_text = http.get("/").text
        assert "day budget" in page_text and "3,400 tokens" in page_text and "0.40 USD" in page_text


def test_serve_shows_a_project_with_no_watch_and_stops_on_sigterm_with_130(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow_process
) -> None:
    key = auto_project.new_issue("say hi", title="waiting")
    process = beflow_process("serve", "0", cwd=auto_project.directory)
    served = Watch(process)
    threading.Thread(target=lambda: served.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    state = httpx.get(served.url + "/api/v1/state", timeout=30).json()
    assert state["health"]["live"] is False and state["lanes"] == []
    assert [q["issue"] for q in state["queue"]] == [key]
    assert httpx.post(served.url + "/api/v1/refresh", timeout=30).status_code == 202
    process.terminate()
    assert process.wait(30) == 130  # stopped, after a graceful shutdown


def test_the_health_says_why_the_watch_holds_back_and_how_to_fix_it(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow_process
) -> None:
    auto_project.configure(agent="claud", watch={"interval": 0.2})
    auto_project.new_issue("say hi")
    process = beflow_process("watch", "--json", "--http", "0", cwd=auto_project.directory)
    watching = Watch(process)
    threading.Thread(target=lambda: watching.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # type: ignore[union-attr]
    url = watching.url

    def health() -> dict[str, object] | None:
        found = httpx.get(url + "/api/v1/state", timeout=30).json()["health"]
        return found if found["blocked"] else None

    found = eventually(health, "the watch held dispatching back", alive=process)
    assert "'claud' is not an agent acpx knows" in str(found["blocked"]) and found["blocked_fix"]
    assert any("not dispatching until this is fixed" in e for e in found["errors"])  # type: ignore[attr-defined]
    # Each queued issue says what holds it back, with the check's message and its fix.
    (queued,) = httpx.get(url + "/api/v1/state", timeout=30).json()["queue"]
    held = {"check": "config", "message": found["blocked"], "fix": found["blocked_fix"], "since": None}
    assert queued["held"] == held
    page = httpx.get(url + "/", timeout=30).text
    assert "held back" in page and "config: " in page


def test_cancelling_a_run_from_the_api_stops_it_restores_its_files_and_leaves_its_issue_open(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow_process, tmp_path: Path
) -> None:
    from beflow.web.guard import TOKEN_ENV

    token = "c" * 24
    marks = tmp_path / "marks.log"
    auto_project.configure(watch={"interval": 0.2, "concurrency": 1}, http={"actions": True})
    key = auto_project.new_issue("write partial.txt half", "sleep 60", f"mark {marks}", title="long")
    process = beflow_process("watch", "--json", "--http", "0", cwd=auto_project.directory, env={TOKEN_ENV: token})
    watching = Watch(process)
    threading.Thread(target=lambda: watching.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()  # type: ignore[union-attr]
    with httpx.Client(base_url=watching.url, timeout=30) as http:
        eventually(marks.exists, "the agent's long turn started", alive=process)
        (lane,) = eventually(
            lambda: [la for la in http.get("/api/v1/state").json()["lanes"] if la["run"]], "the lane has its run"
        )
        run = lane["run"]
        worktree = Path(auto_project.runs.get(run).worktree or "")
        assert (worktree / ".acpxrc.json").exists()  # injected while the agent runs
        own = {"Origin": watching.url}
        assert http.post(f"/api/v1/runs/{run}/cancel", headers=own).status_code == 401  # the token, always
        done = http.post(f"/api/v1/runs/{run}/cancel", headers={**own, "Authorization": f"Bearer {token}"})
        assert done.status_code == 200, done.text
        components = http.get("/api/v1/openapi.json").json()["components"]
        jsonschema.validate(done.json(), {"$ref": "#/components/schemas/ActionDone", "components": components})
        assert done.json()["operation"] == "issue.set_status" and done.json()["result"]["status"] == "open"
        record = eventually(
            lambda: (r := auto_project.runs.get(run)).finished and r, "the run ended", timeout=60, alive=process
        )
        state = eventually(lambda: (s := http.get("/api/v1/state").json())["lanes"] == [] and s, "the lane ended")
        assert state["recent"][0]["id"] == run and state["recent"][0]["outcome"] == "cancelled"
        assert state["queue"] == []  # an open issue is not picked up again
    # As a run whose issue a person moved on: stopped before its turn ended, recorded cancelled saying why, its
    # managed files put back and its worktree removed, its work so far kept on the branch, the issue left open.
    assert record.outcome == "cancelled" and (record.stop_reason or "").startswith("the issue is now ")
    assert [line.split()[0] for line in marks.read_text().splitlines()] == ["start", "end"]
    assert any("removed" in line for line in record.restored) and not worktree.exists()
    assert auto_project.branch_files(f"beflow/{key}")["partial.txt"] == "half"
    issue = auto_project.issue(key)
    assert issue.status == Status.OPEN
    assert any("Cancelled from beflow's dashboard." in c.text for c in issue.comments)
    assert len(auto_project.records(key)) == 1


LISTS = REPO_ROOT / "tests" / "support" / "lists.mjs"


def test_the_lists_of_issues_and_runs_render_and_page_in_a_real_browser(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow_process, browser_modules: Path, tmp_path: Path
) -> None:
    from tests.web.test_http import some_runs

    keys = [
        auto_project.new_issue("say hi", title=f"issue {n}", status=Status.OPEN if n % 3 else Status.READY)
        for n in range(12)
    ]
    runs = some_runs(auto_project.directory, keys[0], 6) + some_runs(auto_project.directory, keys[1], 3)
    process = beflow_process("serve", "0", cwd=auto_project.directory)
    served = Watch(process)
    threading.Thread(target=lambda: served.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    done = subprocess.run(
        ["node", str(LISTS), str(browser_modules), served.url, str(artifacts)],
        capture_output=True,
        text=True,
        timeout=150,
    )
    seen = json.loads(done.stdout.splitlines()[-1])
    assert "error" not in seen and "pageerror" not in seen, (seen, done.stderr)
    assert seen["issuesAll"] == keys and seen["issuesNext"] is False  # 12 fit one page of 50
    assert seen["issuePages"] == [keys[0:5], keys[5:10], keys[10:12]]
    assert seen["issuesPager"].startswith("previous · page 3 of 3")
    assert seen["readyStatuses"] == ["ready"] * 4
    assert seen["back"] == keys[10:12]  # the back button: the page before the filter
    assert sorted(seen["runsAll"]) == sorted(runs)
    assert [len(p) for p in seen["runPages"]] == [4, 4, 1]
    assert sorted(r for p in seen["runPages"] for r in p) == sorted(runs)
    assert set(seen["runsOfIssue"]) <= {keys[0], keys[1]} and len(set(seen["runsOfIssue"])) == 1
    assert seen["wide"] <= 390 + 1
    assert sorted(path.name for path in artifacts.iterdir()) == ["issues-1.png", "runs-1.png"]


@contextlib.contextmanager
def another_origin() -> Iterator[str]:
    """A page of another origin: an HTTP server of its own on another port, serving an empty page."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<!doctype html><title>ops</title>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


CORS = REPO_ROOT / "tests" / "support" / "cors.mjs"


def test_a_configured_origins_page_reads_and_acts_with_the_token_and_another_origins_page_cannot(  # type: ignore[no-untyped-def]
    auto_project: AutoProject, beflow_process, browser_modules: Path
) -> None:
    from beflow.web.guard import TOKEN_ENV

    token = "o" * 24
    with another_origin() as ops, another_origin() as evil:
        auto_project.configure(http={"actions": True, "origins": [ops]})
        key = auto_project.new_issue("say hi", title="from afar", status=Status.READY)
        process = beflow_process("serve", "0", cwd=auto_project.directory, env={TOKEN_ENV: token})
        served = Watch(process)
        threading.Thread(target=lambda: served.stderr.extend(process.stderr), daemon=True).start()  # type: ignore[arg-type]

        def visit(page: str) -> dict[str, object]:
            done = subprocess.run(
                ["node", str(CORS), str(browser_modules), page + "/", served.url, token, key],
                capture_output=True,
                text=True,
                timeout=120,
            )
            seen: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
            assert "error" not in seen, (seen, done.stderr)
            return seen

        refused = visit(evil)
        assert auto_project.issue(key).status == Status.READY  # nothing it sent changed anything
        allowed = visit(ops)
    assert refused == {
        "origin": evil,
        "state": "TypeError",  # the browser let the page read nothing
        "stream": "error",
        "withCookies": "TypeError",
        "noToken": "TypeError",
        "withToken": "TypeError",
    }
    # The configured origin reads the state and the stream; with the credentials mode "include" it reads nothing
    # (no credentials are allowed: the token is a header); an action needs the token, and is done with it.
    assert allowed == {
        "origin": ops,
        "state": 200,
        "stream": "open",
        "withCookies": "TypeError",
        "noToken": 401,
        "withToken": 200,
    }
    assert auto_project.issue(key).status == Status.OPEN
