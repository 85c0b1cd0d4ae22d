"""Worktrees on ``beflow/<key>`` branches, included files and commits, with real git."""

from __future__ import annotations

import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from beflow.errors import BeflowError, ConfigError, UsageError
from beflow.repository import git
from tests.conftest import git as run_git


@pytest.fixture
def worktrees(tmp_path: Path) -> Path:
    return tmp_path / "worktrees"


def test_a_plain_key_is_its_own_branch_and_path(worktrees: Path) -> None:
    assert git.branch_for("42") == "beflow/42"
    assert git.worktree_path(worktrees, "42") == worktrees.resolve() / "42"


@pytest.mark.parametrize("key", ["owner/repo#12", "../../etc", "a b", "x.lock", "..", "feat/ünïcode"])
def test_a_key_that_needs_sanitizing_gets_a_hash_suffix_and_stays_inside_the_worktrees_dir(
    worktrees: Path, key: str
) -> None:
    branch = git.branch_for(key)
    path = git.worktree_path(worktrees, key)

    assert path.parent == worktrees.resolve()
    name = branch.removeprefix("beflow/")
    assert path.name == name and "/" not in name and ".." not in name and not name.endswith(".lock")
    assert len(name.rsplit("-", 1)[1]) == 8  # the hash suffix: two keys that sanitize alike stay apart
    run_git(worktrees.parent, "check-ref-format", "--branch", branch)


def test_keys_that_sanitize_alike_stay_distinct(worktrees: Path) -> None:
    assert git.branch_for("a/b") != git.branch_for("a b")
    assert git.worktree_path(worktrees, "a/b") != git.worktree_path(worktrees, "a b")


def test_a_worktree_starts_from_the_base_and_a_later_one_continues_the_branch(repo: Path, worktrees: Path) -> None:
    repository = git.open_repo(repo)
    base = run_git(repo, "rev-parse", "HEAD").strip()
    path = git.worktree_path(worktrees, "7")

    first = git.create_worktree(repository, path, "beflow/7", "HEAD")
    assert (first.base_commit, first.continued, first.tip) == (base, False, None)
    (path / "work.txt").write_text("attempt 1\n")
    commit = git.commit_all(path, "attempt 1")
    assert "beflow/7" not in run_git(repo, "branch")  # the worktree's HEAD is detached: only publish moves it
    assert commit is not None
    git.publish(path, "beflow/7", commit, first.tip, "attempt 1")
    git.remove_worktree(repository, path)
    assert not path.exists() and "beflow/7" in run_git(repo, "branch")

    second = git.create_worktree(repository, path, "beflow/7", "HEAD")
    assert (second.base_commit, second.continued, second.tip) == (commit, True, commit)
    assert (path / "work.txt").read_text() == "attempt 1\n"
    repository.close()


def test_worktrees_made_at_the_same_time_all_succeed(repo: Path, worktrees: Path) -> None:
    """Parallel runs (watch) make worktrees at once; git alone races on that, beflow takes turns."""

    def make(index: int) -> git.Worktree:
        handle = git.open_repo(repo)
        try:
            return git.create_worktree(handle, worktrees / f"w{index}", f"beflow/w{index}", "HEAD")
        finally:
            handle.close()

    with ThreadPoolExecutor(max_workers=8) as pool:
        made = list(pool.map(make, range(40)))

    assert sorted(w.path.name for w in made) == sorted(f"w{i}" for i in range(40))
    assert len(run_git(repo, "worktree", "list").splitlines()) == 41


def test_a_base_that_is_not_a_commit_is_a_config_error(repo: Path, worktrees: Path) -> None:
    with pytest.raises(ConfigError, match=r"worktrees\.base: 'nope' is not a commit"):
        git.create_worktree(git.open_repo(repo), worktrees / "1", "beflow/1", "nope")


