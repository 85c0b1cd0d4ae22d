"""``beflow doctor``'s sandbox line: which applies here and why (``sandbox.enabled``; ``"auto"``: whether bwrap starts
on this machine); when runs are sandboxed, the sandbox starts, the agent (the test agent, through the pinned acpx)
opens a session inside, and the allowed host is reached through the proxy; each failure names what is missing."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.config import load_project
from beflow.doctor import check_sandbox, run_checks
from tests.support.projects import config_file

pytestmark = pytest.mark.slow  # the doctor starts the agent through acpx, in the sandbox


@pytest.fixture
def listening() -> Iterator[int]:
    """A local TCP server that accepts (and drops) connections: a host the proxy can reach."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = server.accept()
            except OSError:
                return
            client.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


def configure(repo: Path, acpx_bin: Path, agent: str, **sandbox: object) -> None:
    config = {"agent": {"command": agent}, "acpx": [str(acpx_bin)], "sandbox": {"enabled": True, **sandbox}}
    config_file(repo).write_text(json.dumps(config))


def failing_bwrap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bwrap that cannot start a sandbox, as on a kernel that allows no user namespace."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("BEFLOW_BWRAP", str(fake))


def test_the_doctor_starts_the_agent_in_the_sandbox_and_reaches_its_host(
    repo: Path, acpx_bin: Path, test_agent_command: str, listening: int
) -> None:
    configure(repo, acpx_bin, test_agent_command, hosts=[f"127.0.0.1:{listening}"])
    check = check_sandbox(load_project(config_file(repo)))
    assert check.ok, check
    assert "starts" in check.detail
    assert "opened a session inside" in check.detail
    assert f"127.0.0.1:{listening} reached through the proxy" in check.detail


def test_an_agent_that_is_not_logged_in_is_not_blamed_on_the_sandbox(
    repo: Path, acpx_bin: Path, test_agent_command: str, listening: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent check already says the agent is not logged in: the sandbox line says what it checked of the
    sandbox itself, and that the agent was not started in it because of that, never "did not start inside"."""
    monkeypatch.setenv("ACP_TEST_AUTH", "required")  # the test agent's "not logged in"
    configure(repo, acpx_bin, test_agent_command, hosts=[f"127.0.0.1:{listening}"])
    checks = {check.name: check for check in run_checks(config_file(repo))}

    assert not checks["agent"].ok, checks["agent"]
    sandbox = checks["sandbox"]
    assert sandbox.ok and sandbox.warning, sandbox
    assert "did not start inside the sandbox" not in sandbox.detail
    assert sandbox.detail == (
        f"on (sandbox.enabled is true): starts; {load_project(config_file(repo)).config.agent_label()} not started "
        f"inside (it did not start outside it: see above); 127.0.0.1:{listening} reached through the proxy"
    )
    assert sandbox.fix and "agent" in sandbox.fix


def test_a_host_the_proxy_cannot_reach_is_named(repo: Path, acpx_bin: Path, test_agent_command: str) -> None:
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens there
    configure(repo, acpx_bin, test_agent_command, hosts=[f"127.0.0.1:{port}"])
    check = check_sandbox(load_project(config_file(repo)))
    assert not check.ok
    assert f"127.0.0.1:{port} not reached through the proxy: HTTP/1.1 502" in check.detail
    assert check.fix and f"127.0.0.1:{port}" in check.fix


def test_a_sandbox_that_cannot_start_is_named_with_a_fix(
    repo: Path, acpx_bin: Path, test_agent_command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_bwrap(tmp_path, monkeypatch)
    configure(repo, acpx_bin, test_agent_command)
    check = check_sandbox(load_project(config_file(repo)))
    assert not check.ok
    assert check.detail == (
        "on (sandbox.enabled is true): the sandbox could not start: bwrap: setting up uid map: Operation not permitted"
    )
    assert check.fix and "user namespaces" in check.fix


def test_by_default_the_doctor_checks_the_sandbox_where_bwrap_starts(
    repo: Path, acpx_bin: Path, test_agent_command: str, listening: int
) -> None:
    """No word of ``enabled`` in the config: ``"auto"``, and on this machine bwrap starts, so runs are sandboxed
    and the doctor checks the agent in the sandbox as with ``true``."""
    sandbox = {"hosts": [f"127.0.0.1:{listening}"]}
    config = {"agent": {"command": test_agent_command}, "acpx": [str(acpx_bin)], "sandbox": sandbox}
    config_file(repo).write_text(json.dumps(config))
    check = check_sandbox(load_project(config_file(repo)))
    assert check.ok and not check.warning, check
    assert check.detail.startswith('on ("auto", and bwrap starts here): starts')
    assert "opened a session inside" in check.detail


def test_by_default_where_the_sandbox_cannot_start_the_doctor_warns_that_runs_go_unsandboxed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    failing_bwrap(tmp_path, monkeypatch)
    config_file(repo).write_text("{}")
    check = check_sandbox(load_project(config_file(repo)))
    assert check.ok and check.warning
    assert check.detail == (
        'off ("auto", and the sandbox cannot start here: bwrap: setting up uid map: Operation not permitted): '
        "runs are not sandboxed"
    )
    assert check.fix and '"sandbox": {"enabled": true} requires the sandbox' in check.fix


def test_a_sandbox_turned_off_is_said_so(repo: Path) -> None:
    config_file(repo).write_text('{"sandbox": {"enabled": false}}')
    check = check_sandbox(load_project(config_file(repo)))
    assert check.ok and not check.warning
    assert check.detail == "off (sandbox.enabled is false): an agent runs as you, unconfined (beflow docs safety)"
