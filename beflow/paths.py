"""Where beflow keeps its state: ``BEFLOW_HOME`` for global files, ``.beflow/`` in the project, and the HTTP
server's token (docs/dashboard.md#security): ``$BEFLOW_HTTP_TOKEN``, else the file beflow makes under
``BEFLOW_HOME``. Either is a secret of every run (docs/safety.md): an agent running as the user can read the file, so
its value is masked and refused wherever a run's output goes, like the tracker's token. It is found here, below the
server, so that nothing needs to load the server to know it."""

from __future__ import annotations

import hashlib
import os
import re
import shlex
from collections.abc import Mapping
from pathlib import Path

from beflow.errors import UsageError
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, read_regular

STATE_DIR = ".beflow"

#: The file beflow manages in an agent's working directory (never committed by beflow, restored after each run).
ACPXRC = ".acpxrc.json"

_HASHED = re.compile(r"-[0-9a-f]{8}$")

# Ignores everything beflow keeps in `.beflow/` except the project's config and the issues of the local tracker,
# which are the user's to commit. The file ignores itself, so no run state ever shows in `git status`.
_STATE_GITIGNORE = """\
# Written by beflow: run records, locks and caches stay out of git; the config and the local tracker's issues do not.
/*
!/config.json
!/issues/
"""

# What earlier versions wrote, before the config moved into `.beflow/`: replaced, since it would hide the config.
_OLD_STATE_GITIGNORES = (
    """\
# Written by beflow: run records, locks and caches stay out of git; the local tracker's issues do not.
/*
!/issues/
""",
)


def beflow_home() -> Path:
    """``$BEFLOW_HOME`` (absolute: a relative one must not change meaning with the directory), else ``~/.beflow``."""
    configured = os.environ.get("BEFLOW_HOME")
    return Path(os.path.abspath(Path(configured).expanduser())) if configured else Path.home() / ".beflow"


def git_toplevel(start: Path) -> Path | None:
    """The top level of the git work tree containing ``start``, if any: the nearest directory holding ``.git`` (a
    directory, or the file a linked worktree or submodule has)."""
    start = Path(os.path.abspath(start))
    for directory in (start, *start.parents):
        if (directory / ".git").exists():
            return directory
    return None


def outside_git(directory: Path) -> UsageError:
    """Why nothing is written into a project outside a git work tree (``init``, ``issues new``, any command that
    would make ``.beflow/``): beflow's runs are git worktrees and branches, and what it keeps out of git needs a git
    to keep it out of."""
    return UsageError(
        f"{directory} is not inside a git repository; nothing was written",
        fix=f"Make it one first: cd {shlex.quote(str(directory))} && git init && git add -A "
        "&& git commit -m 'first commit'",
    )


def state_dir(project_dir: Path) -> Path:
    """The project's ``.beflow/`` directory, created and git-ignored (but for ``config.json`` and ``issues/``) on
    first use; refused (:func:`outside_git`) when the project is in no git work tree. An agent without the sandbox
    can write there: it is reached through no symlink (:mod:`beflow.system.files`), and an ignore file that is no
    regular file is replaced, never read or written through."""
    if git_toplevel(project_dir) is None:
        raise outside_git(project_dir)
    directory = project_dir / STATE_DIR
    ignore = directory / ".gitignore"
    try:
        current = read_regular(ignore, limit=1 << 16, below=project_dir).decode("utf-8")
    except FileNotFoundError:
        current = None
    except NotRegularError as exc:
        if exc.path != ignore:  # .beflow itself is a symlink: nothing of the state is written through it
            raise
        current = None
    except (OSError, UnicodeDecodeError):
        current = ""  # the user's own (or too big to be beflow's): kept
    if current is None or current in _OLD_STATE_GITIGNORES:
        atomic_write(ignore, _STATE_GITIGNORE, below=project_dir)
    return directory


def slug(text: str, *, max_length: int = 48) -> str:
    """A path- and branch-safe form of ``text``; a hash suffix keeps distinct inputs distinct when it changed."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-_")[:max_length] or "x"
    cleaned = re.sub(r"\.{2,}", ".", cleaned)
    if cleaned.endswith(".lock"):
        cleaned = cleaned[: -len(".lock")] + "-lock"
    # Kept as is only when it cannot be mistaken for another text's slug (which ends in a hash).
    if cleaned == text and not _HASHED.search(text):
        return cleaned
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:8]
    return f"{cleaned}-{digest}"


def path_key(path: Path) -> str:
    """A short stable file name for an absolute path (locks and journals keyed by the path they guard)."""
    resolved = str(path.resolve())
    return f"{slug(path.name, max_length=32)}-{hashlib.sha256(resolved.encode()).hexdigest()[:16]}"


def acpx_home(environ: Mapping[str, str] | None = None) -> Path:
    """The home directory acpx keeps ``.acpx`` in: Node's ``os.homedir()`` is ``$HOME``, else the passwd entry."""
    env = os.environ if environ is None else environ
    return Path(env.get("HOME") or os.path.expanduser("~"))


# -- the HTTP server's token -----------------------------------------------------------------------------------------

TOKEN_ENV = "BEFLOW_HTTP_TOKEN"
TOKEN_FILE = "http-token"
#: The shortest token accepted from the environment: anything shorter is guessed in an afternoon.
MIN_TOKEN = 16


def token_path() -> Path:
    return beflow_home() / TOKEN_FILE


def stored_token() -> str:
    """The token stored under ``BEFLOW_HOME``, if there is one (never made here)."""
    try:
        stored = read_regular(token_path(), limit=4096).decode("utf-8", "replace").strip()
    except (OSError, NotRegularError, FileTooLarge):
        return ""
    return stored if len(stored) >= MIN_TOKEN else ""
