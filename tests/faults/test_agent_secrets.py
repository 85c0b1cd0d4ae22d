"""The agent is an adversary after the token: it reads its own environment and walks up its parents' ``/proc``
entries (acpx, then beflow), writes the token into a file and into its final message, and says secrets in its
progress lines and comments. Each run is beflow as a real process, the pinned acpx, the test agent and the fake
GitHub; the token ends up nowhere: not in the agent's reach, not in a commit, record, comment, pull request or
beflow's output (docs/safety.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from beflow.mcp.acp import MASK
from tests.faults.conftest import Done, unprivileged
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import SECRET_ENV, SECRET_HEADER, AutoProject, git

pytestmark = pytest.mark.slow

#: A cloud credential the agent must not get, and the login variable it must.
AWS_SECRET = "aws-secret-7d3e9c41aa"
OPENAI_KEY = "sk-openai-2b8f6a90cc"
#: A header value with a scheme word: its token is a secret said bare too.
BEARER = "bearer-secret-3c7a55e2"

#: What a hostile agent runs: its own environment, then every ancestor's (acpx, beflow, ...), into ``$1``.
SNOOP = r"""
out="$1"
cat /proc/self/environ | tr '\0' '\n' | sed 's/^/self: /' > "$out"
p=$$
while [ "$p" -gt 1 ]; do
  p=$(sed 's/.*) //' "/proc/$p/stat" | cut -d' ' -f2)
  cmd=$(tr '\0' ' ' < "/proc/$p/cmdline")
  if env=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null) && [ -n "$env" ]; then
    echo "pid $p ($cmd): readable" >> "$out"
    printf '%s\n' "$env" | sed "s/^/$p: /" >> "$out"
  else
    echo "pid $p ($cmd): denied" >> "$out"
  fi
  # what the process's memory would give away
  if head -c 1 "/proc/$p/mem" >/dev/null 2>&1; then echo "pid $p: mem open" >> "$out"; fi
done
"""


def run_beflow(project: AutoProject, *args: str, env: dict[str, str], timeout: float = 180) -> Done:
    done = subprocess.run(
        unprivileged([sys.executable, "-m", "beflow", "--config", str(project.config_path), *args]),
        cwd=project.directory,
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Done(done.returncode, done.stdout, done.stderr)


SECRETS_ENV = {"GITHUB_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "OPENAI_API_KEY": OPENAI_KEY}


@pytest.fixture
def on_github(auto_project: AutoProject, github: FakeGitHub) -> AutoProject:
    """The test project on the fake GitHub, with a bare ``origin`` and pull requests on."""
    auto_project.add_origin()
    auto_project.configure(
        tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url},
        after_run={"pull_request": True},
    )
    return auto_project


def token_anywhere(project: AutoProject, github: FakeGitHub, done: Done, secret: str = TOKEN) -> list[str]:
    """Where ``secret`` is: beflow's output, files of the project and BEFLOW_HOME, git history, comments, pulls."""
    found = [name for name, text in (("stdout", done.stdout), ("stderr", done.stderr)) if secret in text]
    for root in (project.directory, Path(os.environ["BEFLOW_HOME"])):
        found += [str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and secret in _text(p)]
    if secret in git(project.directory, "log", "-p", "--all"):
        found.append("git history")
    found += [f"comment {c['id']}" for n in github.issues for c in github.comments_of(n) if secret in c["body"]]
    found += [f"pull {p['number']}" for p in github.pulls.values() if secret in (p.get("body") or "")]
    return found


def _text(path: Path) -> str:
    return path.read_bytes().decode("utf-8", "replace")


def stolen(loot: Path) -> tuple[dict[str, str], list[str]]:
    """What the snooping agent saw: its own environment, and the lines about its ancestors."""
    lines = _text(loot).splitlines()  # an ancestor's command line need not be UTF-8
    own = dict(line.removeprefix("self: ").split("=", 1) for line in lines if line.startswith("self: ") and "=" in line)
    return own, [line for line in lines if line.startswith("pid ")]


