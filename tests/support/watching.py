"""``beflow watch`` as real processes, whatever the tracker: one read as its ``--json`` events come, and several
machines — separate homes, separate clones of one origin — watching the same issues."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.projects import UNSANDBOXED, config_file, git


class Watcher:
    """``beflow watch --json`` as a real process, its events read as they come."""

    def __init__(self, config: Path, cwd: Path, env: dict[str, str] | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.process = subprocess.Popen(
            [sys.executable, "-m", "beflow", "--config", str(config), "watch", "--json"],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def wait_for(self, match: Callable[[dict[str, Any]], bool], what: str, timeout: float = 90) -> dict[str, Any]:
        """The first event ``match`` accepts; fails if the watch stops or none comes in time."""
        deadline = time.monotonic() + timeout
        while True:
            found = next((e for e in self.events if match(e)), None)
            if found is not None:
                return found
            assert self.process.poll() is None, f"the watch stopped: {self.events[-5:]}"
            assert time.monotonic() < deadline, f"no event: {what}: {self.events[-5:]}"
            time.sleep(0.1)

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of ``kind`` so far (``dispatched``, ``finished``, ...)."""
        return [e for e in list(self.events) if e.get("event") == kind]

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


def machine_clone(
    tmp_path: Path, origin: str | Path, name: str, acpx: Path, agent: str, tracker: dict[str, Any], **config: Any
) -> Path:
    """Another machine's checkout: a clone of ``origin`` in ``tmp_path / name``, its config for the test agent
    through the pinned acpx with ``tracker`` and any other ``config`` keys."""
    path = tmp_path / name
    git(tmp_path, "clone", "-q", str(origin), str(path))
    settings = {"agent": {"command": agent}, "acpx": [str(acpx)], "timeout": 120, "sandbox": UNSANDBOXED,
                "tracker": tracker, **config}  # fmt: skip
    config_file(path).write_text(json.dumps(settings))
    return path


def start_watch(path: Path, home: Path, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``beflow watch --json`` in the checkout at ``path`` with its own ``BEFLOW_HOME``, its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "beflow", "--config", str(config_file(path)), "watch", "--json"],
            cwd=path,
            env={**os.environ, "BEFLOW_HOME": str(home), **env},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
