"""A sandboxed run's own troubles (docs/safety.md#the-sandbox), beflow as a real process with the pinned acpx and the
test agent: a request the proxy cannot make sense of, a beflow killed outright that leaves its scratch directory
behind, an acpx installed with npm's usual layout under a directory the sandbox hides, and a program that does not
start because the sandbox hides what it needs."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from beflow.sandbox import scratch
from tests.conftest import TEST_AGENT
from tests.faults.conftest import beflow_run
from tests.faults.test_sandbox import _alive, wait_for
from tests.faults.test_sandbox_confined import scratch_of
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow

#: A request through the proxy the bridge names: the status line it got, then a CONNECT that works still.
ASK = """
import os, socket, sys, urllib.parse
proxy = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
for target in sys.argv[1:]:
    with socket.create_connection((proxy.hostname, proxy.port), timeout=30) as s:
        s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode("latin-1"))
        print(target, "->", s.recv(200).split(b"\\r\\n")[0].decode("latin-1"))
"""


def test_a_connect_to_a_port_out_of_range_is_answered_400_and_the_run_goes_on(auto_project: AutoProject) -> None:
    """``CONNECT localhost:99999999999999999999`` ended ``--auto`` (the proxy's connect raised OverflowError)."""
    auto_project.configure(sandbox={"enabled": True, "hosts": ["localhost"]})
    targets = ["localhost:99999999999999999999", "localhost:0", "localhost:65536", "localhost:\u00b2"]
    command = f"{sys.executable} -c {json.dumps(ASK)} " + " ".join(f"'{t}'" for t in targets)
    key = auto_project.new_issue(f"run {command} > asked.txt 2>&1", "say done", title="odd ports")
    done = beflow_run(auto_project, "--auto", key)
    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    asked = auto_project.branch_files(f"beflow/{key}")["asked.txt"]
    assert asked.splitlines() == [f"{target} -> HTTP/1.1 400 Bad Request" for target in targets], asked


@pytest.fixture
def own_temp_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A temporary directory of the test's own, as the system's for it and the beflow processes it starts: any beflow
    command sweeps the scratch directories of dead owners it finds in the system's, another test's beside this one
    included. (Short: a scratch directory in it holds a socket, whose path is capped at 107 bytes.)"""
    directory = Path(tempfile.mkdtemp(prefix="beflow-test-"))
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    yield directory
    scratch.remove(directory)


def test_the_scratch_directory_of_a_killed_sandboxed_run_is_swept_by_the_next_command_never_a_live_one(
    auto_project: AutoProject, own_temp_dir: Path, no_leftover_processes: None
) -> None:
    auto_project.configure(sandbox={"enabled": True})
    key = auto_project.new_issue("run touch started; sleep 60", title="long")
    started = auto_project.worktrees_dir / key / "started"
    dead = Path(
        subprocess.run(
            [sys.executable, "-c", "from beflow.sandbox import scratch; print(scratch.make())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    live = scratch.make()  # this process's: alive
    assert dead.parent == live.parent == own_temp_dir
    beflow = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", key],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(started.exists, 60, "the agent never started")
        (left,) = scratch_of(beflow.pid)
        assert (left / "proxy.sock").exists()
        below = psutil.Process(beflow.pid).children(recursive=True)
        beflow.send_signal(signal.SIGKILL)
        beflow.wait(timeout=30)
        wait_for(lambda: not any(_alive(p) for p in below), 10, "the sandbox outlived beflow")
        assert left.is_dir()  # nobody removed it
        assert beflow_run(auto_project, "issues", "list").code == 0
        assert not left.exists() and not dead.exists()
        assert live.is_dir() and (live / scratch.NOTE).is_file()
    finally:
        if beflow.poll() is None:
            beflow.kill()
            beflow.wait()
        shutil.rmtree(live, ignore_errors=True)
        shutil.rmtree(dead, ignore_errors=True)


def npm_install(acpx_bin: Path, under: Path) -> Path:
    """acpx as ``npm install acpx`` lays it out, under ``under``: its dependencies beside it in ``node_modules``
    (a copy of the pinned install, less the tests' own OpenAPI description); its ``.bin/acpx``."""
    tree = acpx_bin.resolve().parents[2]  # …/node_modules/acpx/dist/cli.js → …/node_modules
    assert tree.name == "node_modules", tree
    copied = under / "node_modules"
    shutil.copytree(tree, copied, symlinks=True, ignore=lambda where, names: ["@octokit"] if where == str(tree) else [])
    return copied / ".bin" / "acpx"


def test_acpx_installed_by_npm_under_a_hidden_directory_starts_in_the_sandbox(
    auto_project: AutoProject, acpx_bin: Path
) -> None:
    """``npm install acpx`` in a directory of the home: acpx's package alone was shown, not ``commander`` and the
    rest beside it, and the run failed with acpx's exit before its turn."""
    home = Path(os.environ["HOME"])
    acpx = npm_install(acpx_bin, home / "tools" / "acpx")
    auto_project.configure(acpx=[str(acpx)], sandbox={"enabled": True})
    key = auto_project.new_issue("write hello.txt hi", "say done", title="npm layout")
    done = beflow_run(auto_project, "--auto", key)
    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.sandboxed, record.stop_reason
    assert auto_project.branch_files(f"beflow/{key}")["hello.txt"] == "hi"


def test_a_program_that_does_not_start_because_the_sandbox_hides_its_files_says_which_path_and_how_to_add_it(
    auto_project: AutoProject,
) -> None:
    """An agent kept in the home (``python3 ~/agents/acp_agent.py``): the run's reason names the directory the
    sandbox hid and ``sandbox.read``; adding it there is the fix."""
    home = Path(os.environ["HOME"])
    (home / "agents").mkdir()
    shutil.copy(TEST_AGENT, home / "agents" / "acp_agent.py")
    auto_project.configure(agent={"command": f"{sys.executable} {home}/agents/acp_agent.py"}, sandbox={"enabled": True})
    key = auto_project.new_issue("write hello.txt hi", "say done", title="hidden agent")
    done = beflow_run(auto_project, "--auto", key)
    assert done.code != 0
    (record,) = auto_project.records(key)
    assert record.outcome == "failed" and record.stop_reason is not None
    assert "the sandbox hides ~/agents: add it to sandbox.read" in record.stop_reason, record.stop_reason
    assert "the sandbox hides ~/agents" in done.stderr + done.stdout

    auto_project.configure(sandbox={"enabled": True, "read": ["~/agents"]})
    again = beflow_run(auto_project, "--auto", key)
    assert again.code == 0, again.stderr + again.stdout
    assert auto_project.records(key)[0].outcome == "succeeded"
