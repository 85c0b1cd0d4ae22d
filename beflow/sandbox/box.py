"""A run's sandbox (:class:`Sandbox`): opened once the run's worktree is made and open until the run ends, it serves
the proxy and wraps each command line that runs in the worktree (every hook's, every acpx one).

A sandbox that cannot start fails the run with bwrap's reason (:class:`SandboxError`): the bridge marks that it
started just before it becomes acpx, so a missing mark means that nothing ran inside (:meth:`Sandbox.check`). A
run is never carried on unsandboxed. ``beflow doctor`` starts it ahead of any run (:mod:`beflow.sandbox.check`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import sys
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit

from beflow.config import Config
from beflow.errors import PermanentFailure
from beflow.records.logs import runs_root
from beflow.repository import authors, git, run_objects
from beflow.sandbox import bridge, bwrap, places, policy, scratch
from beflow.sandbox.presets import PRESETS, preset
from beflow.sandbox.proxy import Proxy
from beflow.system import proc, threads

#: In a wrapped argv, what precedes the path of the bridge's marker (:meth:`Sandbox.check`).
READY = "--ready"

#: The kernel's list of the keys a process may view: shown empty in the sandbox.
_KEYS = Path("/proc/keys")

_IDENTITIES: dict[Path, dict[str, str]] = {}


def identity(checkout: Path) -> dict[str, str]:
    """The user's git identity in ``checkout`` as variables, once per checkout and process (a watch's runs)."""
    if checkout not in _IDENTITIES:
        _IDENTITIES[checkout] = authors.identity_env(checkout)
    return _IDENTITIES[checkout]


def server_hosts(servers: Sequence[object]) -> list[str]:
    """``host:port`` of each injected HTTP/SSE MCP server: the agent reaches them through the proxy."""
    hosts = []
    for server in servers:
        url = getattr(server, "url", None)
        if isinstance(url, str):
            parts = urlsplit(url)
            if parts.hostname:
                port = parts.port or (443 if parts.scheme == "https" else 80)
                hosts.append(f"{parts.hostname}:{port}")
    return hosts


class SandboxError(PermanentFailure):
    """The sandbox cannot start: the run fails before its agent starts (and would fail the same way again)."""


def preset_name(config: Config) -> str | None:
    """The preset in use: ``sandbox.preset``, where ``"agent"`` is the one named after ``agent`` (if any)."""
    chosen = config.sandbox.preset
    if chosen == "agent":
        return config.agent if isinstance(config.agent, str) and config.agent in PRESETS else None
    return chosen


def git_dirs(worktree: Path) -> tuple[Path | None, Path | None]:
    """The worktree's own git directory and the repository's common one, read from its ``.git`` file."""
    dot_git = worktree / ".git"
    if not dot_git.exists():  # not in git at all (doctor's empty directory): no git directory to mount
        return None, None
    if dot_git.is_dir():  # not a linked worktree: the repository itself
        return dot_git.resolve(), dot_git.resolve()
    text = dot_git.read_text(encoding="utf-8").strip()
    own = (worktree / text.removeprefix("gitdir:").strip()).resolve()
    common_file = own / "commondir"
    common = (own / common_file.read_text(encoding="utf-8").strip()).resolve() if common_file.exists() else own
    return own, common


def hidden(path: Path, home: Path) -> bool:
    """Whether ``path`` is under a directory the sandbox empties (``$HOME``, ``/tmp``, ...)."""
    return any(path == root or root in path.parents for root in (home, *policy.EMPTIED))


def install_root(program: str) -> list[Path]:
    """Where ``program`` (a name on PATH, or a path) and what it runs from are installed: its directory's parent
    (``…/node-v22/bin/node`` → ``…/node-v22``); for a script the package it belongs to (``package.json``), and
    when that package sits in a ``node_modules`` tree (``npm install acpx``: its dependencies beside it), the
    whole tree, the outermost ``node_modules`` on its real path (Node looks for a dependency in each of them)."""
    found = shutil.which(program)
    if found is None:
        return []
    roots = [Path(found).absolute().parent]
    real = Path(found).resolve()
    trees = [parent for parent in real.parents if parent.name == "node_modules"]
    if trees:
        roots.append(trees[-1])
        return roots
    for parent in real.parents:
        if (parent / "package.json").exists() or (parent / "bin").is_dir():
            roots.append(parent)
            break
    return roots


#: Absolute paths in what a program said; and Node's word for a dependency it did not find.
_PATH = re.compile(r"(?<![\w.~-])/[^\s'\"`:,;()<>\[\]]+")
_PACKAGE = re.compile(r"Cannot find (?:package|module) '([^'./][^']*)' imported from ([^\s'\"]+)")


class Sandbox:
    """The sandbox of one run: the worktree's paths, the config's lists and preset, and, once opened, its proxy.

    ``own`` is what of beflow's own the agent is shown read-only (the channel's directory, the prompt file), each
    while it exists; ``servers`` are the injected ones (their HTTP hosts are reached through the proxy). The
    project's run records are hidden from it."""

    def __init__(
        self,
        config: Config,
        *,
        worktree: Path,
        checkout: Path,
        own: Sequence[Path] = (),
        servers: Sequence[object] = (),
    ) -> None:
        self.config = config
        self.worktree = worktree
        self.checkout = checkout
        self.own = list(own)
        self.home = Path(os.environ.get("HOME") or os.path.expanduser("~")).absolute()
        self.preset = preset_name(config)
        chosen = preset(self.preset, npx=config.acpx_argv()[:1] == ["npx"])
        self.proxy = Proxy([*chosen.hosts, *config.sandbox.hosts, *server_hosts(servers)])
        self._chosen = chosen
        self._scratch: Path | None = None
        self._bwrap: Path | None = None
        self._env: dict[str, str] = {}
        self._started = 0
        self._layout: policy.Layout | None = None
        self._mounts: list[policy.Mount] = []
        self._places: list[policy.PerRun] = []
        #: After the run: the login files written back, and those left as they were and why (places.write_back);
        #: None until then.
        self.written_back: places.WrittenBack | None = None

    @property
    def blocked(self) -> Counter[str]:
        """Connections the proxy refused, by host."""
        return self.proxy.blocked

    def layout(self, scratch: Path) -> policy.Layout:
        own_git, common_git = git_dirs(self.worktree)
        records = runs_root(self.checkout)
        acpx = self.config.acpx_argv()[0]
        programs = [p for prog in (acpx, "node", "sh") for p in install_root(prog)]
        python = [Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).parent, Path(__file__).parents[2]]
        python += [Path(entry) for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))]
        # Only what the sandbox would hide, and never the home itself or a directory holding it.
        installs = [
            p
            for p in (*programs, *python)
            if p.exists() and hidden(p.absolute(), self.home) and not (p == self.home or p in self.home.parents)
        ]
        self._places = policy.per_run(self._chosen, self.home, self.checkout, scratch, places.kind)
        return policy.Layout(
            home=self.home,
            worktree=self.worktree,
            worktree_git=own_git,
            common_git=common_git,
            checkout=self.checkout,
            acpx_home=scratch / "acpx",
            installs=[p.absolute() for p in installs],
            records=records if records.is_dir() else None,
            own=self._own(),
            run_objects=own_git / run_objects.RUN_OBJECTS if own_git is not None and own_git != common_git else None,
            preset=self._chosen,
            presets_own=self._places,
            read=self.config.sandbox.read,
            write=self.config.sandbox.write,
        )

    def _own(self) -> list[Path]:
        """What of beflow's own is there to show now (the channel's directory exists while the agent's turn runs)."""
        return [p for p in self.own if p.exists()]

    @contextlib.asynccontextmanager
    async def opened(self) -> AsyncIterator[Sandbox]:
        """Work out the mounts and serve the proxy while the body runs; then nothing of it is left. A run opens its
        sandbox once, around its hooks and its agent's session: opened again inside, it is the same sandbox."""
        if self._scratch is not None:
            yield self
            return
        path, why = bwrap.bwrap_path()
        if path is None:
            raise SandboxError(f"the sandbox could not start: {why}")
        self._bwrap = path
        self.written_back = None
        directory = scratch.make()
        objects: Path | None = None
        try:
            (directory / "acpx").mkdir(mode=0o700)
            (directory / "empty").touch(mode=0o444)
            self._scratch = directory
            try:
                # The paths as beflow made them, before anything ran inside.
                self._layout = layout = self.layout(directory)
                if layout.run_objects is not None:  # the agent's own object store (delivery brings it in, checked)
                    objects = run_objects.make_run_objects(layout.run_objects, policy.USER_OBJECTS)
                self._mounts = policy.mounts(layout)
            except (OSError, UnicodeDecodeError, git.GitError) as error:  # a worktree's `.git` that cannot be read
                raise SandboxError(f"the sandbox could not start: {self.worktree}: {error}") from None
            try:
                places.prepare(self._places)
            except OSError as error:
                raise SandboxError(f"the sandbox could not start: {error}") from None
            # The user's global git config is not in the sandbox: the agent's commits get the user's identity.
            self._env = {**await threads.blocking(identity, self.checkout), "TMPDIR": "/tmp"}
            (directory / "status").mkdir(mode=0o700)
            async with self.proxy.serving(directory / "proxy.sock"):
                yield self
        finally:
            self._scratch = None
            # Nothing of the sandbox runs any more: the login files come back, the rest of its writes go.
            self.write_back()
            scratch.remove(directory)
            if objects is not None:
                run_objects.forget_run_objects_alternates(objects)

    def write_back(self) -> places.WrittenBack:
        """Once nothing runs in the sandbox any more: the login files the run refreshed written back to the user's
        home (once; the run calls it before it ends, the sandbox's closing otherwise)."""
        if self.written_back is None:
            self.written_back = places.write_back(self._places)
        return self.written_back

    def _objects_alternates(self) -> None:
        """Before a command starts in the sandbox: the run's object directory names the repository's objects. The
        delivery drops that name before beflow's own git reads the directory (outside, it names nothing of
        beflow's); ``before_remove``, which runs after the delivery, reads the repository's objects through it."""
        if self._layout is not None and self._layout.run_objects is not None:
            _restore_alternates(self._layout.run_objects)

    def hides(self, path: Path) -> bool:
        """Whether the sandbox does not show ``path`` (an absolute path as it is outside) as it is: the last mount
        over it empties its directory (``$HOME``, ``/tmp``) or shows something else there (``~/.acpx``)."""
        hidden = False
        for mount in self._mounts:
            over = mount.target == path or mount.target in path.parents
            if not over or mount.kind == "remount-ro" or (mount.optional and not (mount.source or path).exists()):
                continue
            hidden = mount.kind == "tmpfs" or (mount.kind in ("ro", "rw") and mount.source != mount.target)
        return hidden

    def hidden_in(self, command: str, *, cwd: Path) -> list[Path]:
        """What the shell command ``command`` names that is here but hidden in the sandbox (its program, a script
        under ``$HOME``): why a hook that ran there may have failed, and what ``sandbox.read`` needs."""
        return [path for path in _named_paths(command, self.home, cwd) if self.hides(path)]

    async def probe(self) -> None:
        """Start the sandbox once as the agent's will be, running ``acpx --version`` (``beflow doctor``): bwrap's
        own error (no user namespaces, a path it cannot mount) or the missing program is the reason."""
        argv = [*self.config.acpx_argv(), "--version"]
        self.check(await proc.run(self.wrap(argv, cwd=self.worktree), timeout=60))

    def check(self, result: proc.Completed) -> None:
        """After a wrapped command: a :class:`SandboxError` when the sandbox never started it (the bridge's
        marker is missing), with the reason bwrap or the bridge gave."""
        marker = Path(result.argv[result.argv.index(READY) + 1]) if READY in result.argv else None
        if marker is None or marker.exists():
            return
        said = [line for line in result.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        reason = said[-1].strip() if said else result.describe()
        hint = self.explain(reason)
        raise SandboxError(f"the sandbox could not start: {reason}" + (f"; {hint}" if hint else ""))

    def explain(self, said: str) -> str | None:
        """Which path the sandbox hides that ``said`` (what a program that did not start said) names, and how to show
        it: ``the sandbox hides ~/tools/x: add it to sandbox.read``; None when it names none that exists outside."""
        candidates = [Path(path.rstrip(".")) for path in _PATH.findall(said)]
        for package, importer in _PACKAGE.findall(said):  # Node: the dependency sits in a node_modules above
            candidates = [
                parent / "node_modules"
                for parent in Path(importer).parents
                if (parent / "node_modules" / package).exists()
            ] + candidates
        for path in candidates[:50]:  # (a program that printed a thousand paths: the first ones tell)
            if os.path.lexists(path) and self.hides(path):
                shown = path if path.is_dir() else path.parent
                named = f"~/{shown.relative_to(self.home)}" if self.home in shown.parents else str(shown)
                return f"the sandbox hides {named}: add it to sandbox.read if the agent needs it"
        return None

    def wrap(self, argv: Sequence[str], *, cwd: Path) -> list[str]:
        """``argv`` to run in the sandbox, in ``cwd``, with the proxy's bridge before it."""
        assert self._scratch is not None and self._bwrap is not None, "the sandbox is opened first"
        assert self.written_back is None, "nothing runs in the sandbox once its login files are written back"
        socket_path, status = self._scratch / "proxy.sock", self._scratch / "status"
        self._started += 1
        ready = status / f"{self._started}"
        inner = [sys.executable, "-I", "-S", bridge.__file__, str(socket_path), READY, str(ready), "--", *argv]
        self._objects_alternates()
        own = self._own()
        if self._layout is not None and own != list(self._layout.own):  # the channel's directory came, or went
            self._layout = dataclasses.replace(self._layout, own=own)
            self._mounts = policy.mounts(self._layout)
        mounts = [*self._mounts, policy.Mount("rw", socket_path, socket_path), policy.Mount("rw", status, status)]
        if _KEYS.exists():  # the keys this user may view, by name: none of the run's business
            mounts.append(policy.Mount("ro", _KEYS, self._scratch / "empty"))
        return bwrap.argv(self._bwrap, mounts, inner, cwd=cwd, env={**self._env, "HOME": str(self.home)})


def _restore_alternates(objects: Path) -> None:
    """The run's object directory ``objects`` names the repository's objects again (as the sandbox shows them), if
    beflow's own git dropped that (it does before it reads the directory)."""
    if objects.is_dir() and not (objects / "info" / "alternates").exists():
        with contextlib.suppress(OSError, git.GitError):  # (a hook's git then fails, saying what it misses)
            run_objects.make_run_objects(objects, policy.USER_OBJECTS)


def _named_paths(command: str, home: Path, cwd: Path) -> list[Path]:
    """The paths a shell command names itself: its program as ``PATH`` finds it, and each word that is a path outside
    ``cwd`` (``~/x``, ``$HOME/x``, ``/x``), with the file a symbolic link leads to. Never a name in ``cwd`` (the
    worktree is the agent's: a link there could have beflow suggest showing it ``~/.ssh``)."""
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: the shell says so itself
        words = command.split()
    words = [w for w in words if not (w and "=" in w.split("/")[0])]  # `FOO=1 make`: the assignment names nothing
    named: list[Path] = []
    for index, word in enumerate(words):
        for prefix in ("~/", "$HOME/", "${HOME}/"):
            if word.startswith(prefix):
                word = str(home / word[len(prefix) :])
        if Path(word).is_absolute():
            named.append(Path(word))
        elif index == 0 and "/" not in word and (found := shutil.which(word)):
            named.append(Path(found).absolute())
    existing: list[Path] = []
    for path in named:
        if path == cwd or cwd in path.parents:
            continue
        try:
            if path.exists():
                existing += dict.fromkeys([path, path.resolve()])
        except (OSError, RuntimeError):  # a link that goes round in a loop
            continue
    return existing


def describe_blocked(blocked: dict[str, int]) -> str | None:
    """``blocked: 3 connections to example.org, 1 to x.test``; None when nothing was refused."""
    if not blocked:
        return None
    ordered = sorted(blocked.items(), key=lambda item: (-item[1], item[0]))
    parts = [f"{count} connection{'s' if count != 1 else ''} to {host}" for host, count in ordered[:5]]
    more = f" and {len(ordered) - 5} more hosts" if len(ordered) > 5 else ""
    return "blocked: " + ", ".join(parts) + more
