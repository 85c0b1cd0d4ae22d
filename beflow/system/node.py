"""Node.js on this machine: its version, and the pinned Node beflow has npx fetch beside acpx when it is older than
acpx needs (acpx 0.19.1 declares ``node >=22.13``; registry agents such as ``claude`` refuse Node 20 at start-up)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from beflow import ACPX_VERSION, NODE_VERSION
from beflow.errors import BeflowError, Interrupted
from beflow.system import proc

#: The oldest Node.js acpx runs on (its package.json's ``engines``).
MINIMUM = (22, 13)
MINIMUM_TEXT = "22.13"

_seen: dict[str, tuple[int, int, int] | None] = {}


def version() -> tuple[int, int, int] | None:
    """The version of ``node`` on PATH (asked once per binary), or ``None`` when there is none or it does not say."""
    found = shutil.which("node")
    if found is None:
        return None
    key = str(Path(found).resolve())
    if key not in _seen:
        _seen[key] = _ask(found)
    return _seen[key]


def _ask(binary: str) -> tuple[int, int, int] | None:
    try:
        result = proc.run_sync([binary, "--version"], timeout=30.0)
    except Interrupted:
        raise
    except BeflowError:
        return None
    match = re.search(r"(\d+)\.(\d+)\.(\d+)", result.stdout.decode("utf-8", "replace"))
    return (int(match[1]), int(match[2]), int(match[3])) if match and result.ok else None


def too_old(found: tuple[int, int, int] | None) -> bool:
    """Whether ``found`` is a Node.js older than acpx runs on (no Node at all is another problem: not this one)."""
    return found is not None and found[:2] < MINIMUM


def shown(found: tuple[int, int, int]) -> str:
    return "v" + ".".join(map(str, found))


def npx_acpx() -> list[str]:
    """The pinned acpx through npx, with the pinned Node.js first on its PATH: npx puts the ``node`` package's
    binary beside ``acpx`` in the bin directory it runs from, so acpx (``#!/usr/bin/env node``) and the agents it
    starts run on the pinned Node.js, whatever this machine has."""
    return ["npx", "-y", "-p", f"node@{NODE_VERSION}", "-p", f"acpx@{ACPX_VERSION}", "acpx"]


def how_to_get(where: str | None = None) -> str:
    """How to get a Node.js new enough: install one, or (``where``: the config file) let npx fetch the pinned one
    for acpx."""
    install = f"install Node.js 22 ({MINIMUM_TEXT} or later): `nvm install 22`, `fnm install 22`, your package manager"
    if where is None:
        return f"{install} or https://nodejs.org"
    argv = ", ".join(f'"{part}"' for part in npx_acpx())
    return (
        f"{install} or https://nodejs.org; or have npx fetch Node.js {NODE_VERSION} beside acpx for beflow's runs: "
        f'set "acpx": [{argv}] in {where}'
    )
