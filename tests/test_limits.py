"""The guardrails of unattended runs end to end (docs/runs.md#limits): the real pinned acpx drives the test agent
silent, streaming a tool's output, and reporting usage past a budget."""

from __future__ import annotations

import anyio

from beflow.trackers import Status
from tests.support.projects import AutoProject
from tests.test_dispatcher import Watch, fast, watching


def test_a_silent_agent_is_stopped_as_stalled_its_work_committed_and_the_issue_failed_with_why(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    auto_project.configure(limits={"stall": 1})
    key = auto_project.new_issue("write started.txt x", "say thinking hard", "sleep 60")

    result = beflow("--auto", key)

    assert result.exit_code == 1, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "stalled" and not record.permanent
    assert record.silent_for is not None and 1 <= record.silent_for < 10
    assert record.last_activity == "thinking hard"
    assert "sent nothing for 1 s" in (record.stop_reason or "") and "thinking hard" in (record.stop_reason or "")
    assert record.duration is not None and record.duration < 30  # long before the agent's sleep is over
    # Restored and committed like any run that ends early: the agent's work is on the branch, nothing else.
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "started.txt": "x"}
    assert record.restored and "removed" in record.restored[0]
    assert auto_project.registered_worktrees() == []
    issue = auto_project.issue(key)
    assert issue.status == Status.FAILED
    assert "stalled" in issue.comments[-1].text and "thinking hard" in issue.comments[-1].text


def test_a_tool_call_that_keeps_printing_is_not_a_stall(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    auto_project.configure(limits={"stall": 1.5})
    key = auto_project.new_issue("tool-stream 4 0.3", "write done.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.silent_for is None
    assert record.duration is not None and record.duration >= 4


def test_a_watch_retries_a_stalled_run_as_it_retries_a_failure(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast(max_attempts=2, backoff=0.1, backoff_max=0.1), limits={"stall": 1})
    key = auto_project.new_issue("sleep 60")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed")))
        return watch

    watch = anyio.run(scenario)

    assert [e.data["attempt"] for e in watch.of("retry_scheduled", key)] == [2]
    assert [e.data["outcome"] for e in watch.of("finished", key)] == ["stalled", "stalled"]
    assert "gave up after 2 attempts" in watch.of("failed", key)[0].data["reason"]
    assert auto_project.issue(key).status == Status.FAILED
