"""A fleet end to end: workflows started by dispatchers, runs on ``beflow worker`` processes."""

from __future__ import annotations

import base64
import os
import signal
import time
from pathlib import Path

import psutil
from temporalio.client import Client

from beflow.trackers import Status
from tests.fleet.conftest import HEARTBEAT, Fleet, ask, executions, read_events, stored
from tests.support.projects import git
from tests.support.waiting import eventually


def test_an_issue_runs_once_on_a_worker_and_its_workflow_ends(fleet: Fleet) -> None:
    from beflow.config import load_project
    from beflow.doctor import check_engine

    engine = check_engine(load_project(fleet.project.config_path))
    assert engine is not None and engine.ok and "answers" in engine.detail  # beflow doctor sees the service
    key = fleet.project.new_issue("say hello from the fleet", "write notes.txt hi", title="Take notes")
    worker = fleet.worker("w1")
    dispatcher = fleet.beflow("watch", "--once", "--json")
    assert dispatcher.wait(60) == 0, dispatcher.communicate()
    # The run left the issue in review: its workflow continued as new, and waits for feedback (review rounds).
    eventually(lambda: fleet.in_review(key), "the issue's workflow waiting in review", alive=worker)
    assert fleet.project.issue(key).status == Status.REVIEW
    (record,) = fleet.project.records(key)
    assert record.outcome == "succeeded"
    assert fleet.project.branch_files(f"beflow/{key}")["notes.txt"] == "hi"
    state = fleet.state(key)
    assert state["run_id"] == record.id and state["round"] == 0 and state["worker"] == "w1"
    shown = fleet.beflow("issues", "show", key)
    out, err = shown.communicate(timeout=60)
    assert shown.returncode == 0, err
    assert f"workflow: in review, attempt 1, worker w1, latest run {record.id} (succeeded)" in out
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)
    # The workflow is deterministic: its recorded history replays on the workflow code as it is.
    from temporalio.worker import Replayer

    from beflow.fleet.workflow import IssueWorkflow

    async def replayed(client: Client) -> None:
        for history in await executions(client, fleet.workflow(key)):
            await Replayer(workflows=[IssueWorkflow]).replay_workflow(history)

    ask(fleet.address, replayed)


def test_two_dispatchers_starting_the_same_issues_start_each_once(fleet: Fleet) -> None:
    """Ten races of two dispatchers over the same issue: one workflow each time, and one run of each issue."""
    import asyncio

    from temporalio.client import Client

    from beflow.app import open_project
    from beflow.config import load_project
    from beflow.fleet.dispatch import FleetDispatcher

    keys = [fleet.project.new_issue(f"say issue {n}", title=f"issue {n}") for n in range(10)]
    project = load_project(fleet.project.config_path)

    async def race() -> list[tuple[bool, bool]]:
        one, two = FleetDispatcher(project, open_project(project)), FleetDispatcher(project, open_project(project))
        first, second = await Client.connect(fleet.address), await Client.connect(fleet.address)
        return [await asyncio.gather(one.start(first, key), two.start(second, key)) for key in keys]

    starts = asyncio.run(race())
    assert all(sorted(pair) == [False, True] for pair in starts), starts

    async def executions(client: Client) -> list[str]:
        ids = [fleet.workflow(key) for key in keys]
        found = [w.id async for w in client.list_workflows(f'TaskQueue = "{fleet.task_queue}"')]
        for workflow in ids:  # no worker runs them here: they are ended, having been counted
            await client.get_workflow_handle(workflow).terminate("counted")
        return sorted(w for w in found if w in ids)

    found = eventually(lambda: ask(fleet.address, executions), "the workflows listed")
    assert found == sorted(fleet.workflow(key) for key in keys)  # one execution each


