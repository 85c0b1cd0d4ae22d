"""What another process of the user can read of a secret through ``/proc``, as an attacker would look: the environment
and command line of every process it may read, and — of the processes named — every pipe they hold, opened again
through ``/proc/<pid>/fd/N`` (its bytes copied with ``tee(2)``, never taken from the process that reads them), and
every socket they hold (which must not open). The standard library alone: an agent runs it too
(``python3 proc_scan.py OUT HEX_SECRET [--after FILE]``).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import sys
import time
from collections.abc import Iterable

#: ``<linux/fcntl.h>``: a pipe's capacity; ``<fcntl.h>``: tee's flag not to wait.
F_GETPIPE_SZ, F_SETPIPE_SZ = 1032, 1031
SPLICE_F_NONBLOCK = 2


def pids() -> list[int]:
    return sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit())


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return None


def cmdline(pid: int) -> str:
    return (_read(f"/proc/{pid}/cmdline") or b"").replace(b"\0", b" ").decode(errors="replace").strip()


def parent(pid: int) -> int:
    stat = _read(f"/proc/{pid}/stat") or b""
    try:
        return int(stat.rsplit(b")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return 0


def below(root: int) -> list[int]:
    """``root`` and every live process under it."""
    found = []
    for pid in pids():
        p = pid
        while p > 1 and p != root:
            p = parent(p)
        if p == root:
            found.append(pid)
    return found


def _peek(path: str) -> bytes:
    """What the pipe at ``path`` holds now, copied (``tee``) into a pipe of ours: its reader still gets it all."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.tee.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint]
    libc.tee.restype = ctypes.c_ssize_t
    source = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    ours_read, ours_write = os.pipe()
    try:
        size = fcntl.fcntl(source, F_GETPIPE_SZ)
        with contextlib.suppress(OSError):
            fcntl.fcntl(ours_write, F_SETPIPE_SZ, size)
        copied = libc.tee(source, ours_write, size, SPLICE_F_NONBLOCK)
        return os.read(ours_read, copied) if copied > 0 else b""
    finally:
        for fd in (source, ours_read, ours_write):
            os.close(fd)


def scan(secret: bytes, descriptors_of: Iterable[int]) -> dict[str, list[str]]:
    """Where ``secret`` is found (``found``), and what was looked at: the processes whose environment was read
    (``environ``, as ``pid command line``), the pipes copied and the sockets tried (``pipes``, ``sockets``), and the
    sockets that opened (``reopened``: any is a way in)."""
    seen: dict[str, list[str]] = {"found": [], "environ": [], "pipes": [], "sockets": [], "reopened": []}
    me = os.getpid()
    for pid in pids():
        if pid == me:
            continue
        line = cmdline(pid)
        environ = _read(f"/proc/{pid}/environ")
        if environ is not None:
            seen["environ"].append(f"{pid} {line}")
            if secret in environ:
                seen["found"].append(f"{pid} environ: {line}")
        if secret in (_read(f"/proc/{pid}/cmdline") or b""):
            seen["found"].append(f"{pid} cmdline: {line}")
    for pid in descriptors_of:
        if pid == me:
            continue
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(path)
            except OSError:
                continue
            if target.startswith("pipe:"):
                try:
                    held = _peek(path)
                except OSError:
                    continue
                seen["pipes"].append(f"{pid} {fd} {target}")
                if secret in held:
                    seen["found"].append(f"{pid} fd {fd} ({target}): {cmdline(pid)}")
            elif target.startswith("socket:"):
                seen["sockets"].append(f"{pid} {fd} {target}")
                try:
                    opened = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
                except OSError:
                    continue
                os.close(opened)
                seen["reopened"].append(f"{pid} fd {fd} ({target}): {cmdline(pid)}")
    return seen


def _beflow_above(pid: int) -> int:
    """The ``python -m beflow`` process above ``pid`` (0: none)."""
    while pid > 1:
        pid = parent(pid)
        if " -m beflow " in f" {cmdline(pid)} ":
            return pid
    return 0


def main(args: list[str]) -> None:
    """As an agent runs it: waits for the file ``--after`` names (at most 120 s), then scans every process it can
    read, and the descriptors of every process under the beflow that runs it; writes what it saw to ``OUT``."""
    out, secret = args[0], bytes.fromhex(args[1])
    after = args[args.index("--after") + 1] if "--after" in args else None
    deadline = time.monotonic() + 120
    while after is not None and not os.path.exists(after) and time.monotonic() < deadline:
        time.sleep(0.05)
    beflow = _beflow_above(os.getpid())
    seen = scan(secret, below(beflow) if beflow else [])
    seen["beflow"] = [str(beflow)]
    with open(out + ".part", "w") as file:
        json.dump(seen, file)
    os.rename(out + ".part", out)


if __name__ == "__main__":
    main(sys.argv[1:])
