"""The ``.mcp.json`` cascade: load the global and the project file, merge them, expand ``${VAR}`` references.

Two JSON5 files, each ``{"mcpServers": {name: entry}}``, are read in order: ``$BEFLOW_HOME/.mcp.json`` (global),
then ``.mcp.json`` in the project directory. A missing file is skipped. A project entry replaces the global entry
of the same name whole; every other entry of both is kept. ``"disabled": true`` drops a server, so
``{"disabled": true}`` alone in the project file switches a global server off.

Every entry is validated on its own, so one broken entry does not hide the problems of the others: each problem
names the file, the line, the server and the field (``mcpServers.<name>.<field>``).

``${VAR}`` and ``${VAR:-default}`` are expanded in ``command``, ``args``, ``env`` values, ``url`` and ``headers``
values when a run is about to start (:func:`expand`), never when files are loaded, so ``beflow mcp show`` can show
what is written. ``${VAR:-default}`` takes the default when ``VAR`` is unset or empty, as in a POSIX shell; an
unset ``${VAR}`` is an error naming the variable and the server, never a value.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from beflow.config import Project
from beflow.errors import BeflowError, ConfigError
from beflow.paths import beflow_home
from beflow.validation import Problem, described, line_of, parse_json5, problems_of, read_config_text, shown_key

MCP_FILE = ".mcp.json"

Scope = Literal["global", "project"]

NonEmpty = Annotated[str, Field(min_length=1)]


class _Entry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    disabled: bool = False


class StdioServer(_Entry):
    """A server beflow's agent starts as a child process (``type`` defaults to ``stdio``)."""

    type: Literal["stdio"] = "stdio"
    command: NonEmpty
    args: list[str] = Field(default_factory=list)
    env: dict[NonEmpty, str] = Field(default_factory=dict)


class RemoteServer(_Entry):
    """A server the agent reaches over HTTP (``http``: streamable HTTP, ``sse``: server-sent events)."""

    type: Literal["http", "sse"]
    url: NonEmpty
    headers: dict[NonEmpty, str] = Field(default_factory=dict)


Server = StdioServer | RemoteServer

_MODELS: dict[str, type[StdioServer] | type[RemoteServer]] = {
    "stdio": StdioServer,
    "http": RemoteServer,
    "sse": RemoteServer,
}


class Source(BaseModel):
    """One file of the cascade and what became of it."""

    scope: Scope
    path: Path
    exists: bool
    #: What was read (``None`` when the file is missing or could not be read): what the cascade was built from.
    text: str | None = Field(default=None, exclude=True, repr=False)


class Entry(BaseModel):
    """One server of the merged cascade, with the file it came from."""

    model_config = ConfigDict(frozen=True)

    name: str
    scope: Scope
    origin: Path
    #: ``None`` for a bare ``{"disabled": true}``, which only switches a server of the same name off.
    server: Server | None
    #: The global file whose entry of the same name this one replaces.
    overrides: Path | None = None
    #: The text of ``origin``, to give expansion errors a line number.
    text: str = Field(default="", exclude=True, repr=False)

    @property
    def disabled(self) -> bool:
        return self.server is None or self.server.disabled


class Cascade(BaseModel):
    """The merged cascade: both files, every entry (disabled ones too) sorted by name, and what was wrong."""

    sources: list[Source]
    entries: list[Entry]
    problems: list[Problem] = Field(default_factory=list)

    @property
    def active(self) -> list[Entry]:
        """The servers a run gets: every entry that is not disabled, sorted by name."""
        return [e for e in self.entries if not e.disabled]

    def raise_problems(self) -> None:
        if self.problems:
            raise ConfigError(summary(self.problems), fix=fix_for(self.problems))


def cascade_files(project: Project) -> list[tuple[Scope, Path]]:
    """The files of the cascade, in the order they apply (a later one wins per server name)."""
    return [("global", beflow_home() / MCP_FILE), ("project", project.directory / MCP_FILE)]


