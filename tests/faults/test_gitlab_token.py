"""The GitLab token against an agent after it, with GitLab as tracker and code host: the agent reads its own and its
parents' environments, says what it found in its progress, comments and final message; a run is published as a merge
request, and ``beflow doctor --json`` and ``beflow runs show`` are asked after. The token ends up nowhere but in the
``Authorization`` header of the requests to GitLab's API and git's credential for the instance: not in the agent's
reach, a file, a record, a note, the merge request, git's history or configuration, a URL, or beflow's output."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.faults.test_agent_secrets import SNOOP, _text, run_beflow, stolen
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.projects import AutoProject, git

pytestmark = pytest.mark.slow


@pytest.fixture
def on_gitlab(auto_project: AutoProject, gitlab: FakeGitLab, tmp_path: Path) -> AutoProject:
    """The test project on the fake GitLab (tracker and code host), its git served by the fake as ``origin``."""
    gitlab.serve_git(auto_project.directory, tmp_path / "served")
    git(auto_project.directory, "remote", "add", "origin", gitlab.git_url)
    auto_project.configure(
        tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "lease": 30},
        code_host={"kind": "gitlab"},
        after_run={"pull_request": True},
        mcp={"enabled": True, "self": True},  # (the agent's progress and comments go through beflow's tools)
    )
    return auto_project


def test_an_agent_after_the_gitlab_token_finds_it_nowhere_and_nothing_beflow_writes_holds_it(
    on_gitlab: AutoProject, gitlab: FakeGitLab, tmp_path: Path, no_leftover_processes: None
) -> None:
    snoop, loot = tmp_path / "snoop.sh", tmp_path / "loot.txt"
    snoop.write_text(SNOOP)
    said = json.dumps({"text": "found: nothing"})
    host = gitlab.git_url.split("//", 1)[1].split("/", 1)[0]
    gitlab.add_issue(
        "Look around",
        labels=["beflow", "beflow:ready"],
        description=f"acp-test: run sh {snoop} {loot}\nacp-test: write notes.txt hello\n"
        f"acp-test: mcp-call beflow run_progress {said}\nacp-test: mcp-call beflow issue_comment {said}\n"
        'acp-test: run echo "env: $GITLAB_TOKEN $(cat /proc/self/environ | tr "\\0" " ")"\n'
        f"acp-test: run printf 'protocol=http\\nhost={host}\\npath={PROJECT}.git\\n\\n' | git credential fill "
        f"> {tmp_path / 'fill.txt'} 2>&1; git ls-remote origin >> {tmp_path / 'fill.txt'} 2>&1; echo done",
    )
    env = {"GITLAB_TOKEN": TOKEN}

    done = run_beflow(on_gitlab, "--auto", "1", "--json", env=env)
    doctor = run_beflow(on_gitlab, "doctor", "--json", env=env)
    shown = run_beflow(on_gitlab, "runs", "show", "latest", env=env)

    assert done.code == 0, done.stdout + done.stderr
    assert loot.is_file(), done.stderr
    own, ancestors = stolen(loot)
    assert "GITLAB_TOKEN" not in own and TOKEN not in _text(loot)
    beflow = [line for line in ancestors if " -m beflow " in line and "mcp serve" not in line]
    assert beflow and all(line.endswith(": denied") for line in beflow), ancestors
    (mr,) = gitlab.mrs.values()
    assert mr["source_branch"] == "beflow/1"
    filled = _text(tmp_path / "fill.txt")
    assert TOKEN not in filled and "refs/heads" not in filled, filled  # git's credential gives the agent nothing
    notes = [n for threads in gitlab.discussions.values() for t in threads for n in t["notes"]]
    assert [n for n in notes if "found: nothing" in n["body"]], [n["body"] for n in notes]  # (the comment went)

    outputs = {"run": done, "doctor": doctor, "runs show": shown}
    found = [name for name, said in outputs.items() if TOKEN in said.stdout + said.stderr]
    for root in (on_gitlab.directory, Path(os.environ["BEFLOW_HOME"])):
        found += [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and TOKEN in _text(p)]
    found += ["git history"] if TOKEN in git(on_gitlab.directory, "log", "-p", "--all") else []
    found += ["git config"] if TOKEN in git(on_gitlab.directory, "config", "--list", "--show-origin") else []
    found += [f"note {n['id']}" for n in notes if TOKEN in n["body"]]
    found += [f"merge request {m['iid']}" for m in gitlab.mrs.values() if TOKEN in m["title"] + m["description"]]
    found += [f"{s.method} {s.path}" for s in gitlab.seen if TOKEN in s.path + json.dumps(s.query) + json.dumps(s.body)]
    assert found == []
    assert all(s.headers.get("authorization") == f"Bearer {TOKEN}" for s in gitlab.seen)
