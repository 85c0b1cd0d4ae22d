"""The remote: its URL as git resolves it, and a push or a fetch that goes exactly there, with a token only beflow's
credential helper hands over (:mod:`beflow.repository.git_credential`)."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from beflow.errors import ToolMissingError
from beflow.repository.git import CommandFailed, GitError, common_dir, head_of, open_repo, run
from beflow.repository.isolated import bare, isolated
from beflow.repository.refs import branch_tip


def remote_url(directory: Path, remote: str, *, push: bool = False) -> str | None:
    """The URL of ``remote`` in the repository at ``directory`` (its push URL with ``push``; None when there is no
    such remote), with the user's ``insteadOf`` rewrites applied, as git itself would."""
    try:
        args = ["get-url", "--push", remote] if push else ["get-url", remote]
        return run(directory, "remote", *args).strip() or None
    except (GitError, ToolMissingError):
        return None


@dataclass(frozen=True)
class PushAuth:
    """A token git authenticates with, for ``protocol://host`` only (``host[:port]``, as in the URL), as the user
    ``username`` (the name the code host takes with a token: GitHub's ``x-access-token``, GitLab's ``oauth2``).

    git gets it through its credential protocol: beflow's helper (:mod:`beflow.repository.git_credential`) asks
    beflow for it over a socket that only the git command and what it starts inherit, and answers for that protocol
    and host alone. The token is in no environment, no argv, no file and no git setting.
    """

    token: str
    host: str
    protocol: str = "https"
    username: str = "x-access-token"

    def __repr__(self) -> str:  # never the token (a traceback, a log)
        return f"PushAuth(protocol={self.protocol!r}, host={self.host!r}, username={self.username!r})"


def push(directory: Path, url: str, commit: str, branch: str, auth: PushAuth | None = None) -> None:
    """Push ``commit`` to ``branch`` of the repository at ``url`` (a fast-forward; never forced).

    The push goes exactly to ``url``: it runs in an empty repository of its own that borrows the objects of
    ``directory``'s (``objects/info/alternates``), with no configuration file read at all — not the repository's,
    whose ``pushurl``, ``insteadOf``, ``pushInsteadOf``, hooks or ``core.sshCommand`` an agent may have written, nor
    the system's or the user's global one. Only ``auth``'s credential helper and git's defaults apply; no hook runs.
    """
    with open_repo(directory) as repo:
        objects = common_dir(repo) / "objects"
    with tempfile.TemporaryDirectory(prefix="beflow-push-") as scratch:
        root = Path(scratch)
        (root / "objects" / "info").mkdir(parents=True)
        (root / "refs").mkdir()
        (root / "objects" / "info" / "alternates").write_text(f"{objects}\n", encoding="utf-8")
        bare(root, commit)
        with _credential_helper(auth) as (helper, inherited):
            remote_git = isolated(root, url, *helper, pass_fds=inherited)
            try:
                remote_git("push", "--no-verify", "--", "beflow", f"{commit}:refs/heads/{branch}")
            except CommandFailed as exc:
                raise _remote_failed("push", url, branch, exc) from None


def fetch(directory: Path, url: str, branch: str, auth: PushAuth | None = None) -> str | None:
    """The commit ``branch`` points to at ``url``, its objects fetched into the repository at ``directory``; None
    when the remote has no such branch. No local ref is moved (the caller decides).

    As :func:`push`: from an empty repository of its own (no configuration file of the repository's, the system's
    or the user's is read, no hook runs), writing the objects into the repository's object store."""
    with open_repo(directory) as repo:
        objects = common_dir(repo) / "objects"
        have = [c for c in (branch_tip(repo, branch), head_of(repo)) if c]
    with tempfile.TemporaryDirectory(prefix="beflow-fetch-") as scratch:
        root = Path(scratch)
        (root / "objects").mkdir()
        (root / "refs" / "have").mkdir(parents=True)
        for index, commit in enumerate(have):  # what the repository has already: only the rest is fetched
            (root / "refs" / "have" / str(index)).write_text(f"{commit}\n", encoding="utf-8")
        bare(root, "")
        settings = [("protocol.ext.allow", "never"), ("fetch.writeCommitGraph", "false"), ("gc.auto", "0")]
        # The objects land in the repository's own store: the branch can then be moved to them.
        ref = f"refs/heads/{branch}"
        with _credential_helper(auth) as (helper, inherited):
            remote_git = isolated(root, url, *settings, *helper, pass_fds=inherited, GIT_OBJECT_DIRECTORY=str(objects))
            try:
                listed = remote_git("ls-remote", "--", "beflow", ref).strip()
                if not listed:
                    return None
                remote_git("fetch", "--no-tags", "--no-write-fetch-head", "--", "beflow", f"+{ref}:{ref}")
            except CommandFailed as exc:
                raise _remote_failed("fetch", url, branch, exc) from None
        return (root / ref).read_text(encoding="utf-8").strip() if (root / ref).is_file() else listed.split()[0]


@contextlib.contextmanager
def _credential_helper(auth: PushAuth | None) -> Iterator[tuple[list[tuple[str, str]], tuple[int, ...]]]:
    """The settings that make git ask beflow's credential helper for ``auth``'s token, and the descriptor to pass
    on to git (none without ``auth``). The helper asks over one end of a socket pair; a thread of beflow's answers
    on the other, while the block lasts: nothing else can open either end (a pipe could be, through ``/proc``)."""
    if auth is None:
        yield [], ()
        return
    import shlex
    import socket
    import sys
    import threading

    from beflow.repository import git_credential

    ours, theirs = socket.socketpair()  # (neither inherited by any other child: only git gets `theirs`, by number)
    answer = auth.token.encode() + b"\n"

    def serve() -> None:
        with contextlib.suppress(OSError):
            while ours.recv(64):  # a helper's request: one answer each (git may ask more than once)
                ours.sendall(answer)

    thread = threading.Thread(target=serve, name="beflow-git-credential", daemon=True)
    thread.start()
    helper = git_credential.__file__
    program = [sys.executable, "-I", "-S", helper, str(theirs.fileno()), auth.protocol, auth.host, auth.username]
    try:
        yield [("credential.helper", "!" + shlex.join(program))], (theirs.fileno(),)
    finally:
        with contextlib.suppress(OSError):
            ours.shutdown(socket.SHUT_RDWR)
        thread.join()
        ours.close()
        theirs.close()


def _remote_failed(verb: str, url: str, branch: str, exc: CommandFailed) -> GitError:
    shown = without_credentials(url)
    said = exc.stderr.replace(url, shown)
    return GitError(f"git {verb} {shown} {branch} failed: {said}")


def without_credentials(url: str) -> str:
    """``url`` without the user name and password it may carry (``https://user:token@host/...``), to show it."""
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    if "@" not in parts.netloc or not parts.scheme:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rpartition("@")[2]))
