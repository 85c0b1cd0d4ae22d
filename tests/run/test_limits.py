"""The guardrails of unattended runs end to end (docs/config.md#limits, docs/runs.md): the real pinned acpx drives
the test agent silent, streaming a tool's output, and reporting usage past a budget."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import anyio
import pytest
from rich.console import Console

from beflow.cli.watch import render
from beflow.config import Limits
from beflow.guardrails import Usage
from beflow.records.record import RunRecord, new_run_id
from beflow.records.store import RunStore
from beflow.run import spending
from beflow.run.spending import Ledger
from beflow.trackers import Status
from tests.support.projects import AutoProject
from tests.watch.test_dispatcher import Watch, fast, watching


def test_a_silent_agent_is_stopped_as_stalled_its_work_committed_and_the_issue_failed_with_why(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    # (2 s: on a loaded machine acpx and the agent may take more than a second to start, and nothing on the ACP
    # stream before they do is life)
    auto_project.configure(limits={"stall": 2})
    key = auto_project.new_issue("write started.txt x", "say thinking hard", "sleep 60")

    result = beflow("--auto", key)

    assert result.exit_code == 1, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "stalled" and not record.permanent
    assert record.silent_for is not None and 2 <= record.silent_for < 10
    assert record.last_activity == "thinking hard"
    assert "sent nothing for 2 s" in (record.stop_reason or "") and "thinking hard" in (record.stop_reason or "")
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


def test_an_agent_silent_on_the_acp_stream_but_logging_to_stderr_is_stalled(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    """A retry loop that logs every 0.2 s but sends nothing over ACP is no life: stopped after limits.stall."""
    auto_project.configure(limits={"stall": 2})
    key = auto_project.new_issue("write started.txt x", "say calling the model", "stderr-loop 60 0.2")

    result = beflow("--auto", key)

    assert result.exit_code == 1, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "stalled" and record.last_activity == "calling the model"
    assert record.duration is not None and record.duration < 30  # long before the loop's 60 s are over
    stderr = (auto_project.run_dir(record) / "stderr.log").read_text()
    assert "rate limited (429), retrying: attempt 2" in stderr  # it did log, and the log is kept
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "started.txt": "x"}


def test_a_watch_retries_a_stalled_run_as_it_retries_a_failure(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast(max_attempts=2, backoff=0.1, backoff_max=0.1), limits={"stall": 1})
    key = auto_project.new_issue("sleep 60")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed")))
        return watch

    watch = anyio.run(scenario)

    assert [e.data.attempt for e in watch.of("retry_scheduled", key)] == [2]
    assert [e.data.outcome for e in watch.of("finished", key)] == ["stalled", "stalled"]
    assert "gave up after 2 attempts" in watch.of("failed", key)[0].data.reason
    assert auto_project.issue(key).status == Status.FAILED


# -- usage -----------------------------------------------------------------------------------------------------


def test_what_the_agent_reports_it_used_is_recorded_shown_and_summed_per_issue(
    auto_project: AutoProject, beflow
) -> None:
    key = auto_project.new_issue("usage 1500 100000", "usage 2500 100000 0.40 USD", "write a.txt x", "tokens 3000 400")

    result = beflow("--auto", key, "--json")

    assert result.exit_code == 0, result.stderr
    record = auto_project.only_record()
    assert record.usage is not None
    usage = record.usage
    assert (usage.context_used, usage.context_peak, usage.context_size) == (2500, 2500, 100000)
    assert (usage.input_tokens, usage.output_tokens, usage.tokens, usage.cost, usage.currency) == (
        3000,
        400,
        3400,
        0.4,
        "USD",
    )
    events = [json.loads(line) for line in result.stdout.splitlines()]
    (finished,) = [e for e in events if e["event"] == "finished"]
    assert finished["usage"]["cost"] == 0.4 and finished["usage"]["tokens"] == 3400
    # The live figures as they came (both updates may come in one read of acpx's output: then only the latest).
    assert next(e["context_used"] for e in events if e["event"] == "usage") in (1500, 2500)
    comment = auto_project.issue(key).comments[-1].text
    assert "- usage: context 2,500 of 100,000 tokens; 3,400 tokens (3,000 in, 400 out); cost 0.40 USD" in comment

    # A second round: the issue's comment and `runs show` sum every run of the issue.
    auto_project.tracker.set_status(key, Status.READY)
    assert beflow("--auto", key).exit_code == 0
    assert "- all runs of this issue: 6,800 tokens, 0.80 USD over 2 runs" in auto_project.issue(key).comments[-1].text
    shown = beflow("runs", "show", "latest")
    assert "usage     context 2,500 of 100,000 tokens; 3,400 tokens" in shown.stdout
    assert f"all runs of issue {key}: 6,800 tokens, 0.80 USD over 2 runs" in shown.stdout
    listed = beflow("runs", "list", "--issue", key)
    assert "usage" in listed.stdout and "3.4k tok 0.40 USD" in listed.stdout
    assert f"issue {key}: 6,800 tokens, 0.80 USD over 2 runs" in listed.stdout


def test_an_agent_that_reports_nothing_has_no_usage_and_no_price(auto_project: AutoProject, beflow) -> None:
    key = auto_project.new_issue("write a.txt x")

    assert beflow("--auto", key).exit_code == 0

    record = auto_project.only_record()
    assert record.usage is None
    assert "usage" not in auto_project.issue(key).comments[-1].text
    assert "usage     none reported by the agent" in beflow("runs", "show", "latest").stdout


def test_a_cost_budget_against_an_agent_that_reports_no_cost_says_it_was_not_held(
    auto_project: AutoProject, beflow
) -> None:
    auto_project.configure(limits={"cost_per_run": 1})
    key = auto_project.new_issue("usage 1500 100000", "write a.txt x")

    result = beflow("--auto", key, "--json")

    assert result.exit_code == 0, result.stderr
    said = "the agent reported no cost: limits.cost_per_run was not held"
    events = [json.loads(line) for line in result.stdout.splitlines()]
    assert any(e["event"] == "notice" and e["message"] == said for e in events)
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.unheld == said
    assert f"- budgets: {said}" in auto_project.issue(key).comments[-1].text
    assert f"budgets   {said}" in beflow("runs", "show", "latest").stdout


def test_garbage_usage_values_are_ignored_and_counted_never_breaking_the_run(auto_project: AutoProject, beflow) -> None:
    auto_project.configure(limits={"cost_per_run": 5, "tokens_per_run": 10_000})
    garbage = [
        '{"sessionUpdate": "usage_update", "used": -5, "size": "lots", "cost": {"amount": "NaN", "currency": "USD"}}',
        '{"sessionUpdate": "usage_update", "used": 1e400, "size": 1e999, "cost": {"amount": 1e400, "currency": "USD"}}',
        '{"sessionUpdate": "usage_update", "used": 99999999999999999999999, "size": 10, "cost": [1, 2]}',
        '{"sessionUpdate": "usage_update"}',
    ]
    key = auto_project.new_issue(*(f"update {g}" for g in garbage), "usage 100 1000 0.1 USD", "write a.txt x")

    result = beflow("--auto", key)

    assert result.exit_code == 0, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.usage is not None
    assert (record.usage.context_used, record.usage.cost, record.usage.currency) == (100, 0.1, "USD")
    assert record.usage.rejected >= 6
    assert "invalid values ignored" in auto_project.issue(key).comments[-1].text


# -- budgets ---------------------------------------------------------------------------------------------------

BUDGETS = [
    # limits, directives, outcome, words in the reason, permanent
    pytest.param(
        {"cost_per_run": 1},
        ["usage 100 1000 0.5 USD", "usage 200 1000 1.5 USD"],
        "over_budget",
        ["cost 1.50 USD, past limits.cost_per_run (1 USD)", "raise limits.cost_per_run"],
        id="cost",
    ),
    pytest.param(
        {"tokens_per_run": 1000},
        ["usage 5000 10000"],
        "over_budget",
        ["5,000 tokens, past limits.tokens_per_run (1,000)", "raise limits.tokens_per_run"],
        id="tokens",
    ),
    pytest.param(
        {"cost_per_run": 1, "currency": "EUR"},
        ["usage 100 1000 0.1 USD"],
        "failed",
        ["limits.currency is EUR but the agent reports its cost in USD", '"currency": "USD"'],
        id="currency-the-agent-does-not-report",
    ),
    pytest.param(
        {"cost_per_day": 10},
        [
            "usage 100 1000 0.1 USD",
            "update "
            + json.dumps(
                {"sessionUpdate": "usage_update", "used": 1, "size": 9, "cost": {"amount": 0.2, "currency": "EUR"}}
            ),
        ],
        "failed",
        ["agent reports its cost in EUR"],
        id="currency-changed-mid-run",
    ),
]


@pytest.mark.parametrize(
    ("limits", "directives", "outcome", "reason", "permanent"),
    # (the wrong currency is no run's fault: a watch holds dispatching until it is fixed, then retries the run)
    [pytest.param(*p.values, p.values[2] == "over_budget", id=p.id) for p in BUDGETS],
)
def test_a_run_past_its_budget_is_stopped_at_once_and_not_retried(
    auto_project: AutoProject,
    beflow,
    no_leftover_processes: None,
    limits: dict[str, object],
    directives: list[str],
    outcome: str,
    reason: list[str],
    permanent: bool,
) -> None:
    auto_project.configure(limits=limits)
    key = auto_project.new_issue("write started.txt x", *directives, "sleep 60", "write late.txt y")

    result = beflow("--auto", key)

    # Over a budget, the run failed (exit 1); a budget in another currency is the config's error (exit 2).
    assert result.exit_code == (1 if permanent else 2), result.stderr
    if not permanent:
        assert f"{auto_project.config_path}: limits.currency is " in result.stderr, result.stderr
    record = auto_project.only_record()
    assert record.outcome == outcome and record.permanent is permanent
    for words in reason:
        assert words in (record.stop_reason or "")
    assert record.duration is not None and record.duration < 30  # the agent was stopped, not waited for
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "started.txt": "x"}
    issue = auto_project.issue(key)
    assert issue.status == Status.FAILED
    assert all(words in issue.comments[-1].text for words in reason)


def test_a_run_whose_turn_totals_pass_tokens_per_run_ends_over_budget_its_work_committed(
    auto_project: AutoProject, beflow, no_leftover_processes: None
) -> None:
    """The prompt's response carries the turn's token counts only at its end: checked then, past the limit the
    run ends over_budget (permanent), its work committed to its branch, the issue failed with which limit, the
    figure and how to raise it."""
    auto_project.configure(limits={"tokens_per_run": 1000})
    key = auto_project.new_issue("usage 500 100000", "write a.txt x", "tokens 30000 4000")

    result = beflow("--auto", key)

    assert result.exit_code == 1, result.stderr
    record = auto_project.only_record()
    assert record.outcome == "over_budget" and record.permanent
    assert record.usage is not None and record.usage.tokens == 34000
    reason = "the run used 34,000 tokens, past limits.tokens_per_run (1,000)"
    assert reason in (record.stop_reason or "") and "raise limits.tokens_per_run" in (record.stop_reason or "")
    assert auto_project.branch_files("beflow/1") == {"README.md": "# sample\n", "a.txt": "x"}
    assert record.commit is not None and record.pull_request is None
    issue = auto_project.issue(key)
    assert issue.status == Status.FAILED
    assert reason in issue.comments[-1].text and "raise limits.tokens_per_run" in issue.comments[-1].text


def test_an_over_budget_run_is_not_retried_by_a_watch(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast(max_attempts=3), limits={"tokens_per_run": 10})
    key = auto_project.new_issue("usage 500 1000", "sleep 60")

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed")))
            await watch.ticks(2)
        return watch

    watch = anyio.run(scenario)

    assert len(watch.of("dispatched", key)) == 1 and watch.of("retry_scheduled") == []
    assert watch.of("failed", key)[0].data.reason.startswith("not retried: the run used 500 tokens")
    assert watch.of("finished", key)[0].data.usage.context_used == 500
    assert auto_project.issue(key).status == Status.FAILED


def test_a_watch_stops_dispatching_at_its_day_budget_and_resumes_when_the_limit_is_raised(
    auto_project: AutoProject,
) -> None:
    auto_project.configure(watch=fast(concurrency=1), limits={"cost_per_day": 1})
    first = auto_project.new_issue("usage 10 100 1.25 USD", "write a.txt x", priority=1)
    second = auto_project.new_issue("write b.txt y", priority=2)

    async def scenario() -> tuple[Watch, object]:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("budget_reached")))
            await watch.ticks(2)
            held = watch.dispatcher.snapshot()
            auto_project.configure(limits={"cost_per_day": 5})
            await watch.until(lambda: len(watch.of("finished")) == 2)
        return watch, held

    watch, held = anyio.run(scenario)

    (reached,) = watch.of("budget_reached")
    assert (reached.data.spent, reached.data.limit, reached.data.currency) == (1.25, 1, "USD")
    assert "no run is dispatched until tomorrow or until the limit is raised" in reached.data.message
    assert [e.issue for e in watch.of("dispatched")] == [first, second]
    assert watch.of("budget_cleared")[0].data.message == "dispatching again"
    assert held.budget is not None and held.budget.reached and held.queue  # type: ignore[attr-defined]
    assert held.used.cost == {"USD": 1.25}  # type: ignore[attr-defined]


def test_a_watch_held_by_its_day_budget_dispatches_again_the_next_day(auto_project: AutoProject) -> None:
    auto_project.configure(watch=fast(concurrency=1), limits={"cost_per_day": 1})
    first = auto_project.new_issue("usage 10 100 1.25 USD", "tokens 300 100", "write a.txt x", priority=1)
    second = auto_project.new_issue("write b.txt y", priority=2)
    day = [spending.today()]

    async def scenario() -> Watch:
        async with watching(auto_project) as watch:
            watch.dispatcher.ledger.day = lambda: day[0]  # the watch's calendar, moved by the test
            await watch.until(lambda: bool(watch.of("budget_reached")))
            await watch.ticks(2)
            assert [e.issue for e in watch.of("dispatched")] == [first]  # held
            day[0] += dt.timedelta(days=1)
            await watch.until(lambda: len(watch.of("finished")) == 2)
        return watch

    watch = anyio.run(scenario)

    (cleared,) = watch.of("budget_cleared")
    assert (cleared.data.message, cleared.data.spent, cleared.data.limit) == ("dispatching again", 0.0, 1)
    assert [e.issue for e in watch.of("dispatched")] == [first, second]
    # Each finished event carries what the watch's runs used so far.
    used = [e.data.watch_used for e in watch.of("finished")]
    assert [(u.runs, u.reported, u.tokens, u.cost) for u in used if u is not None] == [
        (1, 1, 400, {"USD": 1.25}),
        (2, 1, 400, {"USD": 1.25}),
    ]


def test_a_watch_holds_dispatching_on_a_cost_in_another_currency_and_resumes_when_the_config_is_fixed(
    auto_project: AutoProject,
) -> None:
    """Every run would fail on a cost in another currency than limits.currency: the first run to report one fails,
    the watch dispatches nothing more and says why and how to fix it; a config reload that fixes the currency
    dispatches again, the failed issue's retry included."""
    auto_project.configure(watch=fast(concurrency=1, max_attempts=2), limits={"cost_per_run": 5, "currency": "EUR"})
    first = auto_project.new_issue("usage 10 100 0.10 USD", "write a.txt x", priority=1)
    second = auto_project.new_issue("usage 10 100 0.10 USD", "write b.txt y", priority=2)

    async def scenario() -> tuple[Watch, object]:
        async with watching(auto_project) as watch:
            await watch.until(lambda: any("not dispatching" in e.data.message for e in watch.of("error")))
            await watch.ticks(3)
            held = watch.dispatcher.snapshot()
            auto_project.configure(limits={"cost_per_run": 5, "currency": "USD"})
            await watch.until(lambda: len(watch.of("finished")) == 3)
        return watch, held

    watch, held = anyio.run(scenario)

    (error,) = [e for e in watch.of("error") if "not dispatching" in e.data.message]
    assert "limits.currency is EUR but the agent reports its cost in USD" in error.data.message
    assert held.blocked is not None and "every run would fail on it" in held.blocked  # type: ignore[attr-defined]
    assert '"currency": "USD"' in (held.blocked_fix or "")  # type: ignore[attr-defined]
    assert second in [i.key for i in held.queue]  # type: ignore[attr-defined]
    console = Console(width=300, record=True, color_system=None)
    console.print(render(held, concurrency=1))  # type: ignore[arg-type]
    assert "not dispatching: limits.currency is EUR but the agent reports its cost in USD" in console.export_text()
    # One run failed on it; nothing else was dispatched until the reload, then the retry and the next issue ran.
    # (a dispatch that found the issue still claimed for a moment is skipped and dispatched again: counted once)
    dispatched = [(e.issue, e.data.attempt) for e in watch.of("dispatched")]
    assert list(dict.fromkeys(dispatched)) == [(first, 1), (first, 2), (second, 1)]
    assert watch.of("finished")[0].data.outcome == "failed"
    assert any(getattr(e.data, "message", None) == "dispatching again" for e in watch.of("config_reloaded"))
    assert auto_project.issue(first).status == Status.REVIEW and auto_project.issue(second).status == Status.REVIEW


