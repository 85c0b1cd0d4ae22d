"""Best of N end to end (docs/runs.md#best-of-n): the real acpx drives the test agent as three candidates whose
prompts differ by the ``candidate`` variable; the judge's check and the diff sizes choose, one branch is proposed."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import anyio
import pytest

from beflow.app import open_project
from beflow.config import load_project
from beflow.records.record import CandidateRow, now
from beflow.run.attempts import REVIEW_DIFF, review_prompt, run_issue
from beflow.run.request import RunRequest
from beflow.trackers import Issue, Status
from beflow.watch.questions import WaitingQuestions
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject, git

#: Candidate 1 passes with the larger diff, 2 fails the check, 3 passes with the smallest: 3 is chosen.
PROMPT = (
    "{{ issue.body }}\n"
    "{% if candidate == 1 %}acp-test: write more.txt a\\nb\\nc\\n\n"
    "acp-test: write app.txt ok\\n\n"
    "{% elif candidate == 2 %}acp-test: write app.txt broken\\n\n"
    "{% else %}acp-test: write app.txt ok\\n\n{% endif %}"
)


def test_the_passing_candidate_with_the_smallest_diff_becomes_the_issues_branch_and_its_one_pull_request(
    auto_project: AutoProject, beflow, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTPAT", TOKEN)
    monkeypatch.delenv("GITHUB_TOKEN", raising=False)
    origin = auto_project.add_origin()
    main = git(auto_project.directory, "rev-parse", "main").strip()
    # Candidate 2, unsandboxed and hostile, plants beflow/<key> as a symbolic ref to main: it is set aside.
    hostile = (
        "{% if candidate == 2 %}acp-test: run git symbolic-ref refs/heads/beflow/{{ issue.key }} refs/heads/main\n"
        "{% endif %}"
    )
    auto_project.configure(
        prompt=hostile + PROMPT,
        attempts={"judge": {"checks": ["grep -qx ok app.txt"]}, "keep": False},
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    key = auto_project.new_issue("mcp", title="Make app ok")

    result = beflow("--auto", key, "--attempts", "3")

    assert result.exit_code == 0, result.stderr
    records = {r.candidate: r for r in auto_project.records(key)}
    assert sorted(records) == [0, 1, 2, 3]
    judged, candidates = records[0], [records[n] for n in (1, 2, 3)]
    # Each candidate: its own branch and worktree (gone), the servers injected and put back, checks recorded.
    for n, record in enumerate(candidates, start=1):
        assert record.outcome == "succeeded" and record.branch == f"beflow-attempts/{key}/c{n}"
        assert (record.final_message or "").endswith("mcp servers: docs, tools")
        assert record.restored, record
    assert [(r.lines_changed, [c.passed for c in r.checks]) for r in candidates] == [
        (4, [True]),
        (1, [False]),
        (1, [True]),
    ]
    assert len({r.worktree for r in candidates}) == 3
    # The judged run: candidate 3 chosen, its commit is beflow/<key>; the others' branches removed (keep: false).
    assert judged.outcome == "succeeded", judged.stop_reason
    assert "candidate 3 chosen over 1 other passing" in (judged.stop_reason or "")
    assert [row.chosen for row in judged.candidates] == [False, False, True]
    tip = git(auto_project.directory, "rev-parse", f"beflow/{key}").strip()
    assert judged.commit == tip == records[3].commit
    assert auto_project.branch_files(f"beflow/{key}")["app.txt"] == "ok\n"
    assert [b for b in auto_project.branches() if b.startswith("beflow-attempts/")] == [
        f"beflow-attempts/{key}/planted"
    ]
    assert f"beflow/{key} appeared while the candidates ran" in (judged.stop_reason or "")
    assert git(auto_project.directory, "rev-parse", "main").strip() == main
    assert auto_project.registered_worktrees() == []
    assert auto_project.secrets_in_records() == []
    # One comment on the issue, with the table; the issue is in review.
    issue = auto_project.issue(key)
    assert issue.status == Status.REVIEW
    comments = [c.text for c in issue.comments if c.author == "beflow"]
    assert len([c for c in comments if "candidate" in c]) == 1
    table = comments[-1]
    assert "| 3 (chosen) |" in table and "| 0/1 |" in table and f"`beflow-attempts/{key}/c1`" in table
    # One pull request, of beflow/<key>, with the table; no candidate's branch was pushed.
    (pull,) = github.pulls.values()
    assert (pull["head"]["ref"], pull["title"]) == (f"beflow/{key}", "Make app ok")
    assert "| 3 (chosen) |" in pull["body"] and judged.pull_request == pull["html_url"]
    # The others' branches are gone, and the table says so rather than link them.
    assert f"`beflow-attempts/{key}/c1` (removed)" in pull["body"] and "/tree/" not in pull["body"]
    assert [row.removed for row in judged.candidates] == [True, True, True]
    assert git(origin, "for-each-ref", "--format=%(refname)").split() == [f"refs/heads/beflow/{key}", "refs/heads/main"]
    assert pull["html_url"] in table
    runs = auto_project.directory / ".beflow" / "runs"
    assert [p for p in runs.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()] == []


def test_a_reviewer_agents_answer_chooses_among_the_passing_candidates(
    auto_project: AutoProject, beflow, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Both candidates pass; the smaller diff is candidate 2's, but the reviewer prefers 1 and says why. The issue's
    # body reaches the reviewer's prompt only (the candidates' template leaves it out).
    monkeypatch.setenv("HOSTPAT", TOKEN)
    origin = auto_project.add_origin()
    auto_project.configure(
        prompt="{% if candidate == 1 %}acp-test: write app.txt ok\\nthorough\\n\n"
        "{% else %}acp-test: write app.txt ok\\n\n{% endif %}",
        attempts={"count": 2, "judge": {"checks": ["grep -qx ok app.txt"], "reviewer": auto_project.config["agent"]}},
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    reply = '{"candidate": 1, "reason": "candidate 1 is more thorough @someone"}'
    key = auto_project.new_issue(f"mcp-call beflow candidate_choose {reply}", title="Make app ok")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    records = auto_project.records(key)
    (judged,) = [r for r in records if not r.candidate and not r.reviewing]
    (reviewer,) = [r for r in records if r.reviewing]
    assert reviewer.reviewing == [1, 2] and reviewer.outcome in ("succeeded", "no_changes")
    assert reviewer.commit is None and not reviewer.worktree_kept
    assert (
        "Candidate 2 (1/1 checks passed, 1 lines changed)" in (auto_project.run_dir(reviewer) / "prompt.md").read_text()
    )
    assert judged.review is not None and judged.review.candidate == 1
    assert judged.stop_reason == "candidate 1 chosen by the reviewer"
    assert git(auto_project.directory, "rev-parse", f"beflow/{key}").strip() == judged.commit
    assert [b for b in auto_project.branches() if b.startswith("beflow-attempts/")] == [
        f"beflow-attempts/{key}/c1",
        f"beflow-attempts/{key}/c2",
    ]  # kept (the default); the reviewer's branch held nothing and went
    comment = auto_project.issue(key).comments[-1].text
    assert "The reviewer chose candidate 1:" in comment and "more thorough" in comment
    # The pull request links the other candidate's branch, pushed beside it (kept: the default).
    (pull,) = github.pulls.values()
    link = f"[`beflow-attempts/{key}/c2`](https://127.0.0.1/octo/hello/tree/beflow-attempts/{key}/c2)"
    assert link in pull["body"] and link in comment
    pushed = git(origin, "for-each-ref", "--format=%(refname)").split()
    assert pushed == [f"refs/heads/beflow-attempts/{key}/c2", f"refs/heads/beflow/{key}", "refs/heads/main"]


def test_the_reviewers_prompt_has_the_issue_and_each_passing_diff_capped(repo: Path) -> None:
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "big.txt").write_text("x" * 100 + "\n" + "y\n" * (REVIEW_DIFF // 2) + "\x1b[31m\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "big")
    commit = git(repo, "rev-parse", "HEAD").strip()
    row = CandidateRow(
        candidate=2, run_id="r", agent="a", outcome="succeeded", base_commit=base, commit=commit, lines_changed=9
    )
    issue = Issue(
        key="7", title="Fix it", body="Do it <!-- hidden -->", status=Status.READY, created=now(), updated=now()
    )

    text = review_prompt(repo, issue, [row, row.model_copy(update={"candidate": 3})])

    assert "call the tool `candidate_choose`" in text and "(2, 3)" in text
    assert "# Issue 7: Fix it\n\nDo it" in text and "hidden" not in text
    assert "## Candidate 2 (0/0 checks passed, 9 lines changed)" in text and "## Candidate 3" in text
    assert "+" + "x" * 100 in text and "more bytes of the diff are left out]" in text
    assert "\x1b" not in text and len(text) < 3 * REVIEW_DIFF


def test_the_sets_budget_stops_every_candidate_and_the_issue_fails_saying_why(
    auto_project: AutoProject, beflow
) -> None:
    # Candidate 1 reports 2 USD at once and would go on for a minute; candidate 2 would too: both are stopped when
    # the set reaches attempts.max_cost, whichever started first, and none is proposed.
    auto_project.configure(
        prompt="{% if candidate == 1 %}acp-test: usage 10 100 2 USD\n{% endif %}acp-test: sleep 60\n",
        attempts={"count": 2, "max_cost": 1},
    )
    key = auto_project.new_issue("say hi", title="Spend")

    result = beflow("--auto", key)

    assert result.exit_code == 1, result.stderr
    records = {r.candidate: r for r in auto_project.records(key)}
    judged = records[0]
    assert judged.outcome == "failed"
    assert "reaching attempts.max_cost (1 USD)" in (judged.stop_reason or "")
    assert [row.outcome for row in judged.candidates] == ["over_budget", "over_budget"]
    assert all(r.duration is not None and r.duration < 30 for r in records.values())
    assert "attempts.max_cost" in auto_project.issue(key).comments[-1].text


def test_with_confirm_the_judged_issue_waits_blocked_and_a_persons_override_is_proposed_saying_who_chose(
    auto_project: AutoProject, beflow, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOSTPAT", TOKEN)
    auto_project.add_origin()
    auto_project.configure(
        prompt=PROMPT,
        attempts={"count": 3, "judge": {"checks": ["grep -qx ok app.txt"]}, "confirm": True},
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    key = auto_project.new_issue("mcp", title="Make app ok")

    result = beflow("--auto", key)

    # Judged, nothing proposed: the issue waits for a person, its question the table (no lane is held: no run).
    (judged,) = [r for r in auto_project.records(key) if r.best_of]
    assert judged.outcome == "asked", judged.stop_reason
    assert result.exit_code == 0, result.stderr
    assert judged.question is not None and judged.question.choices == ["c1", "c2", "c3"]
    assert [row.chosen for row in judged.candidates] == [False, False, True]
    assert auto_project.issue(key).status == Status.BLOCKED and github.pulls == {}
    assert "beflow asks which candidate to propose" in auto_project.issue(key).comments[-1].text
    assert [b for b in auto_project.branches() if b.startswith("beflow/")] == []
    # A candidate that failed the check is refused unless the person says anyway; one that does not exist too.
    refused = beflow("issues", "confirm", key, "2")
    assert refused.exit_code == 2 and "candidate 2 did not pass" in refused.stderr
    assert beflow("issues", "confirm", key, "9").exit_code == 2
    chose = beflow("issues", "confirm", key, "1", "--author", "ada", "--note", "the longer one reads better")
    assert chose.exit_code == 0, chose.stderr
    again = beflow("issues", "confirm", key, "3", "--author", "bob")
    assert again.exit_code == 2 and "answered already, by ada" in again.stderr

    # The watch's survey finds the answer (from the records and the tracker: nothing in memory) and proposes it.
    project = load_project(auto_project.directory / ".beflow" / "config.json")
    opened = open_project(project)
    waiting = WaitingQuestions(time.time, lambda *a, **k: None)
    assert [i.key for i in waiting.survey(project, opened.tracker, running=())] == [key]
    request = RunRequest(key=key, mode="watch", only_if_ready=True)
    assert waiting.shape(request, project)
    record = anyio.run(
        functools.partial(
            run_issue,
            project,
            opened.tracker,
            request,
            lambda event: None,
            code_host=opened.code_host,
            lanes=3,
            cancelled_because=lambda: None,
            candidate_events=lambda event: None,
        )
    )

    assert record.outcome == "succeeded", record.stop_reason
    assert record.decided_by == "ada"
    assert record.stop_reason == "candidate 1 chosen by ada, over the judge's candidate 3"
    assert [row.chosen for row in record.candidates] == [True, False, False]
    assert git(auto_project.directory, "rev-parse", f"beflow/{key}").strip() == judged.candidates[0].commit
    (pull,) = github.pulls.values()
    assert "Chosen by ada (attempts.confirm)." in pull["body"] and "| 1 (chosen) |" in pull["body"]
    assert auto_project.issue(key).status == Status.REVIEW
    assert [r.id for r in auto_project.records(key) if r.best_of] == [record.id, judged.id]  # no candidate ran again
    assert len(auto_project.records(key)) == 5


def test_an_answer_to_an_agents_question_resumes_the_run_that_asked_never_a_best_of_n(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.records.record import Answer
    from beflow.run import attempts

    (repo / ".beflow").mkdir(exist_ok=True)
    (repo / ".beflow" / "config.json").write_text('{"attempts": {"count": 3}}')
    project = load_project(repo / ".beflow" / "config.json")
    asked: list[str] = []
    monkeypatch.setattr(attempts, "candidates_for", lambda *args: asked.append("candidates") or (3, None))

    class Plain:
        def __init__(self, project: object, tracker: object, request: RunRequest, events: object, **_: object) -> None:
            asked.append(f"plain run of {request.key}, resuming {request.answer.run if request.answer else None}")

        async def execute(self) -> None:
            return None

    monkeypatch.setattr(attempts, "Run", Plain)
    answer = Answer(text="yes", author="ada", given=now(), run="20261206-1")
    request = RunRequest(key="1", answer=answer)

    async def run() -> None:
        await run_issue(
            project,
            None,  # type: ignore[arg-type]  # (read only to count candidates, which an answer never is)
            request,
            lambda event: None,  # type: ignore[arg-type,return-value]
            code_host=None,
            lanes=3,
            cancelled_because=lambda: None,
            candidate_events=lambda event: None,  # type: ignore[arg-type,return-value]
        )

    anyio.run(run)
    assert asked == ["plain run of 1, resuming 20261206-1"]
