"""The guarded files of a repository's git directory: snapshot, byte-for-byte put back, shared by the runs of one
process, journalled for the next command after a kill."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from beflow import repoguard
from tests.conftest import git as run_git


def state(repo: Path) -> dict[str, tuple[int, bytes | None]]:
    root = repo / ".git"
    found: dict[str, tuple[int, bytes | None]] = {}
    for name in repoguard.GUARDED:
        for path in [root / name, *(root / name).rglob("*")] if (root / name).exists() else []:
            info = path.lstat()
            data = path.read_bytes() if stat.S_ISREG(info.st_mode) else None
            found[str(path.relative_to(root))] = (info.st_mode, data)
    return found


def test_every_change_is_put_back_byte_for_byte_and_named(repo: Path) -> None:
    before = state(repo)
    with repoguard.guarded(repo) as guard:
        run_git(repo, "config", "core.hooksPath", "/tmp/elsewhere")
        (repo / ".git" / "hooks" / "pre-push").write_text("#!/bin/sh\n")
        os.chmod(repo / ".git" / "hooks" / "pre-push", 0o755)
        (repo / ".git" / "hooks" / "update.sample").unlink()
        (repo / ".git" / "info" / "exclude").chmod(0o666)
        (repo / ".git" / "config.worktree").write_text("[core]\n\tfsmonitor = x\n")
        (repo / ".git" / "objects" / "info" / "alternates").write_text("/elsewhere/objects\n")
    assert state(repo) == before
    assert guard.changed == [
        "config",
        "config.worktree",
        "hooks/pre-push",
        "hooks/update.sample",
        "info/exclude",
        "objects/info/alternates",
    ]
    assert not repoguard.has_entries()  # the journal is gone with the guard


def test_an_untouched_repository_is_left_alone(repo: Path) -> None:
    config = repo / ".git" / "config"
    written = config.stat().st_mtime_ns
    with repoguard.guarded(repo) as guard:
        run_git(repo, "commit", "-q", "--allow-empty", "-m", "refs and objects change legitimately")
    assert guard.changed == [] and config.stat().st_mtime_ns == written


def test_runs_of_one_repository_share_the_snapshot_and_each_is_told(repo: Path, tmp_path: Path) -> None:
    other = tmp_path / "wt"
    run_git(repo, "worktree", "add", "-q", "--detach", str(other))
    before = state(repo)
    first = repoguard.begin(repo)
    run_git(other, "config", "remote.origin.pushurl", "/evil")  # the first run's agent, from its worktree
    second = repoguard.begin(other)  # must not take the agent's change for the user's
    assert repoguard.end(second) == ["config"]
    assert state(repo) == before
    assert repoguard.end(first) == ["config"]  # found by the second's end, told to both
    assert not repoguard.has_entries()


def test_the_journal_puts_back_what_a_killed_beflow_left(repo: Path) -> None:
    before = state(repo)
    guard = repoguard.begin(repo)
    run_git(repo, "config", "remote.origin.pushurl", "/evil")
    (repo / ".git" / "hooks" / "post-commit").write_text("#!/bin/sh\n")
    # As if this process had been killed: its entry names a process that is gone.
    (journal,) = repoguard.journal_dir().glob("*.json")
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600  # a config may hold credentials
    entry = repoguard.Entry.model_validate_json(journal.read_text())
    journal.write_text(entry.model_copy(update={"pid": 2**22 + 1, "pid_start": 1.0}).model_dump_json())
    repoguard._ACTIVE.clear()

    (said,) = repoguard.recover()
    assert said.startswith(
        f"put back config, hooks/post-commit in {guard.git_dir} as before the run of beflow pid {2**22 + 1}, "
        "which was killed (the versions found are saved as "
    )
    # What was found is saved aside, in case a change was the user's own (0600: a config may hold credentials).
    saved = Path(said.rsplit(" ", 1)[1].rstrip(")"))
    config = next(saved.parent.glob(saved.name.replace("*", "config")))
    assert "pushurl = /evil" in config.read_text() and stat.S_IMODE(config.stat().st_mode) == 0o600
    assert next(saved.parent.glob(saved.name.replace("*", "hooks%post-commit"))).read_text() == "#!/bin/sh\n"
    assert state(repo) == before
    assert not repoguard.has_entries()