def test_two_dispatcher_processes_at_once_run_every_ready_issue_once(fleet: Fleet) -> None:
    keys = [fleet.project.new_issue(f"say issue {n}", title=f"issue {n}") for n in range(3)]
    worker = fleet.worker("w1", lanes=2)
    dispatchers = [fleet.beflow("watch", "--once", "--json") for _ in range(2)]
    dispatched = []
    for dispatcher in dispatchers:
        dispatched += [e["issue"] for e in read_events(dispatcher) if e["event"] == "dispatched"]
        assert dispatcher.returncode == 0
    assert sorted(dispatched) == sorted(keys)  # each started by one of them
    for key in keys:
        eventually(lambda key=key: fleet.in_review(key), f"issue {key}'s workflow in review", alive=worker)
        assert [r.outcome for r in fleet.project.records(key)] == ["no_changes"]  # one run: it said something
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)


def test_a_worker_killed_mid_run_has_its_run_resumed_on_another_worker(fleet: Fleet, tmp_path: Path) -> None:
    mark = tmp_path / "first-run"
    key = fleet.project.new_issue(
        f"run test -e {mark} && exit 0; echo $$ > {mark}; sleep 120",
        "write result.txt resumed",
        title="Survive a crash",
    )
    first = fleet.worker("w1")
    dispatcher = fleet.beflow("watch", "--once")
    assert dispatcher.wait(60) == 0, dispatcher.communicate()
    eventually(mark.exists, "the first run's agent at work", alive=first)
    second = fleet.worker("w2")
    first.kill()  # SIGKILL: no cleanup, no last heartbeat
    first.wait()
    eventually(lambda: fleet.in_review(key), "the run done on the other worker", alive=second)
    assert fleet.state(key)["worker"] == "w2"
    # The workflow's next step after the heartbeat timeout did not wait long for the dead worker (its sticky queue
    # of cached workflows): fail-over takes the heartbeat timeout and a few seconds, not ten more.
    history = fleet.timed_history(key)
    silent = next(at for kind, at in history if kind.endswith("ACTIVITY_TASK_TIMED_OUT"))
    taken = next(at for kind, at in history if at >= silent and kind.endswith("WORKFLOW_TASK_STARTED"))
    assert taken - silent < 5, history
    records = fleet.project.records(key)
    assert sorted(r.outcome for r in records) == ["cancelled", "succeeded"]  # the killed run, closed; the resumed
    assert fleet.project.branch_files(f"beflow/{key}")["result.txt"] == "resumed"
    assert fleet.project.issue(key).status == Status.REVIEW
    shell = int(mark.read_text())
    eventually(
        lambda: not psutil.pid_exists(shell) or psutil.Process(shell).status() == "zombie",
        "the killed worker's agent gone",
    )
    second.send_signal(signal.SIGTERM)
    second.wait(60)


def test_cancelling_the_workflow_stops_the_running_agent_and_puts_the_managed_file_back(
    fleet: Fleet, tmp_path: Path
) -> None:
    mark = tmp_path / "started"
    key = fleet.project.new_issue(f"run touch {mark}", "sleep 120", "write never.txt x", title="Long")
    worker = fleet.worker("w1")
    dispatcher = fleet.beflow("watch", "--once")
    assert dispatcher.wait(60) == 0, dispatcher.communicate()
    eventually(mark.exists, "the agent at work", alive=worker)
    (running,) = fleet.project.runs.running()
    acpxrc = Path(running.worktree or "") / ".acpxrc.json" if running.worktree else None
    cancelled_at = time.monotonic()

    async def cancel(client: Client) -> None:
        await client.get_workflow_handle(fleet.workflow(key)).cancel()

    ask(fleet.address, cancel)
    eventually(lambda: fleet.status(key) == "CANCELED", "the workflow ending cancelled", alive=worker)
    took = time.monotonic() - cancelled_at
    (record,) = fleet.project.records(key)
    assert record.outcome == "cancelled" and "its workflow was cancelled" in (record.stop_reason or "")
    assert took < HEARTBEAT + 15
    assert acpxrc is None or not acpxrc.exists()
    assert fleet.project.issue(key).status == Status.READY
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)


