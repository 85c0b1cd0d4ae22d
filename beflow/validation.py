"""Reading user-edited JSON5 files into pydantic models, with errors a person can act on.

Every problem names the file, the line where one can be found, the dotted key and what was expected, so that
``.beflow/config.json`` and ``.mcp.json`` report mistakes the same way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import functools
import itertools
import json
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pydantic

from beflow.errors import ConfigError
from beflow.system import startup
from beflow.system.files import FileTooLarge, NotRegularError, read_regular

if TYPE_CHECKING:
    import json5
else:
    json5 = startup.module("json5")  # plain JSON, the usual case, needs none

M = TypeVar("M", bound=pydantic.BaseModel)

# json5's messages: a syntax error (the line and column of the first character it could not read, both 1-based)
# and, with allow_duplicate_keys=False, a key given twice (with neither line nor object).
_JSON5_ERROR = re.compile(
    r'^<string>:(?P<line>\d+) Unexpected (?:end of input|"(?P<char>.)") at column (?P<column>\d+)$', re.DOTALL
)
_JSON5_DUPLICATE = re.compile(r'^Duplicate key "(?P<key>.*)" found in object$', re.DOTALL)
# Python's own limit on reading a long run of digits as a number (int_max_str_digits).
_TOO_MANY_DIGITS = re.compile(r"value has (?P<digits>\d+) digits")

#: How deep objects and arrays may sit inside one another. Real files use a handful of levels; the parser and the
#: validation recurse, and a file nested thousands deep must be an error, not a crash.
MAX_DEPTH = 64
#: How much of a key a message shows: enough to find it in the file.
KEY_SHOWN = 80


class Problem(typing.NamedTuple):
    """One thing wrong in one file."""

    file: Path
    line: int | None
    key: str
    message: str

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else str(self.file)
        return f"{where}: {shown_key(self.key)}: {self.message}" if self.key else f"{where}: {self.message}"


def shown_key(key: str) -> str:
    """A dotted key as a one-line message can show it: control characters visible, a very long key cut short."""
    visible = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in key)
    return visible if len(visible) <= KEY_SHOWN else visible[: KEY_SHOWN - 1] + "…"


#: Bytes a config file (``.beflow/config.json``, ``.mcp.json``) may hold.
MAX_CONFIG_FILE = 16 << 20


def read_json5(path: Path) -> tuple[str, Any]:
    """The text of ``path`` and its JSON5 value; a syntax error or a key given twice is a :class:`ConfigError`."""
    text = read_config_text(path)
    return text, parse_json5(path, text)


def read_config_text(path: Path) -> str:
    """The text of a config file; one that cannot be read as one is a :class:`ConfigError`."""
    try:
        # Never blocks on a FIFO, never reads a file no config could need to be.
        text = read_regular(path, limit=MAX_CONFIG_FILE).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except NotRegularError as exc:
        raise ConfigError(f"{path}: cannot read: it is {exc.kind}, not a file") from None
    except FileTooLarge:
        raise ConfigError(f"{path}: cannot read: larger than {MAX_CONFIG_FILE // (1 << 20)} MiB") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return text


def parse_json5(path: Path, text: str) -> Any:
    """The JSON5 value of ``text`` (read from ``path``); a syntax error or a key given twice is a
    :class:`ConfigError`."""
    _check_depth(path, text)
    # Plain JSON (most files, and every big one) is read by the C parser, many times faster than json5; anything
    # else, a key given twice included, goes to json5, which reads JSON5 and words the errors.
    with contextlib.suppress(ValueError, RecursionError):
        return json.loads(text, object_pairs_hook=_unique_keys)
    try:
        # A key given twice would silently mean the last one: the first is then a setting that does nothing.
        return json5.loads(text, allow_duplicate_keys=False)
    except RecursionError:  # nesting the depth check does not see (it counts brackets outside strings)
        raise ConfigError(f"{path}: nested too deeply to read", fix=_DEPTH_FIX) from None
    except ValueError as exc:
        duplicate = _JSON5_DUPLICATE.match(str(exc))
        if duplicate:
            raise _duplicate_keys_error(path, text, duplicate["key"]) from None
        digits = _TOO_MANY_DIGITS.search(str(exc))
        if digits:
            message = f"{path}: invalid JSON5: a number of {digits['digits']} digits (too long to be a setting)"
            raise ConfigError(message, fix="Write the number it should be.") from None
        raise _syntax_error(path, text, str(exc)) from None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("a key given twice")
    return result


_DEPTH_FIX = f"Objects and arrays may sit at most {MAX_DEPTH} levels deep."


#: What a bracket does to the depth.
_STEP = {"{": 1, "[": 1, "}": -1, "]": -1}
_NOT_BRACKETS = re.compile(r"[^{}\[\]]+")
#: :data:`_STRINGS_AND_COMMENTS` unrolled (the same matches, several times faster on a big file).
_SKIPPED = re.compile(r""""[^"\\\n]*(?:\\.[^"\\\n]*)*"|'[^'\\\n]*(?:\\.[^'\\\n]*)*'|//[^\n]*|/\*.*?\*/""", re.DOTALL)


def _check_depth(path: Path, text: str) -> None:
    """A :class:`ConfigError` at the line where objects and arrays first nest deeper than :data:`MAX_DEPTH`."""
    # The deepest nesting in C-level passes (a 10k-server file in milliseconds); the token walk below, which finds
    # the line, only for a file that is too deep.
    brackets = _NOT_BRACKETS.sub("", _SKIPPED.sub("", text))
    if max(itertools.accumulate(map(_STEP.__getitem__, brackets)), default=0) <= MAX_DEPTH:
        return
    code = _without_comments(text)
    depth = 0
    for token in _TOKEN.finditer(code):
        kind = token.group(0)
        if kind in ("{", "["):
            depth += 1
            if depth > MAX_DEPTH:
                line = code.count("\n", 0, token.start()) + 1
                raise ConfigError(f"{path}:{line}: nested more than {MAX_DEPTH} levels deep", fix=_DEPTH_FIX)
        elif kind in ("}", "]"):
            depth -= 1


def _syntax_error(path: Path, text: str, message: str) -> ConfigError:
    """json5's ``<string>:3 Unexpected "t" at column 3`` (columns are 1-based) in the file's terms, with a hint."""
    fix = "Fix the syntax at that line (comments and trailing commas are allowed)."
    match = _JSON5_ERROR.match(message)
    if match is None:
        return ConfigError(f"{path}: invalid JSON5: {message}", fix=fix)
    line, column, char = int(match["line"]), int(match["column"]), match["char"]
    detail = f"{path}:{line}: invalid JSON5: Unexpected {'end of input' if char is None else _visible(char)}"
    detail += f" at column {column}"
    hint = _syntax_hint(text, line, column, char)
    return ConfigError(f"{detail} ({hint})" if hint else detail, fix=fix)


def _visible(char: str) -> str:
    """A character as a person can see it in a one-line message: never a raw line break or control character."""
    named = {"\n": "newline", "\r": "carriage return", "\t": "tab"}
    return named.get(char) or json.dumps(char, ensure_ascii=not char.isprintable())


def _syntax_hint(text: str, line: int, column: int, char: str | None) -> str | None:
    """The likely cause of the two mistakes json5 reports past the place they were made, else ``None``."""
    code = _without_comments(text)
    lines = code.split("\n")  # json5 counts lines by "\n" alone
    offset = sum(len(earlier) + 1 for earlier in lines[: line - 1]) + column - 1
    before = code[: offset + 1] if char == "," else code[:offset]
    # json5 reads on past the second comma (the character it names is the one after it): say where that is.
    if re.search(r",\s*,\s*$", before):
        comma = before.rindex(",")
        comma_line = code.count("\n", 0, comma) + 1
        comma_column = comma - code.rfind("\n", 0, comma)
        where = f"column {comma_column}" if comma_line == line else f"line {comma_line}, column {comma_column}"
        return f"two commas in a row at {where}?"
    if char is None:  # the end came with brackets still open: say where the one to close was opened
        return _unclosed(code)
    # A value at the start of a line after a line that ends in a value: the comma between them is missing.
    if char.isspace() or char in ",:]}" or code[:offset].rpartition("\n")[2].strip():
        return None
    previous = next((n for n in range(line - 1, 0, -1) if lines[n - 1].strip()), None)
    if previous is not None and lines[previous - 1].rstrip()[-1] not in ",{[:":
        return f"a missing comma at the end of line {previous}?"
    return None


#: A string, a comment or a bracket: what :func:`_unclosed` walks.
_BRACKETS_OUTSIDE_STRINGS = re.compile(_SKIPPED.pattern + r"|[{}\[\]]", re.DOTALL)


def _unclosed(code: str) -> str | None:
    """Where the innermost bracket still open at the end of ``code`` was opened, as a hint; ``None`` when every
    bracket is closed (the end came in a string, say) or they do not pair up."""
    opened: list[int] = []
    for match in _BRACKETS_OUTSIDE_STRINGS.finditer(code):
        token = match.group(0)
        if token in ("{", "["):
            opened.append(match.start())
        elif token in ("}", "]") and (not opened or code[opened.pop()] != {"}": "{", "]": "["}[token]):
            return None
    if not opened:
        return None
    at = opened[-1]
    line, column = code.count("\n", 0, at) + 1, at - code.rfind("\n", 0, at)
    closing = "}" if code[at] == "{" else "]"
    return f"the {code[at]} at line {line}, column {column} is never closed: a {closing} is missing?"


def _duplicate_keys_error(path: Path, text: str, key: str) -> ConfigError:
    """Every key given twice in one object, each at the line of its second occurrence."""
    problems = [
        Problem(path, line, ".".join(str(k) for k in keys), f"key given twice (first at line {first})")
        for keys, line, first in _duplicate_keys(text)
    ]
    if not problems:  # not found again: still name the key json5 names
        problems = [Problem(path, line_of(text, [key]), key, "key given twice")]
    return ConfigError(
        "\n".join(p.render() for p in problems), fix="Keep one of them: only one value of a key can count."
    )


_TOKEN = re.compile(r""""(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|[{}\[\]:,]|[^\s{}\[\]:,"']+""")


def _duplicate_keys(text: str) -> list[tuple[tuple[str | int, ...], int, int]]:
    """The keys given twice in one object of ``text`` (json5 found one, but names neither its object nor its line).

    Each as its path, its line and the line of its first occurrence, in file order.
    """
    return [(path, line, first) for path, line, first in _keys(text) if first is not None]


def _keys(text: str) -> typing.Iterator[tuple[tuple[str | int, ...], int, int | None]]:
    """Every key of every object in ``text``, in file order, in one pass: its path (array indices as numbers), its
    line, and for a key given twice in its object the line of its first occurrence (else ``None``)."""
    code = _without_comments(text)
    frames: list[_Frame] = []
    previous = ""
    line, counted = 1, 0  # lines are counted as the tokens go: one pass over the text, however many keys
    for token in _TOKEN.finditer(code):
        kind = token.group(0)
        if kind in ("{", "["):
            frames.append(_Frame({} if kind == "{" else None, "" if kind == "{" else 0))
        elif kind in ("}", "]") and frames:
            frames.pop()
        elif kind == "," and frames and isinstance(frames[-1].at, int):
            frames[-1].at += 1
        elif kind == ":" and frames and (keys := frames[-1].keys) is not None and previous:
            frames[-1].at = key = _key_text(previous)
            line += code.count("\n", counted, token.start())
            counted = token.start()
            first = keys.get(key)
            if first is None:
                keys[key] = line
            yield tuple(f.at for f in frames), line, first
        previous = kind


def _key_text(token: str) -> str:
    """A key as its token spells it: quoted (JSON's quotes are read fast, JSON5's single quotes by json5) or bare."""
    if token[0] == '"':
        with contextlib.suppress(ValueError):
            return str(json.loads(token))
    if token[0] in "\"'":
        with contextlib.suppress(ValueError):
            return str(json5.loads(token))
    return token


@functools.lru_cache(maxsize=8)
def _key_lines(text: str) -> dict[tuple[str | int, ...], int]:
    """The line of every key path of ``text``; built once per text, so that finding the lines of thousands of
    problems in one file stays linear."""
    lines: dict[tuple[str | int, ...], int] = {}
    for path, line, _ in _keys(text):
        lines.setdefault(path, line)
    return lines


@dataclasses.dataclass
class _Frame:
    """An object (the line of each key seen) or an array (``keys`` None) being read, and the key or index open."""

    keys: dict[str, int] | None
    at: str | int


# Strings (kept: keys are strings) and comments (blanked: a commented-out key is not the key).
_STRINGS_AND_COMMENTS = re.compile(r""""(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|//[^\n]*|/\*.*?\*/""", re.DOTALL)


def _without_comments(text: str) -> str:
    """``text`` with every comment replaced by spaces, so that positions and line numbers stay the same."""

    def blank(match: re.Match[str]) -> str:
        token = match.group(0)
        return token if token[0] in "\"'" else re.sub(r"[^\n]", " ", token)

    return _STRINGS_AND_COMMENTS.sub(blank, text)


def place_of(path: Path | None, *keys: str) -> str:
    """``<config file>:<line>: `` of the first key that is in the file (``<config file>: `` when none is; nothing
    without a file), for messages about a setting: the file in use, whatever its name, and where in it."""
    if path is None:
        return ""
    try:
        text = read_regular(path, limit=MAX_CONFIG_FILE).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return f"{path}: "
    for depth in range(len(keys), 0, -1):
        line = line_of(text, keys[:depth])
        if line is not None:
            return f"{path}:{line}: "
    return f"{path}: "


def line_of(text: str, keys: typing.Sequence[str | int]) -> int | None:
    """Line of a dotted key in JSON5 text; for a key that is not there (a missing one, an array element), the line of
    the nearest enclosing key that is; ``None`` when none is."""
    index = _key_lines(text)
    for end in range(len(keys), 0, -1):
        line = index.get(tuple(keys[:end]))
        if line is not None:
            return line
    return None


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
    values: bool = True,
) -> list[Problem]:
    """Turn pydantic's errors into :class:`Problem` rows, one per key (alternatives of a union joined).

    ``values=False`` says what kind of value was found instead of the value (for files that hold secrets).
    """
    grouped, missing = _grouped(exc, model, data, values=values)
    problems = []
    for keys, messages in grouped.items():
        full = (*prefix, *keys)
        dotted = ".".join(str(k) for k in full)
        # A missing key has no line of its own: the object that lacks it does.
        line = line_of(text, full[:-1] if keys in missing else full)
        problems.append(Problem(path, line, dotted, _join(messages)))
    # In the order a person reads the file; problems without a line last.
    problems.sort(key=lambda p: (p.line is None, p.line or 0))
    return problems


def messages_of(exc: pydantic.ValidationError, *, model: type[pydantic.BaseModel], data: Any) -> list[str]:
    """pydantic's errors for input that is not a file (an operation's arguments): one ``dotted.key: message`` each."""
    grouped, _ = _grouped(exc, model, data)
    return [
        f"{'.'.join(str(k) for k in keys)}: {_join(messages)}" if keys else _join(messages)
        for keys, messages in grouped.items()
    ]


def _grouped(
    exc: pydantic.ValidationError, model: type[pydantic.BaseModel], data: Any, *, values: bool = True
) -> tuple[dict[tuple[str | int, ...], list[str]], set[tuple[str | int, ...]]]:
    """The messages for each key of ``data``, and the keys that are missing."""
    grouped: dict[tuple[str | int, ...], list[str]] = {}
    missing: set[tuple[str | int, ...]] = set()
    for error in exc.errors():
        keys = _data_keys(error, data)
        if error["type"] == "union_tag_invalid":
            keys = (*keys, error["ctx"]["discriminator"].strip("'"))
        if error["type"] == "missing":
            missing.add(keys)
        message = _message(error, model, keys, shown if values else described)
        messages = grouped.setdefault(keys, [])
        if message not in messages:
            messages.append(message)
    # A value of the wrong shape for one branch of a union but with deeper errors in another: the deeper
    # errors are the useful ones.
    for keys in list(grouped):
        if any(len(other) > len(keys) and other[: len(keys)] == keys for other in grouped):
            del grouped[keys]
    return grouped, missing


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


def _message(
    error: Any, model: type[pydantic.BaseModel], keys: tuple[str | int, ...], shown: Callable[[Any], str]
) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind == "extra_forbidden":
        known = _fields_at(model, error["loc"][:-1])
        hint = difflib.get_close_matches(str(keys[-1]), known, n=1)
        if hint:
            return f"unknown key (did you mean {hint[0]!r}?)"
        return f"unknown key (expected one of: {', '.join(known)})" if known else "unknown key"
    if kind == "missing":
        return "required key is missing"
    if kind == "union_tag_invalid":
        return f"expected {error['ctx']['expected_tags'].replace(', ', ' or ')} (got {shown(error['ctx']['tag'])})"
    if kind == "union_tag_not_found":
        return f"required key {error['ctx']['discriminator']} is missing"
    if kind in {"model_type", "dict_type", "model_attributes_type"}:
        return f"expected an object (got {shown(error['input'])})"
    # pydantic's wording for the constraints config files use, in the "expected ... (got ...)" form.
    plural = "s" if ctx.get("min_length") != 1 else ""
    plural_max = "s" if ctx.get("max_length") != 1 else ""
    expected = {
        "string_too_short": f"expected at least {ctx.get('min_length')} character{plural}",
        "string_too_long": f"expected at most {ctx.get('max_length')} character{plural_max}",
        "too_short": f"expected at least {ctx.get('min_length')} item{plural}",
        "too_long": f"expected at most {ctx.get('max_length')} item{plural_max}",
        "string_pattern_mismatch": f"expected text matching {ctx.get('pattern')}",
        "int_type": "expected a whole number",
        "int_parsing": "expected a whole number",
        "int_from_float": "expected a whole number",
        "float_type": "expected a number",
        "float_parsing": "expected a number",
        "finite_number": "expected a finite number",
        "bool_type": "expected true or false",
        "bool_parsing": "expected true or false",
        "greater_than": f"expected a number greater than {_number(ctx.get('gt'))}",
        "greater_than_equal": f"expected a number of at least {_number(ctx.get('ge'))}",
        "less_than": f"expected a number less than {_number(ctx.get('lt'))}",
        "less_than_equal": f"expected a number of at most {_number(ctx.get('le'))}",
    }.get(kind)
    if expected is not None:
        return f"{expected} (got {shown(error['input'])})"
    message = str(error["msg"])
    message = (
        message.replace("Input should be a valid", "expected a")
        .replace("Input should be", "expected")
        .replace("Value error, ", "")
    )
    return f"{message} (got {shown(error['input'])})"


def described(value: Any) -> str:
    """What kind of value ``value`` is, never the value itself (``a string of 24 characters``, ``a number``)."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return f"a string of {len(value)} character{'s' if len(value) != 1 else ''}" if value else "an empty string"
    if isinstance(value, list):
        return f"a list of {len(value)} item{'s' if len(value) != 1 else ''}" if value else "an empty list"
    if isinstance(value, dict):
        return "an object"
    return f"a value of type {type(value).__name__}"


def shown(value: Any, *, limit: int = 80) -> str:
    """A value as the file spells it (``true``, ``null``, ``"60"``), else Python's repr; long ones cut short."""
    if isinstance(value, int) and value.bit_length() > 256:  # str() refuses more than 4300 digits
        return "a number too long to show"
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = f"a value of type {type(value).__name__}"
    # An issue's body or a prompt can be pages long: enough to recognise it.
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(value: Any) -> str:
    """``0`` rather than pydantic's ``0.0`` for a float bound."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _fields_at(model: Any, loc: tuple[str | int, ...]) -> list[str]:
    """Field names (by alias) of the model found at pydantic's ``loc`` below ``model``; empty when unknown.

    ``loc`` holds the data's keys and, for unions, the branch pydantic tried (a discriminator's tag or a model's
    name): that branch's fields are the right suggestions, not those of every alternative.
    """
    annotations: list[Any] = [model]
    for part in loc:
        branches = [b for a in annotations for b in _branches(a)]
        chosen = [b for b in branches if _is_model(b) and part in (b.__name__, *_tags(b))]
        if len(branches) > 1 and chosen:
            annotations = chosen
            continue
        children = [child for branch in branches for child in _children(branch, part)]
        if children:
            annotations = children
        # else: a label pydantic adds (a validator's name): the value is still the one at hand
    names = [f.alias or n for a in annotations for m in _branches(a) if _is_model(m) for n, f in m.model_fields.items()]
    return sorted(dict.fromkeys(names))


def _tags(model: type[pydantic.BaseModel]) -> list[Any]:
    """The literal values of a model's fields: a discriminated union labels a branch with one of them."""
    return [
        value
        for field in model.model_fields.values()
        if typing.get_origin(field.annotation) is typing.Literal
        for value in typing.get_args(field.annotation)
    ]


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
    children: list[Any] = []
    for branch in _branches(annotation):
        origin, args = typing.get_origin(branch), typing.get_args(branch)
        if _is_model(branch) and isinstance(key, str):
            children.extend(f.annotation for n, f in branch.model_fields.items() if key in (n, f.alias))
        elif origin is dict and len(args) == 2 and isinstance(key, str):
            children.append(args[1])
        elif origin is list and args and isinstance(key, int):
            children.append(args[0])
    return children
