"""Review rounds on the local tracker, end to end through the real acpx and the test agent (docs/rounds.md):
``issues comment KEY TEXT --rework`` → a round that continues the branch, answers the feedback once, and says so."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import anyio
import pytest

from beflow.feedback import Feedback, Gathered, Ignored, ThreadComment
from beflow.records.record import RunRecord
from beflow.trackers import Status
from tests.support.projects import AutoProject, git
from tests.watch.test_dispatcher import Clock, Watch, fast, watching

TRAILERS = "%(trailers:key=Beflow-Feedback,valueonly)"
FEEDBACK = "also handle the empty case\nacp-test: write empty.txt handled"


def rounds_of(project: AutoProject, key: str) -> list[RunRecord]:
    """The issue's finished runs, oldest first."""
    return [r for r in reversed(project.records(key)) if r.finished]


def replies(project: AutoProject, key: str) -> list[str]:
    return [c.text for c in project.issue(key).comments if c.text.startswith("beflow answered this")]


def first_run(project: AutoProject, beflow, key: str) -> RunRecord:  # type: ignore[no-untyped-def]
    done = beflow("--auto", key)
    assert done.exit_code == 0, done.stdout + done.stderr
    assert project.issue(key).status == Status.REVIEW
    (record,) = project.records(key)
    return record


def test_rework_on_the_local_tracker_runs_one_round_on_the_same_branch_and_answers_it_once(
    auto_project: AutoProject, beflow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    requests = tmp_path / "agent.jsonl"
    monkeypatch.setenv("ACP_TEST_RECORD", str(requests))
    auto_project.configure(watch=fast(), feedback={"settle": 0.1})
    key = auto_project.new_issue("write hello.txt hi", "say hello written")
    first = first_run(auto_project, beflow, key)
    assert first.round == 0 and first.commit is not None

    done = beflow("issues", "comment", key, FEEDBACK, "--rework", "--author", "alice")
    assert done.exit_code == 0, done.stderr
    assert "back in the queue for a review round" in done.stdout
    assert auto_project.issue(key).status == Status.READY

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: len(rounds_of(auto_project, key)) == 2 and bool(watch.of("finished", key)))
            await watch.ticks(3)  # it looks again: the answered piece starts nothing more
        return watch

    watch = anyio.run(scenario)
    dispatched = watch.of("dispatched", key)
    assert [e.data.round for e in dispatched] == [1]
    _, second = rounds_of(auto_project, key)
    assert second.round == 1 and second.outcome == "succeeded"
    (piece,) = second.feedback
    assert piece.id.startswith("local:") and piece.author == "alice" and piece.kind == "rework"
    assert "also handle the empty case" in piece.excerpt

    # On top of the first run's commit, on the same branch, saying what it answered.
    branch = first.branch
    assert branch is not None
    assert git(auto_project.directory, "rev-parse", f"{branch}^").strip() == first.commit
    assert git(auto_project.directory, "rev-parse", branch).strip() == second.commit
    trailers = git(auto_project.directory, "log", "-1", f"--format={TRAILERS}", branch)
    assert trailers.strip() == piece.id
    files = auto_project.branch_files(branch)
    assert (files["hello.txt"], files["empty.txt"]) == ("hi", "handled")

    # The prompt said what the reviewer asked, and what the first run did; the agent's session went on.
    prompt = (auto_project.run_dir(second) / "prompt.md").read_text()
    assert "Review round 1" in prompt and "also handle the empty case" in prompt and "alice" in prompt
    assert "The first run" in prompt and "hello.txt" in prompt
    assert second.resumed_session == first.session is not None
    methods = [json.loads(line)["method"] for line in requests.read_text().splitlines()]
    assert "session/resume" in methods

    # One reply on the issue, naming the commit; back in review.
    (reply,) = replies(auto_project, key)
    assert second.commit is not None and second.commit[:12] in reply and "`empty.txt`" in reply
    assert auto_project.issue(key).status == Status.REVIEW

    # A watcher started afresh (another process, another machine sharing the branch) answers nothing twice.
    async def again() -> Watch:
        async with watching(auto_project) as watch:
            await watch.ticks(4)
        return watch

    restarted = anyio.run(again)
    assert not restarted.of("dispatched", key)
    assert len(rounds_of(auto_project, key)) == 2 and len(replies(auto_project, key)) == 1


