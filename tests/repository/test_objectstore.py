"""The object store and the refs around an agent, on their own with real git: what changed, and what is only git
doing its work (a freshened object, a repack, packed refs)."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

from beflow.repository import objectstore
from tests.conftest import git


def loose(repo: Path, name: str) -> tuple[str, Path]:
    sha = git(repo, "rev-parse", f"HEAD:{name}").strip()
    return sha, repo / ".git" / "objects" / sha[:2] / sha[2:]


def test_a_loose_object_is_what_its_bytes_hash_to_and_nothing_else(repo: Path, tmp_path: Path) -> None:
    sha, path = loose(repo, "README.md")
    assert objectstore.check_loose(path, sha) is None
    data = path.read_bytes()
    forged = tmp_path / "forged"
    forged.write_bytes(zlib.compress(b"blob 7\0forged!"))
    assert objectstore.check_loose(forged, sha) == "its bytes are not the object its name says"
    forged.write_bytes(data[:-4])
    assert objectstore.check_loose(forged, sha) == "cut short or too long"
    forged.write_bytes(b"garbage")
    assert objectstore.check_loose(forged, sha) == "not a zlib stream"
    forged.write_bytes(zlib.compress(b"blob 99\0short"))
    assert objectstore.check_loose(forged, sha) == "cut short or too long"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert objectstore.check_loose(fifo, sha) == "not a regular file"  # never waited on
    link = tmp_path / "link"
    link.symlink_to(path)
    assert (objectstore.check_loose(link, sha) or "").startswith("unreadable")  # never followed


def test_what_git_does_itself_is_no_change_and_a_rewritten_object_is(repo: Path) -> None:
    before = objectstore.watch(repo, "beflow/1", "HEAD")
    _, path = loose(repo, "README.md")
    os.utime(path, ns=(1, 1))  # git freshens an object it would write again
    git(repo, "repack", "-d", "-q", "-n")  # and packs loose objects, removing them
    git(repo, "pack-refs", "--all")
    assert objectstore.compare(before) == objectstore.Found()

    before = objectstore.watch(repo, "beflow/1", "HEAD")
    (pack,) = (repo / ".git" / "objects" / "pack").glob("*.pack")
    data = bytearray(pack.read_bytes())
    data[-30] ^= 1  # a byte of the last object, its name and size kept
    pack.chmod(0o644)
    with open(pack, "r+b") as out:  # in place: the same inode and size
        out.write(data)
    found = objectstore.compare(before)
    assert [problem.split(" (")[0] for problem in found.objects] == [f"objects/pack/{pack.name}"]
    assert objectstore.describe(found) is not None and "object store" in (objectstore.describe(found) or "")


def test_a_removed_object_or_pack_is_a_change_and_a_new_one_is_verified(repo: Path) -> None:
    sha, path = loose(repo, "README.md")
    before = objectstore.watch(repo, "beflow/1", "HEAD")
    path.unlink()
    new = repo / ".git" / "objects" / "ab" / ("c" * 38)
    new.parent.mkdir(exist_ok=True)
    new.write_bytes(zlib.compress(b"blob 1\0x"))
    found = objectstore.compare(before)
    assert found.objects == [
        f"objects/ab/{'c' * 38} (its bytes are not the object its name says)",
        f"objects/{sha[:2]}/{sha[2:]} (removed)",
    ]


def test_a_ref_the_run_builds_on_that_moved_is_told_apart_from_others(repo: Path) -> None:
    git(repo, "commit", "-q", "--allow-empty", "-m", "second")
    before = objectstore.watch(repo, "beflow/1", "HEAD")
    git(repo, "update-ref", "refs/heads/main", "HEAD~1")
    git(repo, "tag", "planted")
    found = objectstore.compare(before)
    assert (found.built_on, found.refs, found.objects) == (["refs/heads/main"], ["refs/tags/planted"], [])
    assert "refs/heads/main moved during the run" in (objectstore.describe(found) or "")

    before = objectstore.watch(repo, "beflow/1", "HEAD")
    git(repo, "symbolic-ref", "HEAD", "refs/heads/other")
    assert objectstore.compare(before).built_on == ["HEAD"]
