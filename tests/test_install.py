"""beflow installed as a tool, as the README says (pipx and uv tool make a venv of their own; pip --user a user
site): the wheel carries the command, the docs and the templates, and works from anywhere.

Offline and cheap: one wheel is built from a copy of the source (no build isolation: the test extras bring
setuptools), and the dependencies come from the test environment's site-packages (no package index)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from beflow import __version__
from tests.conftest import REPO_ROOT, git

pytestmark = pytest.mark.slow


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    assert result.returncode == 0, f"{argv}: {result.stdout}\n{result.stderr}"
    return result  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the current source, built in a copy (a build writes build/ and *.egg-info beside the code)."""
    source = tmp_path_factory.mktemp("source") / "beflow"
    skip = shutil.ignore_patterns(".git", ".venv", "tools", "build", "dist", "*.egg-info", "__pycache__", ".*cache")
    shutil.copytree(REPO_ROOT, source, symlinks=True, ignore=skip)
    dist = tmp_path_factory.mktemp("dist")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--wheel-dir", str(dist), str(source)])
    (built,) = dist.glob("beflow-*.whl")
    return built


def dependencies_path() -> str:
    """The test environment's site-packages, where beflow's dependencies are (as a plain path: its .pth files,
    the editable install of beflow among them, are not processed)."""
    return sysconfig.get_paths()["purelib"]


def a_user_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "someones-app"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "config.json").write_text('{"port": 8080}\n')
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "app")
    return repo


def check_the_installed_command(command: Path, env: dict[str, str], tmp_path: Path) -> None:
    repo = a_user_repository(tmp_path)
    version = run([str(command), "--version"], cwd=tmp_path, env=env)
    assert version.stdout.strip() == f"beflow {__version__}"
    where = run([str(command.parent / "python"), "-c", "import beflow; print(beflow.__file__)"], cwd=tmp_path, env=env)
    assert not where.stdout.strip().startswith(str(REPO_ROOT)), "the source tree, not the installed copy, was used"
    init = run([str(command), "init"], cwd=repo, env=env)  # the shipped template
    assert "Wrote " in init.stdout and (repo / ".beflow" / "config.json").is_file()
    docs = run([str(command), "docs", "config", "--path"], cwd=repo, env=env)  # the shipped documentation
    assert Path(docs.stdout.strip()).is_file() and not docs.stdout.startswith(str(REPO_ROOT))


def test_installed_in_a_tool_environment_of_its_own_like_pipx_or_uv_tool(wheel: Path, tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    run([sys.executable, "-m", "venv", "--without-pip", str(tool)])
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--python", str(tool / "bin" / "python")]
    run([*pip, "install", "--no-deps", "--no-index", str(wheel)])
    purelib = run([str(tool / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    (Path(purelib.stdout.strip()) / "dependencies.pth").write_text(dependencies_path() + "\n")
    env = {**os.environ, "PATH": f"{tool / 'bin'}{os.pathsep}/usr/bin{os.pathsep}/bin"}

    check_the_installed_command(tool / "bin" / "beflow", env, tmp_path)


def test_installed_for_the_user_with_pip_user(wheel: Path, tmp_path: Path) -> None:
    base = Path(getattr(sys, "_base_executable", sys.executable))  # a venv's python refuses --user
    user = tmp_path / "user"
    env = {**os.environ, "PYTHONUSERBASE": str(user), "PYTHONPATH": dependencies_path(), "PIP_USER": "1"}
    env.pop("VIRTUAL_ENV", None)
    pip = [str(base), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "--no-deps", "--no-index", str(wheel)], env=env)
    env["PATH"] = f"{user / 'bin'}{os.pathsep}{os.environ['PATH']}"
    # The user's python is the base interpreter: `bin/python` of the check is that one.
    (user / "bin" / "python").symlink_to(base)

    check_the_installed_command(user / "bin" / "beflow", env, tmp_path)
