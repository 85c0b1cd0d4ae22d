"""``/api/v1/openapi.json``: the API's OpenAPI 3.1 document, made of what the server serves — its endpoints
(:data:`beflow.web.endpoints.ENDPOINTS`, and the webhooks', :data:`~beflow.web.endpoints.HOOKS`) and the pydantic
models they answer with, the event stream's among them — so that it cannot say what the server does not do."""

from __future__ import annotations

import functools
from http import HTTPStatus
from typing import Any

from pydantic.json_schema import models_json_schema

from beflow import __version__
from beflow.web import api, endpoints

_SCHEMAS = "#/components/schemas/"


@functools.cache
def document() -> dict[str, Any]:
    """The document (made once: nothing in it changes while beflow runs; never change what it returns)."""
    events = api.event_models()
    models = [m for e in endpoints.ENDPOINTS for m in (e.response, e.body) if m is not None]
    models += [api.Problem, *events.values()]
    refs, schemas = models_json_schema(
        [(m, "serialization") for m in dict.fromkeys(models)], ref_template=_SCHEMAS + "{model}"
    )
    # (a model's name, unless two models share it: then pydantic names each by its module too)
    ref: dict[Any, dict[str, Any]] = {model: dict(schema) for (model, _), schema in refs.items()}
    components = schemas.get("$defs", {})
    # Each `data:` line of the event stream is one of them (a run's `finished` and the watch's share the kind).
    components["Event"] = {
        "title": "Event",
        "description": "One `data:` line of /api/v1/events: an event of the `--json` stream, or the server's notice.",
        "anyOf": [_ref(name) for name in events],
    }
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in (*endpoints.ENDPOINTS, *endpoints.HOOKS):
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint, ref)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "beflow",
            "version": __version__,
            "description": "A watch's state, issues and runs; the forges' webhooks that wake it.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def _operation(endpoint: endpoints.Endpoint, ref: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": endpoint.summary, "operationId": endpoint.name}
    if endpoint.signed:
        operation["security"] = []  # (the forge's signature of the body, checked by the endpoint)
    if endpoint.params:
        operation["parameters"] = [_parameter(param) for param in endpoint.params]
    if endpoint.body is not None:
        operation["requestBody"] = {"content": {"application/json": {"schema": ref[endpoint.body]}}}
    if endpoint.response is not None:
        schema = ref[endpoint.response]
    else:  # the event stream's events, or this document
        schema = _ref("Event") if endpoint.media == "text/event-stream" else {"type": "object"}
    operation["responses"] = {
        str(endpoint.status): {
            "description": endpoint.answers or HTTPStatus(endpoint.status).phrase,
            "content": {endpoint.media: {"schema": schema}},
        },
        "default": {"description": "An error", "content": {"application/json": {"schema": ref[api.Problem]}}},
    }
    return operation


def _parameter(param: endpoints.Param) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": param.type}
    if param.minimum is not None:
        schema["minimum"] = param.minimum
    if param.maximum is not None:
        schema["maximum"] = param.maximum
    if param.choices:
        schema["enum"] = list(param.choices)
    found: dict[str, Any] = {"name": param.name, "in": param.where}
    if param.where == "path":
        found["required"] = True
    if param.description is not None:
        found["description"] = param.description
    found["schema"] = schema
    return found


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _SCHEMAS + name}
