"""Process identity: is the process that wrote a journal entry or a run record still the one running?

A pid alone names a process only while it lives: after it exits, the pid goes to whatever starts next (and every
pid starts afresh after a reboot). A pid with its creation time names one process for good, on Linux and macOS
alike (psutil reads both). A process of an earlier boot cannot have the same creation time as one of this boot, so
the boot needs no separate check.
"""

from __future__ import annotations

import psutil

#: Seconds two readings of one process's creation time may differ by. psutil gives it in seconds since the epoch,
#: computed from the boot time, which moves when the clock is stepped; a pid taken again within a second of the
#: first process's start (after that one exited and the pid space wrapped) is not a case worth the risk of
#: mistaking a live process for a dead one.
SAME_START = 1.0

#: Creation stamps below this are from beflow versions that recorded clock ticks since boot, not seconds since the
#: epoch: such a stamp cannot be compared, and the pid alone decides.
_EPOCH_STAMPS = 1e9


def start_time(pid: int) -> float | None:
    """When ``pid`` started, in seconds since the epoch; ``None`` when there is no such process."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def is_running(pid: int, started: float | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` (:func:`start_time`) still runs: not a zombie, not
    a later process that got its pid. With ``started`` unknown, whether some live process has the pid."""
    try:
        process = psutil.Process(pid)
        if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            return False
        created = process.create_time()
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # cannot tell: taking a live run for dead (and undoing its file) is the worse mistake
    if started is None or started < _EPOCH_STAMPS:
        return True
    return abs(created - started) < SAME_START
