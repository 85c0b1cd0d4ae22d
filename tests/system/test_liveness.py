"""Process identity: a pid with its start time names one process for good."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from beflow.system import liveness
from tests.support.waiting import eventually


def finished_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_the_start_time_is_the_process_creation_time() -> None:
    assert liveness.start_time(os.getpid()) == psutil.Process().create_time()
    assert liveness.start_time(finished_pid()) is None


@pytest.mark.parametrize(
    ("started", "running"),
    [
        (0.0, True),  # this very process, as it started
        (-60.0, False),  # its pid, but a process that started a minute earlier: not the same one
        (-3600 * 24 * 365, False),  # a process of an earlier boot
        (None, True),  # no start known: the pid decides
    ],
)
def test_this_process_is_running_only_with_its_own_start(started: float | None, running: bool) -> None:
    mine = liveness.start_time(os.getpid())
    assert mine is not None
    stamp = None if started is None else mine + started
    assert liveness.is_running(os.getpid(), stamp) is running


def test_a_stamp_of_clock_ticks_from_an_earlier_version_leaves_the_pid_to_decide() -> None:
    assert liveness.is_running(os.getpid(), 4189012)
    assert not liveness.is_running(finished_pid(), 4189012)


def test_a_finished_process_and_a_zombie_are_not_running() -> None:
    assert not liveness.is_running(finished_pid(), None)
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exits, and stays a zombie until it is waited for
    try:
        started = liveness.start_time(zombie.pid)
        eventually(lambda: psutil.Process(zombie.pid).status() == psutil.STATUS_ZOMBIE, "the child became a zombie")
        assert not liveness.is_running(zombie.pid, started)
    finally:
        zombie.wait()
