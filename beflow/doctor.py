"""``beflow doctor``: is everything beflow needs here and sound? One check a line, each with a fix."""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from beflow import ACPX_VERSION, proc
from beflow.config import Config, Project, load_project
from beflow.errors import BeflowError

#: acpx probes may download the pinned release through npx on first use.
ACPX_PROBE_TIMEOUT = 300.0


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    warning: bool = False  # ok, but worth a look


def _version(argv: list[str], timeout: float = 30.0) -> tuple[str | None, str]:
    """The first version-looking token a ``--version`` probe prints, and the raw output."""
    try:
        result = proc.run_sync([*argv, "--version"], timeout=timeout)
    except BeflowError as error:
        return None, error.message
    text = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
    if not result.ok:
        return None, f"{' '.join(argv)} --version: {result.describe()}: {text[-300:]}"
    match = re.search(r"\d+\.\d+(\.\d+)?", text)
    return (match.group(0) if match else text), text


def check_git() -> Check:
    version, raw = _version(["git"])
    if version is None:
        return Check("git", False, raw, "Install git 2.20 or newer (worktrees need it).")
    return Check("git", True, version)


def check_node() -> Check:
    version, raw = _version(["node"])
    if version is None:
        return Check("node", False, raw, "Install Node.js 20 or newer (acpx runs on it).")
    major = int(version.split(".")[0])
    if major < 20:
        return Check("node", False, f"{version} is too old", "Install Node.js 20 or newer.")
    return Check("node", True, version)


def check_acpx(config: Config) -> Check:
    argv = config.acpx_argv()
    if argv[0] == "npx" and shutil.which("npx") is None:
        return Check(
            "acpx",
            False,
            "not on PATH, and npx (to fetch the pinned acpx) is missing too",
            f"Install Node.js with npm, or `npm install -g acpx@{ACPX_VERSION}`, or set `acpx` in config.json.",
        )
    version, raw = _version(argv, timeout=ACPX_PROBE_TIMEOUT)
    shown = " ".join(argv)
    if version is None:
        return Check(
            "acpx",
            False,
            raw,
            f"Check that `{shown} --version` works; set `acpx` in config.json to the argv that starts acpx.",
        )
    if version != ACPX_VERSION:
        return Check(
            "acpx",
            True,
            f"{version} via `{shown}` (beflow is tested with {ACPX_VERSION})",
            f'Set "acpx": ["npx", "-y", "acpx@{ACPX_VERSION}"] in config.json to use the tested release.',
            warning=True,
        )
    return Check("acpx", True, f"{version} via `{shown}`")


def check_config(explicit: Path | None) -> tuple[Check, Project | None]:
    try:
        project = load_project(explicit)
    except BeflowError as error:
        return Check(
            "config", False, error.message, error.fix or "Fix the file; `beflow init` writes an example."
        ), None
    if project.config_path is None:
        return (
            Check(
                "config",
                True,
                f"no config.json: defaults for {project.directory}",
                "Run `beflow init`.",
                True,
            ),
            project,
        )
    return Check("config", True, str(project.config_path)), project


#: Checks that need a loaded project (the tracker, the MCP cascade); later features add theirs here.
PROJECT_CHECKS: list[Callable[[Project], Check]] = []


def run_checks(explicit: Path | None = None) -> list[Check]:
    """Every check, in a fixed order; a broken config still lets the tool checks run."""
    config_check, project = check_config(explicit)
    checks = [check_git(), check_node(), check_acpx(project.config if project else Config()), config_check]
    if project is not None:
        checks.extend(check(project) for check in PROJECT_CHECKS)
    return checks
