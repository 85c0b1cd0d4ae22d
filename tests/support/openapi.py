"""GitHub's published OpenAPI description (the pinned npm package ``@octokit/openapi``), loaded and indexed once per
session: every request the client sends to the fake GitHub and every answer the fake gives is checked against it,
so that the fake cannot drift from the real API. Its checker, :class:`Spec`, serves GitLab's description too
(tests/support/gitlab_openapi.py)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from jsonschema import Draft4Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT4

REPO_ROOT = Path(__file__).resolve().parents[2]
SPEC = REPO_ROOT / "tools" / "acpx" / "node_modules" / "@octokit" / "openapi" / "generated" / "api.github.com.json"
URI = "urn:github-rest-api"
#: Statuses any endpoint may answer with, whether or not its description lists them (HTTP and GitHub-wide).
CROSS_CUTTING = {304, 401, 403, 429, 500, 502, 503}


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` in JSON Schema terms (draft 4 does not know the keyword)."""
    if isinstance(node, list):
        return [_nullable(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _nullable(value) for key, value in node.items()}
    if out.pop("nullable", False) is True:
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
            if "enum" in out and None not in out["enum"]:
                out["enum"] = [*out["enum"], None]
        else:
            out = {"anyOf": [out, {"type": "null"}]}
    return out


@dataclass(frozen=True)
class Route:
    method: str
    template: str
    pattern: re.Pattern[str]
    operation: dict[str, Any]


class Spec:
    """The description, its operations indexed by method and path, and validators built on demand."""

    #: Where the document sits in the validators' registry, what it is called in messages, and the schema of the
    #: error answers any operation may give (another forge's description sets its own: tests/support/gitlab_openapi).
    uri = URI
    title = "GitHub's REST API"
    error_pointer = "/components/schemas/basic-error"

    def __init__(self, document: dict[str, Any]) -> None:
        self.document = document
        self.registry = Registry().with_resource(self.uri, Resource(contents=document, specification=DRAFT4))
        self.routes: list[Route] = []
        for template, item in document["paths"].items():
            regex = "^" + re.sub(r"\\\{(\w[\w-]*)\\\}", self._segment(item), re.escape(template)) + "$"
            for method, operation in item.items():
                if method in ("get", "post", "patch", "put", "delete"):
                    self.routes.append(Route(method.upper(), template, re.compile(regex), operation))
        # Literal paths win over templated ones (`/issues/comments/{id}` before `/issues/{issue_number}/...`).
        self.routes.sort(key=lambda r: -len(re.sub(r"\{[^}]+\}", "", r.template)))

    def _segment(self, item: dict[str, Any]) -> Any:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            multi = any(
                self.param(p).get("name") == name and self.param(p).get("x-multi-segment")
                for op in item.values()
                if isinstance(op, dict)
                for p in op.get("parameters", [])
            )
            return f"(?P<{name.replace('-', '_')}>{'.+' if multi else '[^/]+'})"

        return replace

    def param(self, node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            found: dict[str, Any] = self.resolve(node["$ref"])
            return found
        return node

    def resolve(self, ref: str) -> Any:
        node: Any = self.document
        for part in ref.removeprefix("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def route(self, method: str, path: str) -> tuple[Route, dict[str, str]]:
        for route in self.routes:
            if route.method != method:
                continue
            match = route.pattern.match(path)
            if match:
                return route, {k: unquote(v) for k, v in match.groupdict().items()}
        raise LookupError(f"{method} {path} is no operation of {self.title}")

    @functools.cache  # noqa: B019 - one Spec per session
    def validator(self, pointer: str) -> Draft4Validator:
        return Draft4Validator({"$ref": f"{self.uri}#{pointer}"}, registry=self.registry)

    def errors(self, pointer: str, instance: Any) -> list[str]:
        found = sorted(self.validator(pointer).iter_errors(instance), key=lambda e: list(e.absolute_path))
        return [f"{'/'.join(map(str, e.absolute_path)) or '(top)'}: {e.message[:300]}" for e in found[:5]]

    # -- requests and responses ------------------------------------------------------------------------------------

    def check_request(self, method: str, path: str, query: dict[str, str], body: Any) -> list[str]:
        """What is wrong with a request (empty when the description allows it)."""
        try:
            route, _ = self.route(method, path)
        except LookupError as error:
            return [str(error)]
        where = f"{method} {route.template}"
        problems = []
        params = {p["name"]: p for p in map(self.param, route.operation.get("parameters", [])) if p["in"] == "query"}
        for name, value in query.items():
            if name not in params:
                problems.append(f"{where}: unknown query parameter {name!r}")
                continue
            schema = _nullable(params[name].get("schema", {}))
            # A form-style array that is not exploded travels as one comma-separated value (GitLab's `labels=a,b`).
            listed = params[name].get("style", "form") == "form" and params[name].get("explode") is False
            problems += [
                f"{where}: ?{name}={value}: {m}" for m in _check_value(schema, value, self.registry, listed=listed)
            ]
        content = route.operation.get("requestBody", {}).get("content", {})
        if body is not None:
            if "application/json" not in content:
                problems.append(f"{where}: takes no JSON body")
            else:
                pointer = _pointer(
                    "paths", route.template, method.lower(), "requestBody", "content", "application/json", "schema"
                )
                problems += [f"{where} body: {m}" for m in self.errors(pointer, body)]
        elif route.operation.get("requestBody", {}).get("required"):
            problems.append(f"{where}: a JSON body is required")
        return problems

    def check_response(self, method: str, path: str, status: int, body: Any) -> list[str]:
        try:
            route, _ = self.route(method, path)
        except LookupError as error:
            return [str(error)]
        where = f"{method} {route.template} -> {status}"
        responses = route.operation["responses"]
        if str(status) not in responses:
            if status in CROSS_CUTTING:
                if status == 304 or body is None:
                    return []
                return [f"{where}: {m}" for m in self.errors(self.error_pointer, body)]
            return [f"{where}: the description lists no such status ({', '.join(responses)})"]
        response = self.param(responses[str(status)])
        content = response.get("content", {})
        if "application/json" not in content:
            return [] if body is None else [f"{where}: the description says this status has no JSON body"]
        pointer = _pointer("paths", route.template, method.lower(), "responses", str(status))
        node = responses[str(status)]
        if "$ref" in node:
            pointer = node["$ref"].removeprefix("#")
        return [f"{where}: {m}" for m in self.errors(pointer + "/content/application~1json/schema", body)]

    # -- examples --------------------------------------------------------------------------------------------------

    def example(self, pointer: str, **overrides: Any) -> Any:
        """A minimal object the schema at ``pointer`` accepts (every required field), with ``overrides`` on top."""
        value = self._example(self.resolve("#" + pointer), depth=0)
        if isinstance(value, dict):
            value.update(overrides)
        return value

    def _example(self, schema: dict[str, Any], depth: int) -> Any:
        if "$ref" in schema:
            return self._example(self.resolve(schema["$ref"]), depth)
        kinds = schema.get("type", "object")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        nullable = "null" in kinds or any(part == {"type": "null"} for part in schema.get("anyOf", []))
        if nullable and depth > 0:
            return None
        if "allOf" in schema:
            merged: dict[str, Any] = {}
            for part in schema["allOf"]:
                value = self._example(part, depth)
                if isinstance(value, dict):
                    merged.update(value)
            return merged
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self._example(schema[key][0], depth)
        if "enum" in schema:
            return schema["enum"][0]
        kind = next(k for k in kinds if k != "null")
        if kind == "object":
            props = schema.get("properties", {})
            return {name: self._example(props.get(name, {}), depth + 1) for name in schema.get("required", [])}
        if kind == "array":
            return []
        if kind == "string":
            fmt = schema.get("format")
            return {"date-time": "2024-01-01T00:00:00Z", "uri": "https://example.com/x"}.get(fmt, "x")
        if kind in ("integer", "number"):
            return 1
        if kind == "boolean":
            return False
        return None


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


def _check_value(schema: dict[str, Any], raw: str, registry: Registry, *, listed: bool = False) -> list[str]:
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    value: Any = raw
    if listed and "array" in kinds:
        items = schema.get("items", {})
        whole = "integer" in (items.get("type") if isinstance(items.get("type"), list) else [items.get("type")])
        value = [int(v) if whole and re.fullmatch(r"-?\d+", v) else v for v in raw.split(",")]
    elif "integer" in kinds and re.fullmatch(r"-?\d+", raw):
        value = int(raw)
    elif "boolean" in kinds and raw in ("true", "false"):
        value = raw == "true"
    return [e.message for e in Draft4Validator(schema, registry=registry).iter_errors(value)]


@functools.cache
def spec() -> Spec:
    """The pinned description, loaded once per test session."""
    if not SPEC.is_file():
        pytest.fail(f"{SPEC} is missing: ./scripts/test installs the pinned @octokit/openapi (tools/acpx)")
    return Spec(_nullable(json.loads(SPEC.read_text(encoding="utf-8"))))
