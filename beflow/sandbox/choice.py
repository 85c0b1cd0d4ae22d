"""Whether unattended runs are sandboxed (``sandbox.enabled``): ``true`` and ``false`` say it; ``"auto"`` (the
default) asks the machine, once per process, whether bwrap starts a sandbox here (:func:`machine`).

The answer is the machine's, never a run's: a run whose sandbox cannot start on a machine where bwrap works fails
(as with ``true``), so that nothing an agent leaves in its worktree can talk a later run out of its sandbox.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from beflow.config import Config
from beflow.errors import BeflowError, Interrupted
from beflow.sandbox import bwrap, policy
from beflow.system import proc

#: Seconds the probe may take: bwrap starts in milliseconds; a machine this loaded runs nothing well anyway.
PROBE_TIMEOUT = 30.0

#: What to set instead of ``"auto"``, said wherever auto's answer is.
HOW_TO_CHOOSE = (
    '"sandbox": {"enabled": true} requires the sandbox (a run fails when it cannot start), false runs without it '
    "and without this notice (beflow docs safety)"
)


@dataclass(frozen=True)
class Choice:
    """Whether runs are sandboxed, and why, in a few words (``beflow doctor`` shows it)."""

    sandboxed: bool
    why: str
    #: For ``"auto"`` where the sandbox cannot start: the one-line notice a process gives once.
    notice: str | None = None


_lock = threading.Lock()
_probed: dict[str, tuple[bool, str]] = {}
_noticed: set[str] = set()


def _probe_argv(path: Path) -> list[str]:
    """bwrap as a run starts it (its namespaces and the same kinds of mounts, by :func:`bwrap.argv`), running
    ``true``: what the machine must allow for any run's sandbox to start."""
    mounts = [policy.Mount("ro", Path("/"), Path("/")), policy.Mount("dev", Path("/dev"))]
    mounts += [policy.Mount("proc", Path("/proc")), *(policy.Mount("tmpfs", d) for d in policy.EMPTIED)]
    return bwrap.argv(path, mounts, ["true"], cwd=Path("/"))


def machine() -> tuple[bool, str]:
    """Whether bwrap starts a sandbox on this machine, and what it said when it does not; asked once per process
    (and per bwrap binary: ``BEFLOW_BWRAP`` may name another)."""
    path, why = bwrap.bwrap_path()
    if path is None:
        return False, why
    with _lock:  # a watch's first runs start together: one probe answers them all
        if str(path) in _probed:
            return _probed[str(path)]
        works, said = _ask(path)
        if works is None:  # the machine is short of something for now: not its answer (see _ask)
            return True, ""
        _probed[str(path)] = (works, said)
        return works, said


#: What bwrap says when the machine is short of something for now, not when it forbids the sandbox: the user's
#: quota of namespaces used up (another run's agent may hold them: nested namespaces are allowed), no memory, no
#: process left.
_FOR_NOW = ("No space left on device", "Resource temporarily unavailable", "Cannot allocate memory", "Too many users")


def _ask(path: Path) -> tuple[bool | None, str]:
    """Whether bwrap starts here, and what it said when it does not; None when the probe could not tell (it timed
    out, or bwrap was short of something for now): runs are then sandboxed, and fail with the sandbox's own reason
    while it cannot start, never go unsandboxed because of what another run's agent may have brought about."""
    try:
        result = proc.run_sync(_probe_argv(path), timeout=PROBE_TIMEOUT)
    except Interrupted:
        raise  # Ctrl-C stops the command, and the answer is not kept
    except BeflowError as error:
        return False, error.message
    if result.ok:
        return True, ""
    said = [line.strip() for line in result.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    if result.timed_out or (said and any(words in said[-1] for words in _FOR_NOW)):
        return None, said[-1] if said else result.describe()
    return False, said[-1] if said else f"{path}: {result.describe()}"


def choose(config: Config) -> Choice:
    """Whether this config's runs are sandboxed on this machine, and why."""
    enabled = config.sandbox.enabled
    if enabled is True:
        return Choice(True, "sandbox.enabled is true")
    if enabled is False:
        return Choice(False, "sandbox.enabled is false")
    works, said = machine()
    if works:
        return Choice(True, '"auto", and bwrap starts here')
    notice = f"runs are not sandboxed: the sandbox cannot start on this machine ({said}); {HOW_TO_CHOOSE}"
    return Choice(False, f'"auto", and the sandbox cannot start here: {said}', notice)


def first_notice(choice: Choice) -> str | None:
    """``choice``'s notice the first time a process would give it; None after, and when there is none."""
    if choice.notice is None:
        return None
    with _lock:
        if choice.notice in _noticed:
            return None
        _noticed.add(choice.notice)
    return choice.notice