def test_a_branch_checked_out_elsewhere_is_refused_with_where(repo: Path, worktrees: Path, tmp_path: Path) -> None:
    repository = git.open_repo(repo)
    run_git(repo, "worktree", "add", "-q", "-b", "beflow/1", str(tmp_path / "mine"))
    with pytest.raises(BeflowError, match=r"branch beflow/1 is checked out in .*mine"):
        git.create_worktree(repository, worktrees / "1", "beflow/1", "HEAD")


def test_outside_a_git_repository_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not inside a git repository"):
        git.open_repo(tmp_path)


def test_a_directory_in_the_worktrees_place_that_git_does_not_know_is_kept_aside_and_the_run_goes_on(
    repo: Path, worktrees: Path
) -> None:
    path = worktrees / "1"
    (path / "sub").mkdir(parents=True)
    (path / "sub" / "work.txt").write_text("someone's work\n")
    with git.open_repo(repo) as repository:
        made = git.create_worktree(repository, path, "beflow/1", "HEAD")
        again = git.create_worktree(repository, path, "beflow/1", "HEAD")  # the next run: a worktree now
    assert made.set_aside == worktrees / "1.left-1" and again.set_aside is None
    assert (worktrees / "1.left-1" / "sub" / "work.txt").read_text() == "someone's work\n"  # kept, whole
    assert (path / ".git").is_file() and not (path / "sub").exists()


def test_included_files_are_copied_but_never_over_tracked_ones(repo: Path, worktrees: Path) -> None:
    (repo / ".gitignore").write_text(".env\nsecrets/\nbuild/\n")
    (repo / "settings.ini").write_text("tracked\n")
    (repo / ".worktreeinclude").write_text("# one glob a line\n\nsecrets/*.key\nsettings.ini\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-q", "-m", "setup")
    (repo / ".env").write_text("TOKEN=1\n")
    (repo / "secrets").mkdir()
    (repo / "secrets" / "api.key").write_text("k\n")
    (repo / "build").mkdir()
    (repo / "build" / "out.bin").write_text("not wanted\n")
    (repo / "settings.ini").write_text("local edit\n")
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")

    copied = git.copy_included(repo, path, [".env"])

    assert copied == [".env", "secrets/api.key"]
    assert (path / ".env").read_text() == "TOKEN=1\n" and (path / "secrets" / "api.key").read_text() == "k\n"
    assert not (path / "build").exists()
    assert (path / "settings.ini").read_text() == "tracked\n"  # the checkout's version, from git
    assert not git.is_dirty(path)  # ignored files are not the agent's work


