"""The repository's object store and refs around an agent: beflow builds on nothing an agent changed there.

Unsandboxed, an agent runs as the user and can write any file of the repository's object store: rewrite an object
(its name stays, its bytes lie), add a pack whose object shadows one of the user's with other bytes, or move a ref.
Git takes an object's bytes on their word; beflow does not. Before the agent, :func:`watch` notes every file of
``<common>/objects`` (inode, size and times: an ``os.scandir`` walk, nothing read) and every ref; after it,
:func:`compare` says what changed:

- an object file that was there and is gone or replaced: a loose object is fine if the object is still in the store
  with its own bytes (``git gc`` packed it); a pack is not (its objects may be lost);
- one whose times changed (git "freshens" an object it would write again) is verified: a loose object re-hashed, a
  pack with ``git index-pack --verify`` (every object in it re-hashed, its index rebuilt and compared);
- a new object file is verified the same way, so that no new pack or loose object shadows an object with other
  bytes; a symlink or a FIFO where git reads objects is refused;
- a ref that moved (``for-each-ref``, ``packed-refs``, the checkout's ``HEAD``), unless beflow moved it itself.

The caller decides: a run fails when an object was changed or a ref it builds on moved, and names the other refs.
What git derives from the objects (a commit-graph, a multi-pack-index, bitmaps) is not watched: beflow's git after
an agent does not read them (``git.UNTRUSTED_CONFIG``). In the sandbox the store and the refs are read-only to the
agent; its own objects are checked with :func:`verify_directory` before they are brought in.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from beflow.repository.git import CommandFailed, GitError, common_dir, open_repo
from beflow.repository.isolated import bare, isolated
from beflow.repository.reading import ObjectReader
from beflow.repository.refs import full_ref, moved_by_beflow, ref_values

#: A loose object (SHA-1 or SHA-256) and a pack's files, relative to the object directory: git takes every
#: ``pack/*.idx`` for a pack's index, whatever its name (``pack/shadow.idx`` too), and its ``.pack`` beside it.
_LOOSE = re.compile(r"^[0-9a-f]{2}/(?:[0-9a-f]{38}|[0-9a-f]{62})$")
_PACK = re.compile(r"^pack/[^/]+\.(?:pack|idx)$")
#: Bytes read at a time while a loose object is inflated and hashed.
_CHUNK = 1 << 20

#: What a file is known by: inode, size, mtime and ctime (ns).
Stamp = tuple[int, int, int, int]


@dataclass(frozen=True)
class Watch:
    """The object store's files and the refs of a repository, as they were before an agent."""

    directory: Path
    objects: Path
    files: dict[str, Stamp]
    refs: dict[str, str]
    #: The refs whose move fails the run (the branch it publishes, the ref its base names, ``HEAD`` for one).
    built_on: frozenset[str]


@dataclass
class Found:
    """What changed while the agent ran."""

    #: Object files changed, removed or added that are not what they say: ``objects/ab/cdef… (rewritten)``.
    objects: list[str] = field(default_factory=list)
    #: Refs the run builds on or publishes that moved; other refs that moved (not by beflow).
    built_on: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)


def watch(directory: Path, branch: str, base: str) -> Watch:
    """Note the object store and the refs of ``directory``'s repository before an agent runs on ``branch`` from
    ``base`` (``worktrees.base``: ``HEAD`` names the branch the checkout is on)."""
    objects = _common(directory) / "objects"
    refs = ref_values(directory)
    built_on = {f"refs/heads/{branch}", f"packed-refs:refs/heads/{branch}"}
    if base == "HEAD":
        built_on.add("HEAD")
        named = refs.get("HEAD", "").removeprefix("ref: ").strip()
    else:
        named = full_ref(directory, base) or ""
    if named.startswith("refs/"):
        built_on |= {named, f"packed-refs:{named}"}
    return Watch(directory, objects, _files(objects), refs, frozenset(built_on))


def compare(before: Watch) -> Found:
    """What changed since ``before`` (see the module's description)."""
    found = Found()
    now = _files(before.objects)
    check: list[str] = []
    gone_loose: list[str] = []
    for relative, stamp in before.files.items():
        current = now.get(relative)
        if current == stamp:
            continue
        if current is None:
            if _LOOSE.match(relative):
                gone_loose.append(relative.replace("/", ""))
            elif _PACK.match(relative):
                found.objects.append(f"objects/{relative} (removed)")
        elif _PACK.match(relative) and current[:2] != stamp[:2]:
            found.objects.append(f"objects/{relative} (replaced)")
        else:
            check.append(relative)
    check += [relative for relative in now if relative not in before.files]
    found.objects += verify(before.objects, check)
    found.objects += _still_there(before.directory, gone_loose)
    refs_now = ref_values(before.directory)
    for name in sorted(before.refs.keys() | refs_now.keys()):
        was, is_now = before.refs.get(name), refs_now.get(name)
        ref = name.removeprefix("packed-refs:")
        if was == is_now or moved_by_beflow(ref, is_now):
            continue
        if ref != name and is_now is not None and refs_now.get(ref) == is_now:
            continue  # packed as it reads (`git pack-refs`): a packed entry matters where a loose ref hides it
        (found.built_on if name in before.built_on else found.refs).append(name)
    return found


