"""``beflow.system.files``: the one way beflow writes the files it manages, and opens those an agent could have made."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from beflow.system.files import (
    FileTooLarge,
    NotRegularError,
    append,
    atomic_write,
    create_new,
    list_directory,
    make_directory,
    open_append,
    read_capped,
    read_regular,
    read_tail,
    remove,
)


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    """An empty directory of the test's own (tmp_path also holds the isolated home)."""
    path = tmp_path / "files"
    path.mkdir()
    return path


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_text_is_written_as_utf8_with_the_default_mode(directory: Path) -> None:
    target = directory / "file.txt"

    atomic_write(target, "héllo\n")

    assert target.read_bytes() == "héllo\n".encode()
    assert mode_of(target) == 0o644


def test_bytes_and_an_explicit_mode_are_kept_whatever_the_umask(directory: Path) -> None:
    target = directory / "secret"
    previous = os.umask(0o077)
    try:
        atomic_write(target, b"\x00token", mode=0o600)
        atomic_write(directory / "script", "#!/bin/sh\n", mode=0o755)
    finally:
        os.umask(previous)

    assert target.read_bytes() == b"\x00token"
    assert mode_of(target) == 0o600
    assert mode_of(directory / "script") == 0o755


def test_an_existing_file_is_replaced_and_parents_are_created(directory: Path) -> None:
    target = directory / "a" / "b" / "file"
    atomic_write(target, "old, and longer than the new content")

    atomic_write(target, "new")

    assert target.read_text() == "new"
    assert os.listdir(target.parent) == ["file"]  # no temporary file left


def test_a_failed_write_leaves_the_old_content_and_no_temporary_file(directory: Path) -> None:
    target = directory / "target"
    target.mkdir()  # a directory cannot be replaced by a file: the rename fails
    (target / "inside").write_text("kept")

    with pytest.raises(OSError):
        atomic_write(target, "data")

    assert os.listdir(directory) == ["target"]
    assert (target / "inside").read_text() == "kept"


def test_text_that_cannot_be_encoded_writes_nothing(directory: Path) -> None:
    target = directory / "file"
    target.write_text("old")

    with pytest.raises(UnicodeEncodeError):
        atomic_write(target, "\ud800")

    assert target.read_text() == "old"
    assert os.listdir(directory) == ["file"]


def test_remove_is_fine_with_a_missing_file(directory: Path) -> None:
    target = directory / "file"
    atomic_write(target, "x")

    remove(target)
    remove(target)

    assert not target.exists()


