"""The Node.js beflow's runs and its suite run on: 22.13 or later (acpx 0.19.1's ``engines``), the pinned 22 where
this machine's is older."""

from __future__ import annotations

import json
from pathlib import Path

from beflow import ACPX_VERSION, NODE_VERSION
from beflow.system import node
from tests.conftest import REPO_ROOT


def test_the_pinned_node_is_the_one_scripts_test_installs_and_acpx_accepts() -> None:
    package = json.loads((REPO_ROOT / "tools" / "node" / "package.json").read_text())
    assert package["dependencies"] == {"node": NODE_VERSION}
    script = (REPO_ROOT / "scripts" / "test").read_text()
    install = script.index("npm install --prefix tools/node")
    assert (
        install < script.index('export PATH="$PWD/tools/node/node_modules/.bin:$PATH"') < script.index(".venv/bin/mypy")
    )
    assert "/tools/node/node_modules" in (REPO_ROOT / ".gitignore").read_text().splitlines()
    acpx = json.loads((REPO_ROOT / "tools" / "acpx" / "node_modules" / "acpx" / "package.json").read_text())
    assert acpx["version"] == ACPX_VERSION and acpx["engines"]["node"] == f">={node.MINIMUM_TEXT}.0"
    assert tuple(int(part) for part in NODE_VERSION.split("."))[:2] >= node.MINIMUM


def test_the_suite_runs_on_node_22() -> None:
    """scripts/test puts tools/node first on PATH (tests/conftest.py too): acpx and the agents run on Node 22."""
    found = node.version()
    assert found is not None and not node.too_old(found), f"node {found}: run ./scripts/test (it installs Node 22)"


def test_an_older_node_gets_the_pinned_one_from_npx_beside_acpx(tmp_path: Path, monkeypatch) -> None:
    from beflow.config import Config

    (tmp_path / "node").write_text("#!/bin/sh\necho v20.20.2\n")
    (tmp_path / "node").chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))

    assert node.version() == (20, 20, 2) and node.too_old(node.version())
    assert Config().acpx_argv() == ["npx", "-y", "-p", f"node@{NODE_VERSION}", "-p", f"acpx@{ACPX_VERSION}", "acpx"]
    assert Config(acpx=["my-acpx"]).acpx_argv() == ["my-acpx"]
