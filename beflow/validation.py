"""Reading user-edited JSON5 files into pydantic models, with errors a person can act on.

Every problem names the file, the line where one can be found, the dotted key and what was expected, so that
``config.json`` and ``.mcp.json`` report mistakes the same way.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import json5
import pydantic

from beflow.errors import ConfigError

M = TypeVar("M", bound=pydantic.BaseModel)

_JSON5_ERROR = re.compile(r"^<string>:(?P<line>\d+) (?P<message>.*)$", re.DOTALL)


class Problem(typing.NamedTuple):
    """One thing wrong in one file."""

    file: Path
    line: int | None
    key: str
    message: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"{where}: {self.key}: {self.message}" if self.key else f"{where}: {self.message}"


def read_json5(path: Path) -> tuple[str, Any]:
    """The text of ``path`` and its JSON5 value; a syntax error is a :class:`ConfigError` with the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return text, json5.loads(text)
    except ValueError as exc:
        match = _JSON5_ERROR.match(str(exc))
        if match:
            detail = f"{path}:{match['line']}: invalid JSON5: {match['message']}"
        else:
            detail = f"{path}: invalid JSON5: {exc}"
        raise ConfigError(
            detail, fix="Fix the syntax at that line (comments and trailing commas are allowed)."
        ) from None


def line_of(text: str, keys: typing.Sequence[str | int]) -> int | None:
    """Best-effort line of a dotted key in JSON5 text: each key is searched after the previous one."""
    position, found = 0, False
    for key in keys:
        if isinstance(key, int):
            continue
        match = re.compile(rf"""(["']?){re.escape(key)}\1\s*:""").search(text, position)
        if match is None:
            break
        position, found = match.start(), True
    return text.count("\n", 0, position) + 1 if found else None


def validate(model: type[M], data: Any, *, path: Path, text: str, prefix: tuple[str, ...] = ()) -> M:
    """``model`` validated from ``data``; any failure is one :class:`ConfigError` listing every problem."""
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        problems = problems_of(exc, model=model, data=data, path=path, text=text, prefix=prefix)
        raise ConfigError("\n".join(p.render() for p in problems)) from None


def problems_of(
    exc: pydantic.ValidationError,
    *,
    model: type[pydantic.BaseModel],
    data: Any,
    path: Path,
    text: str,
    prefix: tuple[str, ...] = (),
) -> list[Problem]:
    """Turn pydantic's errors into :class:`Problem` rows, one per key (alternatives of a union joined)."""
    grouped: dict[tuple[str | int, ...], list[str]] = {}
    for error in exc.errors():
        keys = _data_keys(error, data)
        if error["type"] == "union_tag_invalid":
            keys = (*keys, error["ctx"]["discriminator"].strip("'"))
        message = _message(error, model, keys)
        messages = grouped.setdefault(keys, [])
        if message not in messages:
            messages.append(message)
    # A value of the wrong shape for one branch of a union but with deeper errors in another: the deeper
    # errors are the useful ones.
    for keys in list(grouped):
        if any(len(other) > len(keys) and other[: len(keys)] == keys for other in grouped):
            del grouped[keys]
    problems = []
    for keys, messages in grouped.items():
        full = (*prefix, *keys)
        dotted = ".".join(str(k) for k in full)
        problems.append(Problem(path, line_of(text, full), dotted, _join(messages)))
    return problems


def _join(messages: list[str]) -> str:
    """Alternatives of a union as one sentence: ``expected a string or an object (got 5)``."""
    suffixes = {m[m.rfind(" (got ") :] for m in messages if " (got " in m}
    if len(messages) > 1 and len(suffixes) == 1 and all(" (got " in m for m in messages):
        suffix = suffixes.pop()
        heads = [m[: -len(suffix)] for m in messages]
        heads = [heads[0]] + [h.removeprefix("expected ") for h in heads[1:]]
        return " or ".join(heads) + suffix
    return " or ".join(messages)


def _data_keys(error: Any, data: Any) -> tuple[str | int, ...]:
    """pydantic's location without the labels it adds for union branches (keys that are not in the data)."""
    loc = error["loc"]
    keys: list[str | int] = []
    current = data
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if (isinstance(current, dict) and part in current) or (
            isinstance(current, list) and isinstance(part, int) and part < len(current)
        ):
            keys.append(part)
            current = current[part]
        elif last and error["type"] == "missing":
            keys.append(part)
        elif not last:
            continue
    return tuple(keys)


def _message(error: Any, model: type[pydantic.BaseModel], keys: tuple[str | int, ...]) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        known = _fields_at(model, keys[:-1])
        hint = difflib.get_close_matches(str(keys[-1]), known, n=1)
        if hint:
            return f"unknown key (did you mean {hint[0]!r}?)"
        return f"unknown key (expected one of: {', '.join(known)})" if known else "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return f"expected {error['ctx']['expected_tags'].replace(', ', ' or ')} (got {error['ctx']['tag']!r})"
    if kind == "union_tag_not_found":
        return f"required key {error['ctx']['discriminator']} is missing"
    if kind in {"model_type", "dict_type", "model_attributes_type"}:
        return f"expected an object (got {error['input']!r})"
    message = str(error["msg"])
    message = (
        message.replace("Input should be a valid", "expected a")
        .replace("Input should be", "expected")
        .replace("Value error, ", "")
    )
    return f"{message} (got {error['input']!r})"


def _fields_at(model: Any, keys: tuple[str | int, ...]) -> list[str]:
    """Field names (by alias) of the model found at ``keys`` below ``model``; empty when it cannot be told."""
    annotations: list[Any] = [model]
    for key in keys:
        annotations = [child for annotation in annotations for child in _children(annotation, key)]
    names = [f.alias or n for a in annotations for m in _branches(a) if _is_model(m) for n, f in m.model_fields.items()]
    return sorted(dict.fromkeys(names))


def _branches(annotation: Any) -> list[Any]:
    """The alternatives of a union (through ``Annotated``), or the annotation itself."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _branches(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [b for arg in typing.get_args(annotation) for b in _branches(arg)]
    return [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)


def _children(annotation: Any, key: str | int) -> list[Any]:
    """What lives at ``key`` inside a value of type ``annotation``."""
    children = []
    for branch in _branches(annotation):
        origin, args = typing.get_origin(branch), typing.get_args(branch)
        if _is_model(branch) and isinstance(key, str) and key in branch.model_fields:
            children.append(branch.model_fields[key].annotation)
        elif origin is dict and len(args) == 2 and isinstance(key, str):
            children.append(args[1])
        elif origin is list and args and isinstance(key, int):
            children.append(args[0])
    return children
