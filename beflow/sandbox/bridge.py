"""Inside the sandbox, before acpx: ``python -I -S bridge.py SOCKET --ready READY -- ARGV...``.

The sandbox has no network but its own loopback. The bridge listens on it (a free port), forwards each connection
to beflow's proxy through its Unix socket (bound into the sandbox), points ``HTTP(S)_PROXY``/``ALL_PROXY`` at
itself, and becomes ``ARGV`` (acpx): the forwarding goes on in a forked child, which ends with the sandbox. Just
before, it creates the file ``READY``: beflow, finding it missing after the run, knows the sandbox never started
(bwrap failed, or ``ARGV`` is not there inside) and that nothing ran. It runs with the standard library alone
(``-I -S``), so that it costs one interpreter start-up.

First of all, it gives the run a session keyring of its own (a new, empty, anonymous one): the user's session
keyring is inherited through bwrap, and a key in it is the possessor's to read (``keyctl``), sandbox or not. It
also sets no-new-privs (bwrap does too: this holds whichever bwrap runs it).
"""

from __future__ import annotations

# The C modules, not socket/threading/signal: those pull in enum, selectors and more, which would double the
# bridge's start-up, paid once per acpx command of every sandboxed run. (ctypes costs about 4 ms: the keyring.)
import _signal  # type: ignore[import-not-found]  # (no stub: the C half of signal)
import _socket
import _thread
import ctypes
import os
import sys

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _pipe(source: _socket.socket, sink: _socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    for end in (sink, source):
        try:  # noqa: SIM105 - contextlib is one import more at every start
            end.shutdown(_socket.SHUT_RDWR)
        except OSError:
            pass


def _serve(listener: _socket.socket, path: str) -> None:
    while True:
        fd, _ = listener._accept()  # type: ignore[attr-defined]  # (_socket's accept: a file descriptor)
        client = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM, 0, fd)
        upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        _thread.start_new_thread(_pipe, (client, upstream))
        _thread.start_new_thread(_pipe, (upstream, client))


#: ``keyctl``'s system call number by machine (x86_64's own table; the generic table of arm64, riscv64, loongarch).
_KEYCTL = {"x86_64": 250, "aarch64": 219, "arm64": 219, "riscv64": 219, "loongarch64": 219}
KEYCTL_JOIN_SESSION_KEYRING = 1
PR_SET_NO_NEW_PRIVS = 38
#: What ``keyctl`` answers where a seccomp filter (a container's default one) forbids it: the agent, under the same
#: filter, cannot reach any keyring either.
_NO_KEYCTL = (1, 38)  # EPERM, ENOSYS


def confine() -> str | None:
    """Join a new session keyring and set no-new-privs; why not, when either fails (nothing may then run)."""
    libc = ctypes.CDLL(None, use_errno=True)
    number = _KEYCTL.get(os.uname().machine)
    if number is None:
        return f"cannot give the run a keyring of its own on {os.uname().machine}"
    if libc.syscall(number, KEYCTL_JOIN_SESSION_KEYRING, None) < 0 and ctypes.get_errno() not in _NO_KEYCTL:
        return f"cannot give the run a keyring of its own: {os.strerror(ctypes.get_errno())}"
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"cannot set no-new-privs: {os.strerror(ctypes.get_errno())}"
    return None


def _found(program: str) -> bool:
    """Whether ``program`` (a path, or a name on PATH) is an executable here (shutil.which, without its import)."""
    if os.sep in program:
        return os.access(program, os.X_OK) and not os.path.isdir(program)
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory, program)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return True
    return False


def main(args: list[str]) -> None:
    path, flag, ready, separator, *argv = args
    assert flag == "--ready" and separator == "--" and argv, "usage: bridge.py SOCKET --ready READY -- ARGV..."
    failed = confine()
    if failed is not None:
        print(f"bwrap: {failed}", file=sys.stderr)
        sys.exit(126)
    if not _found(argv[0]):
        print(f"bwrap: {argv[0]}: not found inside the sandbox", file=sys.stderr)
        sys.exit(127)
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    if os.fork() == 0:  # the forwarder: no terminal, no output pipes held open
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _serve(listener, path)
        os._exit(0)
    listener.close()
    env = dict(os.environ, **dict.fromkeys(PROXY_VARS, url), NO_PROXY="", no_proxy="")
    _signal.signal(_signal.SIGTERM, _signal.SIG_DFL)  # ignored by bwrap (see bwrap.py), not by acpx
    os.close(os.open(ready, os.O_WRONLY | os.O_CREAT, 0o600))
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main(sys.argv[1:])
