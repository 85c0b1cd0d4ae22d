"""Inside the sandbox, before acpx: ``python -I -S bridge.py SOCKET --ready READY -- ARGV...``.

The sandbox has no network but its own loopback. The bridge listens on it (a free port), forwards each connection
to beflow's proxy through its Unix socket (bound into the sandbox), points ``HTTP(S)_PROXY``/``ALL_PROXY`` at
itself, and becomes ``ARGV`` (acpx): the forwarding goes on in a forked child, which ends with the sandbox. Just
before, it creates the file ``READY``: beflow, finding it missing after the run, knows the sandbox never started
(bwrap failed, or ``ARGV`` is not there inside) and that nothing ran. It runs with the standard library alone
(``-I -S``), so that it costs one interpreter start-up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import threading

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            sink.sendall(chunk)
    except OSError:
        pass
    finally:
        for end in (sink, source):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)


def _serve(listener: socket.socket, path: str) -> None:
    while True:
        client, _ = listener.accept()
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            client.close()
            upstream.close()
            continue
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()


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
    if not _found(argv[0]):
        print(f"bwrap: {argv[0]}: not found inside the sandbox", file=sys.stderr)
        sys.exit(127)
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
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
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # ignored by bwrap (see bwrap.py), not by acpx
    os.close(os.open(ready, os.O_WRONLY | os.O_CREAT, 0o600))
    os.execvpe(argv[0], argv, env)


if __name__ == "__main__":
    main(sys.argv[1:])
