"""What a child started, found and stopped: its process group, its tree, the processes tagged for it, and the
watchdog that stops its group when beflow itself dies.

:mod:`beflow.system.proc` starts every child in a group of its own; what it starts stays there (a hook's tools, acpx's
agent), so that signalling the group reaches all of it. A zombie is never counted as left behind: it cannot run, and
lingers until a parent (possibly an init that never reaps) collects it.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import anyio
import anyio.abc
import psutil

from beflow.system import interrupts

#: Seconds to wait for a SIGKILLed group to be gone (a process in uninterruptible sleep can take a while).
KILL_WAIT = 5.0

#: The environment variable that marks every process started for one :func:`beflow.system.proc.run` with
#: ``stop_escaped``: processes inherit it, even those that leave the group and the session (``setsid``, a double
#: fork), so they can be found.
TAG = "BEFLOW_PROCESS_TAG"


def signal_group(pgid: int, signum: int) -> bool:
    """Send ``signum`` to a process group; False when the group is gone."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def live(process: psutil.Process) -> bool:
    """Still running: not gone, not a zombie, and not a later process that got the pid (psutil checks that)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group."""
    members = []
    for process in psutil.process_iter():
        try:
            if os.getpgid(process.pid) == pgid and live(process):
                members.append(process.pid)
        except OSError:  # gone meanwhile
            continue
    return members


def group_alive(pgid: int) -> bool:
    """Whether a live process is left in the group. A group with no process at all is told by the kernel at once;
    only one that still has some is looked through (it may hold zombies alone)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return bool(group_members(pgid))


def kill(process: psutil.Process) -> bool:
    """SIGKILL ``process``; whether it was there to kill."""
    try:
        process.kill()
    except psutil.Error:
        return False
    return True


def pidfd(pid: int) -> int | None:
    """A descriptor that turns readable when the child ``pid`` exits (Linux 5.3 and later; None elsewhere)."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def wait_exit(process: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait until ``process`` has exited (and reap it), at most ``timeout`` seconds; whether it has. Woken by the
    exit itself where a pidfd can be had (``Popen.wait`` looks every few milliseconds)."""
    if process.poll() is not None:
        return True
    fd = pidfd(process.pid)
    if fd is None:
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        waiting = select.poll()
        waiting.register(fd, select.POLLIN)
        waiting.poll(max(0, int(timeout * 1000)))
    finally:
        os.close(fd)
    return process.poll() is not None


def stop_group_blocking(pgid: int, grace: float, leader: subprocess.Popen[bytes] | None = None) -> None:
    """Stop a process group from synchronous code, as :func:`beflow.system.proc.stop_group` does: SIGTERM to the
    leader and half the grace period for it, SIGTERM to the group, SIGKILL when the grace period is over, then a
    short wait until the group is gone. ``leader`` is reaped on the way. A group already gone costs one system
    call."""
    deadline = time.monotonic() + grace
    if leader is not None and leader.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            leader.send_signal(signal.SIGTERM)
        wait_exit(leader, 0.0 if interrupts.forced() else grace / 2)
    if not signal_group(pgid, signal.SIGTERM):
        return
    while time.monotonic() < deadline and not interrupts.forced():
        if leader is not None:
            leader.poll()
        if not group_alive(pgid):
            return
        time.sleep(0.02)
    signal_group(pgid, signal.SIGKILL)
    # SIGKILL takes effect asynchronously: nothing of the group may still run (write files, hold a lock) when the
    # caller goes on.
    gone_by = time.monotonic() + KILL_WAIT
    while group_alive(pgid) and time.monotonic() < gone_by:
        if leader is not None:
            leader.poll()
        time.sleep(0.01)


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every live process below it; empty when ``pid`` is gone."""
    try:
        root = psutil.Process(pid)
        return [root, *(child for child in root.children(recursive=True) if live(child))]
    except psutil.Error:
        return []


def signal_all(processes: list[psutil.Process], signum: int) -> None:
    for process in processes:
        # psutil refuses to signal a pid that a later process took meanwhile: only the tree's own get it.
        with contextlib.suppress(psutil.Error):
            process.send_signal(signum)


async def stop_tree(leader: anyio.abc.Process, grace: float) -> None:
    """Stop a child that shares beflow's process group, and everything it started: the tree is taken before the
    child goes (its orphans would be lost to init), then SIGTERM, the grace period, SIGKILL."""
    with anyio.CancelScope(shield=True):
        processes = tree(leader.pid)
        signal_all(processes, signal.SIGTERM)
        deadline = anyio.current_time() + grace
        while anyio.current_time() < deadline and not interrupts.forced():
            if leader.returncode is None:
                with anyio.move_on_after(0.05):
                    await leader.wait()
            if not any(live(process) for process in processes):
                return
            await anyio.sleep(0.02)
        signal_all(processes, signal.SIGKILL)
        # As in stop_group: SIGKILL takes effect asynchronously; nothing of the tree may run on when we return.
        with anyio.move_on_after(KILL_WAIT):
            while any(live(process) for process in processes):
                if leader.returncode is None:
                    with anyio.move_on_after(0.01):
                        await leader.wait()
                await anyio.sleep(0.01)


def tagged(tag: str) -> list[psutil.Process]:
    """The live processes whose environment carries ``TAG=tag`` (only beflow's own user's can be read)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            if process.environ().get(TAG) == tag and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


async def stop_tagged(tag: str, grace: float) -> None:
    """Stop every process tagged ``tag``: SIGTERM, the grace period, SIGKILL; until none is left."""
    with anyio.CancelScope(shield=True):
        deadline = anyio.current_time() + grace
        signum = signal.SIGTERM
        while left := await anyio.to_thread.run_sync(tagged, tag):
            for process in left:
                with contextlib.suppress(psutil.Error):
                    process.send_signal(signum)
            if signum == signal.SIGKILL and anyio.current_time() > deadline + KILL_WAIT:
                return  # in uninterruptible sleep: nothing more can be done
            await anyio.sleep(0.05)
            if anyio.current_time() >= deadline or interrupts.forced():
                signum = signal.SIGKILL


#: The watchdog of a child's process group (:func:`watchdog`): it reads a pipe only beflow holds open, and when
#: that ends without beflow having stopped the watchdog first — beflow died, even by SIGKILL — the group gets
#: SIGTERM, then SIGKILL. The parent-death signal reaches the child alone; this reaches what it started too (acpx's
#: agent, the agent's tools), however they treat SIGTERM.
_WATCHDOG = 'read -r _; kill -s TERM -- "-$1" 2>/dev/null || exit 0; sleep 2; kill -s KILL -- "-$1" 2>/dev/null'


@dataclass
class Watchdog:
    process: subprocess.Popen[bytes]
    pipe: int

    def dismiss(self) -> None:
        """The group was stopped by beflow (or is gone): the watchdog goes without doing anything."""
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            self.process.wait(timeout=KILL_WAIT)
        with contextlib.suppress(OSError):
            os.close(self.pipe)


def watchdog(pgid: int) -> Watchdog | None:
    """A watchdog for process group ``pgid`` (Linux, where it is the only way; elsewhere None). It lives in a
    session of its own, so that the terminal's Ctrl-C and hang-up reach beflow, not it."""
    if not sys.platform.startswith("linux"):
        return None
    read_end, write_end = os.pipe()  # (not inherited: only this watchdog holds the read end, only beflow the other)
    try:
        process = subprocess.Popen(
            ["sh", "-c", _WATCHDOG, "sh", str(pgid)],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd="/",
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", os.defpath)},  # nothing of beflow's: any process of the user reads it
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return Watchdog(process, write_end)
