"""A run told as an agent session on its Linear issue (an app's token): the session opened and a thought posted as the
first writes after the claim, the agent's tool calls as actions, a response at the end (or an error when the run
fails), a person's stop cancelling it and a follow-up answered by a round — through the real acpx and the test
agent, against the fake Linear; and the whole way through ``beflow watch`` to a pull request on the fake GitHub."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from beflow.config import load_project
from beflow.mcp.journal import journal_dir
from beflow.ops import rounds
from beflow.records.record import RunRecord
from beflow.run import session_reporter
from beflow.run.runner import Run, RunRequest
from beflow.trackers.issue import Status
from beflow.trackers.linear import LinearTracker
from tests.faults.conftest import beflow_run
from tests.support.github import TOKEN as GITHUB_TOKEN
from tests.support.github import FakeGitHub
from tests.support.linear import API_KEY, APP_TOKEN, FakeLinear
from tests.support.linear import linear as linear
from tests.support.projects import AutoProject, git
from tests.support.waiting import eventually

pytestmark = pytest.mark.slow


def run_issue(
    auto_project: AutoProject,
    fake: FakeLinear,
    token: str,
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    meanwhile: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, Any], RunRecord]:
    monkeypatch.setenv("BEFLOW_TEST_LINEAR", token)
    auto_project.configure(
        tracker={"kind": "linear", "team": "ENG", "api_url": fake.url, "token_env": "BEFLOW_TEST_LINEAR"},
        after_run={"pull_request": False},
    )
    if token == APP_TOKEN:
        issue = fake.add_issue("Do it", description=body)
        fake.delegate(issue)  # (Linear opens a session on a delegation: the run takes it up)
    else:
        issue = fake.add_issue("Do it", description=body, labels=["beflow"])  # a person's key: by its label
    project = load_project(auto_project.config_path)
    tracker = auto_project.tracker
    assert isinstance(tracker, LinearTracker)
    person = threading.Thread(target=meanwhile, args=(issue,), daemon=True) if meanwhile else None
    if person is not None:
        person.start()
    record: RunRecord = anyio.run(Run(project, tracker, RunRequest(key="ENG-1", final=False)).execute)
    if person is not None:
        person.join(30)
    return issue, record


def runs_session(fake: FakeLinear, issue: dict[str, Any]) -> dict[str, Any]:
    [session] = issue["agentSessions"]  # the delegation's, taken up by the run: no second one
    return session


def test_a_run_is_an_agent_session_and_a_follow_up_in_it_is_answered_by_a_round_on_the_same_branch(
    auto_project: AutoProject, linear: FakeLinear, monkeypatch: pytest.MonkeyPatch
) -> None:
    issue, record = run_issue(auto_project, linear, APP_TOKEN, monkeypatch, "acp-test: write made.txt hello ENG-2")
    assert record.outcome == "succeeded"
    session = runs_session(linear, issue)
    posted = [s.variables["input"] for s in linear.seen if s.operation == "BeflowAgentActivityCreate"]
    kinds = [p["content"]["type"] for p in posted]
    assert kinds[0] == "thought" and kinds[-1] == "response" and "action" in kinds
    # A tool call is ephemeral: the next activity replaces it in the session (the response, last).
    assert all(p.get("ephemeral") for p in posted if p["content"]["type"] == "action")
    assert [a["content"]["type"] for a in session["activities"]] == ["thought", "response"]
    assert "beflow is working on this" in session["activities"][0]["content"]["body"]
    assert session["status"] == "complete"
    # The thought is the first word after the claim: the session and it come before the issue is moved.
    writes = [s.operation for s in linear.seen if s.query.lstrip().startswith("mutation")]
    claimed = writes.index("BeflowCommentCreate")
    assert writes[claimed + 1] == "BeflowAgentActivityCreate"
    actions = [p["content"] for p in posted if p["content"]["type"] == "action"]
    assert any("made.txt" in a["parameter"] for a in actions)
    assert record.branch and record.branch in session["activities"][-1]["content"]["body"]

    # A person's follow-up in the session, once the issue is in review: a round on the same branch, in that session.
    assert auto_project.tracker.get("ENG-1").status == Status.REVIEW
    asked = linear.prompt(session, "acp-test: write more.txt again")
    project = load_project(auto_project.config_path)
    tracker = auto_project.tracker
    planned = rounds.plan(project, rounds.sources(tracker), "ENG-1", issue_id=issue["id"])
    assert planned is not None and planned.round == 1
    assert [p.id for p in planned.pieces] == [f"linear-prompt:{asked['id']}"]

    request = RunRequest(key="ENG-1", final=False, round=1, feedback=planned.pieces)
    second: RunRecord = anyio.run(Run(project, tracker, request).execute)

    assert second.outcome == "succeeded" and second.round == 1 and second.branch == record.branch
    assert [c.id for c in second.feedback] == [f"linear-prompt:{asked['id']}"]
    assert git(auto_project.directory, "show", f"{second.branch}:more.txt").strip() == "again"
    assert runs_session(linear, issue)["activities"][-1]["content"]["type"] == "response"  # answered where asked
    again = rounds.plan(project, rounds.sources(tracker), "ENG-1", issue_id=issue["id"])
    assert again is not None and again.pieces == []  # answered on the branch: no second round for it


def test_a_failed_run_ends_its_session_with_an_error(
    auto_project: AutoProject, linear: FakeLinear, monkeypatch: pytest.MonkeyPatch
) -> None:
    issue, record = run_issue(auto_project, linear, APP_TOKEN, monkeypatch, "acp-test: fail it broke")
    assert record.outcome == "failed"
    session = runs_session(linear, issue)
    assert [a["content"]["type"] for a in session["activities"]][:: len(session["activities"]) - 1] == [
        "thought",
        "error",
    ]
    assert session["status"] == "error"


def test_with_a_persons_key_no_session_is_opened(
    auto_project: AutoProject, linear: FakeLinear, monkeypatch: pytest.MonkeyPatch
) -> None:
    issue, record = run_issue(auto_project, linear, API_KEY, monkeypatch, "acp-test: say hi")
    assert record.outcome == "no_changes"
    assert issue["agentSessions"] == []


@pytest.mark.usefixtures("no_leftover_processes")
def test_a_persons_stop_in_the_session_cancels_the_run_and_holds_the_issue_back(
    auto_project: AutoProject, linear: FakeLinear, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session_reporter, "STOP_EVERY", 0.2)

    def stop_once_it_works(issue: dict[str, Any]) -> None:
        def working() -> dict[str, Any] | None:
            sessions = issue["agentSessions"]
            return sessions[0] if sessions and len(sessions[0]["activities"]) >= 2 else None

        session = eventually(working, "the run's session at work")
        linear.prompt(session, "Stop, please", stop=True)

    # A managed file the repository has: the run's injection replaces it in the worktree, the stop puts it back.
    prior = b'{"agents": {"kept": {"command": "kept"}}}\n'
    (auto_project.directory / ".acpxrc.json").write_bytes(prior)
    git(auto_project.directory, "add", ".acpxrc.json")
    git(auto_project.directory, "commit", "-q", "-m", "acpx settings")
    body = "acp-test: write early.txt before\nacp-test: sleep 60\nacp-test: write late.txt after"
    issue, record = run_issue(auto_project, linear, APP_TOKEN, monkeypatch, body, stop_once_it_works)
    assert record.outcome == "cancelled"
    assert record.stop_reason is not None and "a person stopped it in the issue's agent session" in record.stop_reason
    assert record.duration is not None and record.duration < 60
    session = runs_session(linear, issue)
    last = session["activities"][-1]["content"]
    assert last["type"] == "response" and last["body"].startswith("Stopped")
    # Held back (beflow:open), not put back in the queue: a watch does not run it again at once.
    assert auto_project.tracker.get("ENG-1").status == Status.OPEN
    # As Ctrl-C: the agent stopped (no process left), and what it did before is kept on its branch.
    assert record.branch is not None
    assert git(auto_project.directory, "show", f"{record.branch}:early.txt").strip() == "before"
    assert "late.txt" not in git(auto_project.directory, "ls-tree", "--name-only", record.branch)
    assert record.mcp_servers  # (injected, so restored: the branch has the repository's file, byte for byte)
    assert git(auto_project.directory, "show", f"{record.branch}:.acpxrc.json").encode() == prior
    assert list(journal_dir().glob("*")) == []  # nothing left for `beflow restore` to put back


@pytest.mark.usefixtures("no_leftover_processes")
def test_a_delegated_issue_is_claimed_by_the_watch_and_answered_with_its_pull_request(
    auto_project: AutoProject, linear: FakeLinear, github: FakeGitHub
) -> None:
    """The whole way: a person delegates the issue to beflow's app; ``beflow watch`` claims it, works it as the
    session a delegation opened, pushes and opens a pull request on GitHub, links it from the session and moves the
    issue to review."""
    auto_project.add_origin()
    auto_project.configure(
        tracker={"kind": "linear", "team": "ENG", "api_url": linear.url, "token_env": "BEFLOW_TEST_LINEAR"},
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    issue = linear.add_issue("Add notes", description="acp-test: write notes.txt first")
    linear.delegate(issue)

    done = beflow_run(auto_project, "watch", "--once", env={"BEFLOW_TEST_LINEAR": APP_TOKEN, "HOSTPAT": GITHUB_TOKEN})

    assert done.code == 0, done.stdout + done.stderr
    [record] = auto_project.runs.records()
    assert record.outcome == "succeeded" and record.issue_id == issue["id"], record.stop_reason
    [pull] = github.pulls.values()
    assert pull["head"]["ref"] == record.branch == "beflow/ENG-1" and record.pull_request == pull["html_url"]
    session = runs_session(linear, issue)
    kinds = [a["content"]["type"] for a in session["activities"]]
    assert kinds[0] == "thought" and kinds[-1] == "response" and session["status"] == "complete"
    posted = [s.variables["input"]["content"]["type"] for s in linear.requests("agentActivityCreate")]
    assert posted[0] == "thought" and "action" in posted
    assert session["externalUrls"] == [{"label": "Pull request", "url": pull["html_url"]}]
    assert issue["state"]["name"] == "In Review" and issue["delegate"]["id"] == linear.app["id"]
    assert APP_TOKEN not in done.stdout + done.stderr and GITHUB_TOKEN not in done.stdout + done.stderr


def test_an_agents_question_is_the_sessions_elicitation_and_a_reply_there_resumes_it(
    auto_project: AutoProject, linear: FakeLinear, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json
    import time

    from beflow.watch.questions import WaitingQuestions

    auto_project.configure(mcp={"self": True})
    ask = {"question": f"Red or blue? ENG-2 @ada {APP_TOKEN}", "choices": ["red", "blue"]}  # (a hostile agent)
    issue, asked = run_issue(
        auto_project, linear, APP_TOKEN, monkeypatch, f"acp-test: mcp-call beflow issue_ask {json.dumps(ask)}"
    )
    transcript = (auto_project.run_dir(asked) / "transcript.jsonl").read_text()
    assert asked.outcome == "asked" and asked.question is not None, transcript[-3000:]
    session = runs_session(linear, issue)
    last = session["activities"][-1]
    assert last["content"]["type"] == "elicitation" and session["status"] == "awaitingInput"
    assert "Red or blue?" in last["content"]["body"] and "2. blue" in last["content"]["body"]
    assert "ENG-2" not in last["content"]["body"]  # the agent's words, inert for Linear
    written = [json.dumps(s.variables) for s in linear.seen if s.query.lstrip().startswith("mutation")]
    assert written and not any(APP_TOKEN in w for w in written)  # the token the agent put in its question: masked
    project, tracker = load_project(auto_project.config_path), auto_project.tracker
    assert tracker.get("ENG-1").status == Status.BLOCKED

    linear.prompt(session, "blue\n\nacp-test: write answer.txt blue")  # a member's reply in the session
    waiting = WaitingQuestions(time.time, lambda *_, **__: None)
    assert [i.key for i in waiting.survey(project, tracker, running=())] == ["ENG-1"]
    request = RunRequest(key="ENG-1", final=False)
    waiting.shape(request, project)
    assert request.answer is not None and request.answer.text.startswith("blue")
    resumed: RunRecord = anyio.run(Run(project, tracker, request).execute)

    assert resumed.outcome == "succeeded" and resumed.resumed_session == asked.session is not None
    assert git(auto_project.directory, "show", f"{resumed.branch}:answer.txt").strip() == "blue"
    assert runs_session(linear, issue)["activities"][-1]["content"]["type"] == "response"  # in the same session
    assert rounds.plan(project, rounds.sources(tracker), "ENG-1", issue_id=issue["id"]).pieces == []  # no round
