"""The sandbox by default (docs/safety.md#the-sandbox): a config that says nothing of it (as a new user's) gets
``"sandbox": {"enabled": "auto"}``: on a machine where bwrap starts (this one), every unattended run is sandboxed;
where it cannot, runs go unsandboxed and each process says so once, with why and how to choose."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.faults.conftest import beflow_run
from tests.support.projects import AutoProject

pytestmark = pytest.mark.slow

HOME_SECRET = "home-secret-0d5a77e2"


def test_a_config_without_a_sandbox_key_sandboxes_the_run_where_bwrap_works(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    (Path(os.environ["HOME"]) / "secret.txt").write_text(HOME_SECRET)
    auto_project.configure(sandbox=None)  # as a new user's config: no word of the sandbox
    assert "sandbox" not in json.loads(auto_project.config_path.read_text())
    key = auto_project.new_issue("run { cat $HOME/secret.txt 2>&1; echo; } > probe.txt", "say done", title="look")

    done = beflow_run(auto_project, "--auto", key)

    assert done.code == 0, done.stderr + done.stdout
    record = auto_project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    assert record.sandboxed
    probe = auto_project.branch_files(f"beflow/{key}")["probe.txt"]
    assert HOME_SECRET not in probe and "No such file" in probe
    assert "not sandboxed" not in done.stderr + done.stdout


def test_where_the_sandbox_cannot_start_runs_go_unsandboxed_with_one_notice_per_process(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create a new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    auto_project.configure(sandbox=None)
    keys = [auto_project.new_issue("write a.txt x", title=f"task {n}") for n in range(2)]

    done = beflow_run(auto_project, "--auto", *keys, "--json", env={"BEFLOW_BWRAP": str(fake)})

    assert done.code == 0, done.stderr + done.stdout
    records = auto_project.records()
    assert [r.outcome for r in records] == ["succeeded", "succeeded"]
    assert not any(r.sandboxed for r in records)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    notices = [e["message"] for e in events if e["event"] == "notice" and "not sandboxed" in e["message"]]
    assert notices == [
        "runs are not sandboxed: the sandbox cannot start on this machine (bwrap: No permissions to create a new "
        'namespace); "sandbox": {"enabled": true} requires the sandbox (a run fails when it cannot start), false '
        "runs without it and without this notice (beflow docs safety)"
    ]

    # `true` requires it: the same machine fails the run, and no agent starts.
    auto_project.configure(sandbox={"enabled": True})
    key = auto_project.new_issue("write b.txt x", title="required")
    required = beflow_run(auto_project, "--auto", key, env={"BEFLOW_BWRAP": str(fake)})
    assert required.code == 1
    (record,) = auto_project.records(key)
    assert record.outcome == "failed" and "the sandbox could not start" in (record.stop_reason or "")
    assert f"beflow/{key}" not in auto_project.branches()


def test_a_machine_short_of_namespaces_for_now_fails_the_run_closed_rather_than_unsandboxed(
    auto_project: AutoProject, tmp_path: Path, no_leftover_processes: None
) -> None:
    """The user's quota of user namespaces is used up — another run's sandboxed agent can hold them all (nested
    namespaces are allowed) — as a new beflow process asks the machine: that is no answer of the machine's, so its
    runs are not carried on unsandboxed; each fails with the sandbox's reason, and no agent starts."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: Creating new namespace failed: No space left on device' >&2\nexit 1\n")
    fake.chmod(0o755)
    auto_project.configure(sandbox=None)
    key = auto_project.new_issue("write a.txt x", title="task")

    done = beflow_run(auto_project, "--auto", key, env={"BEFLOW_BWRAP": str(fake)})

    assert done.code == 1, done.stderr + done.stdout
    (record,) = auto_project.records(key)
    assert record.outcome == "failed" and record.sandboxed, record.stop_reason
    assert "the sandbox could not start: bwrap: Creating new namespace failed: No space left on device" in (
        record.stop_reason or ""
    )
    assert "not sandboxed" not in done.stderr + done.stdout
    assert f"beflow/{key}" not in auto_project.branches()
