"""No process beflow starts but the push holds the tracker's token: not the watchdog beside acpx, not a git
command before or after the agent. A process of the user (an agent that left its session) reads any dumpable
process's environment, so a token in a child's environment is a token given away."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.faults.test_agent_secrets import SECRETS_ENV, on_github, run_beflow  # noqa: F401 - on_github: a fixture
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow

#: What the agent runs: every process below beflow whose environment it can read, with the token in it, into $1.
SCAN = r"""
import os, sys
def parent(pid):
    try:
        return int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0
def cmdline(pid):
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""
me, beflow = os.getpid(), 0
p = me
while p > 1:
    p = parent(p)
    if " -m beflow " in f" {cmdline(p)} ":
        beflow = p
        break
found = []
for entry in os.listdir("/proc"):
    if not entry.isdigit():
        continue
    pid, q = int(entry), int(entry)
    while q > 1 and q != beflow:
        q = parent(q)
    if q != beflow or pid == beflow:
        continue
    try:
        env = open(f"/proc/{pid}/environ", "rb").read()
    except OSError:
        continue
    if sys.argv[2].encode() in env:
        found.append(f"{pid} {cmdline(pid)}")
open(sys.argv[1], "w").write(f"beflow {beflow}\n" + "\n".join(found))
"""

#: A git on PATH that writes down, for every call, its arguments and whether the token is in its environment.
GIT_SPY = """#!/bin/sh
held=none
tr '\\0' '\\n' < /proc/$$/environ | grep -v '^BEFLOW_TEST_SPY' | grep -q "$BEFLOW_TEST_SPY_TOKEN_NEEDLE" && held=token
printf '%s %s\\n' "$held" "$*" >> "$BEFLOW_TEST_SPY_LOG"
exec {git} "$@"
"""


def test_no_child_of_beflow_but_the_push_holds_the_token(
    on_github: AutoProject,  # noqa: F811 - the fixture imported above
    github: FakeGitHub,
    tmp_path: Path,
    no_leftover_processes: None,
) -> None:
    scan, loot, log = tmp_path / "scan.py", tmp_path / "loot.txt", tmp_path / "git.log"
    scan.write_text(SCAN)
    spy = tmp_path / "spy-bin"
    spy.mkdir()
    (spy / "git").write_text(GIT_SPY.format(git=shutil.which("git")))
    (spy / "git").chmod(0o755)
    needle = TOKEN[4:]  # the spy's own environment names the needle, not the token whole
    github.add_issue(
        "Look around",
        labels=["beflow", "beflow:ready"],
        body=f"acp-test: write notes.txt hello\nacp-test: run python3 {scan} {loot} {TOKEN}",
    )
    env = {
        **SECRETS_ENV,
        "PATH": f"{spy}{os.pathsep}{os.environ['PATH']}",
        "BEFLOW_TEST_SPY_LOG": str(log),
        "BEFLOW_TEST_SPY_TOKEN_NEEDLE": needle,
    }

    done = run_beflow(on_github, "--auto", "1", env=env)

    assert done.code == 0, done.stdout + done.stderr
    said = loot.read_text().splitlines()
    assert said[0].startswith("beflow ") and said[0] != "beflow 0", said  # the scan found beflow's children
    assert said[1:] == []  # none of them held the token while the agent ran
    calls = log.read_text().splitlines()
    assert any(" commit " in line for line in calls) and any(" push " in line for line in calls)
    # GitPython's one `git version` as it loads (before the tracker is opened, before any agent) is all there is.
    assert [line for line in calls if line.startswith("token")] == ["token version"] * calls.count("token version")
    assert on_github.only_record().outcome == "succeeded"