def test_auto_runs_a_round_at_once_and_a_round_that_changes_nothing_still_records_what_it_answered(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    auto_project.configure(feedback={"settle": 3600})  # --auto does not wait for feedback to settle
    key = auto_project.new_issue("write hello.txt hi")
    first = first_run(auto_project, beflow, key)
    assert beflow("issues", "comment", key, "looks good, nothing to change", "--rework").exit_code == 0

    done = beflow("--auto", key)
    assert done.exit_code == 0, done.stdout + done.stderr
    _, second = rounds_of(auto_project, key)
    assert second.round == 1 and second.outcome == "no_changes"
    assert second.commit is not None and second.commit != first.commit
    branch = first.branch or ""
    message = git(auto_project.directory, "log", "-1", "--format=%B", branch)
    assert f"beflow run {second.id} (no_changes) on issue" in message and "changed no file in this round" in message
    assert f"Beflow-Feedback: {second.feedback[0].id}" in message
    assert git(auto_project.directory, "rev-parse", f"{branch}^").strip() == first.commit
    assert len(replies(auto_project, key)) == 1 and "changed no file" in replies(auto_project, key)[0]

    # What people read: the round of each run, and the issue's rounds with their feedback.
    listed = beflow("runs", "list", "--issue", key)
    assert listed.exit_code == 0 and "round" in listed.stdout.splitlines()[0]
    shown = beflow("runs", "show", second.id)
    assert "review round 1: 1 piece(s) of feedback answered" in shown.stdout
    assert "rework by" in shown.stdout and "looks good, nothing to change" in shown.stdout
    issue = beflow("issues", "show", key)
    assert "Review rounds (1)" in issue.stdout and "round 1 · run" in issue.stdout and "no_changes" in issue.stdout
    assert "rework" in issue.stdout and "<!-- beflow:rework -->" not in issue.stdout

    # Nothing left to answer: --auto runs the issue as any run again, not as a round.
    assert beflow("--auto", key).exit_code == 0
    assert [r.round for r in rounds_of(auto_project, key)] == [0, 1, 0]
    assert len(replies(auto_project, key)) == 1


def test_rounds_stop_at_max_rounds_and_the_issue_stays_in_review_saying_why(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    auto_project.configure(watch=fast(), feedback={"settle": 0.1, "max_rounds": 1})
    key = auto_project.new_issue("write hello.txt hi")
    first_run(auto_project, beflow, key)
    assert beflow("issues", "comment", key, "acp-test: write one.txt 1", "--rework").exit_code == 0
    assert beflow("--auto", key).exit_code == 0
    assert [r.round for r in rounds_of(auto_project, key)] == [0, 1]

    done = beflow("issues", "comment", key, "acp-test: write two.txt 2", "--rework")
    assert done.exit_code == 0, done.stderr
    assert "stays in review" in done.stdout and "feedback.max_rounds" in done.stdout
    assert auto_project.issue(key).status == Status.REVIEW

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.ticks(4)
        return watch

    watch = anyio.run(scenario)
    assert not watch.of("dispatched", key)
    assert [r.round for r in rounds_of(auto_project, key)] == [0, 1]
    notes = [c.text for c in auto_project.issue(key).comments if c.text.startswith("beflow does not start another")]
    assert len(notes) == 1 and "1 review round(s) (feedback.max_rounds)" in notes[0]
    assert auto_project.issue(key).status == Status.REVIEW


class ReviewSource:
    """A feedback source shaped like a code host's review (inline pieces with a path, a line, a hunk and a thread),
    standing in for one: what it was asked to reply, by piece."""

    description = "a review in a test"

    def __init__(self, pieces: list[Feedback], ignored: list[Ignored]) -> None:
        self.pieces = pieces
        self.ignored = ignored
        self.replies: list[tuple[str, str]] = []

    def gather(self, key: str, branch: str) -> Gathered:
        return Gathered(pieces=self.pieces, ignored=self.ignored)

    def reply(self, piece: Feedback, body: str) -> None:
        if piece.id.startswith("review-comment:"):  # (a source answers only what it gave)
            self.replies.append((piece.id, body))

    def fetch(self, directory: Path, branch: str) -> str | None:
        return None

    def held_secrets(self) -> list[str]:
        return []

    def branch_url(self, branch: str) -> str:
        return f"https://example.com/tree/{branch}"

    def commit_inert(self, text: str) -> str:
        return text


def test_a_review_with_two_inline_comments_waits_to_settle_then_makes_one_round_with_both_in_its_prompt(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    auto_project.configure(watch=fast(), feedback={"settle": 30})
    key = auto_project.new_issue("write hello.txt hi")
    first = first_run(auto_project, beflow, key)
    now = dt.datetime.now(dt.UTC)
    hunk = "@@ -0,0 +1 @@\n+hi"
    pieces = [
        Feedback(
            id="review-comment:11",
            kind="inline",
            author="carol",
            url="https://example.test/pull/1#discussion_r11",
            body="say hello, not hi\nacp-test: write hello.txt hello",
            created=now,
            path="hello.txt",
            line=1,
            hunk=hunk,
            thread=[ThreadComment(author="dave", body="is hi enough?")],
            reply_to="11",
        ),
        Feedback(
            id="review-comment:12",
            kind="inline",
            author="carol",
            body="and add a second line\nacp-test: write second.txt two",
            created=now,
            path="second.txt",
            line=3,
            reply_to="12",
        ),
    ]
    source = ReviewSource(pieces, [Ignored(id="issue-comment:5", author="mallory", why="not a collaborator")])
    clock = Clock()

    async def scenario() -> Watch:
        async with watching(auto_project, clock) as watch:
            watch.dispatcher.code_host = source  # type: ignore[assignment]
            await watch.ticks(3)
            assert not watch.of("dispatched", key)  # the reviewer may not be done: it waits feedback.settle
            clock.advance(31)
            await watch.until(lambda: len(rounds_of(auto_project, key)) == 2 and bool(watch.of("finished", key)))
            await watch.ticks(3)
        return watch

    watch = anyio.run(scenario)
    assert [e.data.round for e in watch.of("dispatched", key)] == [1]  # two pieces, one round
    _, second = rounds_of(auto_project, key)
    assert [p.id for p in second.feedback] == ["review-comment:11", "review-comment:12"]
    assert [(i.id, i.why) for i in second.feedback_ignored] == [("issue-comment:5", "not a collaborator")]
    prompt = (auto_project.run_dir(second) / "prompt.md").read_text()
    assert "`hello.txt` line 1: inline by carol" in prompt and "`second.txt` line 3" in prompt
    assert hunk in prompt and "- dave: is hi enough?" in prompt and "say hello, not hi" in prompt
    files = auto_project.branch_files(first.branch or "")
    assert (files["hello.txt"], files["second.txt"]) == ("hello", "two")
    assert [piece for piece, _ in source.replies] == ["review-comment:11", "review-comment:12"]
    assert all(second.commit is not None and second.commit[:12] in body for _, body in source.replies)
    trailers = git(auto_project.directory, "log", "-1", f"--format={TRAILERS}", "beflow/1")
    assert trailers.split() == ["review-comment:11", "review-comment:12"]
    assert not [c for c in auto_project.issue(key).comments if c.text.startswith("beflow answered")]


def test_a_failed_round_is_retried_as_the_same_round_and_answers_nothing_until_it_succeeds(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    auto_project.configure(watch=fast(max_attempts=2), feedback={"settle": 0.1})
    key = auto_project.new_issue("write hello.txt hi")
    first = first_run(auto_project, beflow, key)
    assert beflow("issues", "comment", key, "acp-test: fail the reviewer's ask", "--rework").exit_code == 0

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed", key)))
        return watch

    watch = anyio.run(scenario)
    assert [(e.data.attempt, e.data.round) for e in watch.of("dispatched", key)] == [(1, 1), (2, 1)]
    assert [(r.round, r.attempt, r.outcome) for r in rounds_of(auto_project, key)] == [
        (0, 1, "succeeded"),
        (1, 1, "failed"),
        (1, 2, "failed"),
    ]
    assert auto_project.issue(key).status == Status.FAILED  # the retry policy's last word
    assert git(auto_project.directory, "log", f"--format={TRAILERS}", "beflow/1").split() == []
    assert git(auto_project.directory, "rev-parse", "beflow/1").strip() == first.commit
    assert replies(auto_project, key) == []


def test_a_round_takes_mcp_servers_from_the_checkout_never_from_the_branch_it_continues(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:  # type: ignore[no-untyped-def]
    evil = '{"mcpServers":{"evil":{"command":"evil-mcp"}}}'
    key = auto_project.new_issue(f"write .mcp.json {evil}")
    first = first_run(auto_project, beflow, key)
    assert auto_project.branch_files(first.branch or "")[".mcp.json"] == evil  # the branch holds the agent's
    assert beflow("issues", "comment", key, "acp-test: mcp", "--rework").exit_code == 0

    assert beflow("--auto", key).exit_code == 0

    second = auto_project.records(key)[0]
    assert second.round == 1 and second.mcp_servers == ["docs", "tools"]  # the checkout's .mcp.json
    transcript = (auto_project.run_dir(second) / "transcript.jsonl").read_text()
    assert "mcp servers: " in transcript and "evil" not in transcript.split("mcp servers: ")[-1].split("\\n")[0]
