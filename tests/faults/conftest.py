"""The fault-injection suite: every scenario runs beflow as a real process (``python -m beflow``) on a real
repository with the pinned acpx and the test agent, then checks what beflow promises (docs/safety.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support.projects import SECRET_ENV, SECRET_HEADER, AutoProject, git

SECRETS = (SECRET_ENV, SECRET_HEADER)


@dataclass
class Done:
    code: int
    stdout: str
    stderr: str


def beflow_run(project: AutoProject, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Done:
    """``python -m beflow --config <the project's config> ARGS`` in the project, to the end."""
    done = subprocess.run(
        [sys.executable, "-m", "beflow", "--config", str(project.config_path), *args],
        cwd=project.directory,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Done(done.returncode, done.stdout, done.stderr)


def secrets_in_history(directory: Path) -> list[str]:
    """Secret values in any commit of any branch or worktree HEAD (``git log -p --all``)."""
    history = git(directory, "log", "-p", "--all", "--format=commit %H")
    return [secret for secret in SECRETS if secret in history]


def secrets_in_files(*roots: Path) -> list[str]:
    """Files under ``roots`` that hold a secret value."""
    found = []
    for root in roots:
        for path in root.rglob("*") if root.is_dir() else []:
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                found += [f"{path}: {s}" for s in SECRETS if s.encode() in data]
    return found


def unprivileged(argv: list[str]) -> list[str]:
    """``argv`` as an ordinary user's process: as root, without capabilities (no ``CAP_SYS_PTRACE``, which would
    let any process read any other's environment whatever beflow does)."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is needed to run these tests as root"
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--", *argv]
