"""What ``beflow serve`` (and ``watch --http``) says when it starts: where it serves, and off loopback where the
token every request needs is — never the token itself, but the once it is made."""

from __future__ import annotations

from pathlib import Path

import pytest

from beflow.cli.serve import announce
from beflow.config import load_project
from beflow.paths import TOKEN_ENV, token_path
from beflow.web.guard import Bind, load_token
from beflow.web.serving import Serving, policy_for
from tests.support.projects import config_file

TOKEN = "e" * 24


def announced(repo: Path, host: str, capsys: pytest.CaptureFixture[str]) -> str:
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text("{}\n")
    bind, token = Bind(host, 8765), load_token()
    capsys.readouterr()
    announce(Serving(bind, token, policy_for(load_project(config_file(repo)), bind, token)))
    return capsys.readouterr().err


def test_off_loopback_it_says_which_file_holds_the_token_and_never_the_token(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    token_path().parent.mkdir(parents=True, exist_ok=True)
    token_path().write_text(TOKEN + "\n")

    said = announced(repo, "0.0.0.0", capsys)

    assert said.splitlines() == [
        "beflow: serving http://0.0.0.0:8765/ (API http://0.0.0.0:8765/api/v1/, MCP http://0.0.0.0:8765/mcp)",
        f"beflow: not loopback: every request needs the token, which is in {token_path()}; "
        "open http://0.0.0.0:8765/?token=<token>",
    ]
    assert TOKEN not in said


def test_a_token_from_the_environment_is_named_by_its_variable(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)

    said = announced(repo, "0.0.0.0", capsys)

    assert f"every request needs the token, which is in ${TOKEN_ENV};" in said and TOKEN not in said


def test_a_token_made_now_is_said_once_with_its_file(
    repo: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)

    said = announced(repo, "0.0.0.0", capsys)
    made = token_path().read_text().strip()

    assert f"stored in {token_path()} (said once): {made}" in said
    assert f"which is in {token_path()};" in said
    assert made not in announced(repo, "0.0.0.0", capsys)  # said once: the next start names the file only
