"""Who may talk to beflow's HTTP server (docs/dashboard.md#security).

- Loopback by default; any other bind needs a token, and every request then carries it
  (``Authorization: Bearer <token>``, or the ``beflow_token`` cookie the page sets after ``/?token=…``).
  ``/mcp`` always needs it (as a bearer token: no cookie), on loopback too.
- ``Host`` is checked on every request (DNS rebinding: a page on ``evil.example`` whose name now points at
  127.0.0.1 sends ``Host: evil.example``), and so is ``Origin`` when a browser sends one: the server's own origin,
  or one ``http.origins`` names.
- Actions (``http.actions``) need a POST and the token, from one of three clients: the server's own page (its
  Origin, or ``Sec-Fetch-Site: same-origin`` where the browser leaves the Origin out; the token as the cookie or a
  bearer token); a script (no Origin, the token as a bearer token: the cookie a browser adds by itself never acts
  for a request that does not say it comes from the page); or an origin ``http.origins`` names, with the token as a
  bearer token (CORS: the server's cookie never counts for another origin's request). Any other Origin (``null``
  included) and any cross-site fetch is refused, token or not.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from beflow.errors import UsageError
from beflow.paths import MIN_TOKEN, TOKEN_ENV, token_path
from beflow.system.files import atomic_write, read_regular

COOKIE = "beflow_token"
#: Where a client learns how to authenticate to a resource (RFC 9728): at this path for the server itself, and with
#: the resource's path after it (``/.well-known/oauth-protected-resource/mcp``) for ``/mcp``. Open to all: a client
#: reads it before it has a token.
RESOURCE_METADATA = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True)
class Bind:
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_bind(text: str, default_host: str = "127.0.0.1") -> Bind:
    """``PORT``, ``HOST:PORT`` or ``[V6]:PORT``; a usage error naming what is wrong otherwise."""
    text = text.strip()
    host, port = default_host, text
    if text.startswith("["):
        inside, _, rest = text[1:].partition("]")
        host, port = inside, rest.removeprefix(":")
    elif ":" in text:
        host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535 or not host:
        raise UsageError(
            f"{text!r} is not [HOST:]PORT",
            fix="Give a port (8765) or a host and a port (0.0.0.0:8765, [::1]:8765).",
        )
    return Bind(host, int(port))


@dataclass(frozen=True)
class Token:
    value: str
    #: Where it came from: the environment, the file under BEFLOW_HOME, or newly made (then said once).
    source: str
    path: Path | None = None

    @property
    def created(self) -> bool:
        return self.source == "created"


def load_token() -> Token:
    """``$BEFLOW_HTTP_TOKEN``; else the one stored (0600) under ``BEFLOW_HOME``; else a new one, stored."""
    configured = os.environ.get(TOKEN_ENV, "").strip()
    if configured:
        if len(configured) < MIN_TOKEN:
            raise UsageError(
                f"{TOKEN_ENV} is {len(configured)} characters long; beflow takes {MIN_TOKEN} or more",
                fix=f"Use a longer random token, or unset {TOKEN_ENV} and beflow makes one.",
            )
        return Token(configured, "environment")
    path = token_path()
    try:
        stored = read_regular(path, limit=4096).decode("utf-8", "replace").strip()  # never a FIFO waited on
    except FileNotFoundError:
        stored = ""
    if len(stored) >= MIN_TOKEN:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)  # a token others can read is no token
        return Token(stored, "file", path)
    value = secrets.token_urlsafe(32)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, value + "\n", mode=0o600)
    return Token(value, "created", path)


@dataclass
class Policy:
    """What every request is checked against."""

    bind: Bind
    token: str
    actions: bool = False
    #: Host names besides the bind's (a name the machine is reached by).
    hosts: list[str] = field(default_factory=list)
    #: Origins besides the server's own that may call the API from a browser (CORS).
    origins: list[str] = field(default_factory=list)

    @property
    def token_required(self) -> bool:
        return not self.bind.loopback

    def host_allowed(self, host: str | None) -> bool:
        if not host:
            return False
        name, port = _split_host(host)
        if port is not None and port != self.bind.port:
            return False
        if name in {h.lower() for h in self.hosts}:
            return True
        if self.bind.loopback:
            return is_loopback(name)
        if self.bind.host in ("0.0.0.0", "::"):
            return True  # any name the machine has; the token is what lets a request in
        return name == self.bind.host.lower() or is_loopback(name)

    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        """No ``Origin`` (a request not from a page), the server's own, or one configured."""
        if origin is None:
            return True
        if origin in self.origins:
            return True
        parts = urlsplit(origin)
        return parts.scheme == "http" and host is not None and parts.netloc.lower() == host.lower()

    def cross_origin(self, origin: str | None, host: str | None) -> bool:
        """A page of another origin that ``http.origins`` names (CORS: it gets the headers that let it read, and
        must present the token itself: its requests never act on the server's cookie)."""
        if origin is None or origin not in self.origins:
            return False
        parts = urlsplit(origin)
        return not (parts.scheme == "http" and host is not None and parts.netloc.lower() == host.lower())

    def same_origin(self, origin: str | None, host: str | None, fetch_site: str | None) -> bool:
        """For actions: a browser's request must come from the server's own page."""
        if fetch_site is not None and fetch_site not in ("same-origin", "none"):
            return False
        if origin is None:
            return True
        parts = urlsplit(origin)
        return parts.scheme == "http" and host is not None and parts.netloc.lower() == host.lower()

    def token_ok(self, presented: str | None) -> bool:
        return presented is not None and hmac.compare_digest(presented.encode(), self.token.encode())


def _split_host(host: str) -> tuple[str, int | None]:
    host = host.strip().lower()
    if host.startswith("["):
        inside, _, rest = host[1:].partition("]")
        port = rest.removeprefix(":")
        return inside, int(port) if port.isdigit() else None
    name, sep, port = host.rpartition(":")
    if sep and port.isdigit():
        return name, int(port)
    return host, None


def bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    return value.strip() if scheme.lower() == "bearer" and value.strip() else None


def challenge(base: str, path: str, presented: str | None) -> str:
    """The ``WWW-Authenticate`` of a 401 (RFC 6750): a bearer token is what this server takes, its metadata (RFC 9728)
    says so for the resource at ``path``; a token that was given and is not this server's is ``invalid_token``.
    Without it, MCP clients take the 401 for OAuth's and look for an authorization server there is none of."""
    resource = "/mcp" + path.removeprefix("/mcp") if path == "/mcp" or path.startswith("/mcp/") else ""
    said = f'Bearer realm="beflow", resource_metadata="{base.rstrip("/")}{RESOURCE_METADATA}{resource}"'
    if presented is not None:
        said += ', error="invalid_token", error_description="not this server\'s token"'
    return said