# --- below a trusted directory: no symlink followed, regular files only, never waited on, capped ----------------


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory beside the trusted one, holding what a symlink would lead to (a user's file)."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret").write_text("aws_secret_access_key = outside-key\n")
    return path


def test_a_file_below_is_read_and_a_symlink_in_its_place_is_refused_unread(directory: Path, outside: Path) -> None:
    (directory / "runs" / "1").mkdir(parents=True)
    (directory / "runs" / "1" / "stderr.log").write_text("ok\n")
    assert read_regular(directory / "runs" / "1" / "stderr.log", below=directory, limit=100) == b"ok\n"

    (directory / "runs" / "1" / "stderr.log").unlink()
    (directory / "runs" / "1" / "stderr.log").symlink_to(outside / "secret")

    with pytest.raises(NotRegularError, match=r"stderr\.log is a symlink, not a regular file"):
        read_regular(directory / "runs" / "1" / "stderr.log", below=directory)
    with pytest.raises(NotRegularError, match="is a symlink"):
        read_tail(directory / "runs" / "1" / "stderr.log", below=directory, limit=10)


def test_a_symlinked_directory_on_the_way_is_refused_for_reading_and_writing(directory: Path, outside: Path) -> None:
    (directory / "runs").mkdir()
    (directory / "runs" / "1").symlink_to(outside)  # the run's directory replaced by a link to the user's
    target = directory / "runs" / "1" / "secret"

    with pytest.raises(NotRegularError, match=r"runs/1 is a symlink, not a directory"):
        read_regular(target, below=directory)
    with pytest.raises(NotRegularError, match="not a directory"):
        append(target, b"appended\n", below=directory)
    with pytest.raises(NotRegularError, match="not a directory"):
        atomic_write(target, "replaced", below=directory)
    with pytest.raises(NotRegularError, match="not a directory"):
        make_directory(directory / "runs" / "1" / "hooks", below=directory)
    with pytest.raises(NotRegularError, match="not a directory"):
        list_directory(directory / "runs" / "1", below=directory)

    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_text() == "aws_secret_access_key = outside-key\n"


def test_a_hard_link_below_is_refused_for_reading_and_for_appending(directory: Path, outside: Path) -> None:
    if os.stat(outside).st_dev != os.stat(directory).st_dev:
        pytest.skip("the two directories are on different filesystems: no hard link between them")
    os.link(outside / "secret", directory / "stderr.log")  # the user's file under a name in the record

    with pytest.raises(NotRegularError, match=r"stderr\.log is a file with 2 names \(a hard link\)"):
        read_regular(directory / "stderr.log", below=directory)
    with pytest.raises(NotRegularError, match="not a file of its own"):
        append(directory / "stderr.log", b"appended\n", below=directory)
    assert (outside / "secret").read_text() == "aws_secret_access_key = outside-key\n"


def test_a_symlinked_trusted_directory_itself_is_followed(tmp_path: Path, outside: Path) -> None:
    # The trusted directory was resolved before any agent ran (a project reached through a linked home, say).
    (tmp_path / "linked").symlink_to(outside)
    assert read_regular(tmp_path / "linked" / "secret", below=tmp_path / "linked").startswith(b"aws")


def test_a_fifo_is_refused_for_reading_and_for_appending_without_waiting(directory: Path) -> None:
    fifo = directory / "progress.jsonl"
    os.mkfifo(fifo)

    # Nobody writes or reads the FIFO: an open that waited would never return.
    with pytest.raises(NotRegularError, match=r"progress\.jsonl is a FIFO"):
        read_regular(fifo, below=directory)
    with pytest.raises(NotRegularError, match="is a FIFO"):
        append(fifo, b"line\n", below=directory)
    with pytest.raises(NotRegularError, match="is a FIFO"):
        read_regular(fifo, limit=10)  # without a trusted directory too


def test_a_character_device_is_refused_unopened_and_a_link_to_one_too(directory: Path) -> None:
    with pytest.raises(NotRegularError, match="zero is a character device"):
        read_regular(Path("/dev/zero"), below=Path("/dev"))
    with pytest.raises(NotRegularError, match="a character device"):
        read_regular(Path("/dev/zero"), limit=1 << 20)  # before: read until memory ran out
    (directory / "progress.jsonl").symlink_to("/dev/zero")
    with pytest.raises(NotRegularError, match="is a symlink"):
        read_tail(directory / "progress.jsonl", below=directory, limit=1 << 20)


def test_a_read_beyond_its_cap_is_refused(directory: Path) -> None:
    (directory / "run.json").write_bytes(b"x" * 101)

    with pytest.raises(FileTooLarge, match="larger than 100 bytes"):
        read_regular(directory / "run.json", below=directory, limit=100)
    assert read_regular(directory / "run.json", below=directory, limit=101) == b"x" * 101
    assert read_tail(directory / "run.json", below=directory, limit=10) == (b"x" * 10, True)
    assert read_tail(directory / "run.json", below=directory, limit=200) == (b"x" * 101, False)


def test_a_file_that_grows_while_it_is_read_is_capped_all_the_same(directory: Path) -> None:
    path = directory / "transcript.jsonl"
    path.write_bytes(b"a" * 10)
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.fstat(fd).st_size == 10  # what a size check before the read saw
        with path.open("ab") as writer:
            writer.write(b"b" * 100)  # the agent appends meanwhile
        with pytest.raises(FileTooLarge):
            read_capped(fd, path, 50)
    finally:
        os.close(fd)


def test_appending_below_makes_the_missing_directories_and_writes_through_no_link(
    directory: Path, outside: Path
) -> None:
    log = directory / "runs" / "1" / "hooks" / "after_run.log"
    with open_append(log, below=directory) as handle:
        handle.write(b"one\n")
    append(log, b"two\n", below=directory)
    assert log.read_bytes() == b"one\ntwo\n"

    log.unlink()
    log.symlink_to(outside / "secret")  # ~/.bashrc, say
    with pytest.raises(NotRegularError, match=r"after_run\.log is a symlink"):
        open_append(log, below=directory)
    dangling = directory / "runs" / "1" / "hooks" / "before_run.log"
    dangling.symlink_to(outside / "planted")
    with pytest.raises(NotRegularError, match=r"before_run\.log is a symlink"):
        append(dangling, b"x", below=directory)
    assert sorted(os.listdir(outside)) == ["secret"]
    assert (outside / "secret").read_text() == "aws_secret_access_key = outside-key\n"


def test_an_atomic_write_below_replaces_a_symlink_and_never_writes_through_it(directory: Path, outside: Path) -> None:
    (directory / "runs").mkdir()
    (directory / "runs" / "run.json").symlink_to(outside / "secret")

    atomic_write(directory / "runs" / "run.json", "{}\n", below=directory, durable=True)

    assert not (directory / "runs" / "run.json").is_symlink()
    assert (directory / "runs" / "run.json").read_text() == "{}\n"
    assert (outside / "secret").read_text() == "aws_secret_access_key = outside-key\n"
    assert os.listdir(directory / "runs") == ["run.json"]


def test_create_new_writes_only_where_nothing_is_not_even_a_dangling_link(directory: Path, outside: Path) -> None:
    source = outside / "secret"
    worktree = directory / "worktree"
    worktree.mkdir()
    fd = os.open(source, os.O_RDONLY)
    try:
        assert create_new(worktree / "config" / ".env", fd, below=worktree, mode=0o600)
        (worktree / ".env").symlink_to(outside / "planted.env")  # dangling: the agent committed it
        assert not create_new(worktree / ".env", fd, below=worktree, mode=0o600)
        (worktree / "linked").symlink_to(outside)
        with pytest.raises(NotRegularError, match="linked is a symlink, not a directory"):
            create_new(worktree / "linked" / ".env", fd, below=worktree, mode=0o600)
    finally:
        os.close(fd)

    assert (worktree / "config" / ".env").read_bytes() == source.read_bytes()
    assert mode_of(worktree / "config" / ".env") == 0o600
    assert sorted(os.listdir(outside)) == ["secret"]


def test_a_path_outside_the_trusted_directory_is_a_bug(directory: Path, outside: Path) -> None:
    with pytest.raises(ValueError, match="not a path below"):
        read_regular(directory / ".." / "outside" / "secret", below=directory)
    with pytest.raises(ValueError):
        read_regular(outside / "secret", below=directory)
