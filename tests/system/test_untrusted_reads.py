"""Files beflow reads that an agent running as the user (without the sandbox) could have replaced — acpx's global
config and queue locks in the home directory, a lock's note and the HTTP server's token under ``BEFLOW_HOME``, the
local tracker's last key, a checkout's ``.acpxrc.json`` — are read as regular files only: a FIFO there (or a link to
one) is refused at once, never waited on (:func:`beflow.system.files.read_regular`, which also refuses a device and caps
what it reads: tests/system/test_files.py)."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from pydantic import BaseModel

from beflow.agent import session
from beflow.config import load_project
from beflow.mcp.acp import shadowed_global_servers
from beflow.paths import beflow_home
from beflow.run import preflight
from beflow.system.locks import NotedLock
from beflow.trackers.local import LocalTracker
from beflow.web import guard

T = TypeVar("T")


def returns(call: Callable[[], T]) -> T:
    """What ``call`` returns, from a thread of its own: one that waits on a FIFO for ever fails the test instead of
    holding it."""
    result: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(call())
        except BaseException as error:  # handed to the test
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "it waited on the FIFO"
    if errors:
        raise errors[0]
    return result[0]


@pytest.fixture(params=["fifo", "link to a fifo"])
def plant(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[Path], None]:
    def planted(path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if request.param == "fifo":
            os.mkfifo(path)
        else:
            fifo = tmp_path / f"fifo-{path.name}"
            os.mkfifo(fifo)
            path.symlink_to(fifo)

    return planted


def test_acpx_global_config_and_queue_locks(tmp_path: Path, plant: Callable[[Path], None]) -> None:
    home = tmp_path / "home"
    plant(home / ".acpx" / "config.json")
    plant(home / ".acpx" / "queues" / "owner.lock")

    assert returns(lambda: shadowed_global_servers({"HOME": str(home)})) is None
    assert returns(lambda: session.queue_owner_pids("session", home)) == []


class Note(BaseModel):
    pid: int


def test_a_locks_note(tmp_path: Path, plant: Callable[[Path], None]) -> None:
    plant(tmp_path / "held.json")
    lock = NotedLock(tmp_path / "held.lock", tmp_path / "held.json", Note)

    assert returns(lock.note) is None


def test_the_http_servers_token(plant: Callable[[Path], None]) -> None:
    plant(beflow_home() / "http-token")

    with pytest.raises(OSError, match="http-token is a"):
        returns(guard.load_token)


def test_the_local_trackers_last_key(repo: Path, plant: Callable[[Path], None]) -> None:
    plant(repo / ".beflow" / "tracker" / "last-key")
    tracker = LocalTracker(repo / ".beflow" / "issues", repo)

    assert returns(lambda: tracker.create(title="first", body="")).key == "1"


def test_a_checkouts_acpxrc_for_agent_names(repo: Path, plant: Callable[[Path], None]) -> None:
    plant(repo / ".acpxrc.json")

    assert returns(lambda: preflight._configured_agents(load_project(cwd=repo))) == set()


def test_a_state_directory_replaced_by_a_link_is_a_clear_error_and_nothing_is_written_through(
    repo: Path, tmp_path: Path, beflow
) -> None:  # type: ignore[no-untyped-def]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (repo / ".beflow").symlink_to(elsewhere)

    result = beflow("issues", "new", "a title")

    assert result.exit_code == 1
    assert f"{repo / '.beflow'} is a symlink, not a directory" in result.stderr  # before: a crash, and its log
    assert "fix: beflow follows no link" in result.stderr
    assert list(elsewhere.iterdir()) == []
