"""A real git server for the tests: git's own smart HTTP (``git http-backend``, run as a CGI for each request) behind
Python's HTTP server, over TLS with a certificate of its own, on 127.0.0.1.

Like GitHub, it asks for a credential (401 with ``WWW-Authenticate: Basic``) and takes only the user name and
password it was given; it can hold the requests of a service (``git-receive-pack``: a push) until the test lets
them go, so that a test looks at the push while it runs. git trusts it through ``GIT_SSL_CAINFO`` (:attr:`ca`).
The credential is compared here, in the test's process: ``git http-backend`` gets the user's name alone.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import ipaddress
import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

#: How long a held request waits for the test at most: a test that fails while a push is held does not hang.
HOLD_MOST = 120.0


def certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM files in ``directory``): the certificate is also
    the authority git is told to trust."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "git-server.pem", directory / "git-server.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@dataclass
class Seen:
    """A request the server answered: the service it was for, the user it authenticated (None: none), the status."""

    method: str
    path: str
    user: str | None
    status: int


@dataclass
class GitRepos:
    """Repositories served over git's smart HTTP (under ``root``, as ``/<owner>/<name>.git``), the credentials they
    take, and what was asked of them: the part a fake code host that serves its projects' git reuses."""

    root: Path
    #: The user name and password it takes (as GitHub takes a token: ``x-access-token`` and the token).
    credentials: dict[str, str] = field(default_factory=dict)
    #: Services whose authenticated requests are held until :attr:`released` is set.
    hold: set[str] = field(default_factory=set)
    #: Set while a request is held (the test looks then), and to let held requests go.
    holding: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    seen: list[Seen] = field(default_factory=list)

    def bare(self, path: str, source: Path) -> Path:
        """A bare clone of the repository at ``source``, served at ``path`` (``octo/hello.git``)."""
        target = self.root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["git", "clone", "-q", "--bare", str(source), str(target)], check=True, capture_output=True)
        return target

    def authenticated(self, header: str | None) -> str | None:
        """The user an ``Authorization`` header authenticates, None when it does not."""
        if not header or not header.startswith("Basic "):
            return None
        try:
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return user if user in self.credentials and self.credentials[user] == password else None

    def serve(self, handler: BaseHTTPRequestHandler) -> None:
        """Answer ``handler``'s request (a GET or a POST of git's smart HTTP) as ``git http-backend`` does, once its
        Basic credential is one of :attr:`credentials` (else a 401 asking for one)."""
        parts = urlsplit(handler.path)
        body = _body(handler) if handler.command == "POST" else b""
        user = self.authenticated(handler.headers.get("Authorization"))
        if user is None:
            self.seen.append(Seen(handler.command, parts.path, None, 401))
            _send(handler, 401, {"WWW-Authenticate": 'Basic realm="git"', "Content-Type": "text/plain"}, b"no\n")
            return
        service = parts.path.rsplit("/", 1)[-1]
        if service == "refs":  # info/refs?service=git-receive-pack
            service = parts.query.removeprefix("service=")
        if handler.command == "POST" and service in self.hold:
            self.holding.set()
            self.released.wait(HOLD_MOST)
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "REQUEST_METHOD": handler.command,
            "PATH_INFO": parts.path,
            "QUERY_STRING": parts.query,
            "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_USER": user,
            "REMOTE_ADDR": "127.0.0.1",
            "GIT_PROTOCOL": handler.headers.get("Git-Protocol", ""),
            "HTTP_CONTENT_ENCODING": handler.headers.get("Content-Encoding", ""),
        }
        backend = [shutil.which("git") or "git", "http-backend"]
        done = subprocess.run(backend, input=body, env=env, capture_output=True, check=False)
        head, _, payload = done.stdout.partition(b"\r\n\r\n")
        headers: dict[str, str] = {}
        status = 200
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers[key] = value.strip()
        self.seen.append(Seen(handler.command, parts.path, user, status))
        _send(handler, status, headers, payload)


@dataclass
class GitServer(GitRepos):
    """The repositories, served over TLS on a port of their own; git trusts the certificate at :attr:`ca`."""

    ca: Path = Path()
    port: int = 0

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.port}/{path}"


def _body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks = []
        while size := int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16):
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
        while handler.rfile.readline().strip():  # trailers, up to the empty line
            pass
        return b"".join(chunks)
    return handler.rfile.read(int(handler.headers.get("Content-Length") or 0))


def _send(handler: BaseHTTPRequestHandler, status: int, headers: dict[str, str], body: bytes) -> None:
    handler.send_response(status)
    for key, value in headers.items():
        handler.send_header(key, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _handler(server: GitServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            server.serve(self)

        do_GET = do_POST = _serve

    return Handler


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], context: ssl.SSLContext):
        super().__init__(address, handler)
        self.context = context

    def finish_request(self, request: Any, client_address: Any) -> None:
        # The handshake in the request's own thread, not in the one that accepts every connection.
        super().finish_request(self.context.wrap_socket(request, server_side=True), client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away (a push killed, a refused handshake) is no failure of the server


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[GitServer]:
    """A git server on a local port, serving the repositories under ``directory / "repos"``, until the block ends."""
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = certificate(directory)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    state = GitServer(directory / "repos", ca=cert)
    state.root.mkdir(parents=True, exist_ok=True)
    httpd = _TlsServer(("127.0.0.1", 0), _handler(state), context)
    state.port = httpd.server_address[1]
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.released.set()
        httpd.shutdown()
        httpd.server_close()
