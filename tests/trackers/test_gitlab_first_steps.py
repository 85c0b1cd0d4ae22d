"""A new user's first steps with GitLab, as the docs give them: ``beflow init`` in a clone of the project, the tracker
set to GitLab (the project read from ``origin``), ``beflow doctor`` saying what is missing and how to fix it,
``beflow init --labels``, then ``beflow doctor`` all good — with the token in ``$GITLAB_TOKEN``, or from ``glab`` when
there is none, and a clear refusal naming both when there is neither."""

from __future__ import annotations

import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.support.gitlab import TOKEN, FakeGitLab
from tests.support.gitlab_projects import gitlab_origin
from tests.support.projects import UNSANDBOXED, AutoProject, config_file

pytestmark = pytest.mark.slow


def fake_glab(directory: Path, host: str) -> str:
    """A ``glab`` whose ``glab config get token --host HOST`` prints the token (for that host alone: the instance's
    host and port, as glab keeps a self-managed instance's)."""
    directory.mkdir()
    glab = directory / "glab"
    glab.write_text(f'#!/bin/sh\n[ "$*" = "config get token --host {host}" ] && echo {TOKEN} && exit 0\nexit 1\n')
    glab.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ['PATH']}"


def said(stdout: str, *names: str) -> list[str]:
    """Every line of doctor's checks of these names (a check may show several: ``gitlab`` does), fixes joined on."""
    found: list[str] = []
    for line in stdout.splitlines():
        if line.startswith("    fix:") and found and found[-1] is not None:
            found[-1] += "\n" + line
        elif line[2:].split(": ", 1)[0] in names:
            found.append(line)
    return found


def test_init_labels_and_doctor_on_gitlab(
    auto_project: AutoProject, gitlab: FakeGitLab, beflow, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = auto_project.directory
    gitlab_origin(auto_project, gitlab)
    config_file(project).unlink()
    assert beflow("init").exit_code == 0
    config = config_file(project)
    settings = json.loads(json.dumps(auto_project.config))  # the test agent and acpx, as a user's would be set
    settings |= {"tracker": {"kind": "gitlab", "url": gitlab.url}, "sandbox": UNSANDBOXED}
    config.write_text(json.dumps(settings))
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)

    missing = beflow("doctor")
    (tracker,) = said(missing.stdout, "tracker")
    assert tracker.startswith("! tracker:") and "beflow:ready" in tracker, missing.stdout  # (beflow makes them too)
    assert "beflow init --labels" in tracker

    created = beflow("init", "--labels")
    assert created.exit_code == 0, created.stderr
    assert {"beflow", "beflow:ready", "beflow:in-progress", "beflow:review"} <= set(gitlab.labels)

    good = beflow("doctor")
    (line,) = said(good.stdout, "tracker")
    assert good.exit_code == 0 and line.startswith("✓ tracker:") and "acme/widgets" in line, good.stdout
    access = said(good.stdout, "gitlab")  # what GitLab says beflow may do: the token's scope, the project, a push
    assert access and all(a.startswith("✓ gitlab:") for a in access), good.stdout
    assert any("api" in a for a in access) and any("acme/widgets" in a for a in access)
    assert TOKEN not in good.stdout + good.stderr

    # No token in the environment: glab's, for this host.
    monkeypatch.delenv("GITLAB_TOKEN")
    monkeypatch.setenv("PATH", fake_glab(tmp_path / "bin", urlsplit(gitlab.url).netloc))
    from_glab = beflow("doctor")
    assert from_glab.exit_code == 0 and said(from_glab.stdout, "tracker")[0].startswith("✓ tracker:"), from_glab.stdout

    # Neither: the fix names both.
    monkeypatch.setenv("PATH", os.environ["PATH"].split(os.pathsep, 1)[1])
    refused = beflow("doctor")
    lines = "\n".join(said(refused.stdout, "tracker"))
    assert refused.exit_code == 1 and lines.startswith("✗ tracker:")
    assert "GITLAB_TOKEN" in lines and "glab" in lines, lines


def test_doctor_says_a_token_that_cannot_push_and_a_project_it_cannot_see(
    auto_project: AutoProject, gitlab: FakeGitLab, beflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    reporter = gitlab.user("rita", access_level=20)
    gitlab.tokens["glpat-reporter"] = (reporter["id"], ["api"])
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-reporter")
    auto_project.configure(tracker={"kind": "gitlab", "project": "acme/widgets", "url": gitlab.url})
    beflow("init", "--labels")

    weak = beflow("doctor")
    refused = [line for line in said(weak.stdout, "gitlab") if line.startswith("✗")]
    assert weak.exit_code == 1 and refused and "Reporter" in refused[0] and "push" in refused[0], weak.stdout

    gitlab.tokens["glpat-readonly"] = (gitlab.bot["id"], ["read_api"])
    monkeypatch.setenv("GITLAB_TOKEN", "glpat-readonly")
    scopes = beflow("doctor")
    refused = [line for line in said(scopes.stdout, "gitlab") if line.startswith("✗")]
    assert scopes.exit_code == 1 and refused and "api" in refused[0], scopes.stdout

    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": "acme/gone", "url": gitlab.url})
    gone = beflow("doctor")
    refused = [line for line in said(gone.stdout, "tracker", "gitlab") if line.startswith("✗")]
    assert gone.exit_code == 1 and refused and "tracker.project" in refused[0] and "acme/gone" in refused[0], (
        gone.stdout
    )
