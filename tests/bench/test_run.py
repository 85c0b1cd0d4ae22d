"""A smoke run of every benchmark row of ``bench/run.py`` at tiny sizes: each row runs end to end against the real
acpx and the test agent and reports a figure. Correctness only — speed is measured by running the benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ROWS = (
    "help",
    "startup",
    "run",
    "usage",
    "watch",
    "latency",
    "webhook",
    "issues",
    "issues100k",
    "idle",
    "drain",
    "mcp",
    "rss",
    "http",
    "feedback",
    "round",
    "gitlabidle",
    "gitlabround",
    "linearidle",
    "linearagent",
    "sandbox",
    "store",
    "fleet",
    "fleet2x2",
    "fleetfailover",
    "attempts",
)


@pytest.mark.bench
@pytest.mark.parametrize("row", ROWS)
def test_every_benchmark_row_runs(row: str, tmp_path: Path) -> None:
    result = tmp_path / "result.json"
    env = {**os.environ, "BEFLOW_HOME": str(tmp_path / "home")}
    env.pop("BEFLOW_CONFIG", None)
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--rows", row, "--json", str(result)],
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(result.read_text())
    assert data["rows"], done.stdout
    for measured in data["rows"]:
        assert measured["measured"] == measured["measured"] and measured["measured"] is not None  # not NaN
        assert measured["goal"] and measured["name"] in done.stdout
    assert {"cpu", "cores", "load"} <= set(data["machine"])


def test_the_benchmark_lists_every_row() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import run
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert tuple(run.ROWS) == ROWS
    assert all(callable(getattr(run.Bench, row)) for row in ROWS)
