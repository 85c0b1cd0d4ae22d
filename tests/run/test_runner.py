"""One autonomous run end to end (docs/architecture.md): the real pinned acpx drives the test ACP agent in a throwaway
worktree with the project's MCP servers injected; the run commits, records, updates the tracker and cleans up."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import anyio
import pytest

from beflow.config import load_project
from beflow.records.record import RunRecord
from beflow.records.store import RunStore
from beflow.run.runner import Run, RunRequest
from beflow.trackers import Status
from beflow.trackers.issue import normalize_key
from tests.conftest import processes_under
from tests.support.projects import SECRET_ENV, SECRET_HEADER, AutoProject, git
from tests.support.waiting import eventually

# -- success -----------------------------------------------------------------------------------------------------


def test_a_run_commits_the_change_to_its_branch_records_it_and_moves_the_issue_to_review(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, no_leftover_processes: None
) -> None:
    requests = tmp_path / "agent-requests.jsonl"
    monkeypatch.setenv("ACP_TEST_RECORD", str(requests))
    key = auto_project.new_issue("write hello.txt hi\\n", "mcp", title="Say hello")
    main_head = git(auto_project.directory, "rev-parse", "main").strip()

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    assert f"issue {key}: succeeded" in result.stderr
    record = auto_project.only_record()
    branch_head = git(auto_project.directory, "rev-parse", "beflow/1").strip()
    assert (record.issue, record.title, record.mode, record.attempt) == (key, "Say hello", "auto", 1)
    assert record.agent == auto_project.config["agent"]["command"]
    assert (record.branch, record.base_commit, record.commit) == ("beflow/1", main_head, branch_head)
    assert record.outcome == "succeeded" and "end_turn" in (record.stop_reason or "")
    assert record.finished_at is not None and record.started_at <= record.finished_at
    assert record.duration is not None and record.duration >= 0
    assert record.mcp_servers == ["docs", "tools"]
    assert record.changed_files == ["A\thello.txt"]
    assert record.final_message == "mcp servers: docs, tools"
    assert record.exit_code == 0 and not record.worktree_kept

    # The record directory: run.json, the prompt, acpx's JSON-RPC transcript, its stderr; no secret anywhere.
    directory = auto_project.run_dir(record)
    assert sorted(p.name for p in directory.iterdir()) == ["prompt.md", "run.json", "stderr.log", "transcript.jsonl"]
    assert json.loads((directory / "run.json").read_text())["outcome"] == "succeeded"
    assert "# Say hello" in (directory / "prompt.md").read_text()
    methods = [json.loads(line).get("method") for line in (directory / "transcript.jsonl").read_text().splitlines()]
    assert "session/new" in methods and "session/prompt" in methods
    assert auto_project.secrets_in_records() == []

    # ... while the agent itself did receive the values: injection happened.
    (new_session,) = [r for r in map(json.loads, requests.read_text().splitlines()) if r["method"] == "session/new"]
    handed = {s["name"]: s for s in new_session["params"]["mcpServers"]}
    assert handed["tools"]["env"] == [{"name": "TOOLS_KEY", "value": SECRET_ENV}]
    assert handed["docs"]["headers"] == [{"name": "Authorization", "value": SECRET_HEADER}]

    # The tracker: review, with a comment naming outcome, branch, commit, files changed and duration.
    issue = auto_project.issue(key)
    assert issue.status == Status.REVIEW
    comment = issue.comments[-1]
    assert comment.author == "beflow"
    for part in ("succeeded", "`beflow/1`", branch_head[:12], "`hello.txt`", f"{record.duration:.1f} s"):
        assert part in comment.text

    # The branch holds exactly the agent's change (the injected .acpxrc.json never reached it) ...
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "hello.txt": "hi\n"}
    # ... the worktree is gone, the branch stays, and the user's checkout was never touched.
    assert not Path(record.worktree or "").exists()
    assert auto_project.registered_worktrees() == []
    assert "beflow/1" in auto_project.branches()
    assert git(auto_project.directory, "rev-parse", "HEAD").strip() == main_head
    assert not (auto_project.directory / "hello.txt").exists()
    status = git(auto_project.directory, "status", "--porcelain", "--untracked-files=all").splitlines()
    assert sorted(status) == ["?? .beflow/config.json", "?? .beflow/issues/0001-say-hello.md", "?? .mcp.json"]


def test_a_tracked_acpxrc_keeps_its_committed_bytes_on_the_branch(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    prior = b'{\r\n  "defaultPermissions": "approve-all"\r\n}'  # CRLF, no final newline: bytes, not content
    (auto_project.directory / ".acpxrc.json").write_bytes(prior)
    git(auto_project.directory, "add", ".acpxrc.json")
    git(auto_project.directory, "commit", "-q", "-m", "acpx settings")
    key = auto_project.new_issue("write hello.txt hi", "mcp")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    record = auto_project.only_record()
    assert record.final_message == "mcp servers: docs, tools"  # the agent ran with the injected list
    assert record.changed_files == ["A\thello.txt"]
    on_branch = subprocess.run(
        ["git", "show", "beflow/1:.acpxrc.json"], cwd=auto_project.directory, capture_output=True, check=True
    ).stdout
    assert on_branch == prior  # restored before the commit: the injected version was never staged
    assert (auto_project.directory / ".acpxrc.json").read_bytes() == prior
    assert any("restored" in note for note in record.restored)


# -- the other outcomes ------------------------------------------------------------------------------------------

OUTCOMES = [
    # id, directives, config changes, outcome, tracker status, words in the reason, files on the branch
    pytest.param(["say nothing to change"], {}, "no_changes", Status.REVIEW, "without changing", {}, id="no-changes"),
    pytest.param(
        ["write half.txt x", "fail out of ideas"],
        {},
        "failed",
        Status.FAILED,
        "out of ideas",
        {"half.txt": "x"},
        id="agent-error",
    ),
    pytest.param(
        ["write half.txt x", "crash 3"],
        {},
        "failed",
        Status.FAILED,
        "exited in the middle of its turn (acpx exit 1): [acp-test-agent",
        {"half.txt": "x"},
        id="agent-crash",
    ),
    pytest.param(
        ["write slow.txt x", "sleep 30"],
        {"timeout": 2},
        "timeout",
        Status.FAILED,
        "within 2 s",
        {"slow.txt": "x"},
        id="timeout",
    ),
]


@pytest.mark.parametrize(("directives", "changes", "outcome", "status", "reason", "files"), OUTCOMES)
def test_each_way_a_run_ends_is_recorded_committed_and_cleaned_up(
    auto_project: AutoProject,
    beflow,
    no_leftover_processes: None,
    directives: list[str],
    changes: dict[str, object],
    outcome: str,
    status: Status,
    reason: str,
    files: dict[str, str],
) -> None:
    auto_project.configure(**changes)
    key = auto_project.new_issue(*directives)

    result = beflow("--auto", key)

    assert result.exit_code == (0 if outcome == "no_changes" else 1), result.stderr
    record = auto_project.only_record()
    assert record.outcome == outcome
    assert reason in (record.stop_reason or "")
    assert record.finished_at is not None and record.mcp_servers == ["docs", "tools"]
    assert auto_project.secrets_in_records() == []
    issue = auto_project.issue(key)
    assert issue.status == status
    assert outcome in issue.comments[-1].text and reason in issue.comments[-1].text
    # Whatever the outcome, the agent's work is on the branch (never .acpxrc.json) and the worktree is gone; a
    # run that left nothing leaves no branch identical to the base, nor an empty folder under $BEFLOW_HOME.
    if files:
        assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", **files}
        assert record.branch == "beflow/1" and record.commit is not None
    else:
        assert auto_project.branches() == ["main"] and record.branch is None and record.commit is None
        assert "branch:" not in issue.comments[-1].text
    assert record.restored and "removed" in record.restored[0]
    assert not Path(record.worktree or "").exists() and auto_project.registered_worktrees() == []
    assert not auto_project.worktrees_dir.exists()


def test_a_run_that_changes_nothing_on_a_branch_with_earlier_work_keeps_the_branch(
    auto_project: AutoProject, beflow
) -> None:
    key = auto_project.new_issue("write first.txt 1")
    assert beflow("--auto", key).exit_code == 0
    auto_project.tracker.set_status(key, Status.READY)

    assert beflow("--auto", key).exit_code == 0  # writes the same content again: nothing new to commit

    second = auto_project.records(key)[0]
    assert second.outcome == "no_changes" and second.branch == "beflow/1"
    assert auto_project.branch_files("beflow/1")["first.txt"] == "1"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_stops_the_agent_restores_commits_records_and_requeues(
    auto_project: AutoProject, beflow_process, no_leftover_processes: None, signum: signal.Signals
) -> None:
    key = auto_project.new_issue("write started.txt x", "sleep 30")
    process = beflow_process("--auto", key, cwd=auto_project.directory)
    started = auto_project.worktrees_dir / key / "started.txt"
    eventually(started.exists, "the agent started", 30, alive=process)  # the agent is now in its sleep

    process.send_signal(signum)
    _, stderr = process.communicate(timeout=30)

    assert process.returncode == 130, stderr
    assert f"interrupted by {signum.name}" in stderr
    record = auto_project.only_record()
    assert record.outcome == "cancelled" and signum.name in (record.stop_reason or "")
    assert auto_project.issue(key).status == Status.READY
    assert "cancelled" in auto_project.issue(key).comments[-1].text
    # .acpxrc.json was removed before the commit: the branch has the agent's file and nothing else.
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "started.txt": "x"}
    assert record.restored and "removed" in record.restored[0]
    assert not started.parent.exists() and auto_project.registered_worktrees() == []
    assert auto_project.secrets_in_records() == []


def test_after_beflow_is_killed_its_agent_stops_and_the_next_run_picks_the_issue_up(
    auto_project: AutoProject, beflow_process, beflow, no_leftover_processes: None
) -> None:
    """SIGKILL gives beflow no chance to clean up: acpx gets SIGTERM from the kernel (its parent-death signal) and
    stops the agent; the next beflow command restores .acpxrc.json, requeues the issue and closes the stale record."""
    key = auto_project.new_issue("write started.txt x", "sleep 30", "write late.txt too late")
    process = beflow_process("--auto", key, cwd=auto_project.directory)
    worktree = auto_project.worktrees_dir / key
    eventually((worktree / "started.txt").exists, "the agent started", 30, alive=process)

    process.kill()
    process.wait(timeout=10)
    # long before the agent's 30 s sleep is over
    eventually(lambda: not processes_under(auto_project.directory.parent), "acpx and the agent stopped", 10)

    result = beflow("runs", "list", "--json")
    assert result.exit_code == 0
    assert "removed" in result.stderr  # the killed run's .acpxrc.json, put back by this very command
    (stale,) = json.loads(result.stdout)
    assert stale["outcome"] == "cancelled" and "killed" in stale["stop_reason"]
    assert not (worktree / "late.txt").exists()
    assert auto_project.issue(key).status == Status.IN_PROGRESS  # until a run requeues it
    issue_file = auto_project.issue(key).path
    assert issue_file is not None
    issue_file.write_text(issue_file.read_text().replace("sleep 30", "sleep 0"))  # a hand edit, for a quick rerun
    rerun = beflow("--auto")
    assert rerun.exit_code == 0, rerun.stderr
    assert auto_project.issue(key).status == Status.REVIEW


def test_a_finished_run_whose_issue_could_not_be_updated_is_settled_not_run_again(
    auto_project: AutoProject, beflow
) -> None:
    """The issue file was unreadable when the run ended: the next beflow gives the issue the run's status and
    comment from the record, instead of requeueing it as if the run had died."""
    key = auto_project.new_issue("write a.txt x")
    assert beflow("--auto", key).exit_code == 0
    (record,) = auto_project.records(key)
    tracker = auto_project.tracker
    tracker.set_status(key, Status.IN_PROGRESS)  # as if the final update had not happened
    comments_before = len(auto_project.issue(key).comments)

    result = beflow("--auto")

    assert result.exit_code == 0, result.stderr
    assert auto_project.records(key) == [record]  # not run again
    issue = auto_project.issue(key)
    assert issue.status == Status.REVIEW
    assert len(issue.comments) == comments_before + 1 and record.id in issue.comments[-1].text


# -- attempts, selection, concurrency ---------------------------------------------------------------------------


def test_a_second_attempt_continues_the_branch_of_the_first(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("write one.txt 1")
    assert beflow("--auto", key).exit_code == 0
    first = auto_project.only_record()
    # A reviewer asks for more; comments are part of the default prompt, so the agent sees the request.
    auto_project.tracker.set_status(key, Status.READY, note="acp-test: write two.txt 2", author="reviewer")

    assert beflow("--auto", key).exit_code == 0

    second, _ = auto_project.records(key)
    assert second.base_commit == first.commit
    assert second.changed_files == ["A\ttwo.txt"]  # one.txt was already there, as attempt 1 left it
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "one.txt": "1", "two.txt": "2"}
    assert git(auto_project.directory, "rev-parse", "beflow/1~1").strip() == first.commit


def test_without_keys_every_ready_issue_runs_once_by_priority_then_age(auto_project: AutoProject, beflow) -> None:
    older = auto_project.new_issue("say older", title="older")
    urgent = auto_project.new_issue("say urgent", title="urgent", priority=1)
    newer = auto_project.new_issue("say newer", title="newer")
    auto_project.new_issue("write no.txt x", title="not ready", status=Status.OPEN)

    result = beflow("--auto")

    assert result.exit_code == 0, result.stderr
    ran = sorted(auto_project.records(), key=lambda r: r.started_at)
    assert [r.issue for r in ran] == [urgent, older, newer]
    assert beflow("--auto").exit_code == 0  # nothing is ready any more: every issue ran once
    assert len(auto_project.records()) == 3


def test_two_beflows_started_together_run_each_issue_once(auto_project: AutoProject, beflow_process) -> None:
    keys = [auto_project.new_issue(f"write q{n}.txt {n}", "sleep 0.3") for n in range(4)]

    first = beflow_process("--auto", cwd=auto_project.directory)
    second = beflow_process("--auto", cwd=auto_project.directory)
    assert first.wait(timeout=120) == 0, first.stderr.read() if first.stderr else ""
    assert second.wait(timeout=120) == 0, second.stderr.read() if second.stderr else ""

    assert sorted(r.issue for r in auto_project.records()) == sorted(keys)
    assert all(auto_project.issue(key).status == Status.REVIEW for key in keys)


def test_a_key_named_twice_runs_once(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key, key, "--concurrency", "2")

    assert result.exit_code == 0, result.stderr
    assert len(auto_project.records(key)) == 1


def test_limit_runs_only_the_first_ready_issues(auto_project: AutoProject, beflow) -> None:
    first = auto_project.new_issue("say one")
    second = auto_project.new_issue("say two")

    assert beflow("--auto", "--limit", "1").exit_code == 0

    assert [r.issue for r in auto_project.records()] == [first]
    assert auto_project.issue(second).status == Status.READY


def test_concurrency_runs_issues_at_the_same_time(auto_project: AutoProject, beflow, tmp_path: Path) -> None:
    marks = tmp_path / "marks.log"
    # Each agent sleeps between its start and end marks long enough for the other one to start.
    keys = [auto_project.new_issue(f"mark {marks}", "sleep 3", f"write {n}.txt {n}") for n in ("a", "b")]

    result = beflow("--auto", "--concurrency", "2")

    assert result.exit_code == 0, result.stderr
    kinds = [line.split()[0] for line in marks.read_text().splitlines()]
    assert kinds == ["start", "start", "end", "end"]  # both had started before either ended
    assert {r.issue for r in auto_project.records()} == set(keys)
    assert all(r.outcome == "succeeded" for r in auto_project.records())


def test_an_unknown_key_fails_before_anything_runs(auto_project: AutoProject, beflow) -> None:
    auto_project.new_issue("write a.txt x", title="first")
    auto_project.new_issue("write b.txt x", title="second")

    result = beflow("--auto", "1", "12")

    assert result.exit_code == 1
    assert "no issue 12" in result.stderr and "1 (first)" in result.stderr and "2 (second)" in result.stderr
    assert auto_project.records() == [] and auto_project.branches() == ["main"]
    assert auto_project.issue("1").status == Status.READY


def test_a_closed_issue_is_refused(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("write a.txt x")
    auto_project.tracker.set_status(key, Status.CLOSED)

    result = beflow("--auto", key)

    assert result.exit_code == 1
    assert f"issue {key} is closed" in result.stderr
    assert auto_project.records() == [] and auto_project.branches() == ["main"]


def test_a_claimed_issue_is_refused(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("write a.txt x")
    with auto_project.tracker.claim(key, "another run"):
        result = beflow("--auto", key)

    assert result.exit_code == 1
    assert f"issue {key} is claimed by another run" in result.stderr
    assert auto_project.records() == [] and auto_project.issue(key).status == Status.READY


def test_a_run_that_cannot_be_retried_fails_the_issue_even_when_a_dispatcher_would_retry(
    auto_project: AutoProject,
) -> None:
    """``final=False`` (watch will retry) puts a failed issue back to ready, but not a permanent failure."""
    auto_project.configure(prompt="{{ issue.nope }}")
    broken = auto_project.new_issue("say hi")
    auto_project.configure(prompt=None)
    failing = auto_project.new_issue("fail again")

    def run(key: str, prompt: str | None) -> RunRecord:
        auto_project.configure(prompt=prompt)
        project = load_project(auto_project.config_path)
        runner = Run(project, auto_project.tracker, RunRequest(key=key, final=False))
        return anyio.run(runner.execute)

    assert run(broken, "{{ issue.nope }}").permanent
    assert auto_project.issue(broken).status == Status.FAILED
    assert not run(failing, None).permanent
    assert auto_project.issue(failing).status == Status.READY


def test_an_agent_that_cannot_be_started_is_a_permanent_failure(auto_project: AutoProject) -> None:
    """acpx reports AGENT_SPAWN_ENOENT; no retry can fix a missing agent, so a dispatcher would not retry it."""
    key = auto_project.new_issue("say hi")
    auto_project.configure(agent={"command": "no-such-agent-binary --acp"})
    project = load_project(auto_project.config_path)
    runner = Run(project, auto_project.tracker, RunRequest(key=key, final=False))

    record = anyio.run(runner.execute)

    assert record.permanent
    assert record.outcome == "failed"
    assert record.stop_reason == (
        "the agent no-such-agent-binary --acp could not be started: Failed to spawn agent command: "
        "no-such-agent-binary --acp. Fix: install the agent, or give its full path in `agent.command` in "
        ".beflow/config.json"
    )
    assert auto_project.issue(key).status == Status.FAILED


def test_an_agent_that_is_not_logged_in_fails_with_the_real_cause_and_the_fix_and_for_good(
    auto_project: AutoProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent answers session/new with ACP's auth-required error: that, not "no error output", is the reason."""
    monkeypatch.setenv("ACP_TEST_AUTH", "required")
    key = auto_project.new_issue("write never.txt x")
    runner = Run(load_project(auto_project.config_path), auto_project.tracker, RunRequest(key=key, final=False))

    record = anyio.run(runner.execute)

    assert record.permanent  # no retry logs anyone in
    assert record.outcome == "failed"
    assert record.stop_reason is not None and "\n" not in record.stop_reason
    assert record.stop_reason.startswith("the agent ")
    assert "is not logged in: Authentication required (its answer to session/new). Fix: log in" in record.stop_reason
    issue = auto_project.issue(key)
    assert issue.status == Status.FAILED
    assert "is not logged in: Authentication required" in issue.comments[-1].text


