"""What a run's sandbox mounts, and where: pure, from the run's paths and the ``sandbox`` config.

The system is read-only; ``$HOME``, ``/tmp`` and ``/run`` are empty in-memory directories (so neither the home's
files nor the sockets of ``/run`` and ``/tmp`` are reachable); then, on top, in this order: what is read-only (the
user's checkout and its git directory, the programs' installs, the preset's and ``sandbox.read``'s paths), what is
read-write (the worktree, the worktree's own git directory, the run's own object directory where the repository's
objects are, the preset's paths as the run's own overlays or copies (:func:`per_run`), ``sandbox.write``'s paths),
and last the read-only pieces inside read-write ones (``objects/info``, whose ``alternates`` names the repository's
objects, shown read-only elsewhere) and what of beflow's own the run shows its agent. A later mount covers an
earlier one.

No path the agent can write is one beflow's own process later reads as its own, but for the worktree and its git
directory: the project's run records are hidden (an empty read-only directory), and beflow's own server in the run
reports through the run's channel, whose directory is read-only (its socket can be reached, not removed or
replaced).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from beflow.sandbox.presets import Preset

#: ``remount-ro`` makes the mount at ``target`` (an emptied directory, once what shows in it is mounted) read-only;
#: ``overlay`` shows ``source`` at ``target`` with writes going to ``upper``, ``tmp-overlay`` to a hidden tmpfs.
Kind = Literal["ro", "rw", "tmpfs", "dev", "proc", "remount-ro", "overlay", "tmp-overlay"]


@dataclass(frozen=True)
class Mount:
    """One mount: ``source`` at ``target``; ``optional`` ones are skipped when the source does not exist; an
    ``overlay``'s writes go to ``upper`` (its work directory is ``upper``'s sibling ``work``)."""

    kind: Kind
    target: Path
    source: Path | None = None
    optional: bool = False
    upper: Path | None = None


@dataclass(frozen=True)
class PerRun:
    """One path a preset lets the agent write, as a run has it: ``target`` shows the user's own content, but what
    the agent writes there goes to the run's own place, and is dropped after the run but for ``logins``.

    - ``overlay``: a directory holding login files: writes go to ``place`` (the overlay's upper directory, outside
      the sandbox), where beflow finds the login files (``logins``, names directly in ``target``) after the run;
    - ``tmp-overlay``: any other directory (settings, hooks, plugins, caches): writes go to a tmpfs nobody sees;
    - ``copy``: a file (``~/.claude.json``): ``place`` is the run's copy of it, bound read-write.
    """

    target: Path
    how: Literal["overlay", "tmp-overlay", "copy"]
    place: Path | None = None
    logins: tuple[str, ...] = ()

    def mount(self) -> Mount:
        if self.how == "overlay":
            return Mount("overlay", self.target, self.target, upper=self.place)
        if self.how == "tmp-overlay":
            return Mount("tmp-overlay", self.target, self.target)
        return Mount("rw", self.target, self.place)


def per_run(preset: Preset, home: Path, base: Path, scratch: Path, kind: Callable[[Path], str | None]) -> list[PerRun]:
    """The run's own place for each of ``preset``'s writable paths that exists (``kind``: ``"dir"``, ``"file"``,
    or None when there is nothing there: the agent then writes in the emptied home, and that is gone too). Places
    are under ``scratch`` (``presets/<n>/``), a directory of the run's own that the sandbox does not show."""
    logins = [expand(p, home, base) for p in preset.logins]
    places: list[PerRun] = []
    for index, target in enumerate(_unique(expand(p, home, base) for p in preset.write)):
        found = kind(target)
        own = scratch / "presets" / str(index)
        names = tuple(login.name for login in logins if login.parent == target)
        if found == "dir" and names:
            places.append(PerRun(target, "overlay", own / "upper", names))
        elif found == "dir":
            places.append(PerRun(target, "tmp-overlay"))
        elif found == "file":
            places.append(PerRun(target, "copy", own / target.name))
    return places


@dataclass(frozen=True)
class Layout:
    """The paths of one run that the sandbox is made of."""

    home: Path
    worktree: Path
    #: The worktree's own git directory (``.git/worktrees/<name>``) and the repository's common one.
    worktree_git: Path | None
    common_git: Path | None
    #: The user's checkout (the project directory).
    checkout: Path
    #: The run's private ``~/.acpx`` (acpx's sessions), and the user's acpx config shown read-only in it.
    acpx_home: Path
    #: Programs' install directories (acpx, node, Python and beflow) that would otherwise be hidden.
    installs: Sequence[Path] = ()
    #: The project's run records (``.beflow/runs``), hidden: no record is the agent's to read or write.
    records: Path | None = None
    #: What of beflow's own the run shows its agent, read-only (the channel's directory, the prompt file).
    own: Sequence[Path] = ()
    #: The run's own object directory (``run_objects.RUN_OBJECTS``): where the agent's new objects go, the repository's
    #: own objects a read-only alternate (at :data:`USER_OBJECTS`). None: the objects stay read-only.
    run_objects: Path | None = None
    preset: Preset = field(default_factory=Preset)
    #: The preset's writable paths as the run's own (:func:`per_run`): never the user's.
    presets_own: Sequence[PerRun] = ()
    read: Sequence[str] = ()
    write: Sequence[str] = ()


