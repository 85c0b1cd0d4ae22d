"""Start a program in a session keyring of its own that holds one key, as a user's login session's would:

    python3 with_session_key.py NAME PAYLOAD PROGRAM ARGS...

The key (type ``user``) is added to a new anonymous session keyring, which ``PROGRAM`` inherits (beflow, in
tests/faults/test_sandbox_confined.py); its id is in ``PROBE_KEY_ID`` and the program's pid (this process's: it
becomes the program) in ``PROBE_BEFLOW_PID``.
"""

from __future__ import annotations

import ctypes
import os
import sys

#: add_key's and keyctl's numbers by machine (x86_64's table; the generic one of arm64 and riscv64).
ADD_KEY, KEYCTL = {"x86_64": (248, 250), "aarch64": (217, 219), "riscv64": (217, 219)}[os.uname().machine]
KEYCTL_JOIN_SESSION_KEYRING, KEY_SPEC_SESSION_KEYRING = 1, -3


def main(name: str, payload: str, argv: list[str]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None) < 0:
        raise OSError(ctypes.get_errno(), "keyctl(KEYCTL_JOIN_SESSION_KEYRING)")
    data = payload.encode()
    key = libc.syscall(ADD_KEY, b"user", name.encode(), data, len(data), KEY_SPEC_SESSION_KEYRING)
    if key < 0:
        raise OSError(ctypes.get_errno(), "add_key")
    os.environ.update(PROBE_KEY_ID=str(key), PROBE_BEFLOW_PID=str(os.getpid()))
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3:])
