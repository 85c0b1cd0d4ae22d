"""beflow's git credential helper as git runs it (``python -I -S git_credential.py FD PROTOCOL HOST ACTION``, a real
process with one end of a socket pair): it answers ``get`` for its protocol and host alone, asks beflow nothing
otherwise, and reads a bounded amount of git's request and of beflow's answer."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from beflow.repository import git_credential

TOKEN = "ghs_helper0123456789abcdef"
HOST = "github.example.com:8443"


def request(protocol: str = "https", host: str = HOST, *extra: str) -> bytes:
    return "".join(
        f"{line}\n" for line in (f"protocol={protocol}", f"host={host}", "path=octo/hello.git", *extra)
    ).encode()


def helper(
    fd: int, action: str, stdin: bytes, protocol: str = "https", host: str = HOST, username: str = "x-access-token"
) -> str:
    argv = [sys.executable, "-I", "-S", git_credential.__file__, str(fd), protocol, host, username, action]
    done = subprocess.run(argv, input=stdin, capture_output=True, pass_fds=(fd,), timeout=60, check=True)
    return done.stdout.decode()


class Beflow:
    """beflow's end of the pair: answers every request with ``answer`` and counts the requests."""

    def __init__(self, answer: bytes) -> None:
        self.ours, self.theirs = socket.socketpair()
        self.answer = answer
        self.asked = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        try:
            while self.ours.recv(64):
                self.asked += 1
                self.ours.sendall(self.answer)
        except OSError:
            pass

    def close(self) -> None:
        self.ours.shutdown(socket.SHUT_RDWR)
        self.thread.join()
        self.ours.close()
        self.theirs.close()


@pytest.fixture
def beflow() -> Iterator[Beflow]:
    served = Beflow(f"{TOKEN}\n".encode())
    yield served
    served.close()


def test_it_answers_get_for_its_protocol_and_host(beflow: Beflow) -> None:
    said = helper(
        beflow.theirs.fileno(),
        "get",
        request("https", HOST, "capability[]=authtype", "wwwauth[]=Basic realm=x", "wwwauth[]=Bearer"),
    )
    assert said == f"username=x-access-token\npassword={TOKEN}\n"
    assert helper(beflow.theirs.fileno(), "get", request()) == said  # git may ask again: it is answered again
    assert beflow.asked == 2


def test_it_answers_with_the_user_name_the_code_host_takes(beflow: Beflow) -> None:
    """GitLab takes any token as the password of the user ``oauth2``; a name that could bend git's credential
    protocol (a line end, an ``=``) gives no credential at all."""
    said = helper(beflow.theirs.fileno(), "get", request(), username="oauth2")
    assert said == f"username=oauth2\npassword={TOKEN}\n"
    assert helper(beflow.theirs.fileno(), "get", request(), username="oauth2\npassword=x") == ""
    assert helper(beflow.theirs.fileno(), "get", request(), username="") == ""
    assert beflow.asked == 1


@pytest.mark.parametrize(
    "protocol, host",
    [
        ("https", "elsewhere.example.com"),  # a redirect, a rewritten URL
        ("https", "github.example.com"),  # the host on another port
        ("https", "github.example.com:443"),
        ("http", HOST),  # not over TLS
        ("https", f"{HOST}.evil.example.com"),
    ],
)
def test_it_answers_nothing_for_another_host_or_protocol_and_asks_beflow_nothing(
    beflow: Beflow, protocol: str, host: str
) -> None:
    assert helper(beflow.theirs.fileno(), "get", request(protocol, host)) == ""
    assert helper(beflow.theirs.fileno(), "get", b"host=" + HOST.encode() + b"\n") == ""  # no protocol said
    # A request that says the host or the protocol twice, two ways, is not guessed at.
    assert helper(beflow.theirs.fileno(), "get", request() + b"host=elsewhere.example.com\n") == ""
    assert helper(beflow.theirs.fileno(), "get", request() + b"protocol=http\n") == ""
    assert beflow.asked == 0


@pytest.mark.parametrize("action", ["store", "erase", "other"])
def test_it_answers_nothing_for_store_and_erase(beflow: Beflow, action: str) -> None:
    assert helper(beflow.theirs.fileno(), action, request() + f"username=x\npassword={TOKEN}\n".encode()) == ""
    assert beflow.asked == 0


def test_what_it_reads_of_beflows_answer_is_bounded() -> None:
    """An answer without a line end within its bound gives no credential, and the helper stops reading there."""
    ours, theirs = socket.socketpair()
    flood = b"x" * (4 * git_credential.MAX_ANSWER)
    ours.sendall(flood)  # there before it asks: all it could read
    try:
        assert helper(theirs.fileno(), "get", request()) == ""
        theirs.setblocking(False)
        left = b""
        while True:
            try:
                chunk = theirs.recv(1 << 16)
            except BlockingIOError:
                break
            left += chunk
        assert len(flood) - len(left) <= git_credential.MAX_ANSWER + 1
        assert ours.recv(64) == git_credential.ASK  # it did ask
    finally:
        ours.close()
        theirs.close()


@pytest.mark.parametrize("answer", [b"", b"\n", f"{TOKEN}\nmore\n".encode(), b"to\0ken\n", b"tok\r\n"])
def test_an_answer_that_is_not_one_clean_line_gives_no_credential(answer: bytes) -> None:
    served = Beflow(answer)
    try:
        if not answer:
            served.ours.shutdown(socket.SHUT_WR)  # beflow gone: the end of the stream, no answer
        assert helper(served.theirs.fileno(), "get", request()) == ""
    finally:
        served.close()


def test_what_it_reads_of_gits_request_is_bounded(beflow: Beflow) -> None:
    endless = b"x" * (8 * git_credential.MAX_REQUEST)  # no line end, no empty line: no end of the request
    assert helper(beflow.theirs.fileno(), "get", request() + endless) == ""
    assert beflow.asked == 0


def test_a_descriptor_that_is_not_a_socket_is_not_read() -> None:
    """A pipe (which any process of the user could open again through /proc) is never taken for beflow's socket."""
    read, write = os.pipe()
    os.write(write, f"{TOKEN}\n".encode())
    try:
        assert helper(read, "get", request()) == ""
        assert os.read(read, 100) == f"{TOKEN}\n".encode()  # not read
    finally:
        os.close(read)
        os.close(write)


def test_bad_usage_is_an_error() -> None:
    done = subprocess.run(
        [sys.executable, "-I", "-S", git_credential.__file__, "not-a-number", "https", HOST, "get"],
        capture_output=True,
        input=request(),
    )
    assert done.returncode == 2 and done.stdout == b"" and b"usage" in done.stderr
