"""beflow's process made non-dumpable (beflow/system/hardening.py): other processes of the user cannot read it, while
beflow's own helpers still see its children — the escaped-process search by environment tag, process identity by
creation time, the children of Ctrl-C — because every child is dumpable again after its ``exec``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from tests.faults.conftest import unprivileged

CHILD = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    import anyio, psutil
    from beflow.system import hardening, liveness, proc

    assert hardening.keep_private() and hardening.is_private() and hardening.keep_private()
    seen = {}
    child = subprocess.Popen(["sleep", "30"])
    seen["child_start"] = liveness.start_time(child.pid) is not None
    seen["child_running"] = liveness.is_running(child.pid, liveness.start_time(child.pid))
    seen["own_start"] = liveness.start_time(os.getpid()) is not None
    seen["children"] = [p.pid for p in psutil.Process().children()] == [child.pid]
    seen["child_environ"] = "PATH" in psutil.Process(child.pid).environ()
    # A child that escapes its group (setsid + background) is found by its tag and stopped with the run.
    async def escaped():
        escape = "setsid sleep 29.71 >/dev/null 2>&1 & echo started"
        result = await proc.run(["sh", "-c", escape], timeout=10, stop_escaped=True)
        return result.ok
    seen["escaped_run"] = anyio.run(escaped)
    seen["escaped_left"] = [p.pid for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "29.71"]]
    # Someone else of the same user reads beflow's environment: denied.
    reader = subprocess.run(["cat", f"/proc/{os.getpid()}/environ"], capture_output=True)
    seen["reader_denied"] = reader.returncode != 0 and os.environ["HARDENING_SECRET"].encode() not in reader.stdout
    child.kill()
    print(json.dumps(seen))
    """
)


def test_a_private_beflow_still_sees_its_children_and_nobody_else_sees_it() -> None:
    done = subprocess.run(
        unprivileged([sys.executable, "-c", CHILD]),
        env={**os.environ, "HARDENING_SECRET": "hardening-secret-0f9e"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {
        "child_start": True,
        "child_running": True,
        "own_start": True,
        "children": True,
        "child_environ": True,
        "escaped_run": True,
        "escaped_left": [],
        "reader_denied": True,
    }