def assert_nothing_to_steal(loot: Path) -> None:
    own, ancestors = stolen(loot)
    assert own.get("OPENAI_API_KEY") == OPENAI_KEY  # the agent logs in with it
    assert "GITHUB_TOKEN" not in own and "AWS_SECRET_ACCESS_KEY" not in own
    beflow = [line for line in ancestors if " -m beflow " in line and "mcp serve" not in line]
    assert beflow and all(line.endswith(": denied") for line in beflow), ancestors
    assert not [line for line in ancestors if line.endswith("mem open") and "beflow" in line]
    text = _text(loot)
    assert TOKEN not in text and AWS_SECRET not in text


@pytest.mark.parametrize("mode", ["--auto", "watch", "--attend", "--open"])
def test_an_agent_that_reads_its_own_and_beflows_environment_finds_no_token_in_any_mode(
    on_github: AutoProject, github: FakeGitHub, tmp_path: Path, mode: str, no_leftover_processes: None
) -> None:
    snoop, loot, hook_loot = tmp_path / "snoop.sh", tmp_path / "loot.txt", tmp_path / "hook-loot.txt"
    snoop.write_text(SNOOP)
    on_github.configure(open={"default": ["sh", str(snoop), str(loot), "{prompt}"]})
    worktree = mode in ("--auto", "watch")
    if worktree:  # a hook runs where the agent worked: it gets what the agent gets
        on_github.configure(hooks={"after_run": f"sh {snoop} {hook_loot}"})
    github.add_issue("Look around", labels=["beflow", "beflow:ready"], body=f"acp-test: run sh {snoop} {loot}")
    args = {"--auto": ["--auto", "1"], "watch": ["watch", "--once"], "--attend": ["--attend", "1"]}
    done = run_beflow(on_github, *args.get(mode, ["--open", "1"]), env=SECRETS_ENV)

    assert done.code == 0, done.stdout + done.stderr
    assert loot.is_file(), done.stderr
    assert_nothing_to_steal(loot)
    if worktree:
        assert_nothing_to_steal(hook_loot)
    assert token_anywhere(on_github, github, done) == []
    assert token_anywhere(on_github, github, done, AWS_SECRET) == []


