"""A real pseudo-terminal for tests of what a person at a terminal sees and types (``beflow --attend``/``--open``).

:func:`start` runs ``python -m beflow ...`` as the session leader of a new pseudo-terminal, which is its
controlling terminal and its stdin, stdout and stderr, as in a terminal window: Ctrl-C typed there is SIGINT to
the foreground process group, and closing the terminal (the master side) hangs it up (SIGHUP).
"""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

#: ANSI escape sequences (colours, cursor moves) are dropped from what the tests read.
ANSI = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")


@dataclass
class Terminal:
    """The master side of a pseudo-terminal running one beflow process."""

    pid: int
    fd: int
    output: bytes = b""
    status: int | None = field(default=None)

    @property
    def text(self) -> str:
        """Everything shown so far, without escape sequences, with ``\\r\\n`` as ``\\n``."""
        return ANSI.sub(b"", self.output).replace(b"\r\n", b"\n").decode("utf-8", errors="replace")

    def _read(self, timeout: float) -> bool:
        """Read what is available within ``timeout``; False once the terminal has nothing more to give."""
        if self.fd < 0:
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return True
        try:
            data = os.read(self.fd, 65536)
        except OSError:  # EIO: every process has closed its side
            return False
        if not data:
            return False
        self.output += data
        return True

    def expect(self, pattern: str, timeout: float = 30.0) -> re.Match[str]:
        """Wait until the screen shows ``pattern`` (a regular expression)."""
        deadline = time.monotonic() + timeout
        while True:
            match = re.search(pattern, self.text)
            if match:
                return match
            if time.monotonic() > deadline or not self._read(min(0.2, max(0.0, deadline - time.monotonic()))):
                if match := re.search(pattern, self.text):
                    return match
                raise AssertionError(f"{pattern!r} did not appear; the terminal shows:\n{self.text}")

    def type(self, keys: str | bytes) -> None:
        """Type ``keys`` (``"y\\r"`` answers a prompt; ``"\\x03"`` is Ctrl-C)."""
        os.write(self.fd, keys.encode() if isinstance(keys, str) else keys)

    def wait(self, timeout: float = 60.0) -> int:
        """Read until beflow exits; its exit code (128 + n when a signal ended it)."""
        deadline = time.monotonic() + timeout
        while self.status is None:
            self._read(0.1)
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.status = os.waitstatus_to_exitcode(status)
                self.status = 128 - self.status if self.status < 0 else self.status
                while self._read(0.05):
                    pass
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                raise AssertionError(f"beflow did not exit within {timeout:g} s; the terminal shows:\n{self.text}")
        return self.status

    def hang_up(self) -> None:
        """Close the terminal, as closing its window does: the session gets SIGHUP."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
        self.hang_up()


def start(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Terminal:
    """Start ``python -m beflow *args`` in ``cwd`` on a new pseudo-terminal (80x24, TERM=xterm)."""
    environment = {**os.environ, "TERM": "xterm", **(env or {})}
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec at once, nothing of pytest may run here
        try:
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "beflow", *args], environment)
        finally:
            os._exit(127)
    return Terminal(pid=pid, fd=fd)
