"""What a hostile agent tries from inside beflow's sandbox to get out of it (tests/faults/test_sandbox_confined.py),
one line ``name: what happened`` each, with the standard library alone (no program a machine may lack):

    python3 sandbox_probe.py BEFLOW_PID KEY_ID KEY_NAME PORT

``BEFLOW_PID`` is beflow's pid outside, ``KEY_ID``/``KEY_NAME`` a key in the session keyring beflow was started
with, ``PORT`` a TCP port listening on the machine's loopback. A call that succeeds says ``DONE`` (or what it read);
one that fails says its errno's name.
"""

from __future__ import annotations

import ctypes
import errno
import os
import socket
import sys
from pathlib import Path

LIBC = ctypes.CDLL(None, use_errno=True)
#: keyctl's number by machine (x86_64's table; the generic one of arm64 and riscv64).
KEYCTL = {"x86_64": 250, "aarch64": 219, "riscv64": 219}[os.uname().machine]
KEYCTL_SEARCH, KEYCTL_READ = 10, 11
KEY_SPEC_SESSION_KEYRING, KEY_SPEC_USER_KEYRING = -3, -4
MS_REMOUNT, MS_BIND, MNT_DETACH, CLONE_NEWNET = 0x20, 0x1000, 2, 0x40000000


def failed() -> str:
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def call(result: int) -> str:
    return "DONE" if result >= 0 else failed()


def read(path: str) -> str:
    try:
        with open(path, "rb") as handle:
            return repr(handle.read(4000))
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))


def key(ring: int, name: str) -> str:
    found = LIBC.syscall(KEYCTL, KEYCTL_SEARCH, ring, b"user", name.encode(), 0)
    return call(found) if found < 0 else f"FOUND {found}"


def key_payload(key_id: int) -> str:
    buffer = ctypes.create_string_buffer(4096)
    size = LIBC.syscall(KEYCTL, KEYCTL_READ, key_id, buffer, 4096)
    return call(size) if size < 0 else repr(buffer.raw[:size])


def setns(path: str) -> str:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))
    return call(LIBC.setns(fd, CLONE_NEWNET))


def connect(port: int) -> str:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return "DONE"
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))


def status(field: str) -> str:
    with open("/proc/self/status") as handle:
        return next(line.split(":", 1)[1].strip() for line in handle if line.startswith(field + ":"))


def main(beflow: int, key_id: int, key_name: str, port: int) -> None:
    home = os.environ["HOME"]
    lines = {
        "caps": status("CapEff"),
        "bounding": status("CapBnd"),
        "no_new_privs": status("NoNewPrivs"),
        "umount_home": call(LIBC.umount2(home.encode(), MNT_DETACH)),
        "umount_tmp": call(LIBC.umount2(b"/tmp", MNT_DETACH)),
        "umount_proc": call(LIBC.umount2(b"/proc", MNT_DETACH)),
        "remount_root": call(LIBC.mount(None, b"/", None, MS_REMOUNT | MS_BIND, None)),
        "remount_root_plain": call(LIBC.mount(None, b"/", None, MS_REMOUNT, None)),
        "write_root": _write("/beflow-escaped"),
        "ssh_key": read(f"{home}/.ssh/id_rsa"),
        "beflow_seen": str(os.path.exists(f"/proc/{beflow}")),
        "beflow_environ": read(f"/proc/{beflow}/environ"),
        "setns_beflow": setns(f"/proc/{beflow}/ns/net"),
        "direct_connect": connect(port),
        "session_key": key(KEY_SPEC_SESSION_KEYRING, key_name),
        "user_key": key(KEY_SPEC_USER_KEYRING, key_name),
        "key_by_id": key_payload(key_id),
        "proc_keys": read("/proc/keys"),
        "tty_nr": Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[4],  # (field 7: its terminal)
        "dev_tty": _open("/dev/tty"),  # a terminal to push input into (TIOCSTI): there is none
    }
    for name, said in lines.items():
        print(f"{name}: {said}")


def _open(path: str) -> str:
    try:
        os.close(os.open(path, os.O_RDWR | os.O_NONBLOCK | os.O_NOCTTY))
        return "DONE"
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))


def _write(path: str) -> str:
    try:
        with open(path, "w") as handle:
            handle.write("escaped")
        return "DONE"
    except OSError as error:
        return errno.errorcode.get(error.errno or 0, str(error))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