# -- the prompt --------------------------------------------------------------------------------------------------


def test_a_template_with_an_unknown_variable_is_refused_before_anything_changes(
    auto_project: AutoProject, beflow
) -> None:
    (auto_project.directory / "prompt.j2").write_text("Fix {{ issue.key }}.\n{{ ticket.title }}\n")
    auto_project.configure(prompt="prompt.j2")
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 2
    assert "prompt.j2: unknown variable 'ticket'" in result.stderr
    assert auto_project.records() == []
    assert auto_project.issue(key).status == Status.READY
    assert auto_project.branches() == ["main"]


def test_a_broken_mcp_file_is_refused_before_anything_changes(auto_project: AutoProject, beflow) -> None:
    (auto_project.directory / ".mcp.json").write_text('{"mcpServers": {"broken": {"args": []}}}')
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 2
    assert ".mcp.json" in result.stderr and "mcpServers.broken" in result.stderr
    assert auto_project.records() == []
    assert auto_project.issue(key).status == Status.READY
    assert auto_project.branches() == ["main"]


def test_a_prompt_that_does_not_render_for_an_issue_fails_its_run_and_names_the_template(
    auto_project: AutoProject, beflow
) -> None:
    (auto_project.directory / "prompt.j2").write_text("Fix {{ issue.key }}.\nFirst label: {{ issue.labels[0] }}\n")
    auto_project.configure(prompt="prompt.j2")
    key = auto_project.new_issue("write a.txt x")  # no labels

    result = beflow("--auto", key)

    assert result.exit_code == 1
    record = auto_project.only_record()
    assert record.outcome == "failed"
    assert "prompt did not render" in (record.stop_reason or "") and "prompt.j2" in (record.stop_reason or "")
    assert auto_project.issue(key).status == Status.FAILED
    assert auto_project.branches() == ["main"]  # nothing else happened