def test_closing_a_running_issue_by_hand_cancels_its_workflow(fleet: Fleet, tmp_path: Path) -> None:
    mark = tmp_path / "started"
    key = fleet.project.new_issue(f"run touch {mark}", "sleep 120", title="Closed meanwhile")
    worker = fleet.worker("w1")
    watch = fleet.beflow("watch", "--json")
    eventually(mark.exists, "the agent at work", alive=worker)
    fleet.project.tracker.set_status(key, Status.CLOSED, note="not needed after all")
    eventually(lambda: fleet.status(key) == "CANCELED", "the workflow cancelled by the dispatcher", alive=watch)
    (record,) = fleet.project.records(key)
    assert record.outcome == "cancelled"
    assert fleet.project.issue(key).status == Status.CLOSED  # the person's word stands
    for process in (watch, worker):
        process.send_signal(signal.SIGTERM)
        process.wait(60)


def test_a_worker_stopped_mid_run_cancels_its_run_and_the_workflow_takes_it_up_elsewhere(
    fleet: Fleet, tmp_path: Path
) -> None:
    mark = tmp_path / "first-run"
    key = fleet.project.new_issue(
        f"run test -e {mark} && exit 0; touch {mark}; sleep 120", "write result.txt taken up", title="Stopped"
    )
    first = fleet.worker("w1")
    assert fleet.beflow("watch", "--once").wait(60) == 0
    eventually(mark.exists, "the first run's agent at work", alive=first)
    second = fleet.worker("w2")
    first.send_signal(signal.SIGTERM)
    _, said = first.communicate(timeout=60)
    # It ends as a service stopped: one line, no error, no traceback of the run's failure that moves it elsewhere.
    assert said == "beflow: stopped\n" and first.returncode == 130
    eventually(lambda: fleet.in_review(key), "the run done on the other worker", alive=second)
    assert fleet.state(key)["worker"] == "w2"
    stopped, resumed = sorted(fleet.project.records(key), key=lambda r: r.started_at)
    assert stopped.outcome == "cancelled" and "worker w1 stopped" in (stopped.stop_reason or "")
    assert resumed.outcome == "succeeded"
    assert fleet.project.branch_files(f"beflow/{key}")["result.txt"] == "taken up"
    second.send_signal(signal.SIGTERM)
    second.wait(60)


def test_ctrl_c_on_a_workers_terminal_mid_run_ends_it_in_one_line_and_records_the_run_stopped(
    fleet: Fleet, tmp_path: Path
) -> None:
    from tests.support import terminal

    mark = tmp_path / "at-work"
    key = fleet.project.new_issue(f"run touch {mark}; sleep 120", "write result.txt never", title="Ctrl-C")
    config = str(fleet.project.config_path)
    term = terminal.start("--config", config, "worker", "--id", "w1", "--lanes", "1", cwd=fleet.project.directory)
    try:
        term.expect("worker w1: 1 lane")
        assert fleet.beflow("watch", "--once").wait(60) == 0
        term.expect("started")
        eventually(mark.exists, "the agent at work")
        term.type("\x03")
        assert term.wait() == 130
    finally:
        term.close()
    shown = term.text.splitlines()
    assert shown[-1] == "beflow: stopped", term.text
    assert "finished" in shown[-2] and "outcome=cancelled" in shown[-2] and "worker w1 stopped" in shown[-2]
    assert "Traceback" not in term.text and "WorkerStopped" not in term.text
    (record,) = fleet.project.records(key)
    assert record.outcome == "cancelled" and record.stop_reason == "worker w1 stopped"


