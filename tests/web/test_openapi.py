"""``/api/v1/openapi.json`` is made of the endpoints the server routes (``endpoints.ENDPOINTS``) and of their
models: a valid OpenAPI 3.1 document (checked by openapi-spec-validator), naming every route the server has under
``/api/v1/`` and no route it does not have."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError
from starlette.routing import Match, Route

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.web import endpoints
from beflow.web.asgi import build_app
from beflow.web.guard import TOKEN_ENV, Bind, Policy
from beflow.web.live import Hub
from beflow.web.openapi import document
from beflow.web.server import Server
from beflow.web.serving import Serving, beside
from tests.support.projects import config_file

TOKEN = "t" * 20 + "-openapi-token"


@pytest.fixture
def project(repo: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    config_file(repo).parent.mkdir(parents=True, exist_ok=True)
    config_file(repo).write_text(json.dumps({"http": {"actions": True}}) + "\n")
    open_tracker(load_project(config_file(repo))).create("An issue", "")
    return repo


@pytest.fixture
def served(project: Path) -> Iterator[Serving]:
    with beside(load_project(config_file(project)), Bind("127.0.0.1", 0), Hub(), None) as serving:
        yield serving


def test_the_document_is_valid_openapi_and_is_what_the_server_serves(served: Serving) -> None:
    made = json.loads(json.dumps(document()))  # (a copy: the document is made once)
    validate(made)
    with httpx.Client(base_url=f"http://127.0.0.1:{served.bind.port}", timeout=10) as http:
        answer = http.get("/api/v1/openapi.json")
    assert answer.status_code == 200 and answer.json() == made
    assert set(made["paths"]) == {e.path for e in (*endpoints.ENDPOINTS, *endpoints.HOOKS)}
    # The validator is no rubber stamp: an answer it does not describe is refused.
    del made["paths"]["/api/v1/state"]["get"]["responses"]["200"]["description"]
    with pytest.raises(OpenAPIValidationError):
        validate(made)


def _requests(route: Route) -> set[str]:
    return set(route.methods or ()) - {"HEAD"}


def _scope(path: str, method: str) -> dict[str, Any]:
    """A request for ``path`` with a value in each of its parameters (``{id}`` -> ``p1``)."""
    return {"type": "http", "path": re.sub(r"\{[^}]+\}", "p1", path), "root_path": "", "method": method}


def test_every_route_under_api_v1_is_in_the_document_and_every_endpoint_in_it_is_routed(project: Path) -> None:
    server = Server(load_project(config_file(project)), Policy(Bind("127.0.0.1", 1), TOKEN), mcp=False)
    app = build_app(server).app  # type: ignore[attr-defined]  # (behind the guard)
    routes = [r for r in app.routes if isinstance(r, Route) and r.path.startswith(("/api/", "/hooks/"))]
    assert len(routes) > 10 and all(_requests(r) for r in routes)  # (each names its methods: no catch-all)
    documented = [(path, method.upper()) for path, item in document()["paths"].items() for method in item]
    assert len(documented) == len(endpoints.ENDPOINTS) + len(endpoints.HOOKS)
    # What the document says is answered by the route for that very path and method (the first that matches).
    for path, method in documented:
        scope = _scope(path, method)
        chosen = next(r for r in app.routes if r.matches(scope)[0] == Match.FULL)
        assert (chosen.path, method in _requests(chosen)) == (path, True)
    # And every route answers only what the document says: a path and method of it (or, for the routes that
    # tell a client which actions there are, a POST the document's actions are instances of).
    for route in routes:
        for method in _requests(route):
            said = [p for p, m in documented if m == method and route.matches(_scope(p, method))[0] == Match.FULL]
            assert said, f"{method} {route.path} is served, and not in the document"


def test_an_action_that_does_not_exist_is_told_which_do(served: Serving) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{served.bind.port}", timeout=10) as http:
        unknown = http.post("/api/v1/issues/1/close", headers=auth)
        assert unknown.status_code == 404
        said = unknown.json()["error"]["message"]
        assert said == "no action 'close' here; there are: retry, status, priority, answer, confirm, review"
        assert "there are: cancel" in http.post("/api/v1/runs/r1/close", headers=auth).json()["error"]["message"]
        assert http.post("/api/v1/issues/1/retry", headers=auth).json()["operation"] == "issue.set_status"
        # A route of the document answers its own method only.
        assert http.post("/api/v1/state", headers=auth).status_code == 405
        assert http.get("/api/v1/issues/1/retry").status_code == 405
