"""What the tests of the repository room share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def worktrees_dir(tmp_path: Path) -> Path:
    """Where beflow's worktrees of the test's repository go."""
    return tmp_path / "worktrees"