def test_issues_show_on_a_fleet_whose_workers_are_gone_or_frozen_says_so_promptly_and_how_to_start_one(
    fleet: Fleet, tmp_path: Path
) -> None:
    """A workflow's state is a query, which only a worker answers: with no worker polling its task queue,
    ``issues show`` says so at once (not after 30 s, blaming the service); with one that polls but does not answer
    (frozen), within the query's few seconds."""
    mark = tmp_path / "at-work"
    key = fleet.project.new_issue(f"run touch {mark}; sleep 120", "write result.txt never", title="Nobody")
    assert fleet.beflow("watch", "--once").wait(60) == 0  # its workflow runs; no worker ever took it

    def shown() -> tuple[float, str]:
        began = time.monotonic()
        out, err = fleet.beflow("issues", "show", key).communicate(timeout=60)
        return time.monotonic() - began, out + err

    took, said = shown()
    assert took < 10, said
    assert f"no worker serves its task queue '{fleet.task_queue}' (Temporal at {fleet.address} answers)" in said
    assert "fix: Start one in the project's checkout: `beflow worker`" in said
    frozen = fleet.worker("w1")
    eventually(mark.exists, "the run's agent at work", alive=frozen)
    frozen.send_signal(signal.SIGSTOP)
    try:
        took, said = shown()
    finally:
        frozen.send_signal(signal.SIGCONT)
        frozen.send_signal(signal.SIGTERM)
        frozen.wait(60)
    assert took < 20, said
    assert f"no worker of its task queue '{fleet.task_queue}' answered for it within 5 s" in said
    assert "`beflow worker`" in said and "did not answer within 30 s" not in said


def test_feedback_on_an_issue_in_review_is_signalled_to_its_workflow_which_runs_the_round(fleet: Fleet) -> None:
    from beflow.app import open_tracker
    from beflow.config import load_project
    from beflow.fleet.shapes import workflow_id

    fleet.project.configure(feedback={"settle": 0.5})
    key = fleet.project.new_issue("write hello.txt hi", title="Greet")
    worker = fleet.worker("w1")
    watch = fleet.beflow("watch", "--json")
    eventually(lambda: fleet.in_review(key), "the first run done, its workflow waiting in review", alive=watch)

    rework = fleet.beflow(
        "issues",
        "comment",
        key,
        "also handle the empty case\nacp-test: write empty.txt handled",
        "--rework",
        "--author",
        "alice",
    )
    assert rework.wait(60) == 0, rework.communicate()

    def round_done() -> bool:
        finished = [r for r in fleet.project.records(key) if r.finished]
        return len(finished) == 2 and fleet.in_review(key) and fleet.state(key)["round"] == 1

    eventually(round_done, "review round 1 run by the workflow, which waits in review again", alive=watch)
    first, second = sorted(fleet.project.records(key), key=lambda r: r.started_at)
    assert (first.round, second.round) == (0, 1) and second.outcome == "succeeded"
    (piece,) = second.feedback
    assert piece.author == "alice" and piece.id in fleet.state(key)["seen"]
    branch = f"beflow/{key}"
    files = fleet.project.branch_files(branch)
    assert (files["hello.txt"], files["empty.txt"]) == ("hi", "handled")
    trailers = git(fleet.project.directory, "log", "-1", "--format=%(trailers:key=Beflow-Feedback,valueonly)", branch)
    assert trailers.strip() == piece.id
    watch.send_signal(signal.SIGTERM)
    events = read_events(watch)
    assert next(e for e in events if e["event"] == "feedback" and e["issue"] == key)["pieces"] == 1
    # The watch kept looking (every half second, through the round and after it) but told the workflow once.
    tracker = open_tracker(load_project(fleet.project.config_path)).identity

    async def signals(client: Client) -> int:
        histories = await executions(client, workflow_id(tracker, key))
        return sum(e.HasField("workflow_execution_signaled_event_attributes") for h in histories for e in h.events)

    assert ask(fleet.address, signals) == 1
    # Done by hand: the dispatcher ends the workflow that waited for feedback, as completed.
    fleet.project.tracker.set_status(key, Status.DONE, note="merged by hand")
    once = fleet.beflow("watch", "--json")
    eventually(lambda: fleet.status(key) == "COMPLETED", "the workflow in review ended", alive=once)
    once.send_signal(signal.SIGTERM)
    once.wait(60)
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)


