"""Where the HTTP server's token lives (docs/dashboard.md#security): ``$BEFLOW_HTTP_TOKEN``, else the file beflow
makes under ``BEFLOW_HOME``. Either is a secret of every run (docs/safety.md): an agent running as the user can read
the file, so its value is masked and refused wherever a run's output goes, like the tracker's token. Kept apart from
the server, which nothing else needs to load to know the token."""

from __future__ import annotations

from pathlib import Path

from beflow.files import FileTooLarge, NotRegularError, read_regular
from beflow.paths import beflow_home

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
