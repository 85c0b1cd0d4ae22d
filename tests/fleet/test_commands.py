"""The fleet from the command line, as a user sets it up: ``beflow temporal dev``, two ``beflow worker`` and
``beflow watch``, on the local tracker."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from temporalio.client import Client

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.fleet.shapes import workflow_id
from beflow.trackers import Status
from tests.fleet.conftest import HEARTBEAT, ask, free_port
from tests.support.projects import SECRET_ENV, SECRET_HEADER, AutoProject
from tests.support.waiting import eventually


def test_dev_server_two_workers_and_watch_turn_ready_issues_into_branches_once(
    auto_project: AutoProject, beflow_process: Any, tmp_path: Path
) -> None:
    database = tmp_path / "temporal.db"
    port = free_port()
    server = beflow_process("temporal", "dev", "--port", str(port), "--db", str(database), cwd=auto_project.directory)
    assert server.stdout is not None
    address = server.stdout.readline().strip()  # printed once it takes connections
    assert address == f"127.0.0.1:{port}", address + server.communicate()[1]
    auto_project.configure(
        engine={"kind": "temporal", "address": address, "task_queue": "e2e", "heartbeat": HEARTBEAT},
        watch={"interval": 0.5},
    )
    keys = [auto_project.new_issue("mcp", f"write issue-{n}.txt from the fleet", title=f"n{n}") for n in range(3)]

    def start(*args: str) -> Any:
        return beflow_process("--config", str(auto_project.config_path), *args, cwd=auto_project.directory)

    workers = [start("worker", "--id", name, "--lanes", "2") for name in ("one", "two")]
    for worker in workers:
        assert worker.stderr is not None
        assert "lane(s)" in worker.stderr.readline()
    watch = start("watch")
    for key in keys:
        eventually(
            lambda key=key: auto_project.issue(key).status == Status.REVIEW,
            f"issue {key} in review",
            timeout=120,
            alive=watch,
        )
    for n, key in enumerate(keys):
        assert [r.outcome for r in auto_project.records(key)] == ["succeeded"]
        assert auto_project.branch_files(f"beflow/{key}")[f"issue-{n}.txt"] == "from the fleet"
    # Three issues on two workers of two lanes each: both took work, and each says so in its workflow's state.
    tracker = open_tracker(load_project(auto_project.config_path)).identity

    async def workers_of(client: Client) -> set[str]:
        return {(await client.get_workflow_handle(workflow_id(tracker, key)).query("state"))["worker"] for key in keys}

    assert ask(address, workers_of) == {"one", "two"}
    # Each is a service: SIGTERM stops it, and it says so — no error.
    for process in (watch, *workers, server):
        process.send_signal(signal.SIGTERM)
        _, said = process.communicate(timeout=60)
        assert process.returncode == 130 and said.strip().splitlines()[-1] == "beflow: stopped", said
        assert "error" not in said, said
    # What the service stored (inputs, results, heartbeats) holds no secret of the runs' MCP servers.
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("temporal.db*"))
    assert b"beflow/local:" in stored  # the workflows are there
    assert SECRET_ENV.encode() not in stored and SECRET_HEADER.encode() not in stored
    assert b"issue-0.txt" not in stored  # nor the prompt


def test_the_dev_server_restarted_mid_run_loses_nothing(
    auto_project: AutoProject, beflow_process: Any, tmp_path: Path
) -> None:
    """The service stops while a run is in progress and comes back on the same database: the workflow goes on,
    the issue ends in review with its work on its branch."""
    import subprocess

    from beflow.fleet import devserver

    port, database = free_port(), tmp_path / "temporal.db"
    command = [*devserver.argv(port, database), "--http-port", str(free_port()), "--metrics-port", str(free_port())]

    def serve() -> subprocess.Popen[bytes]:
        server = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        eventually(lambda: devserver.accepting(port), "the dev server accepting connections")
        return server

    server = serve()
    auto_project.configure(
        engine={"kind": "temporal", "address": f"127.0.0.1:{port}", "task_queue": "restart", "heartbeat": HEARTBEAT}
    )
    mark = tmp_path / "at-work"
    key = auto_project.new_issue(f"run touch {mark}", "sleep 4", "write kept.txt after the restart", title="Restart")

    def start(*args: str) -> Any:
        return beflow_process("--config", str(auto_project.config_path), *args, cwd=auto_project.directory)

    worker = start("worker", "--id", "w1")
    assert "lane(s)" in worker.stderr.readline()
    assert start("watch", "--once").wait(60) == 0
    eventually(mark.exists, "the agent at work", alive=worker)
    server.terminate()
    server.wait(30)
    server = serve()  # the same port and database
    tracker = open_tracker(load_project(auto_project.config_path)).identity

    async def phase(client: Client) -> str:
        try:
            return str((await client.get_workflow_handle(workflow_id(tracker, key)).query("state"))["phase"])
        except Exception:  # (the service not answering yet)
            return ""

    eventually(lambda: ask(f"127.0.0.1:{port}", phase) == "in review", "the run done", timeout=120, alive=worker)
    assert auto_project.issue(key).status == Status.REVIEW
    assert auto_project.branch_files(f"beflow/{key}")["kept.txt"] == "after the restart"
    assert "succeeded" in [r.outcome for r in auto_project.records(key)]
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)
    server.terminate()
    server.wait(30)