def test_with_an_encryption_key_the_service_stores_only_sealed_payloads(fleet: Fleet, temporal_database: Path) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    engine = {**fleet.project.config["engine"], "encryption_key_env": "BEFLOW_FLEET_KEY"}
    fleet.project.configure(engine=engine)
    issue = fleet.project.new_issue("write sealed.txt x", title="Sealed")
    worker = fleet.worker("w1", env={"BEFLOW_FLEET_KEY": key})
    dispatcher = fleet.beflow("watch", "--once", env={"BEFLOW_FLEET_KEY": key})
    assert dispatcher.wait(60) == 0, dispatcher.communicate()

    async def continued(client: Client) -> bool:  # (the run's result recorded: raw history, nothing to open)
        return len(await executions(client, fleet.workflow(issue))) >= 2

    eventually(lambda: ask(fleet.address, continued), "the sealed run's workflow continued in review", alive=worker)
    (record,) = fleet.project.records(issue)
    assert record.outcome == "succeeded"
    # The run's id is in the run's result and the next execution's input: sealed, the service never saw it.
    database = stored(temporal_database)
    assert fleet.workflow(issue).encode() in database  # (the workflow is there: its id is the service's own)
    in_the_clear = [name for name, value in (("run id", record.id), ("key", key)) if value.encode() in database]
    assert in_the_clear == []
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)


def test_a_worker_at_start_sweeps_the_worktree_a_killed_run_left_and_keeps_one_with_work(
    fleet: Fleet, tmp_path: Path
) -> None:
    mark, busy = tmp_path / "started", tmp_path / "busy"
    clean = fleet.project.new_issue(f"run touch {mark}", "sleep 120", title="Clean")
    worker = fleet.worker("w1", lanes=2)
    assert fleet.beflow("watch", "--once").wait(60) == 0
    eventually(mark.exists, "the first run's agent at work", alive=worker)
    dirty = fleet.project.new_issue(f"run echo draft > work.txt && touch {busy}", "sleep 120", title="Dirty")
    assert fleet.beflow("watch", "--once").wait(60) == 0
    eventually(busy.exists, "the second run's agent at work", alive=worker)
    worker.kill()  # SIGKILL: both worktrees stay behind
    worker.wait()
    left = {key: fleet.project.records(key)[0].worktree for key in (clean, dirty)}
    assert all(path and Path(path).is_dir() for path in left.values())

    async def ended(client: Client) -> None:  # (their runs will not be taken up: the issues' work is over)
        for key in (clean, dirty):
            await client.get_workflow_handle(fleet.workflow(key)).terminate("not needed any more")

    ask(fleet.address, ended)
    again = fleet.worker("w2")
    again.send_signal(signal.SIGTERM)
    again.wait(60)
    swept = {e["issue"]: e["reason"] for e in read_events(again) if e["event"] == "swept"}
    assert swept[clean] == f"removed {left[clean]}, left by an earlier run" and not Path(left[clean]).exists()
    assert swept[dirty].startswith(f"kept {left[dirty]}") and (Path(left[dirty]) / "work.txt").read_text() == "draft\n"


