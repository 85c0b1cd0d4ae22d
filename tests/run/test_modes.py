"""The supervised modes' core (beflow/run/modes.py): beflow's exit code after ``--open``."""

from __future__ import annotations

import anyio
import pytest

from beflow.config import load_project
from beflow.records.record import RunRecord, now
from beflow.run import modes
from beflow.system import proc
from beflow.trackers import Status
from tests.support.projects import AutoProject


@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (-2, 130), (-15, 143), (None, 1)])
def test_beflow_exits_with_the_clients_code(code: int | None, status: int) -> None:
    record = RunRecord(id="r", issue="1", mode="open", agent="claude", started_at=now(), exit_code=code)
    assert modes.exit_status(record) == status


# --- a failure of beflow itself -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["attend", "open"])
def test_an_unexpected_failure_is_recorded_and_the_issue_goes_back_where_it_was(
    auto_project: AutoProject, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key = auto_project.new_issue("say hi")
    auto_project.configure(open={"default": ["true", "{prompt}"]})

    async def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug in beflow")

    monkeypatch.setattr(proc, "run", broken)
    project = load_project(auto_project.config_path)
    start = modes.attend if mode == "attend" else modes.open_native

    with pytest.raises(Exception) as raised:  # the bug itself propagates (in a task group's group, maybe)
        anyio.run(lambda: start(project, auto_project.tracker, key))
    error = raised.value
    while isinstance(error, ExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    assert isinstance(error, RuntimeError) and str(error) == "a bug in beflow"

    record = auto_project.only_record()
    assert record.outcome == "failed" and "RuntimeError: a bug in beflow" in (record.stop_reason or "")
    assert auto_project.issue(key).status == Status.READY