def load_cascade(project: Project) -> Cascade:
    """Read and merge the cascade; problems are collected on the result (see :meth:`Cascade.raise_problems`)."""
    sources: list[Source] = []
    merged: dict[str, Entry] = {}
    folded: dict[str, Entry] = {}  # by the name as a person reads it (see _folded)
    problems: list[Problem] = []
    seen: set[Path] = set()
    for scope, path in cascade_files(project):
        resolved = path.resolve()
        if resolved in seen:  # the project directory is BEFLOW_HOME: one file, read once
            continue
        seen.add(resolved)
        exists = path.is_file()
        if not exists:
            sources.append(Source(scope=scope, path=path, exists=exists))
            continue
        try:
            text = read_config_text(path)
        except ConfigError as error:
            sources.append(Source(scope=scope, path=path, exists=exists))
            problems.append(_problem_of_error(path, error))
            continue
        sources.append(Source(scope=scope, path=path, exists=exists, text=text))
        entries, found = _parsed_file(scope, path, text)
        problems.extend(found)
        for entry in entries:
            twin = folded.get(_folded(entry.name))
            if twin is not None and twin.name != entry.name:
                problems.append(_twin_problem(entry, twin))
                continue
            replaced = merged.get(entry.name)
            if replaced is not None:
                entry = entry.model_copy(update={"overrides": replaced.origin})
            merged[entry.name] = folded[_folded(entry.name)] = entry
    return Cascade(sources=sources, entries=[merged[name] for name in sorted(merged)], problems=problems)


def _folded(name: str) -> str:
    """A server name as a person reads it: ``Docs`` and ``docs``, or ``é`` typed as one character or as two, are one
    name to a reader (and to agents that match names loosely) but two keys to JSON."""
    return unicodedata.normalize("NFKC", name).casefold()


def _twin_problem(entry: Entry, twin: Entry) -> Problem:
    """``entry`` is named like ``twin`` but for case or Unicode form: which one a name means would be a guess."""
    where = f"{twin.origin}:{line}" if (line := line_of(twin.text, ("mcpServers", twin.name))) else str(twin.origin)
    message = (
        f"differs from server {shown_key(twin.name)!r} ({where}) only in case or Unicode form: give them names that"
        " differ in more than that, or the same name to replace it"
    )
    return Problem(entry.origin, line_of(entry.text, ("mcpServers", entry.name)), f"mcpServers.{entry.name}", message)


def _invisible(name: str) -> bool:
    """Whether ``name`` holds a control or format character (a NUL, a zero-width space, a direction override)."""
    if name.isprintable():  # every Cc and Cf character is unprintable: the common case without a loop
        return False
    return any(unicodedata.category(c) in ("Cc", "Cf") for c in name)


@functools.lru_cache(maxsize=2)  # the global file and the project's
def _parsed_file(scope: Scope, path: Path, text: str) -> tuple[tuple[Entry, ...], tuple[Problem, ...]]:
    """:func:`_read_file` of a text already read, remembered for the last two texts: the checks before a run and
    the run itself, and every run of a watch, read the same files, and a big one takes a while to validate."""
    entries, problems = _read_file(scope, path, text)
    return tuple(entries), tuple(problems)


def forget_files() -> None:
    """Forget the files read so far (for a measurement of a first read)."""
    _parsed_file.cache_clear()


def _read_file(scope: Scope, path: Path, text: str) -> tuple[list[Entry], list[Problem]]:
    """The valid entries of one file (read as ``text``), and a problem for every invalid one."""
    try:
        data = parse_json5(path, text)
    except ConfigError as error:
        return [], [_problem_of_error(path, error)]
    if not isinstance(data, dict):
        return [], [Problem(path, 1, "", f"expected a JSON object at the top level (got {type(data).__name__})")]
    problems = [
        Problem(path, line_of(text, [key]), str(key), "unknown key (expected mcpServers)")
        for key in data
        if key != "mcpServers"
    ]
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        found = type(servers).__name__
        problems.append(
            Problem(path, line_of(text, ["mcpServers"]), "mcpServers", f"expected an object of servers (got {found})")
        )
        return [], problems
    entries = []
    valid = _validate_all(servers)
    for name, raw in servers.items():
        keys = ("mcpServers", name)
        if not name.strip() or name != name.strip():
            message = "a server name must not be blank or start or end with spaces"
            problems.append(Problem(path, line_of(text, keys), f"mcpServers.{name}", message))
            continue
        if _invisible(name):
            message = "a server name must not hold control or invisible characters (shown escaped here)"
            problems.append(Problem(path, line_of(text, keys), f"mcpServers.{name}", message))
            continue
        if name in valid:
            server = valid[name]
        else:
            try:
                server = _validate_entry(raw, path=path, text=text, keys=keys)
            except _Invalid as invalid:
                problems.extend(invalid.problems)
                continue
        entries.append({"name": name, "scope": scope, "origin": path, "server": server, "text": text})
    # One call into pydantic-core for every entry of the file, not one per entry.
    return _entries().validate_python(entries), problems


@functools.cache
def _entries() -> pydantic.TypeAdapter[list[Entry]]:
    return pydantic.TypeAdapter(list[Entry])


@functools.cache
def _servers_of(model: type[StdioServer] | type[RemoteServer]) -> pydantic.TypeAdapter[dict[str, Server]]:
    return pydantic.TypeAdapter(dict[str, model])  # type: ignore[valid-type]