def test_an_agents_question_waits_on_the_fleet_and_a_trusted_answer_resumes_its_session_as_the_same_attempt(
    fleet: Fleet, temporal_database: Path
) -> None:
    import json

    fleet.project.configure(mcp={"self": True}, watch={**fleet.project.config["watch"], "max_attempts": 1})
    ask = {"question": "Red or blue-9f3e?", "choices": ["red", "blue"]}
    key = fleet.project.new_issue("write first.txt before the question", f"mcp-call beflow issue_ask {json.dumps(ask)}")
    worker = fleet.worker("w1")
    watch = fleet.beflow("watch", "--json")
    eventually(lambda: fleet.project.issue(key).status == Status.BLOCKED, "the agent's question", alive=watch)
    # While the question waits no workflow holds the issue (nothing runs); the answer alone starts one.
    eventually(lambda: fleet.status(key) == "COMPLETED", "the asking run's workflow ended", alive=watch)

    fleet.project.tracker.comment(key, "teal-7c41\n\nacp-test: write answer.txt blue", author="ada")
    eventually(lambda: fleet.in_review(key), "the answered session resumed to its end", alive=watch)
    resumed, asked = fleet.project.records(key)
    assert asked.outcome == "asked" and resumed.outcome == "succeeded"
    assert resumed.answer is not None and resumed.answer.run == asked.id and resumed.answer.author == "ada"
    assert resumed.attempt == asked.attempt == 1  # no attempt spent (max_attempts 1)
    assert resumed.resumed_session == asked.session is not None
    assert fleet.project.branch_files(f"beflow/{key}")["answer.txt"] == "blue"

    watch.send_signal(signal.SIGTERM)
    events = read_events(watch)
    assert [e["attempt"] for e in events if e["event"] == "dispatched" and e["issue"] == key] == [1, 1]
    # The workflow knows that an answer is due, never the question's nor the answer's words.
    held = stored(temporal_database)
    assert b"blue-9f3e" not in held and b"teal-7c41" not in held
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)


def test_best_of_n_runs_its_candidates_in_a_workers_lanes_and_a_killed_worker_has_it_judged_once_on_another(
    fleet: Fleet, tmp_path: Path
) -> None:
    mark = tmp_path / "first-run"
    # Candidate 1 waits on the first worker until it is killed, then writes the work the judge's check passes;
    # candidate 2's fails it.
    fleet.project.configure(
        prompt=(
            "{% if candidate == 1 %}"
            f"acp-test: run test -e {mark} && exit 0; echo $$ > {mark}; sleep 120\n"
            "acp-test: write app.txt ok\\n\n"
            "{% else %}acp-test: write app.txt broken\\n\n{% endif %}"
        ),
        attempts={"judge": {"checks": ["grep -qx ok app.txt"]}},
    )
    key = fleet.project.tracker.create(title="Make app ok", labels=["attempts:2"]).key
    first = fleet.worker("w1", lanes=2)
    assert fleet.beflow("watch", "--once").wait(60) == 0
    eventually(mark.exists, "candidate 1's agent at work on the first worker", alive=first)
    # The other lane of the worker: candidate 2 ran to its end while candidate 1 waited.
    eventually(
        lambda: any(r.candidate == 2 and r.outcome == "succeeded" for r in fleet.project.records(key)),
        "candidate 2 done beside candidate 1",
        alive=first,
    )
    second = fleet.worker("w2", lanes=2)
    first.kill()  # SIGKILL: its candidates and its judged run die with it
    first.wait()
    eventually(lambda: fleet.in_review(key), "the best of 2 judged on the other worker", alive=second)
    assert fleet.state(key)["worker"] == "w2"
    records = fleet.project.records(key)
    judged = [r for r in records if r.candidate == 0]
    # The killed worker's judged run, closed; the one on w2 judged its own two candidates and chose the passing one.
    assert sorted(r.outcome for r in judged) == ["cancelled", "succeeded"]
    (done,) = [r for r in judged if r.outcome == "succeeded"]
    assert [(row.candidate, row.chosen) for row in done.candidates] == [(1, True), (2, False)]
    assert {r.id for r in records if r.candidate} >= {row.run_id for row in done.candidates}
    assert fleet.project.branch_files(f"beflow/{key}")["app.txt"] == "ok\n"
    assert fleet.project.issue(key).status == Status.REVIEW
    second.send_signal(signal.SIGTERM)
    second.wait(60)