def test_an_agent_given_the_token_that_writes_it_into_a_file_is_not_published_and_its_words_are_masked(
    on_github: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    # The user gave the agent the token (agent_token): the agent leaks it into a file and its final message. No
    # MCP server is injected: the check before publishing looks for beflow's own secrets all the same.
    on_github.configure(tracker={**on_github.config["tracker"], "agent_token": True}, mcp={"enabled": False})
    github.add_issue(
        "Leak it",
        labels=["beflow", "beflow:ready"],
        body='acp-test: write notes.txt hello\nacp-test: run printf %s "$GITHUB_TOKEN" > token.txt\n'
        'acp-test: run echo "the token is $GITHUB_TOKEN"',
    )

    done = run_beflow(on_github, "--auto", "1", env=SECRETS_ENV)

    assert done.code == 1, done.stdout + done.stderr
    record = on_github.only_record()
    assert record.outcome == "failed" and record.worktree_kept and record.commit is None
    reason = record.stop_reason or ""
    assert "token.txt" in reason and "a secret value" in reason and "beflow/1 was not updated" in reason
    worktree = Path(record.worktree or "")
    assert (worktree / "token.txt").read_text() == TOKEN  # the work is kept, uncommitted, for a person to see
    assert "beflow/1" not in on_github.branches()
    origin = on_github.directory.parent / "origin.git"
    assert "beflow/1" not in git(origin, "branch", "--list")
    assert github.pulls == {}
    assert f"the token is {MASK}" in (record.final_message or "")
    transcript = (on_github.run_dir(record) / "transcript.jsonl").read_text()
    assert MASK in transcript
    (comment,) = github.comments_of(1)
    assert "**failed**" in comment["body"] and f"the token is {MASK}" in comment["body"]
    assert [where for where in token_anywhere(on_github, github, done) if not where.startswith(str(worktree))] == []


def test_the_token_in_the_final_message_of_a_published_run_is_masked_in_the_pull_request(
    on_github: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    on_github.configure(tracker={**on_github.config["tracker"], "agent_token": True})
    github.add_issue(
        "Say it",
        labels=["beflow", "beflow:ready"],
        body='acp-test: write notes.txt hello\nacp-test: run echo "the token is $GITHUB_TOKEN"',
    )

    done = run_beflow(on_github, "--auto", "1", "--json", env=SECRETS_ENV)

    assert done.code == 0, done.stdout + done.stderr
    (pull,) = github.pulls.values()
    assert f"the token is {MASK}" in pull["body"]
    (comment,) = github.comments_of(1)
    assert f"the token is {MASK}" in comment["body"]
    assert token_anywhere(on_github, github, done) == []


def test_secrets_in_an_agents_progress_and_comments_are_masked_everywhere(
    auto_project: AutoProject, no_leftover_processes: None
) -> None:
    mcp = json.loads((auto_project.directory / ".mcp.json").read_text())
    mcp["mcpServers"]["api"] = {
        "type": "http",
        "url": "https://api.example.com/mcp",
        "headers": {"Authorization": f"Bearer {BEARER}"},
    }
    (auto_project.directory / ".mcp.json").write_text(json.dumps(mcp))
    auto_project.configure(mcp={"enabled": True, "self": True})
    said = f"tools key {SECRET_ENV}, docs {SECRET_HEADER}, bare {BEARER}"
    key = auto_project.new_issue(
        "mcp-call beflow run_progress " + json.dumps({"text": f"progress: {said}"}),
        "mcp-call beflow issue_comment " + json.dumps({"text": f"comment: {said}"}),
        "mcp-call beflow run_status {}",
        "write notes.txt hello",
    )

    done = run_beflow(auto_project, "--auto", key, "--json", env={})
    shown = run_beflow(auto_project, "runs", "show", "latest", env={})

    assert done.code == 0, done.stdout + done.stderr
    record = auto_project.only_record()
    masked = f"tools key {MASK}, docs {MASK}, bare {MASK}"
    assert [note.text for note in record.progress] == [f"progress: {masked}"]
    comments = [c.text for c in auto_project.issue(key).comments if c.author == "agent"]
    assert comments == [f"comment: {masked}"]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [e["text"] for e in events if e["event"] == "progress"] == [f"progress: {masked}"]
    assert f"progress: {masked}" in shown.stdout
    for secret in (SECRET_ENV, SECRET_HEADER, BEARER):
        for root in (auto_project.directory, Path(os.environ["BEFLOW_HOME"])):
            # (the issue itself, and the tracker's index of it, hold them: the test wrote them there, as the agent's
            # directives; the agent's comment in it is masked, as checked above)
            holding = [p for p in root.rglob("*") if p.is_file() and secret in _text(p) and p.name != ".mcp.json"]
            assert [p for p in holding if not {"issues", "tracker"} & set(p.parts)] == []
        assert secret not in done.stdout + done.stderr + shown.stdout


def test_the_code_hosts_token_is_withheld_from_the_agent_with_the_local_tracker(
    auto_project: AutoProject, github: FakeGitHub, tmp_path: Path, no_leftover_processes: None
) -> None:
    # The issues are local; GitHub is only the code host, its token in a variable of its own (a name the default
    # drop list does not match: it is withheld as the code host's secret): the agent gets none
    # of it, nor does any process it can read, and the token ends up nowhere.
    auto_project.add_origin()
    snoop, loot = tmp_path / "snoop.sh", tmp_path / "loot.txt"
    snoop.write_text(SNOOP)
    auto_project.configure(
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    key = auto_project.new_issue("write notes.txt hello", f"run sh {snoop} {loot}")

    done = run_beflow(auto_project, "--auto", key, env={"HOSTPAT": TOKEN, "GITHUB_TOKEN": ""})

    assert done.code == 0, done.stdout + done.stderr
    own, ancestors = stolen(loot)
    assert "HOSTPAT" not in own and TOKEN not in _text(loot)
    beflow = [line for line in ancestors if " -m beflow " in line and "mcp serve" not in line]
    assert beflow and all(line.endswith(": denied") for line in beflow), ancestors
    (pull,) = github.pulls.values()
    assert pull["head"]["ref"] == "beflow/1"
    assert token_anywhere(auto_project, github, done) == []
