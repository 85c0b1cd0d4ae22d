"""The schemas beflow publishes — every tool's input and output schema, and the HTTP API's OpenAPI document — say
only what JSON Schema 2020-12 defines: a client that validates (every TypeScript MCP client) meets no format it has
to ignore."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from beflow.mcpserver.schema import input_schema, ordered, output_schema
from beflow.ops.issues import IssueKey
from beflow.ops.runs import ListRuns, RunStatusQuery
from beflow.web import openapi

#: The formats JSON Schema 2020-12 defines (Validation, section 7.3).
STANDARD_FORMATS = {
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
}


def formats(node: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """Every ``format`` a schema names, with where (a property named ``format`` is not one)."""
    if isinstance(node, dict):
        if isinstance(node.get("format"), str):
            yield where, node["format"]
        for key, value in node.items():
            yield from formats(value, f"{where}/{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from formats(value, f"{where}/{index}")


def test_every_tool_schema_names_standard_formats_only() -> None:
    found = []
    for op in ordered():
        for bound in (None, "7"):
            found += [(op.name, *f) for f in formats(input_schema(op, bound), "input")]
        found += [(op.name, *f) for f in formats(output_schema(op), "output")]
    assert found, "no format at all: the walk looks at nothing"
    assert [f for f in found if f[2] not in STANDARD_FORMATS] == []


def test_the_openapi_document_names_standard_formats_only() -> None:
    found = list(formats(openapi.document()))
    assert found
    assert [f for f in found if f[1] not in STANDARD_FORMATS] == []


def test_the_walk_finds_a_format_that_is_not_standard() -> None:
    schema = {"type": "object", "properties": {"format": {"type": "string", "format": "path"}}}
    assert list(formats(schema)) == [("/properties/format", "path")]


@pytest.mark.parametrize("model", [IssueKey, ListRuns, RunStatusQuery])
def test_a_whole_number_is_an_issue_key_and_a_float_or_a_bool_is_not(model: Any) -> None:
    field = "key" if model is IssueKey else "issue"
    assert getattr(model.model_validate({field: 7}), field) == "7"
    for refused in (7.0, 7.5, True):
        with pytest.raises(ValueError):
            model.model_validate({field: refused})