def test_a_custom_template_file_is_what_the_agent_is_told(auto_project: AutoProject, beflow) -> None:
    template = "acp-test: write {{ run_id }}.txt {{ issue.title }} on {{ branch }}, attempt {{ attempt }}\n"
    (auto_project.directory / "prompt.md.j2").write_text(template)
    auto_project.configure(prompt="prompt.md.j2")
    key = auto_project.new_issue(title="Custom")

    assert beflow("--auto", key).exit_code == 0

    record = auto_project.only_record()
    files = auto_project.branch_files("beflow/1")
    assert files[f"{record.id}.txt"] == "Custom on beflow/1, attempt 1"


# -- worktrees: included files, hooks, keeping the work ----------------------------------------------------------


def test_included_ignored_files_are_copied_into_the_worktree(auto_project: AutoProject, beflow) -> None:
    directory = auto_project.directory
    (directory / ".gitignore").write_text(".env\nlocal/\n")
    (directory / ".worktreeinclude").write_text("# secrets for the tests\nlocal/*.ini\n")
    git(directory, "add", ".gitignore", ".worktreeinclude")
    git(directory, "commit", "-q", "-m", "ignore local files")
    (directory / ".env").write_text("TOKEN=from-env\n")
    (directory / "local").mkdir()
    (directory / "local" / "settings.ini").write_text("[s]\n")
    auto_project.configure(worktrees={"include": [".env"]}, hooks={"after_create": "cat .env local/settings.ini"})
    key = auto_project.new_issue("write a.txt x")

    assert beflow("--auto", key).exit_code == 0

    record = auto_project.only_record()
    log = (auto_project.run_dir(record) / "hooks" / "after_create.log").read_text()
    assert "TOKEN=from-env" in log and "[s]" in log
    assert set(auto_project.branch_files("beflow/1")) == {".gitignore", ".worktreeinclude", "README.md", "a.txt"}