#: Directories emptied in the sandbox besides ``$HOME``: the private temporary directory, and the system's
#: sockets (an ssh agent, a container engine's socket).
EMPTIED = (Path("/tmp"), Path("/run"), Path("/var/tmp"))


#: Files of the worktree's own git directory that stay read-only (its HEAD, index and logs do not).
PINNED = ("commondir", "gitdir", "config.worktree", "beflow-exclude")

#: Where the sandbox shows the repository's own objects, read-only: the run's object directory names it as its
#: alternate (in the sandbox's private ``/tmp``, so that nothing outside is ever taken for it).
USER_OBJECTS = Path("/tmp/.beflow-repository-objects")


def expand(path: str, home: Path, base: Path) -> Path:
    """A configured path: ``~/x`` under ``home``, an absolute one as it is, a relative one under ``base``."""
    if path == "~" or path.startswith("~/"):
        return home / path[2:] if path != "~" else home
    candidate = Path(path)
    return candidate if candidate.is_absolute() else base / candidate


def mounts(layout: Layout) -> list[Mount]:
    """The mounts of ``layout``'s sandbox, in the order they are made."""
    home, base = layout.home, layout.checkout
    out = [Mount("ro", Path("/"), Path("/")), Mount("dev", Path("/dev")), Mount("proc", Path("/proc"))]
    out += [Mount("tmpfs", path) for path in EMPTIED]
    out.append(Mount("tmpfs", home))
    git_dir = layout.common_git
    readable = [layout.checkout, *([git_dir] if git_dir else []), *layout.installs]
    out += [Mount("ro", path, path) for path in _unique(readable)]
    out += [
        Mount("ro", path, path, optional=True) for path in _unique(expand(p, home, base) for p in layout.preset.read)
    ]
    out += [Mount("ro", path, path, optional=True) for path in _unique(expand(p, home, base) for p in layout.read)]
    gits = [layout.worktree_git] if git_dir and layout.worktree_git else []
    writable = [layout.worktree, *gits]
    out += [Mount("rw", path, path) for path in _unique(writable)]
    if git_dir is not None and layout.run_objects is not None:  # the agent's new objects go into the run's own
        out.append(Mount("rw", git_dir / "objects", layout.run_objects))
    out += [place.mount() for place in layout.presets_own]
    out += [Mount("rw", path, path, optional=True) for path in _unique(expand(p, home, base) for p in layout.write)]
    out.append(Mount("rw", home / ".acpx", layout.acpx_home))
    acpx_config = home / ".acpx" / "config.json"  # (a bind's source is read outside the sandbox: the user's own)
    out.append(Mount("ro", acpx_config, acpx_config, optional=True))
    if git_dir is not None and layout.run_objects is not None:
        # The run's alternates (naming the user's objects, shown read-only) are beflow's, not the agent's.
        out.append(Mount("ro", git_dir / "objects" / "info", layout.run_objects / "info"))
        out.append(Mount("ro", USER_OBJECTS, git_dir / "objects"))
    if layout.worktree_git is not None and layout.worktree_git != git_dir:
        # What ties the worktree to the repository stays as beflow made it: a `.git` file or `commondir` pointed
        # elsewhere would have beflow's own git after the run read another repository; its excludes file too, and
        # the run's object directory where it lies (written through `objects` only, never moved or replaced).
        pinned = [layout.worktree / ".git", *(layout.worktree_git / name for name in PINNED)]
        pinned += [layout.run_objects] if layout.run_objects is not None else []
        out += [Mount("ro", path, path, optional=True) for path in pinned]
    # Last, so that no writable mount (`sandbox.write` naming the project or BEFLOW_HOME, say) covers them.
    if layout.records is not None:
        out.append(Mount("tmpfs", layout.records))
    out += [Mount("ro", path, path) for path in _unique(layout.own)]
    if layout.records is not None:  # empty and read-only: nothing the agent puts there could even seem a record
        out.append(Mount("remount-ro", layout.records))
    return out


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: list[Path] = []
    for path in paths:
        if path not in seen:
            seen.append(path)
    return seen