def test_commit_all_leaves_an_untracked_acpxrc_out_and_reports_no_changes(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    (path / git.ACPXRC).write_text('{"mcpServers": []}')

    assert git.commit_all(path, "nothing") is None
    assert not git.is_dirty(path)

    (path / "new.txt").write_text("x\n")
    commit = git.commit_all(path, "new")
    assert commit is not None
    assert run_git(path, "show", "--name-only", "--format=", commit).split() == ["new.txt"]
    assert git.changed_files(path, run_git(repo, "rev-parse", "main").strip(), commit) == ["A\tnew.txt"]


def test_commit_all_without_a_git_identity_commits_as_beflow(
    repo: Path, worktrees: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    empty = tmp_path / "empty.gitconfig"
    empty.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    (path / "new.txt").write_text("x\n")

    git.commit_all(path, "new")

    assert run_git(path, "log", "-1", "--format=%an <%ae>").strip() == "beflow <beflow@localhost>"


def test_a_commit_that_git_cannot_make_is_an_error_naming_the_worktree(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    run_git(path, "init", "-q", "nested")  # a repository without a commit cannot be staged

    with pytest.raises(BeflowError, match=f"git add failed in {path}"):
        git.commit_all(path, "x")


def test_a_git_command_that_hangs_is_stopped_at_the_timeout_with_what_it_started(
    repo: Path, worktrees: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A post-checkout hook that never returns (here: until a file appears that nobody writes) would hold
    ``git worktree add`` — and the run — forever: git is killed with the hook at ``GIT_TIMEOUT``.

    The timeout has to fall while the hook runs: on a loaded machine git may take longer than a short timeout to
    get there, and a timeout that fell before the hook started says nothing of the hook. Such a try is made again,
    on a worktree of its own, with twice the time."""
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text(
        f"#!/bin/sh\necho $$ > {repo / 'hook.pid.new'} && mv {repo / 'hook.pid.new'} {repo / 'hook.pid'}\n"
        f"for i in $(seq 1200); do [ -e {repo / 'never'} ] && exit 0; sleep 0.05; done\ntouch {repo / 'hook.ended'}\n"
    )
    hook.chmod(0o755)

    for attempt, timeout in enumerate((1.0, 2.0, 4.0, 8.0, 16.0)):
        monkeypatch.setattr(git, "GIT_TIMEOUT", timeout)
        repository = git.open_repo(repo)
        with pytest.raises(git.GitError) as raised:
            git.create_worktree(
                repository, git.worktree_path(worktrees, str(7 + attempt)), f"beflow/{7 + attempt}", "HEAD"
            )
        repository.close()
        assert f"did not finish within {timeout:g} s and was stopped" in raised.value.message
        if (repo / "hook.pid").exists():
            break

    assert raised.value.message.startswith(f"git worktree add did not finish within {timeout:g} s and was stopped")
    pid = int((repo / "hook.pid").read_text())
    assert psutil.pid_exists(pid) is False or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (repo / "hook.ended").exists(), "the hook was not stopped: it ran to its end"


# -- the managed file stays out of the run's commits -------------------------------------------------------------


def _agent_git(path: Path, env: dict[str, str], *args: str) -> str:
    """git as the agent runs it: in the worktree, with the environment beflow gives acpx."""
    import os
    import subprocess

    done = subprocess.run(["git", *args], cwd=path, env={**os.environ, **env}, capture_output=True, text=True)
    return done.stdout + done.stderr


def test_an_agents_add_all_leaves_an_untracked_managed_file_out_and_the_users_repository_unchanged(
    repo: Path, worktrees: Path
) -> None:
    exclude = repo / ".git" / "info" / "exclude"
    before = exclude.read_bytes()
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    env = git.hide_managed_file(path)
    (path / git.ACPXRC).write_text('{"mcpServers": [{"name": "s", "env": [{"name": "K", "value": "secret"}]}]}')
    (path / "work.txt").write_text("x\n")

    _agent_git(path, env, "add", "-A")
    _agent_git(path, env, "commit", "-q", "-m", "agent")

    assert run_git(path, "show", "--name-only", "--format=", "HEAD").split() == ["work.txt"]
    assert exclude.read_bytes() == before  # shared with the user's checkout: never written
    assert (repo / git.ACPXRC).exists() is False and run_git(repo, "status", "--porcelain") == ""


def test_a_tracked_managed_file_is_skipped_by_the_agents_commit_all_and_given_back_to_git_after(
    repo: Path, worktrees: Path
) -> None:
    (repo / git.ACPXRC).write_text('{"ttl": 1}\n')
    run_git(repo, "add", git.ACPXRC)
    run_git(repo, "commit", "-q", "-m", "acpxrc")
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    env = git.hide_managed_file(path)
    (path / git.ACPXRC).write_text('{"ttl": 1, "mcpServers": [{"name": "s"}]}\n')

    _agent_git(path, env, "commit", "-q", "-a", "-m", "agent")
    _agent_git(path, env, "add", "-A")

    assert _agent_git(path, env, "diff", "--cached", "--name-only").strip() == ""
    (path / git.ACPXRC).write_text('{"ttl": 1}\n')  # restored
    git.unhide_managed_file(path)
    assert "S " not in run_git(path, "ls-files", "-v", git.ACPXRC)[:2]
    assert not git.is_dirty(path)


def test_the_users_global_excludes_still_apply_to_the_agent(repo: Path, worktrees: Path, tmp_path: Path) -> None:
    ignore = tmp_path / "global-ignore"
    ignore.write_text("*.log\n")
    run_git(repo, "config", "core.excludesFile", str(ignore))
    path = worktrees / "1"
    git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    env = git.hide_managed_file(path)
    (path / "debug.log").write_text("x\n")
    (path / git.ACPXRC).write_text("{}")

    assert _agent_git(path, env, "status", "--porcelain") == ""


SECRET = b"sk-live-0123456789abcdef"
INJECTED = b'{"mcpServers": [{"name": "s", "env": [{"name": "K", "value": "sk-live-0123456789abcdef"}]}]}\n'


def test_find_leaks_names_the_commit_that_holds_injected_content_wherever_it_is(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    start = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "clean.txt").write_text("fine\n")
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", "clean")
    assert git.find_leaks(path, start, git.head(path), [INJECTED, SECRET], managed=True) == []

    (path / "backup.json").write_bytes(INJECTED)
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", "copy")
    leaky = git.head(path)
    (path / "backup.json").unlink()
    run_git(path, "commit", "-q", "-a", "-m", "gone again")  # the history still holds it

    leaks = git.find_leaks(path, start, git.head(path), [INJECTED, SECRET], managed=True)
    assert [(leak.commit, leak.path) for leak in leaks] == [(leaky, "backup.json")]


def test_find_leaks_catches_the_managed_path_and_a_secret_value_but_not_one_that_was_there_before(
    repo: Path, worktrees: Path
) -> None:
    (repo / "settings.env").write_bytes(b"KEY=" + SECRET + b"\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-q", "-m", "the user's own copy of the value")
    path = worktrees / "1"
    start = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "settings.env").write_bytes(b"KEY=" + SECRET + b"\nMORE=1\n")  # the value was there before: fine
    run_git(path, "commit", "-q", "-a", "-m", "edit")
    assert git.find_leaks(path, start, git.head(path), [INJECTED, SECRET], managed=True) == []

    (path / "notes.md").write_bytes(b"token: " + SECRET + b"\n")
    (path / git.ACPXRC).write_text('{"edited": true}')
    run_git(path, "add", "-f", ".")
    run_git(path, "commit", "-q", "-m", "leak")
    leaks = git.find_leaks(path, start, git.head(path), [INJECTED, SECRET], managed=True)
    assert sorted(leak.path for leak in leaks) == [git.ACPXRC, "notes.md"]
    assert git.find_leaks(path, start, git.head(path), [], managed=False) == []


def test_find_leaks_reads_commit_messages_and_file_names_too(repo: Path, worktrees: Path) -> None:
    """Both are pushed with the branch: a secret said there leaves as surely as one in a file."""
    path = worktrees / "1"
    start = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "plain.txt").write_text("nothing to see\n")
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", f"note {SECRET.decode()}")
    said = git.head(path)
    (path / f"d-{SECRET.decode()}").write_text("x\n")
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", "a file")
    named = git.head(path)

    leaks = git.find_leaks(path, start, git.head(path), [SECRET], managed=False)

    assert [(leak.commit, leak.path) for leak in leaks] == [(said, "its message"), (named, "a file's name")]
    assert all(SECRET.decode() not in leak.describe() for leak in leaks)


def test_find_leaks_exempts_a_secret_only_on_the_word_of_an_earlier_version_whose_bytes_hash_to_its_id(
    repo: Path, worktrees: Path
) -> None:
    """An earlier version that seems to hold the value (its loose object rewritten in the store, so git itself reads
    the forged bytes) exempts nothing: the blob is corrupt, and that is a leak in itself."""
    (repo / "settings.env").write_text("KEY=none\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-q", "-m", "settings")
    old = run_git(repo, "rev-parse", "HEAD:settings.env").strip()
    forged = b"KEY=" + SECRET + b"\n"
    loose = repo / ".git" / "objects" / old[:2] / old[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(forged) + forged))
    assert run_git(repo, "cat-file", "blob", old).encode() == forged  # git takes it as it is
    path = worktrees / "1"
    start = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "settings.env").write_bytes(forged)
    run_git(path, "commit", "-q", "-a", "-m", "the value, seemingly there before")

    leaks = git.find_leaks(path, start, git.head(path), [SECRET], managed=False)

    assert [leak.path for leak in leaks] == ["settings.env"]
    assert f"object {old} is corrupt" in leaks[0].describe()


def test_find_leaks_reads_the_headers_of_a_commit_and_refuses_one_too_large_to_read(
    repo: Path, worktrees: Path
) -> None:
    path = worktrees / "1"
    start = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    run_git(path, "-c", f"user.name=Me {SECRET.decode()}", "commit", "-q", "--allow-empty", "-m", "plain")
    named = git.head(path)
    (path / "message").write_text("x" * (git.MAX_COMMIT + 1))
    run_git(path, "commit", "-q", "--allow-empty", "-F", "message")
    huge = git.head(path)

    leaks = git.find_leaks(path, start, huge, [SECRET], managed=False)

    assert [(leak.commit, leak.path) for leak in leaks] == [
        (named, "its author, committer or another header"),
        (huge, "its message"),
    ]
    assert "is unpublishable: its message is over 1 MiB" in leaks[1].describe()
    assert git.find_leaks(path, start, huge, [], managed=False)  # with no secret to look for, too


def test_publish_moves_the_branch_only_from_where_it_was(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    tree = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD")
    (path / "a.txt").write_text("a\n")
    first = git.commit_all(path, "a")
    assert first is not None
    git.publish(path, "beflow/1", first, None, "run")
    assert run_git(repo, "rev-parse", "beflow/1").strip() == first
    with pytest.raises(BeflowError, match="changed during the run"):
        git.publish(path, "beflow/1", first, tree.base_commit, "run")  # someone else moved it meanwhile


def test_uncommit_turns_the_runs_commits_into_uncommitted_changes(repo: Path, worktrees: Path) -> None:
    path = worktrees / "1"
    start = git.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "a.txt").write_text("a\n")
    made = git.commit_all(path, "a")
    git.uncommit(path, start)
    assert git.head(path) == start and (path / "a.txt").read_text() == "a\n" and git.is_dirty(path)
    assert made not in run_git(path, "log", "--all", "--format=%H")


def test_a_worktree_whose_directory_vanished_is_pruned_before_the_next_one_is_made(
    repo: Path, worktrees: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repository = git.open_repo(repo)
    gone = git.worktree_path(worktrees, "1")
    git.create_worktree(repository, gone, "beflow/1", "HEAD")
    run_git(repo, "branch", "beflow/1", "HEAD")
    run_git(gone, "checkout", "-q", "beflow/1")  # as a killed beflow of an older version left it
    for path in sorted(gone.rglob("*"), reverse=True):
        path.unlink() if path.is_file() or path.is_symlink() else path.rmdir()
    gone.rmdir()
    monkeypatch.setattr(git, "_PRUNED", set())  # a new process

    # The registration of the vanished worktree holds beflow/1: without a prune the branch seems checked out.
    again = git.create_worktree(repository, git.worktree_path(worktrees, "other"), "beflow/1", "HEAD")

    assert again.continued and str(gone) not in run_git(repo, "worktree", "list")


def test_the_default_base_is_read_without_git_and_names_the_same_commit(repo: Path) -> None:
    repository = git.open_repo(repo)
    assert git.resolve_base(repository, "HEAD") == run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "checkout", "-q", "--detach")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", "detached")
    assert git.resolve_base(repository, "HEAD") == run_git(repo, "rev-parse", "HEAD").strip()
    run_git(repo, "pack-refs", "--all")
    run_git(repo, "checkout", "-q", "-")
    assert git.resolve_base(repository, "HEAD") == run_git(repo, "rev-parse", "HEAD").strip()
