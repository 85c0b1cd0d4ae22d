"""What the server's browser tests share: the packaged Chromium."""

from __future__ import annotations

import os
from pathlib import Path

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
