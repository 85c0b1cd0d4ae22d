"""The guarded files of a repository's git directory: snapshot, byte-for-byte put back, shared by the runs of one
process, journalled for the next command after a kill."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from beflow.paths import path_key
from beflow.repository import repoguard, snapshot
from tests.conftest import git as run_git


def state(repo: Path) -> dict[str, tuple[int, bytes | None]]:
    root = repo / ".git"
    found: dict[str, tuple[int, bytes | None]] = {}
    for name in snapshot.GUARDED:
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
    # As if this process had been killed: its entries (the repository's, the global git config's) name a process
    # that is gone.
    journals = sorted(repoguard.journal_dir().glob("*.json"))
    assert len(journals) == 2
    for journal in journals:
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


@pytest.mark.parametrize("version", ["with its places", "before places and start times"])
def test_a_journal_an_earlier_beflow_left_when_it_was_killed_is_put_back(repo: Path, version: str) -> None:
    # The entry as beflow wrote it before the journal was shared (its fields in that order, compact): a user may
    # have one on disk from a beflow killed before the upgrade.
    before = state(repo)
    git_dir = (repo / ".git").resolve()
    places = snapshot.snapshot_places(git_dir)
    items = {path: item.model_dump() for path, item in snapshot.take(git_dir, places).items()}
    entry = {"git_dir": str(git_dir), "pid": 2**22 + 1, "pid_start": 1.0, "items": items, "places": places}
    if version != "with its places":
        del entry["pid_start"], entry["places"]
    repoguard.journal_dir().mkdir(parents=True)
    journal = repoguard.journal_dir() / f"{path_key(git_dir)}-{2**22 + 1}.json"
    journal.write_text(json.dumps(entry, separators=(",", ":")))
    run_git(repo, "config", "remote.origin.pushurl", "/evil")

    (said,) = repoguard.recover()

    assert said.startswith(f"put back config in {git_dir} as before the run of beflow pid {2**22 + 1}, which was")
    assert state(repo) == before
    assert not repoguard.has_entries()


def test_a_damaged_journal_entry_is_moved_aside_whatever_it_is(repo: Path) -> None:
    # An agent running as the user can write the journal's directory: what it leaves there must not make every
    # later beflow command warn, nor `beflow restore` fail.
    journal = repoguard.journal_dir()
    journal.mkdir(parents=True)
    (journal / "a-directory.json").mkdir()
    (journal / "a-directory.json" / "inside").write_text("x")
    os.mkfifo(journal / "a-fifo.json")
    (journal / "garbage.json").write_text("{not json")

    assert repoguard.recover() == []

    assert not repoguard.has_entries()
    moved = sorted(path.stem.rsplit("-", 1)[0] for path in (journal / "damaged").iterdir())
    assert moved == ["a-directory", "a-fifo", "garbage"]
    assert repoguard.recover() == []


def test_submodules_git_directories_and_other_worktrees_config_are_guarded(repo: Path, tmp_path: Path) -> None:
    library = tmp_path / "library"
    library.mkdir()
    run_git(library, "init", "-q", "-b", "main")
    run_git(library, "commit", "-q", "--allow-empty", "-m", "lib")
    run_git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(library), "lib/sub")
    run_git(repo, "commit", "-q", "-m", "a submodule")
    other = tmp_path / "users-worktree"
    run_git(repo, "worktree", "add", "-q", "--detach", str(other))
    name = other.name
    git_dir = repo / ".git"
    (git_dir / "worktrees" / name / "config.worktree").write_text("[core]\n\tbare = false\n")
    module = git_dir / "modules" / "lib" / "sub"  # a name with a slash: folders on the way
    assert (module / "config").is_file()

    with repoguard.guarded(repo) as guard:
        run_git(repo / "lib" / "sub", "config", "core.hooksPath", "/tmp/elsewhere")
        (module / "hooks" / "post-checkout").write_text("#!/bin/sh\n")
        (module / "info" / "attributes").write_text("* filter=evil\n")
        (git_dir / "worktrees" / name / "config.worktree").write_text("[core]\n\tfsmonitor = evil\n")
        planted = git_dir / "modules" / "planted"  # a git directory the agent makes up, for a submodule to come
        planted.mkdir()
        (planted / "config").write_text("[core]\n\tfsmonitor = evil\n")

    assert guard.changed == [
        "modules/lib/sub/config",
        "modules/lib/sub/hooks/post-checkout",
        "modules/lib/sub/info/attributes",
        "modules/planted/config",
        f"worktrees/{name}/config.worktree",
    ]
    assert "hooksPath" not in (module / "config").read_text() and not (module / "hooks" / "post-checkout").exists()
    assert (git_dir / "worktrees" / name / "config.worktree").read_text() == "[core]\n\tbare = false\n"
    assert not (planted / "config").exists()


def test_a_worktree_removed_during_the_run_is_no_change(repo: Path, tmp_path: Path) -> None:
    own = tmp_path / "runs-worktree"
    run_git(repo, "worktree", "add", "-q", "--detach", str(own))
    run_git(repo, "config", "extensions.worktreeConfig", "true")
    run_git(own, "config", "--worktree", "core.sparseCheckout", "false")
    with repoguard.guarded(repo) as guard:
        run_git(repo, "worktree", "remove", "--force", str(own))  # the run's own, removed as it ends
    assert guard.changed == []


def test_the_users_global_git_config_is_put_back_and_named(repo: Path, tmp_path: Path) -> None:
    gitconfig = Path(os.environ["GIT_CONFIG_GLOBAL"])
    before = gitconfig.read_bytes()
    with repoguard.guarded(repo) as guard:
        run_git(repo, "config", "--global", "core.hooksPath", str(tmp_path / "planted"))
    assert gitconfig.read_bytes() == before
    assert guard.changed == [str(gitconfig)]
    said = repoguard.describe(guard)
    assert said.startswith(f"the agent changed your global git config {gitconfig}, which a run must not touch")
    saved = Path(said.rsplit(" ", 1)[1].rstrip(")"))
    assert "hooksPath" in next(saved.parent.glob(saved.name.replace("*", "*gitconfig"))).read_text()
    assert not repoguard.has_entries()


def test_runs_of_two_repositories_share_the_global_snapshot(repo: Path, tmp_path: Path) -> None:
    second = tmp_path / "second"
    second.mkdir()
    run_git(second, "init", "-q", "-b", "main")
    gitconfig = Path(os.environ["GIT_CONFIG_GLOBAL"])
    before = gitconfig.read_bytes()
    first = repoguard.begin(repo)
    assert repoguard.agent_at_work(second)  # the first run's agent may have changed what every repository reads
    run_git(repo, "config", "--global", "core.fsmonitor", "/evil")  # the first run's agent
    other = repoguard.begin(second)  # must not take the agent's change for the user's
    assert repoguard.end(other) == [str(gitconfig)]
    assert gitconfig.read_bytes() == before
    assert repoguard.end(first) == [str(gitconfig)]  # found by the other's end, told to both
    assert not repoguard.agent_at_work(second) and not repoguard.has_entries()


def test_what_the_agent_points_a_symlink_at_is_never_taken_for_guarded_nor_removed(repo: Path, tmp_path: Path) -> None:
    users = tmp_path / "users-files"
    users.mkdir()
    (users / "config").write_text("the user's\n")
    (users / "HEAD").write_text("the user's\n")
    gitconfig = Path(os.environ["GIT_CONFIG_GLOBAL"])
    before = gitconfig.read_bytes()
    with repoguard.guarded(repo) as guard:
        (repo / ".git" / "modules").mkdir()
        (repo / ".git" / "modules" / "evil").symlink_to(users)
        gitconfig.unlink()
        gitconfig.symlink_to(users / "config")
    assert (users / "config").read_text() == "the user's\n" and (users / "HEAD").read_text() == "the user's\n"
    assert not gitconfig.is_symlink() and gitconfig.read_bytes() == before
    assert guard.changed == [str(gitconfig)]


def test_a_symlinked_global_config_is_guarded_where_it_points(repo: Path, tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    gitconfig = Path(os.environ["GIT_CONFIG_GLOBAL"])
    target = dotfiles / "gitconfig"
    target.write_bytes(gitconfig.read_bytes())
    gitconfig.unlink()
    gitconfig.symlink_to(target)
    before = target.read_bytes()
    with repoguard.guarded(repo) as guard:
        run_git(repo, "config", "--global", "core.hooksPath", "/tmp/planted")  # git writes through the symlink
    assert target.read_bytes() == before and gitconfig.is_symlink()
    assert guard.changed == [str(target.resolve())]


def test_a_symlink_the_agent_puts_in_the_way_is_never_followed_and_the_run_is_told(repo: Path, tmp_path: Path) -> None:
    users = tmp_path / "another-repositorys-objects-info"
    users.mkdir()
    (users / "alternates").write_text("/the/users/own\n")
    info = repo / ".git" / "objects" / "info"
    with repoguard.guarded(repo) as guard:
        shutil.rmtree(info)
        info.symlink_to(users)  # objects/info/alternates now reads the other repository's file
    assert (users / "alternates").read_text() == "/the/users/own\n"  # neither taken for the agent's nor removed
    assert guard.changed and guard.failed is not None and "a symlink now stands in the way of" in guard.failed
    assert "beflow restore" in repoguard.describe(guard)
