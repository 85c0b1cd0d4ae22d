"""Fixtures shared by every test: an isolated home, temporary git repositories, the CLI, the pinned acpx."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from beflow.cli import main
from tests.support import slow
from tests.support.github import github  # noqa: F401 - the fake GitHub, for the GitHub tracker's tests
from tests.support.gitlab import gitlab  # noqa: F401 - the fake GitLab, for the GitLab tracker's and code host's tests
from tests.support.gitlab_projects import on_gitlab  # noqa: F401 - the test project on the fake GitLab
from tests.support.projects import auto_project, finished_run  # noqa: F401 - fixtures for every test module

REPO_ROOT = Path(__file__).resolve().parent.parent
TEST_AGENT = Path(__file__).resolve().parent / "support" / "acp_agent.py"

#: The pinned Node.js 22 scripts/test installs (acpx 0.19.1 declares node >=22.13): first on PATH for the whole
#: suite, pytest run by hand included, whatever Node.js this machine has.
NODE_BIN = REPO_ROOT / "tools" / "node" / "node_modules" / ".bin"
if (NODE_BIN / "node").exists() and not os.environ.get("PATH", "").startswith(f"{NODE_BIN}{os.pathsep}"):
    os.environ["PATH"] = f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"


def pytest_report_header() -> str:
    found = shutil.which("node")
    return f"node: {found} (./scripts/test installs the pinned Node.js 22 into tools/node)"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that start acpx or a beflow process are marked ``slow`` (``pytest -m "not slow"`` is the fast loop);
    the benchmark rows (``bench``) run only when the mark expression names them (``pytest -m bench``: a step of
    their own in ``./scripts/test``)."""
    slow.mark(items)
    if "bench" not in (config.getoption("markexpr") or ""):
        left_out = [item for item in items if item.get_closest_marker("bench") is not None]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if item.get_closest_marker("bench") is None]


@pytest.fixture(autouse=True)
def _slow_processes_are_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A test not marked slow that starts acpx or beflow fails, saying how to mark it."""
    yield from slow.guard(request.node, monkeypatch)


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """BEFLOW_HOME and HOME in the test's temp directory; touching the real home directory fails."""
    home = tmp_path / "home"
    home.mkdir()
    beflow_home = tmp_path / "beflow-home"
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n[init]\n\tdefaultBranch = main\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("BEFLOW_HOME", str(beflow_home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("BEFLOW_CONFIG", raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")

    def forbidden(*_args: object) -> Path:
        raise AssertionError("tests must not touch the real home directory")

    monkeypatch.setattr(Path, "home", classmethod(forbidden))
    return beflow_home


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd`` and return its stdout (tests only: the product goes through beflow.repository.git)."""
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one commit on ``main``; the test runs inside it."""
    path = tmp_path / "repo"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    (path / "README.md").write_text("# sample\n")
    git(path, "add", "README.md")
    git(path, "commit", "-q", "-m", "initial")
    monkeypatch.chdir(path)
    return path


@dataclass
class Result:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture
def beflow(capsys: pytest.CaptureFixture[str]):
    """Call the ``beflow`` CLI in-process, as a user would type it; returns exit code and output."""

    def invoke(*args: str) -> Result:
        capsys.readouterr()
        try:
            main(list(args))
        except SystemExit as done:
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        else:  # pragma: no cover - main always exits
            code = 0
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return invoke


@pytest.fixture
def beflow_process():
    """Start ``python -m beflow`` as a real process (for signals, locks and crashes)."""
    started: list[subprocess.Popen[str]] = []

    def start(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            [sys.executable, "-m", "beflow", *args],
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture(scope="session")
def acpx_bin() -> Path:
    """The pinned acpx that scripts/test installs; its absence is a failure, never a skip."""
    configured = os.environ.get("BEFLOW_TEST_ACPX")
    candidates = [Path(configured)] if configured else []
    candidates.append(REPO_ROOT / "tools" / "acpx" / "node_modules" / ".bin" / "acpx")
    for candidate in candidates:
        if candidate.exists():
            return candidate
    found = shutil.which("acpx")
    if found:
        return Path(found)
    pytest.fail("the pinned acpx is not installed: run ./scripts/test (it installs it into tools/acpx)")


@pytest.fixture
def test_agent_command() -> str:
    """The raw ACP agent command (acpx --agent) of the test agent the suite ships."""
    return f"{sys.executable} {TEST_AGENT}"


@pytest.fixture
def codex_is_the_test_agent(test_agent_command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """acpx's own config (``$HOME/.acpx/config.json``) maps the registry agents ``codex`` (the default) and
    ``claude`` to the test agent: as if they were installed and logged in, never downloaded in a test. Their
    command lines (what one logs in with) are on PATH, doing nothing."""
    bin_dir = tmp_path / "agents-bin"
    bin_dir.mkdir()
    for name in ("codex", "claude"):
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = Path(os.environ["HOME"]) / ".acpx" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    agents = {name: {"command": test_agent_command} for name in ("codex", "claude")}
    config.write_text(json.dumps({"agents": agents}))
    return config


def processes_under(directory: Path) -> list[str]:
    """Live processes (not this one) whose command line names ``directory`` or whose cwd is inside it."""
    root = str(directory)
    found = []
    for process in psutil.process_iter():
        if process.pid == os.getpid():
            continue
        try:
            cmdline = " ".join(process.cmdline())
            cwd = process.cwd()
            zombie = process.status() == psutil.STATUS_ZOMBIE
        except psutil.Error:
            continue
        if not zombie and (root in cmdline or cwd == root or cwd.startswith(root + os.sep)):
            found.append(f"{process.pid}: {cmdline} (in {cwd})")
    return found


@pytest.fixture
def no_leftover_processes(tmp_path: Path) -> Iterator[None]:
    """Fails the test if a process it started outlives it: one working in, or naming, the test's own tmp_path
    (its repository, worktrees and BEFLOW_HOME), so other tests' and sessions' processes never count."""
    yield
    deadline = time.monotonic() + 5  # a process that is already stopping may take a moment to be reaped
    while (leftovers := processes_under(tmp_path)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not leftovers, f"processes left behind: {leftovers}"
