"""The supervised modes' core (beflow/modes.py): beflow's exit code after ``--open``."""

from __future__ import annotations

import pytest

from beflow import modes
from beflow.records import RunRecord, now


@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (-2, 130), (-15, 143), (None, 1)])
def test_beflow_exits_with_the_clients_code(code: int | None, status: int) -> None:
    record = RunRecord(id="r", issue="1", mode="open", agent="claude", started_at=now(), exit_code=code)
    assert modes.exit_status(record) == status
