"""What the server's browser tests share: the packaged Chromium, and the page drivers run in it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.fixture(scope="session")
def browser_modules() -> Path:
    """tools/browser/node_modules, which scripts/test installs; its absence is a failure, never a skip."""
    configured = os.environ.get("BEFLOW_TEST_BROWSER")
    path = Path(configured) if configured else REPO_ROOT / "tools" / "browser" / "node_modules"
    if not (path / "puppeteer-core").is_dir() or not (path / "@sparticuz" / "chromium").is_dir():
        pytest.fail("the test browser is not installed: run ./scripts/test (it installs it into tools/browser)")
    return path


def drive(modules: Path, script: str, *args: str, timeout: float = 300) -> dict[str, Any]:
    """What page driver ``script`` (in tests/support) saw, run with ``args`` in the Chromium of ``modules``: the JSON
    of its last line, once it is known that the page raised no script error and no dialog."""
    driver = subprocess.run(
        ["node", str(REPO_ROOT / "tests" / "support" / script), str(modules), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    seen: dict[str, Any] = json.loads(driver.stdout.splitlines()[-1])
    assert "error" not in seen, f"{json.dumps(seen)}\n{driver.stderr}"
    assert seen["pageerrors"] == [] and seen["dialogs"] == []
    return seen