def verify(objects: Path, relative: Iterable[str]) -> list[str]:
    """What of the files ``relative`` (to the object directory ``objects``) is not what its name says: a loose
    object re-hashed, a pack verified whole; other files (git's derived data) are left alone."""
    problems: list[str] = []
    packs: set[str] = set()
    for name in sorted(set(relative)):
        path = objects / name
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            continue
        if not (_LOOSE.match(name) or _PACK.match(name) or stat.S_ISLNK(info.st_mode)):
            continue
        if not stat.S_ISREG(info.st_mode):
            problems.append(f"objects/{name} (not a regular file)")
        elif _LOOSE.match(name):
            why = check_loose(path, name.replace("/", ""))
            if why is not None:
                problems.append(f"objects/{name} ({why})")
        else:
            packs.add(name.rsplit(".", 1)[0])
    for pack in sorted(packs):
        if not (objects / f"{pack}.idx").is_file() or not (objects / f"{pack}.pack").is_file():
            continue  # half a pack: git uses neither file
        why = verify_pack(objects / f"{pack}.pack")
        if why is not None:
            problems.append(f"objects/{pack}.pack ({why})")
    return problems


def verify_pack(pack: Path) -> str | None:
    """Why the pack at ``pack`` is not what its index says, every object in it re-hashed (``git index-pack
    --verify``, from beflow's isolated git: no configuration file read); None when it is."""
    with tempfile.TemporaryDirectory(prefix="beflow-verify-") as scratch:
        root = Path(scratch)
        (root / "objects").mkdir()
        (root / "refs").mkdir()
        bare(root, pack.stem.removeprefix("pack-"))
        try:
            isolated(root, "")("index-pack", "--verify", str(pack))
        except CommandFailed as exc:
            return exc.stderr.splitlines()[-1] if exc.stderr else f"exit {exc.status}"
    return None


def verify_directory(objects: Path) -> list[str]:
    """What of every object file in ``objects`` (a run's own object directory) is not what its name says."""
    return verify(objects, _files(objects))


def check_loose(path: Path, sha: str) -> str | None:
    """Why the loose object file ``path`` is not the object ``sha`` (its bytes inflated and re-hashed, a chunk at a
    time; never through a symlink, never blocking on a FIFO); None when it is."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        return f"unreadable: {exc.strerror}"
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "not a regular file"
        return _hash_loose(fd, sha)
    finally:
        os.close(fd)


def _hash_loose(fd: int, sha: str) -> str | None:
    inflate = zlib.decompressobj()
    digest = hashlib.new("sha256" if len(sha) == 64 else "sha1")
    header, size, seen = b"", -1, 0
    try:
        for data in _inflated(fd, inflate):
            if size < 0:
                header += data
                if b"\0" not in header:
                    if len(header) > 64:
                        return "no object header"
                    continue
                head, _, data = header.partition(b"\0")
                kind, _, length = head.partition(b" ")
                if kind not in (b"blob", b"tree", b"commit", b"tag") or not length.isdigit():
                    return "no object header"
                size = int(length)
                digest.update(head + b"\0")
            seen += len(data)
            digest.update(data)
    except zlib.error:
        return "not a zlib stream"
    if size < 0 or seen != size or not inflate.eof:
        return "cut short or too long"
    return None if digest.hexdigest() == sha else "its bytes are not the object its name says"


def _inflated(fd: int, inflate: zlib._Decompress) -> Iterator[bytes]:
    """The inflated bytes of the file ``fd``, a bounded chunk at a time (a small file may inflate to gigabytes)."""
    while chunk := os.read(fd, _CHUNK):
        data = inflate.decompress(chunk, _CHUNK)
        yield data
        while inflate.unconsumed_tail:
            yield inflate.decompress(inflate.unconsumed_tail, _CHUNK)
    yield inflate.flush()


def _still_there(directory: Path, shas: list[str]) -> list[str]:
    """The loose objects ``shas`` that were removed and are not in the store any more with their own bytes."""
    if not shas:
        return []
    problems = []
    with ObjectReader(directory) as reader:
        for sha in shas:
            try:
                reader.stream(sha, None, lambda _chunk: None)
            except GitError:
                problems.append(f"objects/{sha[:2]}/{sha[2:]} (removed)")
    return problems


def _common(directory: Path) -> Path:
    with open_repo(directory) as repo:
        return common_dir(repo)


def _files(objects: Path) -> dict[str, Stamp]:
    """Every entry of the object directory (relative path: stamp), symlinks as they are (never followed)."""
    found: dict[str, Stamp] = {}
    pending = [""]
    while pending:
        prefix = pending.pop()
        try:
            entries = list(os.scandir(objects / prefix if prefix else objects))
        except (FileNotFoundError, NotADirectoryError):
            continue
        for entry in entries:
            relative = f"{prefix}{entry.name}"
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(info.st_mode):
                pending.append(f"{relative}/")
            else:
                found[relative] = (info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
    return found


def describe(found: Found) -> str | None:
    """Why the run fails because of ``found``; None when it does not."""
    said = []
    if found.objects:
        said.append(
            f"the agent changed the repository's object store ({_listed(found.objects)}), so beflow builds on "
            "nothing of it"
        )
    if found.built_on:
        said.append(f"{_listed(found.built_on)} moved during the run, which the run builds on or publishes")
    return "; ".join(said) or None


def _listed(names: list[str], most: int = 5) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more