def test_a_retry_that_resumes_the_session_counts_its_own_cost_once_in_the_issues_and_the_days_sums(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """ACP's cost is the session's, cumulative: the resumed retry reports 0.60 USD (the first run's 0.30 and its
    own 0.30); it records both and counts 0.30, so the issue, the watch and the day have spent 0.60, not 0.90."""
    auto_project.configure(watch=fast(max_attempts=2), limits={"cost_per_day": 0.8})
    key = auto_project.new_issue("spend 1000 200000 0.30 USD", "fail not yet")

    async def scenario() -> tuple[Watch, object]:
        async with watching(auto_project) as watch:
            await watch.until(lambda: bool(watch.of("failed", key)))
            await watch.ticks(2)
            state = watch.dispatcher.snapshot()
        return watch, state

    watch, state = anyio.run(scenario)

    second, first = auto_project.records(key)
    assert second.resumed_session == first.session is not None
    assert first.usage is not None and (first.usage.cost, first.usage.session_cost) == (0.3, 0.3)
    assert second.usage is not None
    assert (second.usage.cost, second.usage.session_cost, second.usage.earlier_cost) == (0.3, 0.6, 0.3)
    assert watch.of("finished", key)[-1].data.usage.cost == 0.3
    assert state.used.cost == {"USD": pytest.approx(0.6)}  # type: ignore[attr-defined]
    assert watch.of("budget_reached") == []  # 0.60 of the day's 0.80: the session's 0.30 is not counted twice
    comment = auto_project.issue(key).comments[-1].text
    assert "cost 0.30 USD; the resumed session's 0.60 USD, less the earlier runs' 0.30" in comment
    assert "- all runs of this issue: 2,000 tokens, 0.60 USD over 2 runs" in comment


def test_a_days_spending_counts_the_days_watch_runs_from_their_records_and_starts_again_the_next_day(
    repo: Path,
) -> None:
    store = RunStore(repo)
    today = dt.datetime.now().astimezone()
    spent = [
        (today, "watch", 2.0, "USD"),
        (today, "auto", 9.0, "USD"),
        (today - dt.timedelta(days=1), "watch", 5.0, "USD"),
    ]
    for started, mode, cost, currency in spent:
        record = RunRecord(id=new_run_id("7"), issue="7", mode=mode, agent="a", started_at=started)  # type: ignore[arg-type]
        record.usage = Usage(cost=cost, currency=currency, updates=1)
        record.close("succeeded", "done")
        store.create(record, "prompt")
    day = [today.date()]
    ledger = Ledger(day=lambda: day[0])
    limits = Limits(cost_per_day=2)

    ledger.refresh(store)
    budget = ledger.budget(limits, [])
    assert budget is not None and (budget.spent, budget.reached) == (2.0, True)  # the watch's run of today only
    live = ledger.budget(Limits(cost_per_day=3), [Usage(cost=0.5, currency="USD", updates=1), None])
    assert live is not None and live.spent == 2.5  # a run still going counts with what it reported so far

    day[0] += dt.timedelta(days=1)
    ledger.refresh(store)
    budget = ledger.budget(limits, [])
    assert budget is not None and (budget.spent, budget.reached) == (0.0, False)


def test_a_days_spending_counts_the_runs_another_watch_process_finishes_after_the_first_look(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two watch processes of one project, each with its ledger: what the other finishes later that day counts at
    this one's next look; each look reads only the records written since the last one."""
    store = RunStore(repo)
    reads: list[str] = []
    validate = RunRecord.model_validate_json

    def reading(data: bytes | str) -> RunRecord:
        record = validate(data)
        reads.append(record.id)
        return record

    monkeypatch.setattr(RunRecord, "model_validate_json", reading)

    def run(cost: float, *, finished: bool = True) -> RunRecord:
        record = RunRecord(
            id=new_run_id("7"), issue="7", mode="watch", agent="a", started_at=dt.datetime.now().astimezone()
        )
        record.usage = Usage(cost=cost, currency="USD", updates=1)
        if finished:
            record.close("succeeded", "done")
        store.create(record, "prompt")
        return record

    this, other = Ledger(), Ledger()
    mine = run(1.0)
    this.refresh(store)
    other.refresh(store)
    this.finished(mine)  # (this watch's own finish counts once, whether heard or read)
    assert this.budget(Limits(cost_per_day=9), []).spent == 1.0  # type: ignore[union-attr]

    theirs = run(0.5, finished=False)  # the other watch's run, still going at this one's next look
    reads.clear()
    this.refresh(store)
    assert reads == [theirs.id]  # the new record only, not every record of the day
    assert this.budget(Limits(cost_per_day=9), []).spent == 1.0  # type: ignore[union-attr]

    theirs.usage = Usage(cost=2.0, currency="USD", updates=3)
    theirs.close("succeeded", "done")
    store.save(theirs)  # the other process finishes it
    reads.clear()
    this.refresh(store)
    this.refresh(store)
    assert reads == [theirs.id]  # read again once, when it was rewritten
    budget = this.budget(Limits(cost_per_day=3), [])
    assert budget is not None and (budget.spent, budget.reached) == (3.0, True)
