"""The event streams' text: each event serialized and masked once for every client that sends it, masked again
when the secrets change (a config reload)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beflow.config import load_project
from beflow.mcp.redact import Redactor
from beflow.web.guard import Bind, Policy
from beflow.web.server import Server
from tests.support.projects import config_file


def test_an_event_is_masked_once_for_every_stream_and_again_after_the_secrets_change(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_file(repo).write_text("{}\n")
    server = Server(load_project(config_file(repo)), Policy(Bind("127.0.0.1", 1), "t" * 24), mcp=False)
    masked: list[str] = []
    text = Redactor.text
    monkeypatch.setattr(Redactor, "text", lambda self, value: masked.append(value) or text(self, value))
    event = {"id": 7, "event": "activity", "issue": "1", "run": "r", "latest": "reading", "time": 1.0}
    said = [server.said.text(server.redact, dict(event)) for _ in range(5)]  # five pages' streams
    assert said == [f"id: 7\ndata: {json.dumps({k: v for k, v in event.items() if k != 'id'})}\n\n"] * 5
    assert len(masked) == 1
    server._masking = None  # (as a config reload that brings a secret: a new masking)
    server.said.text(server.redact, dict(event))
    assert len(masked) == 2
    for n in range(300):  # the texts kept are bounded
        server.said.text(server.redact, {**event, "id": 100 + n})
    assert len(server.said._texts) == server.said.keep
