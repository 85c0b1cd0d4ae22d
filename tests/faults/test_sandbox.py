"""A hostile agent in the sandbox (docs/safety.md#the-sandbox): beflow as a real process, the pinned acpx, the test
agent's ``run`` directive, real local HTTP servers. With ``"sandbox": {"enabled": true}`` it cannot read the home,
write the user's checkout or its git directory, reach a host not on the list, see or signal processes outside; it
still works in its worktree, reaches an allowed host through beflow's proxy, and the run publishes normally."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from beflow.agent.acpx_command import MAX_ARGV_PROMPT
from beflow.records.record import RunRecord
from tests.conftest import processes_under
from tests.faults.conftest import beflow_run, unprivileged
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow

HOME_SECRET = "home-secret-61c0f2d9"


class _Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = f"hello from {self.server.server_address[1]}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def servers() -> Iterator[tuple[int, int]]:
    """Two local HTTP servers: the first goes on the allowlist, the second does not."""
    started = [http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hello) for _ in range(2)]
    for server in started:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    yield started[0].server_address[1], started[1].server_address[1]
    for server in started:
        server.shutdown()
        server.server_close()


def fetch(port: int) -> str:
    """A shell line: GET http://127.0.0.1:<port>/ through whatever proxy the environment names; says the result."""
    code = (
        "import urllib.request,sys\n"
        f"try: print('GOT', urllib.request.urlopen('http://127.0.0.1:{port}/', timeout=10).read().decode())\n"
        "except Exception as e: print('NO', e)"
    )
    return f"python3 -c {json.dumps(code)}"


def hostile(checkout: Path, allowed: int, denied: int) -> str:
    """What the agent runs, its findings written to probe.txt in its worktree (which the run commits)."""
    steps = [
        "echo home: $(cat $HOME/secret.txt 2>&1)",
        f"echo checkout: $(echo planted 2>&1 > {checkout}/planted.txt && echo WROTE)",
        f"echo config: $(echo '[core]' 2>&1 >> {checkout}/.git/config && echo WROTE)",
        f"echo hook: $(echo 'exit 0' 2>&1 > {checkout}/.git/hooks/pre-commit && echo WROTE)",
        "echo dotgit: $(echo 'gitdir: /tmp/elsewhere' 2>&1 > .git && echo WROTE)",
        "echo commondir: $(echo /tmp/elsewhere 2>&1 > $(git rev-parse --git-dir)/commondir && echo WROTE)",
        f"echo allowed: $({fetch(allowed)})",
        f"echo denied: $({fetch(denied)}) $({fetch(denied)}) $({fetch(denied)})",
        "echo processes: $(ls /proc | grep -c '^[0-9]')",
        f"echo signal: $(kill -0 {os.getpid()} 2>&1 && echo SIGNALLED)",
        "echo worktree: $(cat README.md 2>&1 | head -c 20)",
    ]
    return "run { " + "; ".join(steps) + "; } > probe.txt 2>&1"


@pytest.mark.parametrize("mode", ["--auto", "watch"])
def test_a_hostile_agent_in_the_sandbox_reaches_only_its_worktree_and_allowed_hosts(
    auto_project: AutoProject, servers: tuple[int, int], mode: str, no_leftover_processes: None
) -> None:
    allowed, denied = servers
    home = Path(os.environ["HOME"])
    (home / "secret.txt").write_text(HOME_SECRET)
    checkout = auto_project.directory
    config_before = (checkout / ".git" / "config").read_bytes()
    auto_project.configure(sandbox={"enabled": True, "hosts": [f"127.0.0.1:{allowed}"]})
    key = auto_project.new_issue(hostile(checkout, allowed, denied), "say done", title="probe")
    args = ["--auto", key] if mode == "--auto" else ["watch", "--once"]
    done = beflow_run(auto_project, *args)
    assert done.code == 0, done.stderr + done.stdout

    record = auto_project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    assert record.sandboxed
    assert record.blocked == {"127.0.0.1": 3}
    probe = auto_project.branch_files(f"beflow/{key}")["probe.txt"]
    found = dict(line.split(": ", 1) for line in probe.strip().splitlines())
    assert HOME_SECRET not in probe
    assert "No such file" in found["home"]
    for what in ("checkout", "config", "hook", "dotgit", "commondir"):
        assert "WROTE" not in found[what] and "Read-only file system" in found[what], probe
    assert not (checkout / "planted.txt").exists()
    assert (checkout / ".git" / "config").read_bytes() == config_before
    assert not (checkout / ".git" / "hooks" / "pre-commit").exists()
    assert found["allowed"] == f"GOT hello from {allowed}"
    assert found["denied"].startswith("NO HTTP Error 403")
    assert int(found["processes"]) < 10  # the sandbox's own few (bwrap's init, acpx, the agent, the shell...)
    assert "SIGNALLED" not in found["signal"] and "No such process" in found["signal"]
    assert found["worktree"].strip()  # its worktree's files are there to read
    # The run's record, its comment and `runs show` say what was refused.
    assert not record.git_restored
    shown = beflow_run(auto_project, "runs", "show", record.id)
    assert "blocked: 3 connections to 127.0.0.1" in shown.stdout
    comments = [comment.text for comment in auto_project.issue(key).comments]
    assert any("sandbox: blocked: 3 connections to 127.0.0.1" in text for text in comments), comments


