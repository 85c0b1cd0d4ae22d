"""beflow's git credential helper: ``python -I -S git_credential.py FD PROTOCOL HOST USERNAME ACTION``.

git runs it (``credential.helper``) in the git commands beflow runs with a token
(:class:`beflow.repository.remote.PushAuth`). For ``get`` of exactly ``PROTOCOL`` and ``HOST`` (``host[:port]``, as
git names it) it asks beflow for the token over the socket ``FD`` that the git command inherited from beflow, and
answers ``username=USERNAME`` (the name the code host takes with a token: ``x-access-token`` on GitHub, ``oauth2`` on
GitLab) and ``password=<token>``; for any other protocol or host (a redirect, a rewritten URL), and for ``store`` and
``erase``, it answers nothing and never asks. The token so is in no environment, no argv and no file: a socket, unlike
a pipe, cannot be opened again through ``/proc/<pid>/fd/FD`` by another process. What it reads is bounded (git's
request, beflow's answer); anything unexpected — FD not a socket, no answer, an answer too long or holding a line
end — gives no credential at all, and git then fails to authenticate. It runs with the standard library alone (``-I
-S``): one interpreter start-up per credential asked.
"""

from __future__ import annotations

import os
import stat
import sys

#: The most of git's request read (its attributes, one a line, up to an empty line).
MAX_REQUEST = 64 << 10
#: The most of beflow's answer read: the token and its line end.
MAX_ANSWER = 8 << 10
#: What the helper sends beflow to ask for the token.
ASK = b"get\n"
#: The user name GitHub takes with a token.
USERNAME = "x-access-token"
#: What a user name may be: it goes into git's credential protocol as one ``key=value`` line.
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _request(stream: int) -> dict[str, str] | None:
    """The ``protocol`` and ``host`` of git's request (``key=value`` lines up to an empty line or the end); None
    past :data:`MAX_REQUEST` or when one is given twice, two ways."""
    data = b""
    while b"\n\n" not in data and not data.startswith(b"\n"):
        chunk = os.read(stream, 4096)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            return None
    head = data.split(b"\n\n", 1)[0] if not data.startswith(b"\n") else b""
    attributes: dict[str, str] = {}
    for line in head.decode("utf-8", "replace").split("\n"):
        key, sep, value = line.partition("=")
        if key not in ("protocol", "host") or not sep:
            continue  # (``wwwauth[]``, ``capability[]`` and the like come many times)
        if attributes.get(key, value) != value:  # said twice, two ways: which one git meant is not for us to guess
            return None
        attributes[key] = value
    return attributes


def _token(fd: int) -> str | None:
    """The token beflow answers on socket ``fd`` (one line, at most :data:`MAX_ANSWER` bytes); None otherwise."""
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            return None
        os.write(fd, ASK)
        answer = b""
        while b"\n" not in answer:
            chunk = os.read(fd, MAX_ANSWER + 1 - len(answer))
            if not chunk:
                return None
            answer += chunk
            if len(answer) > MAX_ANSWER:
                return None
    except OSError:
        return None
    token, _, rest = answer.partition(b"\n")
    if rest or not token or b"\0" in token or b"\r" in token:
        return None
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        return None


def answer(fd: int, protocol: str, host: str, action: str, stream: int, username: str = USERNAME) -> str:
    """What the helper prints for git's ``action`` with its request on ``stream``: the credential, or nothing."""
    if action != "get" or not username or not set(username) <= _NAME_CHARACTERS:
        return ""
    request = _request(stream)
    if request is None or request.get("protocol") != protocol or request.get("host") != host:
        return ""
    token = _token(fd)
    if token is None:
        return ""
    return f"username={username}\npassword={token}\n"


def main(args: list[str]) -> int:
    if len(args) != 5 or not args[0].isdigit():
        print("usage: git_credential.py FD PROTOCOL HOST USERNAME ACTION", file=sys.stderr)
        return 2
    fd, protocol, host, username, action = int(args[0]), args[1], args[2], args[3], args[4]
    sys.stdout.write(answer(fd, protocol, host, action, sys.stdin.fileno(), username))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