def _validate_all(servers: dict[str, Any]) -> dict[str, Server | None]:
    """The servers of a file validated in one pydantic-core call per kind (a big file in milliseconds, not one call
    per entry). A kind with any invalid entry is left out: :func:`_validate_entry` then names every problem of each
    of its entries, exactly as it does for a file of one entry."""
    valid: dict[str, Server | None] = {}
    kinds: dict[type[StdioServer] | type[RemoteServer], dict[str, Any]] = {}
    for name, raw in servers.items():
        if not isinstance(raw, dict):
            continue
        if raw.get("disabled") is True and set(raw) <= {"disabled", "type"}:
            valid[name] = None
            continue
        kind = raw.get("type", "stdio")
        model = _MODELS.get(kind) if isinstance(kind, str) else None
        if model is not None:
            kinds.setdefault(model, {})[name] = raw
    for model, raws in kinds.items():
        try:
            valid.update(_servers_of(model).validate_python(raws))
        except pydantic.ValidationError:
            continue
    return valid


class _Invalid(Exception):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems


def _validate_entry(raw: Any, *, path: Path, text: str, keys: tuple[str, str]) -> Server | None:
    dotted = ".".join(keys)
    if not isinstance(raw, dict):
        raise _Invalid([Problem(path, line_of(text, keys), dotted, f"expected an object (got {described(raw)})")])
    # `{"disabled": true}` alone switches off a server of the same name from the global file.
    if raw.get("disabled") is True and set(raw) <= {"disabled", "type"}:
        return None
    kind = raw.get("type", "stdio")
    model = _MODELS.get(kind) if isinstance(kind, str) else None
    if model is None:
        # A short word is a typo to point at ("ws"); anything else is described, not shown.
        got = repr(kind) if isinstance(kind, str) and re.fullmatch(r"[A-Za-z0-9_-]{1,12}", kind) else described(kind)
        message = f"expected 'stdio', 'http' or 'sse' (got {got})"
        raise _Invalid([Problem(path, line_of(text, (*keys, "type")), f"{dotted}.type", message)])
    try:
        return model.model_validate(raw)
    except pydantic.ValidationError as exc:
        # Never the value itself: an entry's values are where secrets live (a token in the wrong field, say).
        problems = problems_of(exc, model=model, data=raw, path=path, text=text, prefix=keys, values=False)
        raise _Invalid(problems) from None


def _problem_of_error(path: Path, error: BeflowError) -> Problem:
    """A reading or syntax error of ``read_json5`` (``<file>:<line>: <message>``) as a problem row."""
    message = error.message.removeprefix(f"{path}")
    match = re.match(r"^:(\d+): (.*)$", message, re.DOTALL)
    if match:
        return Problem(path, int(match[1]), "", match[2])
    return Problem(path, None, "", message.removeprefix(": "))


def summary(problems: list[Problem]) -> str:
    count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
    return f"{count} in the MCP cascade:\n" + "\n".join(p.render() for p in problems)


# --- expansion ------------------------------------------------------------------------------------------------

# `${NAME}` or `${NAME:-default}`; anything else after `${` (up to `}` or the end) is a malformed reference.
_REFERENCE = re.compile(r"\$\{(?P<body>[^}]*)(?P<close>\}?)")
_BODY = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>.*))?$", re.DOTALL)