def test_a_sandbox_that_cannot_start_fails_the_run_with_its_reason_and_no_agent_starts(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    """bwrap unusable (here: a kernel without user namespaces, as bwrap says it): the run fails before the agent,
    with bwrap's own words; it never runs unsandboxed."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    agent_log = tmp_path / "agent.jsonl"
    auto_project.configure(sandbox={"enabled": True})
    key = auto_project.new_issue("write escaped.txt unsandboxed", title="never runs")
    done = beflow_run(auto_project, "--auto", key, env={"BEFLOW_BWRAP": str(fake), "ACP_TEST_RECORD": str(agent_log)})
    assert done.code != 0
    record = auto_project.only_record()
    assert record.outcome == "failed"
    reason = "the sandbox could not start: bwrap: No permissions to create a new namespace"
    assert record.stop_reason is not None and reason in record.stop_reason
    assert reason in done.stderr + done.stdout
    assert not agent_log.exists()  # no agent ever started
    assert record.permanent, record.stop_reason


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_the_sandbox_dies_with_the_run_whatever_its_tools_do(
    auto_project: AutoProject, tmp_path: Path, signum: int, no_leftover_processes: None
) -> None:
    """beflow stopped (SIGTERM: the run is cancelled in order) or killed outright (SIGKILL): bwrap, acpx, the
    agent and a tool that ignores every polite signal are all gone within seconds."""
    auto_project.configure(sandbox={"enabled": True})
    key = auto_project.new_issue("run touch started; trap '' TERM INT HUP; sleep 60 & wait; sleep 60", title="long")
    started = auto_project.worktrees_dir / key / "started"
    beflow = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", key],
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(started.exists, 60, "the agent's tool never started")
        below = psutil.Process(beflow.pid).children(recursive=True)
        names = " ".join(" ".join(p.cmdline()) for p in below)
        assert "bwrap" in names and "acp_agent.py" in names and "sleep 60" in names, names
        beflow.send_signal(signum)
        beflow.wait(timeout=30)
    finally:
        if beflow.poll() is None:
            beflow.kill()
            beflow.wait()
    wait_for(lambda: not any(_alive(p) for p in below), 10, f"left running: {processes_under(tmp_path)}")
    if signum == signal.SIGKILL:
        assert beflow_run(auto_project, "runs", "list").code == 0  # the next command records the run
    assert auto_project.only_record().outcome == "cancelled"


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(what)
        time.sleep(0.05)


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def own_run(field: str) -> str:
    """A shell word: what the agent learns of its run from the injected file, as any agent can (``--run``'s id,
    ``--channel``'s socket)."""
    code = (
        "import json;(s,)=[s for s in json.load(open('.acpxrc.json'))['mcpServers'] if s['name']=='beflow'];"
        f"a=s['args'];print(a[a.index('--{field}')+1])"
    )
    return f"$(python3 -c {json.dumps(code)})"


def against_the_record(checkout: Path) -> str:
    """What the agent runs against its own run's record and channel, its findings in probe.txt (committed)."""
    runs = checkout / ".beflow" / "runs"
    forged = json.dumps({"time": "2026-01-01T00:00:00Z", "text": "forged by the agent"})
    steps = [
        f"d={runs}/{own_run('run')}",
        f"c={own_run('channel')}",
        f"echo progress: $(echo '{forged}' 2>&1 >> $d/progress.jsonl && echo WROTE)",
        "echo run: $(ln -sf /etc/hostname $d/run.json 2>&1 && echo WROTE)",
        "echo stderr: $(echo forged 2>&1 > $d/stderr.log && echo WROTE)",
        "echo transcript: $(mv -f $d/prompt.md $d/transcript.jsonl 2>&1 && echo WROTE)",
        "echo created: $(echo x 2>&1 > $d/hooks.log && echo WROTE)",
        f"echo others: $(cat {runs}/earlier-run/secret.txt 2>&1)",
        "echo socket: $(rm -f $c 2>&1 && echo WROTE)",
        "echo channel: $(touch $(dirname $c)/planted 2>&1 && echo WROTE)",
    ]
    return "run { " + "; ".join(steps) + "; } > probe.txt 2>&1"


def test_the_agent_in_the_sandbox_cannot_touch_its_record_yet_its_own_server_reports_to_it(
    auto_project: AutoProject,
) -> None:
    """``mcp.self`` in the sandbox: the run's record directory is not the agent's to write (its progress file,
    ``run.json``, ``stderr.log``, the transcript), nor are other runs' records there to read, and the channel's
    socket cannot be removed or replaced; still beflow's server started inside reports the agent's progress and
    comment through the channel, and the run's process writes them."""
    checkout = auto_project.directory
    earlier = checkout / ".beflow" / "runs" / "earlier-run"
    earlier.mkdir(parents=True)
    (earlier / "secret.txt").write_text("another-issue's-words")
    auto_project.configure(mcp={"enabled": True, "self": True}, sandbox={"enabled": True})
    directives = [
        against_the_record(checkout),
        "mcp-call beflow run_progress " + json.dumps({"text": "halfway, sandboxed"}),
        "mcp-call beflow issue_comment " + json.dumps({"text": "written from the sandbox"}),
    ]
    # A prompt too long for an argument (in bytes): acpx reads it from the run's prompt file, shown read-only.
    long_body = "\n".join(f"acp-test: {d}" for d in directives) + "\n\n" + "éléments " * 6_000
    key = auto_project.tracker.create(title="own server", body=long_body).key
    done = beflow_run(auto_project, "--auto", key)
    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    assert record.sandboxed and "beflow" in record.mcp_servers

    probe = auto_project.branch_files(f"beflow/{key}")["probe.txt"]
    found = dict(line.split(": ", 1) for line in probe.strip().splitlines())
    for what in ("progress", "run", "stderr", "transcript", "created", "socket", "channel"):
        assert "WROTE" not in found[what] and "Read-only file system" in found[what], probe
    assert "No such file" in found["others"], probe
    # The record is beflow's: every file in it regular and as the run wrote it.
    directory = auto_project.run_dir(record)
    for path in directory.rglob("*"):
        assert not path.is_symlink() and (path.is_file() or path.is_dir()), path
    assert not (directory / "hooks.log").exists()
    assert json.loads((directory / "run.json").read_text())["id"] == record.id
    assert "forged" not in (directory / "stderr.log").read_text()
    assert len((directory / "prompt.md").read_bytes()) > MAX_ARGV_PROMPT
    assert '"jsonrpc"' in (directory / "transcript.jsonl").read_text()
    assert [note.text for note in record.progress] == ["halfway, sandboxed"]
    assert "halfway, sandboxed" in beflow_run(auto_project, "runs", "show", record.id).stdout
    agent_comments = [c.text for c in auto_project.issue(key).comments if c.author == "agent"]
    assert agent_comments == ["written from the sandbox"]


def test_without_user_namespaces_the_run_fails_with_bwraps_reason(auto_project: AutoProject, tmp_path: Path) -> None:
    """The real bwrap where it cannot make its namespaces (root without capabilities, as a container that drops
    them): the run fails with bwrap's words and nothing ran. (The suite runs as root, as test_agent_secrets.py's
    ordinary-user runs do.)"""
    auto_project.configure(sandbox={"enabled": True})
    key = auto_project.new_issue("write escaped.txt unsandboxed", title="never runs")
    done = subprocess.run(
        unprivileged([sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "--auto", key]),
        cwd=auto_project.directory,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    record = auto_project.only_record()
    assert record.outcome == "failed" and record.permanent
    assert record.stop_reason is not None
    assert "the sandbox could not start: bwrap: " in record.stop_reason
    assert "Operation not permitted" in record.stop_reason
    assert not list(auto_project.worktrees_dir.rglob("escaped.txt"))


def ended(project: AutoProject, key: str) -> list[RunRecord]:
    return [record for record in project.records(key) if record.outcome != "running"]


def test_a_retry_in_the_sandbox_resumes_the_agents_session(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """``watch``'s second attempt resumes the agent's ACP session: acpx's named session (``sessions new``, then
    ``prompt -s`` and its queue owner) works inside the sandbox, in the run's private acpx state."""
    auto_project.configure(
        sandbox={"enabled": True},
        watch={"interval": 0.2, "backoff": 0.1, "backoff_max": 0.2, "max_attempts": 2, "concurrency": 1},
    )
    key = auto_project.new_issue("write progress.txt step", "fail not yet")
    watch = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(auto_project.config_path), "watch"],
        cwd=auto_project.directory,
        env={**os.environ, "ACP_TEST_RESUME": "resume"},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(ended(auto_project, key)) == 2, 120, "the second attempt never ended")
    finally:
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
    second, first = auto_project.records(key)
    assert (first.attempt, second.attempt) == (1, 2)
    assert first.sandboxed and second.sandboxed, (first.stop_reason, second.stop_reason)
    assert second.resumed_session == first.session is not None, second.resume_note
