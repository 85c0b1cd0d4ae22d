"""Which tests are slow: those that start acpx or a ``beflow`` process (``pytest -m "not slow"`` leaves them out).

Tests are marked at collection, from the fixtures they use and where they live; a test that starts such a process
without having been marked fails in the fast loop with a message saying how to mark it, so the fast loop never
quietly grows slow and the marks never go stale.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

#: Fixtures that start acpx or a beflow process, or hand the test what it needs to (the pinned acpx).
SLOW_FIXTURES = frozenset({"acpx_bin", "beflow_process", "auto_project", "finished_run", "temporal_server"})

#: Folders whose every test runs beflow as a real process (the benchmarks run it many times).
SLOW_FOLDERS = ("faults", "bench")


def is_slow(item: pytest.Item) -> bool:
    if item.get_closest_marker("slow") is not None:
        return True
    if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    parts = Path(str(item.fspath)).parts
    return any(folder in parts for folder in SLOW_FOLDERS)


def mark(items: list[pytest.Item]) -> None:
    for item in items:
        if is_slow(item) and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.slow)


def starts_a_slow_process(args: Any) -> str | None:
    """What, in a command line about to be started, makes it slow: the pinned acpx, or beflow (``python -m beflow``
    or its script). Only the program counts, and ``-m beflow`` after it: ``git push beflow`` starts no beflow."""
    argv: Sequence[str] = [args] if isinstance(args, str | bytes | os.PathLike) else list(args)
    words = [os.fsdecode(a) for a in argv]
    if len(words) == 1:
        words = words[0].split()
    if not words:
        return None
    program = os.path.basename(words[0])
    # The pinned acpx (a stand-in script named acpx in a test's temp directory starts in milliseconds).
    if (program == "acpx" and "node_modules" in words[0]) or program == "npx":
        return "acpx"
    if program == "beflow":
        return program
    if program.startswith("python") and words[1:3] == ["-m", "beflow"]:
        return "python -m beflow"
    return None


class _Guarded(subprocess.Popen):  # type: ignore[type-arg]
    test: ClassVar[str] = ""
    offences: ClassVar[list[str]] = []

    def __init__(self, args: Any, *rest: Any, **options: Any) -> None:
        found = starts_a_slow_process(args)
        if found is not None:
            message = (
                f"{self.test} starts {found} but is not marked slow: mark it `@pytest.mark.slow` (or use a fixture of "
                "tests/support/slow.py's SLOW_FIXTURES), so that `pytest -m 'not slow'` stays fast"
            )
            self.offences.append(message)  # said again after the test, in case beflow's own handler caught this
            pytest.fail(message, pytrace=False)
        super().__init__(args, *rest, **options)


def guard(item: pytest.Item, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Around a test not marked slow: starting acpx or beflow fails it (in this process; children are not watched)."""
    if item.get_closest_marker("slow") is not None:
        yield
        return
    _Guarded.test, _Guarded.offences = item.nodeid, []
    monkeypatch.setattr(subprocess, "Popen", _Guarded)
    yield
    if _Guarded.offences:
        pytest.fail(_Guarded.offences[0], pytrace=False)
