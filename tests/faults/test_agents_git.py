"""beflow's git never follows the agent's git (docs/safety.md, "Your repository's git"): an agent that points its
worktree's HEAD or ``.git`` file at the user's branch or checkout, rewrites objects of the user's store, or moves
the refs beflow builds on, moves nothing of the user's through beflow, and its run is not published.

Each scenario is a real ``python -m beflow --auto`` run whose test agent does the attack with its ``run``
directive; each checks that the user's checkout, every ref, HEAD and every object file that was there before are
byte for byte as they were."""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.faults.conftest import beflow_run, secrets_in_history
from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import SECRET_ENV, AutoProject, git
from tests.support.repo_state import RepoState

pytestmark = pytest.mark.slow


#: The code host's token, in a variable of its own: the push and the pull request use it.
HOST = {"HOSTPAT": TOKEN}


@pytest.fixture
def project(auto_project: AutoProject, github: FakeGitHub) -> AutoProject:
    """The project, unsandboxed, with a branch ``feature`` one commit ahead of ``main``; a run that succeeds pushes
    its branch to ``origin`` (a bare clone beside it) and opens a pull request on the fake GitHub."""
    auto_project.configure(sandbox={"enabled": False})
    directory = auto_project.directory
    git(directory, "checkout", "-q", "-b", "feature")
    (directory / "feature.txt").write_text("the user's work\n")
    git(directory, "add", "feature.txt")
    git(directory, "commit", "-q", "-m", "the user's feature")
    git(directory, "checkout", "-q", "main")
    auto_project.add_origin()
    auto_project.configure(
        code_host={"kind": "github", "repo": "octo/hello", "api_url": github.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    return auto_project


def pushed(project: AutoProject) -> list[str]:
    """The branches beflow pushed to ``origin``."""
    origin = project.directory.parent / "origin.git"
    return git(origin, "for-each-ref", "--format=%(refname)", "refs/heads/beflow").split()


def not_published(project: AutoProject, before: RepoState, github: FakeGitHub) -> None:
    """Nothing of the run reached a branch, ``origin`` or a pull request, and the user's repository is as it was."""
    assert "beflow/1" not in project.branches()
    assert pushed(project) == [] and github.pulls == {}
    assert before.same_but_new_objects(RepoState.of(project.directory)) == []
    assert secrets_in_history(project.directory) == []


def test_a_worktree_head_that_names_the_users_branch_moves_it_neither_by_the_commit_nor_by_the_refusal(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    """The agent makes its HEAD ``ref: refs/heads/feature`` and leaves a secret in a file: beflow's commit and the
    refusal that undoes it once moved ``feature`` (``git commit``, then ``git reset --mixed``)."""
    before = RepoState.of(project.directory)
    key = project.new_issue(
        'run echo "ref: refs/heads/feature" > "$(git rev-parse --git-dir)/HEAD"',
        f"write token.txt {SECRET_ENV}",
    )

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.worktree_kept
    assert "puts a secret value" in (record.stop_reason or "") and "beflow/1 was not updated" in (
        record.stop_reason or ""
    )
    not_published(project, before, github)
    worktree = Path(record.worktree or "")
    assert (worktree / "token.txt").read_text() == SECRET_ENV  # the work is kept, uncommitted
    base = git(project.directory, "rev-parse", "main").strip()
    assert git(worktree, "rev-parse", "HEAD").strip() == base  # its HEAD detached where the run started
    assert git(worktree, "rev-parse", "--symbolic-full-name", "HEAD").strip() == "HEAD"  # detached


def test_a_worktree_head_that_names_history_the_run_did_not_start_from_fails_the_run_loudly(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    directory = project.directory
    git(directory, "checkout", "-q", "--orphan", "other")
    git(directory, "commit", "-q", "--allow-empty", "-m", "unrelated")
    git(directory, "checkout", "-q", "main")
    before = RepoState.of(directory)
    key = project.new_issue('run echo "ref: refs/heads/other" > "$(git rev-parse --git-dir)/HEAD"', "write a.txt a")

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.worktree_kept
    reason = record.stop_reason or ""
    assert "does not descend from" in reason and "where the run started" in reason, reason
    assert "does not descend from" in done.stdout + done.stderr
    not_published(project, before, github)


def test_a_worktree_git_file_pointed_at_the_users_checkout_leaves_the_checkout_alone(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    """The agent points its worktree's ``.git`` at the user's ``.git``: beflow's git once staged the worktree into
    the user's index and committed on the user's ``main``."""
    directory = project.directory
    before = RepoState.of(directory)
    key = project.new_issue(f'run echo "gitdir: {directory}/.git" > .git', "write hello.txt hi\\n")

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 0, done.stderr
    record = project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    assert project.branch_files("beflow/1") == {"README.md": "# sample\n", "hello.txt": "hi\n"}
    now = RepoState.of(directory)
    assert [line for line in now.refs.splitlines() if "beflow/1" not in line] == before.refs.splitlines()
    assert (now.head, now.checkout, now.status) == (before.head, before.checkout, before.status)
    assert before.same_but_new_objects(now) == ["refs"]  # the branch beflow/1 is new, and only it
    assert pushed(project) == ["refs/heads/beflow/1"] and len(github.pulls) == 1


#: What the agent runs to rewrite the object of a file of the run's start, in the user's store: that version of the
#: file then seems to hold ``text`` (an earlier version holding a secret exempted it from the leak check).
FORGE = """
import os, subprocess, sys, zlib
name, text = sys.argv[1], sys.argv[2].encode()
sha = subprocess.check_output(["git", "rev-parse", "HEAD:" + name], text=True).strip()
common = subprocess.check_output(["git", "rev-parse", "--git-common-dir"], text=True).strip()
path = os.path.join(common, "objects", sha[:2], sha[2:])
os.makedirs(os.path.dirname(path), exist_ok=True)
if os.path.exists(path):
    os.chmod(path, 0o644)
with open(path, "wb") as out:
    out.write(zlib.compress(b"blob %d\\0" % len(text) + text))
"""


#: What the agent runs to add a pack whose index names an object of the run's start (a file's version) but holds
#: other bytes: git searches packs first, and takes them for that object (no existing file of the store changes).
SHADOW = """
import hashlib, os, struct, subprocess, sys
name, text = sys.argv[1], sys.argv[2].encode()
def run(*args, **kwargs):
    return subprocess.run(["git", *args], check=True, capture_output=True, **kwargs).stdout
target = run("rev-parse", "HEAD:" + name, text=True).strip()
forged = run("hash-object", "-w", "--stdin", input=text).decode().strip()
common = run("rev-parse", "--git-common-dir", text=True).strip()
prefix = os.path.join(common, "objects", "pack", "pack")
pack = run("pack-objects", "-q", prefix, input=forged.encode() + b"\\n").decode().strip()
path = prefix + "-" + pack + ".idx"
idx = bytearray(open(path, "rb").read())
at = 8 + 256 * 4  # one object: its id right after the header and the fan-out table
idx[at:at + 20] = bytes.fromhex(target)
idx[8:at] = b"".join(struct.pack(">I", int(byte >= idx[at])) for byte in range(256))
idx[-20:] = hashlib.sha1(bytes(idx[:-20])).digest()
os.chmod(path, 0o644)
open(path, "wb").write(bytes(idx))
"""


def python(script: str, *args: str) -> str:
    """A ``run`` directive that runs the Python ``script`` with ``args`` where the agent is (its source goes in the
    command line itself: in the sandbox no file of the test's is there)."""
    source = base64.b64encode(script.encode()).decode()
    return f"run echo {source} | base64 -d | python3 - " + " ".join(f"'{arg}'" for arg in args)


def test_a_rewritten_object_of_the_users_store_does_not_exempt_a_secret_from_the_leak_check(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    directory = project.directory
    (directory / "config.txt").write_text("token = none\n")
    git(directory, "add", "config.txt")
    git(directory, "commit", "-q", "-m", "config")
    objects_before = RepoState.of(directory).objects
    key = project.new_issue(
        python(FORGE, "config.txt", f"token = {SECRET_ENV}"), f"write config.txt token = {SECRET_ENV}\\n"
    )

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.worktree_kept
    assert "beflow/1" not in project.branches()  # (the history now shows the forged file: the store is the agent's)
    # The store's watch names the object (without it, the leak check finds it corrupt when it reads it).
    forged = git(directory, "rev-parse", "HEAD:config.txt").strip()
    assert forged[2:] in (record.stop_reason or "") and "not the object its" in (record.stop_reason or "")
    assert record.permanent  # a watch does not hand the issue to an agent again by itself
    # (The forged object file itself is the agent's doing, outside beflow: it is named, not put back.)
    changed = [path for path, digest in objects_before.items() if RepoState.of(directory).objects.get(path) != digest]
    assert changed == [f"{forged[:2]}/{forged[2:]}"]
    assert pushed(project) == [] and github.pulls == {}


def test_a_commit_message_of_150_mb_is_refused_unread_and_beflows_memory_stays_flat(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    message = "head -c 150000000 /dev/zero | tr '\\\\0' a > ../message"
    key = project.new_issue(f"run {message} && git commit -q --allow-empty -F ../message && rm ../message")
    process = subprocess.Popen(
        [sys.executable, "-m", "beflow", "--config", str(project.config_path), "--auto", key],
        cwd=project.directory,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, **HOST},
    )
    watched, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        with contextlib.suppress(psutil.NoSuchProcess):
            peak = max(peak, watched.memory_info().rss)
        time.sleep(0.05)
    _, stderr = process.communicate(timeout=600)

    assert process.returncode == 1, stderr.decode()
    record = project.only_record()
    assert "is unpublishable: its message is over 1 MiB" in (record.stop_reason or ""), record.stop_reason
    assert "beflow/1" not in project.branches() and record.commit is None
    assert pushed(project) == [] and github.pulls == {}
    # Before: every message of the run was read at once (607 MB for this one). Now: one commit at a time, capped.
    assert peak < 150 * 2**20, f"peak RSS {peak / 2**20:.0f} MiB"


def test_a_new_pack_that_shadows_an_object_of_the_users_store_is_found_and_the_run_not_published(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    directory = project.directory
    (directory / "config.txt").write_text("token = none\n")
    git(directory, "add", "config.txt")
    git(directory, "commit", "-q", "-m", "config")
    before = RepoState.of(directory)
    key = project.new_issue(
        python(SHADOW, "config.txt", f"token = {SECRET_ENV}"), f"write config.txt token = {SECRET_ENV}\\n"
    )

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.permanent, record.stop_reason
    reason = record.stop_reason or ""
    assert "the agent changed the repository's object store (objects/pack/pack-" in reason, reason
    assert "beflow/1" not in project.branches()
    assert before.same_but_new_objects(RepoState.of(directory)) == []  # (the new pack is the agent's own doing)
    assert pushed(project) == [] and github.pulls == {}


def test_a_shadowing_pack_under_a_name_git_never_gives_one_is_found_all_the_same(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    """git takes every ``objects/pack/*.idx`` for a pack, whatever its name: the agent renames its shadowing pack
    ``shadow.pack``/``shadow.idx`` and writes nothing else that the leak check would read. The run is not published,
    and its reason names the pack (the user's own git now reads the README it forged)."""
    directory = project.directory
    before = RepoState.of(directory)
    packs = '"$(git rev-parse --git-common-dir)/objects/pack"'
    rename = f'cd {packs} && for f in pack-*; do mv "$f" "shadow.${{f##*.}}"; done'
    key = project.new_issue(python(SHADOW, "README.md", "forged"), f"run {rename}", "write a.txt a")

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr + done.stdout
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.permanent, record.stop_reason
    reason = record.stop_reason or ""
    assert "the agent changed the repository's object store (objects/pack/shadow.pack" in reason, reason
    assert "beflow/1" not in project.branches()
    assert before.same_but_new_objects(RepoState.of(directory)) == []  # (the new pack is the agent's own doing)
    assert pushed(project) == [] and github.pulls == {}


def test_a_ref_the_run_builds_on_that_the_agent_moves_fails_the_run_and_other_refs_are_named(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    directory = project.directory
    feature = git(directory, "rev-parse", "feature").strip()
    key = project.new_issue(f"run git update-ref refs/heads/main {feature}", "write a.txt a")

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and not record.permanent
    assert "refs/heads/main moved during the run, which the run builds on or publishes" in (record.stop_reason or "")
    assert "beflow/1" not in project.branches()
    assert pushed(project) == [] and github.pulls == {}

    git(directory, "update-ref", "refs/heads/main", f"{feature}~1")
    key = project.new_issue("run git tag -f planted && git update-ref refs/heads/feature HEAD", "write b.txt b")
    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 0, done.stderr
    record = project.records(key)[0]
    assert record.outcome == "succeeded" and record.refs_moved == ["refs/heads/feature", "refs/tags/planted"]
    assert "refs moved during the run, not by beflow: refs/heads/feature, refs/tags/planted" in done.stderr
    assert "b.txt" in project.branch_files(f"beflow/{key}")
    assert pushed(project) == [f"refs/heads/beflow/{key}"] and len(github.pulls) == 1
    shown = beflow_run(project, "runs", "show", record.id, env=HOST)
    assert "refs moved during the run, not by beflow: refs/heads/feature, refs/tags/planted" in shown.stdout


def test_an_agent_that_repacks_and_writes_an_object_it_has_is_no_tamperer(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    """A repack (as ``git gc`` makes one) packs the loose objects and removes them, ``pack-refs`` packs the refs, and
    writing an object that exists already touches its file: all leave every object and ref what it was, and the run
    is published."""
    key = project.new_issue(
        "run git hash-object -w README.md && git repack -d -n -q && git pack-refs --all", "write a.txt a"
    )

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 0, done.stderr
    record = project.only_record()
    assert record.outcome == "succeeded", record.stop_reason
    assert project.branch_files("beflow/1")["a.txt"] == "a"
    assert not record.refs_moved
    assert pushed(project) == ["refs/heads/beflow/1"] and len(github.pulls) == 1


def test_in_the_sandbox_the_agents_objects_are_its_own_and_beflow_brings_in_what_the_run_needs(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    """The agent commits in the sandbox into the run's own object directory (the user's objects a read-only
    alternate); beflow brings the commit, and what the agent staged, into the user's store, every object re-hashed.
    The alternates and the run's directory itself are beyond the agent's reach."""
    project.configure(sandbox={"enabled": True})
    directory = project.directory
    before = RepoState.of(directory)
    common = '"$(git rev-parse --git-common-dir)"'
    readme = git(directory, "rev-parse", "HEAD:README.md").strip()  # a loose object of the user's
    probes = [
        f"echo alternates: $(echo /elsewhere 2>&1 >> {common}/objects/info/alternates && echo WROTE)",
        'echo moved: $(mv "$(git rev-parse --git-dir)/beflow-objects" /tmp/taken 2>&1 && echo MOVED)',
        f"echo store: $(test -e {common}/objects/{readme[:2]}/{readme[2:]} && echo SEEN)",
    ]
    key = project.new_issue(
        "write a.txt a\\n",
        "run git add a.txt && git commit -q -m agent-commit",
        "write b.txt b\\n",
        "run git add b.txt",
        "run { " + "; ".join(probes) + "; } > probe.txt 2>&1",
    )

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 0, done.stderr
    record = project.only_record()
    assert record.outcome == "succeeded" and record.sandboxed, record.stop_reason
    files = project.branch_files("beflow/1")
    assert (files["a.txt"], files["b.txt"]) == ("a\n", "b\n")
    assert git(directory, "log", "--format=%s", "beflow/1").split("\n")[1] == "agent-commit"
    found = {name: said for name, _, said in (line.partition(":") for line in files["probe.txt"].splitlines())}
    assert "WROTE" not in found["alternates"] and "Read-only file system" in found["alternates"]
    assert "MOVED" not in found["moved"]
    assert "SEEN" not in found["store"]  # the user's objects are not where the agent writes (git reads them)
    now = RepoState.of(directory)
    assert before.same_but_new_objects(now) == ["refs"]  # beflow/1, and only it
    git(directory, "fsck", "--no-dangling")  # every object the branch needs is in the user's store, sound
    assert pushed(project) == ["refs/heads/beflow/1"] and len(github.pulls) == 1  # the push finds them there


def test_in_the_sandbox_an_object_the_agent_forges_reaches_nothing_of_the_users(
    project: AutoProject, github: FakeGitHub, no_leftover_processes: None
) -> None:
    """The agent rewrites the object of a file of the run's start where the repository's objects are: in the
    sandbox that is its own directory (the user's store read-only), and beflow brings nothing of it in."""
    project.configure(sandbox={"enabled": True})
    directory = project.directory
    before = RepoState.of(directory)
    key = project.new_issue(python(FORGE, "README.md", "forged"), "write a.txt a\\n")

    done = beflow_run(project, "--auto", key, env=HOST)

    assert done.code == 1, done.stderr
    record = project.only_record()
    assert record.outcome == "failed" and record.commit is None and record.permanent and record.sandboxed
    readme = git(directory, "rev-parse", "HEAD:README.md").strip()
    reason = record.stop_reason or ""
    assert "the agent wrote objects that are not what their names say" in reason and readme[2:] in reason, reason
    not_published(project, before, github)
    assert git(directory, "cat-file", "blob", readme) == "# sample\n"
