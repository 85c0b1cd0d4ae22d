"""``atomic_write``: the one way beflow writes the files it manages."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from beflow.files import atomic_write, remove


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