class _Unresolved(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def mask_references(value: str, mask: str) -> str:
    """``value`` with every ``${...}`` reference replaced by ``mask``: what one expands to may be a secret."""
    return _REFERENCE.sub(mask, value)


def expand_string(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with every ``${VAR}``/``${VAR:-default}`` replaced (values are not expanded again).

    Raises ``_Unresolved`` with a message that names the variable (never a value).
    """
    if "${" not in value:
        return value

    def replace(match: re.Match[str]) -> str:
        body = _BODY.match(match["body"])
        if body is None or not match["close"]:
            # Where it is, not what it says: the text after `${` may be a value pasted in by mistake.
            where = f"at character {match.start() + 1}"
            raise _Unresolved(f"malformed reference {where} (expected ${{NAME}} or ${{NAME:-default}})")
        name, default = body["name"], body["default"]
        current = environ.get(name)
        if default is not None:
            return current if current else default
        if current is None:
            raise _Unresolved(f"${{{name}}} is not set and has no default")
        return current

    return _REFERENCE.sub(replace, value)


def expand(entry: Entry, environ: Mapping[str, str]) -> tuple[Server | None, list[Problem]]:
    """The entry's server with references expanded, or ``None`` and the problems (one per field) that stopped it."""
    server = entry.server
    if server is None:
        return None, []
    if not _has_reference(server):
        return server, []  # nothing to expand (the server is immutable: it can be shared)
    problems: list[Problem] = []

    def problem(keys: tuple[str | int, ...], message: str) -> None:
        full = ("mcpServers", entry.name, *keys)
        dotted = ".".join(str(k) for k in full)
        problems.append(Problem(entry.origin, line_of(entry.text, full), dotted, f"{message} (server {entry.name!r})"))

    def field(keys: tuple[str | int, ...], value: str) -> str:
        try:
            return expand_string(value, environ)
        except _Unresolved as unresolved:
            problem(keys, unresolved.message)
            return value

    expanded: Server
    if isinstance(server, StdioServer):
        expanded = server.model_copy(
            update={
                "command": field(("command",), server.command),
                "args": [field(("args", i), a) for i, a in enumerate(server.args)],
                "env": {k: field(("env", k), v) for k, v in server.env.items()},
            }
        )
        if not problems and not expanded.command.strip():
            problem(("command",), "expands to an empty command")
    else:
        expanded = server.model_copy(
            update={
                "url": field(("url",), server.url),
                "headers": {k: field(("headers", k), v) for k, v in server.headers.items()},
            }
        )
        # The value itself is not shown: a URL can carry a token.
        if not problems and not re.match(r"^https?://", expanded.url.strip(), re.IGNORECASE):
            problem(("url",), "expected an http:// or https:// URL after expansion")
    return (None if problems else expanded), problems


def _has_reference(server: Server) -> bool:
    """Whether any field that is expanded holds a ``${``."""
    if isinstance(server, StdioServer):
        texts = [server.command, *server.args, *server.env.values()]
    else:
        texts = [server.url, *server.headers.values()]
    return "${" in "\0".join(texts)  # one search, not one per field (a NUL cannot join two halves of `${`)


def expand_all(cascade: Cascade, environ: Mapping[str, str]) -> tuple[list[tuple[str, Server]], list[Problem]]:
    """Every active server expanded (sorted by name), and every expansion problem."""
    servers: list[tuple[str, Server]] = []
    problems: list[Problem] = []
    for entry in cascade.active:
        server, found = expand(entry, environ)
        problems.extend(found)
        if server is not None:
            servers.append((entry.name, server))
    return servers, problems


class Checked(BaseModel):
    """The whole cascade checked: the merged files, the servers that resolve, and every problem."""

    cascade: Cascade
    servers: list[tuple[str, Server]]
    problems: list[Problem]


def check_cascade(project: Project, environ: Mapping[str, str]) -> Checked:
    """Everything ``beflow mcp check`` validates: syntax, shapes and expansion, every problem at once."""
    with collector_paused():
        cascade = load_cascade(project)
        servers, problems = expand_all(cascade, environ)
        return Checked(cascade=cascade, servers=servers, problems=[*cascade.problems, *problems])


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No garbage collection for the block: building thousands of servers, every object of which stays alive,
    would otherwise set off collections that walk all of them again and again (a third of the time at 10k)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def resolved_servers(project: Project, environ: Mapping[str, str]) -> list[tuple[str, Server]]:
    """The expanded active servers, sorted by name; any problem in the cascade is one :class:`ConfigError`."""
    checked = check_cascade(project, environ)
    if checked.problems:
        raise ConfigError(summary(checked.problems), fix=fix_for(checked.problems))
    return checked.servers


_UNSET = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)\} is not set and has no default")


def fix_for(problems: list[Problem]) -> str:
    """What to do about these problems: for unset variables, export them or give a default; for a syntax error,
    fix the syntax; for the rest, fix each entry at its line."""
    unset = list(dict.fromkeys(m["name"] for p in problems if (m := _UNSET.search(p.message))))
    syntax = [p for p in problems if p.message.startswith("invalid JSON5")]
    others = [p for p in problems if not _UNSET.search(p.message) and p not in syntax]
    parts = []
    if unset:
        names = " and ".join(unset) if len(unset) <= 2 else ", ".join(unset[:-1]) + f" and {unset[-1]}"
        first = unset[0]
        parts.append(f"export {names} before running beflow, or write ${{{first}:-…}} in .mcp.json to give a default")
    if syntax:  # as config.json's: the file is JSON5
        parts.append("fix the syntax where shown (comments and trailing commas are allowed)")
    if others:
        parts.append("fix each entry at the line shown (`beflow docs mcp` describes them)")
    text = "; ".join(parts)
    return text[:1].upper() + text[1:] + "; `beflow mcp check` lists every problem."