def test_a_failing_after_create_hook_aborts_the_run_with_its_output_in_the_record(
    auto_project: AutoProject, beflow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests = tmp_path / "agent-requests.jsonl"
    monkeypatch.setenv("ACP_TEST_RECORD", str(requests))
    auto_project.configure(hooks={"after_create": "echo installing dependencies; exit 7"})
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 1
    record = auto_project.only_record()
    assert record.outcome == "failed" and "hook after_create failed (exit 7)" in (record.stop_reason or "")
    log = (auto_project.run_dir(record) / "hooks" / "after_create.log").read_text()
    assert "installing dependencies" in log and "exit 7" in log
    assert not requests.exists()  # the agent never started
    assert auto_project.issue(key).status == Status.FAILED
    assert auto_project.registered_worktrees() == []


def test_hooks_that_print_a_secret_do_not_put_it_in_the_record(auto_project: AutoProject, beflow) -> None:
    hooks = {
        name: f"echo {name}: {SECRET_ENV}" for name in ("after_create", "before_run", "after_run", "before_remove")
    }
    auto_project.configure(hooks=hooks)
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    logs = sorted((auto_project.run_dir(auto_project.only_record()) / "hooks").iterdir())
    assert [log.name for log in logs] == [f"{name}.log" for name in sorted(hooks)]
    assert auto_project.secrets_in_records() == []


def test_a_hook_printing_the_injected_file_shows_no_value_however_short(auto_project: AutoProject, beflow) -> None:
    servers = {"tools": {"command": "t", "env": {"PIN": "q7x", "TOKEN": "long-secret-4f2a"}}}
    (auto_project.directory / ".mcp.json").write_text(json.dumps({"mcpServers": servers}))
    auto_project.configure(hooks={"before_run": "cat .acpxrc.json; echo; echo PIN=$(echo q7x)"})
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    log = (auto_project.run_dir(auto_project.only_record()) / "hooks" / "before_run.log").read_text()
    assert '"mcpServers"' in log and "PIN=••••" in log  # the hook did print them ...
    assert "q7x" not in log.split("\n", 1)[1] and "long-secret-4f2a" not in log  # ... masked (the command aside)


def test_a_failing_after_run_hook_is_logged_and_ignored(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(hooks={"after_run": "echo cleaning up; exit 3"})
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    assert "hook after_run failed (exit 3)" in result.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.changed_files == ["A\ta.txt"]
    assert "cleaning up" in (auto_project.run_dir(record) / "hooks" / "after_run.log").read_text()


def test_a_hook_that_outlives_its_timeout_is_stopped(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    auto_project.configure(hooks={"after_create": {"command": "echo waiting; sleep 30", "timeout": 1}})
    key = auto_project.new_issue("write a.txt x")

    assert beflow("--auto", key).exit_code == 1

    record = auto_project.only_record()
    assert record.outcome == "failed" and "hook after_create failed" in (record.stop_reason or "")
    log = (auto_project.run_dir(record) / "hooks" / "after_create.log").read_text()
    assert "waiting" in log and "timed out" in log


def test_when_the_commit_fails_the_worktree_is_kept_and_named(auto_project: AutoProject, beflow) -> None:
    # The agent's session leaves a nested repository without a commit, which `git add` cannot stage.
    auto_project.configure(hooks={"after_run": "git init -q vendor/lib"})
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 1
    record = auto_project.only_record()
    worktree = Path(record.worktree or "")
    assert record.outcome == "failed" and record.worktree_kept
    assert f"the work is kept in {worktree}" in (record.stop_reason or "")
    assert (worktree / "a.txt").read_text() == "x" and not (worktree / ".acpxrc.json").exists()
    comment = auto_project.issue(key).comments[-1].text
    assert f"worktree kept at `{worktree}`" in comment


def test_a_progress_display_that_fails_does_not_break_the_run(auto_project: AutoProject) -> None:
    """``beflow --auto --json | head -1``: the pipe closes, the run still ends properly."""
    key = auto_project.new_issue("say hi", "write a.txt x")
    shown = []

    def closed_pipe(event: object) -> None:
        shown.append(event)
        raise BrokenPipeError(32, "Broken pipe")

    project = load_project(auto_project.config_path)
    record = anyio.run(Run(project, auto_project.tracker, RunRequest(key=key), closed_pipe).execute)

    assert len(shown) == 1  # the display was dropped after it failed
    assert record.outcome == "succeeded" and auto_project.issue(key).status == Status.REVIEW
    assert auto_project.registered_worktrees() == []


def test_a_busy_issue_lock_holds_the_run_not_the_event_loop(auto_project: AutoProject) -> None:
    """Another writer holds the issue's lock (the local tracker waits up to 30 s for it): the run waits in a worker
    thread, so the loop — other runs' output, signal handling, here this test — goes on, and the run then succeeds."""
    key = auto_project.new_issue("say hi", "write a.txt x")
    project = load_project(auto_project.config_path)
    tracker = auto_project.tracker
    lock = tracker._lock(f"issue-{normalize_key(key)}")  # type: ignore[attr-defined]
    store = RunStore(project.directory)
    waited_on_the_loop: list[bool] = []

    async def main() -> RunRecord:
        done: list[RunRecord] = []

        async def run() -> None:
            done.append(await Run(project, tracker, RunRequest(key=key)).execute())

        lock.acquire()
        try:
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(run)
                with anyio.fail_after(60):
                    while not store.records():  # written just before the tracker is told, under the lock
                        await anyio.sleep(0.01)
                waited_on_the_loop.append(auto_project.issue(key).status == Status.READY)
                lock.release()
        finally:
            if lock.is_locked:
                lock.release()
        return done[0]

    record = anyio.run(main)

    assert waited_on_the_loop == [True]  # the loop ran while the run was still waiting for the lock
    assert record.outcome == "succeeded" and auto_project.issue(key).status == Status.REVIEW


def test_the_before_remove_hook_runs_in_the_worktree_before_it_goes(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(hooks={"before_remove": "echo removing; ls"})
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    record = auto_project.only_record()
    log = (auto_project.run_dir(record) / "hooks" / "before_remove.log").read_text()
    assert "removing" in log and "a.txt" in log
    assert auto_project.registered_worktrees() == []


def test_control_characters_in_an_issue_reach_the_agent_replaced_and_the_run_succeeds(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    requests = tmp_path / "agent-requests.jsonl"
    monkeypatch.setenv("ACP_TEST_RECORD", str(requests))
    body = "acp-test: write hello.txt hi\nA NUL \x00 here and an escape \x1b[2J there."
    key = auto_project.tracker.create(title="Say\x00 hello, fixes #3", body=body, status=Status.READY).key

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    assert auto_project.only_record().outcome == "succeeded"
    assert auto_project.issue(key).status == Status.REVIEW
    prompts = [r for r in map(json.loads, requests.read_text().splitlines()) if r["method"] == "session/prompt"]
    text = "".join(part["text"] for part in prompts[0]["params"]["prompt"])
    assert "A NUL \ufffd here and an escape \ufffd[2J there." in text
    subject = git(auto_project.directory, "log", "-1", "--format=%s", "beflow/1").strip()
    assert subject == "Say\ufffd hello, fixes #\u20603"  # (a title's closing keyword closes nothing once merged)


def _gone(pid: int, within: float = 15.0) -> bool:
    """Whether ``pid`` has stopped running (a zombie does not run) by ``within`` seconds from now."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_after_beflow_is_killed_what_its_hook_started_stops_too(
    auto_project: AutoProject, beflow_process, tmp_path: Path
) -> None:
    # The hook's shell gets the parent-death signal; the sleeps it started (one in the background, one in the
    # foreground) must not work on, orphaned, in the worktree.
    pids = tmp_path / "pids"
    hook = f"sleep 300 & echo $! >> {pids}; sh -c 'echo $$ >> {pids}.tmp; mv {pids}.tmp {pids}.2; exec sleep 300'"
    auto_project.configure(hooks={"before_run": hook})
    key = auto_project.new_issue("say hi")
    process = beflow_process("--auto", key, cwd=auto_project.directory)
    deadline = time.monotonic() + 60
    while not (tmp_path / "pids.2").exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the hook never started"
        time.sleep(0.05)

    process.kill()
    process.wait(timeout=10)

    started = [int(p) for p in (pids.read_text() + (tmp_path / "pids.2").read_text()).split()]
    assert len(started) == 2
    assert all(_gone(pid) for pid in started), f"left running: {started}"


def test_a_hook_child_that_left_the_hooks_session_is_stopped_when_the_hook_ends(
    auto_project: AutoProject, beflow, tmp_path: Path, no_leftover_processes: None
) -> None:
    pid_file = tmp_path / "escaped.pid"
    escape = f"setsid sh -c 'echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; exec sleep 300' &"
    auto_project.configure(hooks={"after_create": f"{escape} while [ ! -e {pid_file} ]; do sleep 0.01; done"})
    key = auto_project.new_issue("write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    assert _gone(int(pid_file.read_text()), within=0.5), "the setsid child of the hook outlived it"


#: The git processes one ``--auto`` run starts (the checks before it included; git's own children and
#: GitPython's two ``git version`` at import not counted). The bare script — ``worktree add``, ``add -A``,
#: ``commit``, ``worktree remove`` — starts 4; the rest is what keeps a run safe (the commit built on what the
#: agent's HEAD names only once it descends from the run's start, and HEAD rewritten by beflow, never written
#: through; the refs read before the agent and after it, so that a run builds on none the agent moved; the branch
#: moved by compare-and-swap only after every commit was checked for injected bytes, the worktree left only when
#: clean, and after the agent one ``git config`` per directory to learn which filter drivers to turn off).
GIT_PROCESSES_PER_RUN = 27


def test_one_run_starts_no_more_git_processes_than_it_needs(
    auto_project: AutoProject, beflow_process, tmp_path: Path
) -> None:
    real = shutil.which("git")
    assert real is not None
    wrapper, log = tmp_path / "git-wrapper", tmp_path / "git-calls.log"
    wrapper.mkdir()
    (wrapper / "git").write_text(f'#!/bin/sh\nprintf "%s %s\\n" "$1" "$2" >> "{log}"\nexec "{real}" "$@"\n')
    (wrapper / "git").chmod(0o755)
    key = auto_project.new_issue("write out.txt hello")

    path = f"{wrapper}{os.pathsep}{os.environ['PATH']}"
    process = beflow_process("--auto", key, cwd=auto_project.directory, env={"PATH": path})
    _, stderr = process.communicate(timeout=120)

    assert process.returncode == 0, stderr
    assert auto_project.only_record().outcome == "succeeded"
    calls = [line for line in log.read_text().splitlines() if line != "version "]
    assert len(calls) <= GIT_PROCESSES_PER_RUN, "\n".join(calls)


def test_draining_ready_issues_reads_the_tracker_a_constant_number_of_times(
    auto_project: AutoProject, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Draining N issues is O(N): the tracker's files are all looked at a fixed number of times per drain however
    many runs it makes, and no run parses an issue file but its own."""
    from beflow.trackers import local_files

    monkeypatch.setattr(local_files, "RACY_NS", -(10**12))  # (files just written are trusted to their stamp at once)
    scans: list[int] = []
    parsed: list[str] = []
    sync, parse = local_files.IssueFiles._sync_now, local_files.parse

    def counting_sync(self: local_files.IssueFiles) -> None:
        scans.append(1)
        sync(self)

    def counting_parse(path: Path, text: str, **kwargs: object) -> local_files.Issue:
        parsed.append(path.name)
        return parse(path, text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(local_files.IssueFiles, "_sync_now", counting_sync)
    monkeypatch.setattr(local_files, "parse", counting_parse)
    for n in range(20):
        auto_project.new_issue(title=f"someone else's {n}", status=Status.OPEN)
    auto_project.tracker.listing()  # the index knows them all
    seen: dict[int, tuple[int, list[str]]] = {}
    for runs in (1, 3):
        keys = [auto_project.new_issue("say done", title=f"drain {runs}.{n}") for n in range(runs)]
        scans.clear()
        parsed.clear()
        result = beflow("--auto")
        assert result.exit_code == 0, result.stderr
        assert all(auto_project.issue(key).status == Status.REVIEW for key in keys)
        others = [name for name in parsed if local_files.number_of_name(name) not in keys]
        seen[runs] = (len(scans), others)
    assert seen[1][0] == seen[3][0] == 1, seen  # one look at every file per drain
    assert seen[1][1] == seen[3][1] == [], seen
