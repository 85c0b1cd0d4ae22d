"""The check of every commit of a run for injected bytes and secret values, each object re-hashed as it is read."""

from __future__ import annotations

import zlib
from pathlib import Path

from beflow.paths import ACPXRC
from beflow.repository import git, leaks, refs, worktrees
from tests.conftest import git as run_git

SECRET = b"sk-live-0123456789abcdef"
INJECTED = b'{"mcpServers": [{"name": "s", "env": [{"name": "K", "value": "sk-live-0123456789abcdef"}]}]}\n'


def test_find_leaks_names_the_commit_that_holds_injected_content_wherever_it_is(
    repo: Path, worktrees_dir: Path
) -> None:
    path = worktrees_dir / "1"
    start = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "clean.txt").write_text("fine\n")
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", "clean")
    assert leaks.find_leaks(path, start, refs.head(path), [INJECTED, SECRET], managed=True) == []

    (path / "backup.json").write_bytes(INJECTED)
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", "copy")
    leaky = refs.head(path)
    (path / "backup.json").unlink()
    run_git(path, "commit", "-q", "-a", "-m", "gone again")  # the history still holds it

    found = leaks.find_leaks(path, start, refs.head(path), [INJECTED, SECRET], managed=True)
    assert [(leak.commit, leak.path) for leak in found] == [(leaky, "backup.json")]


def test_find_leaks_catches_the_managed_path_and_a_secret_value_but_not_one_that_was_there_before(
    repo: Path, worktrees_dir: Path
) -> None:
    (repo / "settings.env").write_bytes(b"KEY=" + SECRET + b"\n")
    run_git(repo, "add", ".")
    run_git(repo, "commit", "-q", "-m", "the user's own copy of the value")
    path = worktrees_dir / "1"
    start = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "settings.env").write_bytes(b"KEY=" + SECRET + b"\nMORE=1\n")  # the value was there before: fine
    run_git(path, "commit", "-q", "-a", "-m", "edit")
    assert leaks.find_leaks(path, start, refs.head(path), [INJECTED, SECRET], managed=True) == []

    (path / "notes.md").write_bytes(b"token: " + SECRET + b"\n")
    (path / ACPXRC).write_text('{"edited": true}')
    run_git(path, "add", "-f", ".")
    run_git(path, "commit", "-q", "-m", "leak")
    found = leaks.find_leaks(path, start, refs.head(path), [INJECTED, SECRET], managed=True)
    assert sorted(leak.path for leak in found) == [ACPXRC, "notes.md"]
    assert leaks.find_leaks(path, start, refs.head(path), [], managed=False) == []


def test_find_leaks_reads_commit_messages_and_file_names_too(repo: Path, worktrees_dir: Path) -> None:
    """Both are pushed with the branch: a secret said there leaves as surely as one in a file."""
    path = worktrees_dir / "1"
    start = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "plain.txt").write_text("nothing to see\n")
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", f"note {SECRET.decode()}")
    said = refs.head(path)
    (path / f"d-{SECRET.decode()}").write_text("x\n")
    run_git(path, "add", ".")
    run_git(path, "commit", "-q", "-m", "a file")
    named = refs.head(path)

    found = leaks.find_leaks(path, start, refs.head(path), [SECRET], managed=False)

    assert [(leak.commit, leak.path) for leak in found] == [(said, "its message"), (named, "a file's name")]
    assert all(SECRET.decode() not in leak.describe() for leak in found)


def test_find_leaks_exempts_a_secret_only_on_the_word_of_an_earlier_version_whose_bytes_hash_to_its_id(
    repo: Path, worktrees_dir: Path
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
    path = worktrees_dir / "1"
    start = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    (path / "settings.env").write_bytes(forged)
    run_git(path, "commit", "-q", "-a", "-m", "the value, seemingly there before")

    found = leaks.find_leaks(path, start, refs.head(path), [SECRET], managed=False)

    assert [leak.path for leak in found] == ["settings.env"]
    assert f"object {old} is corrupt" in found[0].describe()


def test_find_leaks_reads_the_headers_of_a_commit_and_refuses_one_too_large_to_read(
    repo: Path, worktrees_dir: Path
) -> None:
    path = worktrees_dir / "1"
    start = worktrees.create_worktree(git.open_repo(repo), path, "beflow/1", "HEAD").base_commit
    run_git(path, "-c", f"user.name=Me {SECRET.decode()}", "commit", "-q", "--allow-empty", "-m", "plain")
    named = refs.head(path)
    (path / "message").write_text("x" * (leaks.MAX_COMMIT + 1))
    run_git(path, "commit", "-q", "--allow-empty", "-F", "message")
    huge = refs.head(path)

    found = leaks.find_leaks(path, start, huge, [SECRET], managed=False)

    assert [(leak.commit, leak.path) for leak in found] == [
        (named, "its author, committer or another header"),
        (huge, "its message"),
    ]
    assert "is unpublishable: its message is over 1 MiB" in found[1].describe()
    assert leaks.find_leaks(path, start, huge, [], managed=False)  # with no secret to look for, too
