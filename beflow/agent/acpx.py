"""acpx: the command line beflow builds for a run, and reading what acpx streams back.

With ``--format json`` acpx prints the ACP JSON-RPC traffic between itself and the agent, one message a line:
``initialize``, ``session/new`` (with the ``mcpServers`` it handed over), ``session/prompt``, the agent's
``session/update`` notifications (message chunks, tool calls), ``session/request_permission`` requests, and the
prompt's result (``stopReason``) or error. :class:`Transcript` follows that stream for progress and the summary.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import anyio

from beflow.config import AgentCommand, Config
from beflow.guardrails import Usage, amount, currency_code, token_count
from beflow.paths import acpx_home, slug
from beflow.records.record import RunRecord, clean_text
from beflow.records.store import RunStore
from beflow.system import interrupts, proc
from beflow.system.files import read_regular

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager


class Confinement(Protocol):
    """What every acpx command line of a session runs in when it is confined (:class:`beflow.sandbox.box.Sandbox`):
    opened around the session, wrapping each command line, and asked after each whether it really ran inside."""

    def opened(self) -> AbstractAsyncContextManager[object]: ...

    def wrap(self, argv: Sequence[str], *, cwd: Path) -> list[str]: ...

    def check(self, result: proc.Completed) -> None: ...


#: acpx's exit codes beyond 0 (success) and 1 (error).
ACPX_TIMEOUT = 3
ACPX_PERMISSION_DENIED = 5
#: acpx's ``detailCode`` s that mean the agent itself cannot be started.
AGENT_MISSING = {"AGENT_SPAWN_ENOENT", "AGENT_SPAWN_EACCES"}

# ACP's names that the stream's reader acts on, in one place. The ACP SDK (agent-client-protocol) is the
# reference: tests/agent/test_acpx.py checks these against its schema and feeds the reader messages built by its models.
# The SDK is not imported here: loading its schema costs more CPU than a whole `beflow --help`.
NEW_SESSION = "session/new"
PROMPT = "session/prompt"
UPDATE = "session/update"
REQUEST_PERMISSION = "session/request_permission"
#: The kinds of ``session/update`` the reader follows (the others, plans and thoughts among them, pass by).
MESSAGE_CHUNK = "agent_message_chunk"
TOOL_CALL = "tool_call"
TOOL_CALL_UPDATE = "tool_call_update"
#: The agent's report of its context and cost (``used``, ``size``, optional ``cost``: ``amount``, ``currency``).
USAGE_UPDATE = "usage_update"
USAGE_FIELDS = ("used", "size")
COST_FIELDS = ("amount", "currency")
#: A usage update exactly as acpx relays the common shape (its serialisation: no spaces, these keys in this order,
#: whole numbers, no escapes), matched whole so that the thousands an agent may send are read without a JSON parse
#: each (a regular expression is about a tenth of it); any other line, a usage update of another shape included, is
#: parsed as JSON. What the match takes means the same as the parse would: nothing else can be in such a line.
USAGE_LINE = re.compile(
    rb'\{"jsonrpc":"2\.0","method":"session/update","params":\{"sessionId":"([A-Za-z0-9_.:-]{1,200})",'
    rb'"update":\{"sessionUpdate":"usage_update","used":(0|[1-9][0-9]{0,15}),"size":(0|[1-9][0-9]{0,15})'
    rb'(?:,"cost":\{"amount":(-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,20})?(?:[eE][+-]?[0-9]{1,3})?),'
    rb'"currency":"([A-Za-z]{3})"\})?\}\}\}'
)
USAGE_LINE_START = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"'

#: The turn's token counts in the prompt's response (``usage``), as ACP names them, and the record's names.
TURN_TOKENS = {
    "inputTokens": "input_tokens",
    "outputTokens": "output_tokens",
    "totalTokens": "total_tokens",
    "thoughtTokens": "thought_tokens",
    "cachedReadTokens": "cached_read_tokens",
    "cachedWriteTokens": "cached_write_tokens",
}
#: What a tool call's updates may change, as the reader keeps it; and the statuses that end a tool call.
TOOL_FIELDS = ("title", "kind", "status")
TOOL_ENDED = ("completed", "failed")

#: Requests the agent sends to acpx (the client); every other request in the stream is acpx's to the agent.
AGENT_REQUESTS = frozenset({REQUEST_PERMISSION, "mcp/connect", "mcp/disconnect"})
AGENT_REQUEST_PREFIXES = ("fs/", "terminal/", "elicitation/", "_")

#: Prompts longer than this go through a file (``exec -f``) instead of argv, which the kernel limits per argument.
MAX_ARGV_PROMPT = 64 * 1024


def agent_args(config: Config) -> list[str]:
    """How acpx is told which agent to run: a registry name, or ``--agent <command>`` for a raw one."""
    if isinstance(config.agent, AgentCommand):
        return ["--agent", config.agent.command]
    return [config.agent]


def exec_argv(
    config: Config,
    *,
    cwd: Path,
    prompt: str,
    prompt_file: Path | None = None,
    permissions: str,
    timeout: float | None,
) -> list[str]:
    """``acpx --cwd <cwd> --format json --verbose --<permissions> [--timeout T] <agent> exec <prompt>``.

    ``--verbose`` passes the agent's own stderr on to acpx's: when an agent dies mid-turn, its last words are
    the only account of why."""
    argv = [*config.acpx_argv(), "--cwd", str(cwd), "--format", "json", "--verbose", f"--{permissions}"]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return _with_prompt([*argv, *agent_args(config), "exec"], prompt, prompt_file)


def _with_prompt(argv: list[str], prompt: str, prompt_file: Path | None) -> list[str]:
    """``argv`` with the prompt last: as an argument, or, when too long for one, as ``--file`` (where the run
    record keeps it)."""
    if len(prompt.encode("utf-8")) > MAX_ARGV_PROMPT and prompt_file is not None:
        return [*argv, "--file", str(prompt_file)]
    return [*argv, prompt]


def attend_argv(
    config: Config, *, cwd: Path, prompt: str, permissions: str, prompt_file: Path | None = None
) -> list[str]:
    """Attended: text output on the user's terminal, permission prompts answered there (no ``--timeout``: the
    person decides when to stop)."""
    argv = [*config.acpx_argv(), "--cwd", str(cwd), f"--{permissions}", *agent_args(config), "exec"]
    return _with_prompt(argv, prompt, prompt_file)


#: Characters of one agent message kept (its end), and how many messages, tool calls and permission requests:
#: an agent that floods the stream leaves beflow's memory flat (the transcript file has it all, up to its cap).
MAX_MESSAGE = 1 << 20
MAX_KEPT = 1000


@dataclass
class Transcript:
    """What the JSON-RPC stream of one acpx run said, followed line by line (in bounded memory)."""

    session_id: str | None = None
    mcp_servers: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # the agent's text, one entry per turn of chunks
    tool_calls: dict[str, dict[str, Any]] = field(default_factory=dict)
    permission_requests: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str | None = None
    error: str | None = None  # the agent's error answer to the prompt
    error_code: int | None = None  # its JSON-RPC code (-32000: authentication required)
    request_error: str | None = None  # the agent's error answer to another of acpx's requests (session/new, ...)
    request_error_code: int | None = None
    request_error_method: str | None = None  # which request: "session/new", "initialize", ...
    acpx_error: str | None = None  # acpx's own error (``"id": null``), e.g. a timeout
    acpx_code: str | None = None  # its ``data.acpxCode``: TIMEOUT, PERMISSION_PROMPT_UNAVAILABLE, ...
    acpx_detail: str | None = None  # its ``data.detailCode``: AGENT_SPAWN_ENOENT, AGENT_DISCONNECTED, ...
    latest: str | None = None  # the most recent activity, for progress displays
    usage: Usage = field(default_factory=Usage)  # what the agent reported it used (guardrails.Usage)
    _chunks: list[str] = field(default_factory=list)
    _chunk_bytes: int = 0
    _tail: str = ""
    _prompt_ids: set[Any] = field(default_factory=set)
    _requests: dict[Any, str] = field(default_factory=dict)  # acpx's requests to the agent still unanswered
    _burst: _Burst | None = field(default=None, repr=False, compare=False)

    @property
    def prompted(self) -> bool:
        """Whether acpx got as far as sending the prompt to the agent."""
        return bool(self._prompt_ids)

    def follow(self, lines: bytes) -> None:
        """Take the lines one read of acpx's output brought (joined by their newlines, as
        :data:`beflow.system.proc.LinesHandler` has them), as :meth:`feed` takes each. The agent's usage updates,
        thousands
        a run, are taken straight into :attr:`usage` when they have acpx's common shape (:data:`USAGE_LINE`): no
        JSON parse, no message made of them; a read of nothing else (a burst of them) is taken whole
        (:class:`_Burst`)."""
        usage, burst = self.usage, self._burst
        if burst is not None and burst.took(usage, lines):
            return
        start, whole = USAGE_LINE_START, USAGE_LINE.fullmatch
        for line in lines.split(b"\n"):
            match = whole(line) if line.startswith(start) else None
            if match is None:
                self.feed(line)
                continue
            session, used, size, cost, currency = match.groups()
            if cost is None:
                _take_usage(usage, int(used), int(size))
            else:
                _take_usage(usage, int(used), int(size), _number(cost), currency.decode(), costed=True)
            if burst is None or burst.session != session:  # the session whose bursts the next reads may bring
                burst = self._burst = _Burst(session)

    def feed(self, line: bytes | str) -> dict[str, Any] | None:
        """Take one line of acpx output; returns the parsed message (None for anything that is not JSON-RPC)."""
        if type(line) is bytes and line.startswith(USAGE_LINE_START):
            usage = USAGE_LINE.fullmatch(line)
            if usage is not None:  # the agent's usage updates, thousands a run: no JSON parse each
                return self._usage_line(usage)
        message = _decoded(line)
        if message is None:
            return None
        method, params = message.get("method"), message.get("params") or {}
        if isinstance(method, str) and "id" in message and not _from_agent(method):
            self._requests[message["id"]] = method
        # Ids are per direction: the agent's own requests count from 1 too, so a request is forgotten once answered.
        ident = message.get("id")
        answered = self._requests.pop(ident, None) if method is None and isinstance(ident, int | str) else None
        if method == NEW_SESSION:
            self.mcp_servers = _server_names(params)
        elif method == PROMPT:
            self._prompt_ids.add(message.get("id"))
            self._flush()
        elif method == UPDATE:
            self._update(params.get("update") or {})
        elif method == REQUEST_PERMISSION:
            tool = params.get("toolCall") or {}
            self.permission_requests.append(tool)
            del self.permission_requests[:-MAX_KEPT]
            self.latest = f"permission requested: {tool.get('title') or tool.get('toolCallId', '?')}"
        elif "result" in message and isinstance(message["result"], dict):
            result = message["result"]
            if "sessionId" in result and self.session_id is None:
                self.session_id = result["sessionId"]
            if "stopReason" in result:
                self.stop_reason = result["stopReason"]
                self._flush()
                if "usage" in result:
                    _turn_usage(self.usage, result["usage"])
        elif "error" in message and message.get("id") is None:
            error = message["error"] or {}
            self.acpx_error = str(error.get("message") or error)
            self.acpx_code = (error.get("data") or {}).get("acpxCode")
            self.acpx_detail = (error.get("data") or {}).get("detailCode")
            self._flush()
        elif "error" in message and message.get("id") in self._prompt_ids:
            error = message["error"] or {}
            self.error = str(error.get("message") or error)
            self.error_code = _code(error)
            self._flush()
        elif "error" in message and answered is not None:
            error = message["error"] or {}
            self.request_error_method = answered
            self.request_error = str(error.get("message") or error)
            self.request_error_code = _code(error)
        return message

    def _usage_line(self, match: re.Match[bytes]) -> dict[str, Any]:
        session, used, size, cost, currency = match.groups()
        update: dict[str, Any] = {"sessionUpdate": USAGE_UPDATE, "used": int(used), "size": int(size)}
        if cost is not None:
            update["cost"] = {"amount": _number(cost), "currency": currency.decode()}
        _usage_update(self.usage, update)
        params = {"sessionId": session.decode(), "update": update}
        return {"jsonrpc": "2.0", "method": UPDATE, "params": params}

    def _update(self, update: dict[str, Any]) -> None:
        kind = update.get("sessionUpdate")
        if kind == MESSAGE_CHUNK:
            text = (update.get("content") or {}).get("text", "")
            text = clean_text(text) if isinstance(text, str) else ""
            self._chunks.append(text)
            self._chunk_bytes += len(text)
            if self._chunk_bytes > MAX_MESSAGE:  # a message without end: its last part is what is kept
                joined = "".join(self._chunks)[-MAX_MESSAGE:]
                self._chunks, self._chunk_bytes = [joined], len(joined)
            # The last line of the message so far, from a bounded tail of it (not the whole message every chunk).
            self._tail = (self._tail + text)[-1000:]
            lines = self._tail.strip().splitlines()
            if lines:
                self.latest = lines[-1][:200]
        elif kind in (TOOL_CALL, TOOL_CALL_UPDATE):
            self._flush()  # text around a tool call is a message of its own, as readable() shows it
            if len(self.tool_calls) >= MAX_KEPT and update.get("toolCallId") not in self.tool_calls:
                self.tool_calls.pop(next(iter(self.tool_calls)))
            call = _tool_call(self.tool_calls, update)
            self.latest = f"{call.get('title', 'tool call')} ({call.get('status', 'pending')})"
        elif kind == USAGE_UPDATE:
            _usage_update(self.usage, update)

    def _flush(self) -> None:
        if self._chunks:
            self.messages.append("".join(self._chunks).strip())
            self._chunks, self._chunk_bytes, self._tail = [], 0, ""
            del self.messages[:-MAX_KEPT]

    @property
    def final_message(self) -> str | None:
        self._flush()
        return self.messages[-1] if self.messages else None


def _usage_update(usage: Usage, update: dict[str, Any]) -> None:
    """Take one ``usage_update`` into ``usage``."""
    used, size, cost = update.get("used"), update.get("size"), update.get("cost")
    if cost is None:
        _take_usage(usage, used, size)
    elif isinstance(cost, dict):
        _take_usage(usage, used, size, cost.get("amount"), cost.get("currency"), costed=True)
    else:
        _take_usage(usage, used, size, costed=True)


class _Burst:
    """The usage updates of one session as acpx relays a burst of them: lines alike but for their figures, taken a
    read at a time by one pattern instead of one by one. The figures it admits are bounded so that every one is
    valid (a token count below MAX_TOKENS; a cost below MAX_COST, without sign or exponent): a read it takes ends as
    taking its lines one by one would; a read with any other line, or whose costs would change more than the
    latest figure (a currency that changes, a resumed session's cost to count from), is left to that."""

    def __init__(self, session: bytes) -> None:
        self.session = session
        self.start = USAGE_LINE_START + session + b'","update":{"sessionUpdate":"usage_update","used":'
        count = rb"(?:0|[1-9][0-9]{0,14})"
        cost = rb'(?:,"cost":\{"amount":(?:0|[1-9][0-9]{0,10})(?:\.[0-9]{1,20})?,"currency":"[A-Za-z]{3}"\})?'
        # Only ``used`` is needed of every line (for the peak); the size and the cost that count are the last ones.
        self.pattern = re.compile(
            re.escape(b"\n" + self.start) + b"(" + count + b")" + rb',"size":' + count + cost + rb"\}\}\}(?=\n)"
        )

    def took(self, usage: Usage, lines: bytes) -> bool:
        """Whether every line of ``lines`` (joined by newlines) is such an update: then all are taken into ``usage``."""
        start, last = self.start, lines.rfind(b"\n") + 1
        if not (lines.startswith(start) and lines.startswith(start, last)):
            return False  # (a cheap look at the first and the last line: most reads of anything else end here)
        used = self.pattern.findall(b"\n" + lines + b"\n")  # (a match is a whole line, newline to newline)
        if len(used) != lines.count(b"\n") + 1:
            return False
        final = latest = USAGE_LINE.fullmatch(lines, last)
        costed = lines.count(COST_KEY)
        if costed:  # the line of the latest cost
            at = lines.rfind(COST_KEY)
            end = lines.find(b"\n", at)
            latest = USAGE_LINE.fullmatch(lines, lines.rfind(b"\n", 0, at) + 1, len(lines) if end < 0 else end)
        if final is None or latest is None:  # (never: what the pattern takes, USAGE_LINE takes too)
            return False
        currency = latest[5].decode().upper() if costed else ""
        if costed and (
            lines.count(b'"currency":"' + latest[5] + b'"') != costed  # one currency, as the agent wrote it
            or usage.earlier_cost is not None
            or usage.currency not in (None, currency)
        ):
            return False
        _take_context(usage, list(map(int, used)), int(final[3]))
        if costed:  # the session's cumulative cost: its latest figure is all that counts
            usage.report_cost(float(latest[4]), currency)
        return True


#: What starts a usage update's cost in acpx's serialisation.
COST_KEY = b',"cost":{"amount":'


def _take_context(usage: Usage, used: list[int], size: int) -> None:
    """A burst's context figures (all valid) into ``usage``, as :func:`_take_usage` takes them one by one."""
    usage.updates += len(used)
    usage.context_used = used[-1]
    peak = max(used)
    if usage.context_peak is None or peak > usage.context_peak:
        usage.context_peak = peak
    usage.context_size = size


def _take_usage(
    usage: Usage, used: object, size: object, cost: object = None, currency: object = None, *, costed: bool = False
) -> None:
    """One usage update's figures into ``usage`` (``costed``: it had a ``cost``); a value that is not valid is
    counted and ignored (the others of the update still count): an agent's bad number never breaks a run, nor
    becomes a figure."""
    usage.updates += 1
    context, window = token_count(used), token_count(size)
    usage.rejected += (context is None) + (window is None)
    if context is not None:
        usage.context_used = context
        if usage.context_peak is None or context > usage.context_peak:
            usage.context_peak = context
    if window is not None:
        usage.context_size = window
    if not costed:
        return
    value, code = amount(cost), currency_code(currency)
    if value is None or code is None:
        usage.rejected += 1
        return
    usage.report_cost(value, code)


def _number(text: bytes) -> int | float:
    """A JSON number :data:`USAGE_LINE` took, as the JSON parse reads it (an int unless it has a point or exponent)."""
    return float(text) if b"." in text or b"e" in text or b"E" in text else int(text)


def _turn_usage(usage: Usage, reported: object) -> None:
    """The prompt response's ``usage`` (the turn's token counts) into ``usage``."""
    if not isinstance(reported, dict):
        usage.rejected += 1
        return
    for wire, name in TURN_TOKENS.items():
        if wire not in reported or reported[wire] is None:
            continue
        count = token_count(reported[wire])
        if count is None:
            usage.rejected += 1
        else:
            setattr(usage, name, count)


def _decoded(line: bytes | str) -> dict[str, Any] | None:
    """One line of the stream as a JSON-RPC message, or ``None`` for anything else (acpx's other output)."""
    try:
        message = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return message if isinstance(message, dict) else None


def _from_agent(method: str) -> bool:
    return method in AGENT_REQUESTS or method.startswith(AGENT_REQUEST_PREFIXES)


def _server_names(params: dict[str, Any]) -> list[str]:
    """The names of the MCP servers a ``session/new`` hands over (never their values)."""
    return [s.get("name", "?") for s in params.get("mcpServers", []) if isinstance(s, dict)]


def _tool_call(calls: dict[str, dict[str, Any]], update: dict[str, Any]) -> dict[str, Any]:
    """The tool call a ``tool_call`` or ``tool_call_update`` is about, with what the update changed."""
    call = calls.setdefault(update.get("toolCallId", "?"), {})
    call.update({k: v for k, v in update.items() if k in TOOL_FIELDS})
    return call


def _code(error: Any) -> int | None:
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, int) else None


@dataclass(frozen=True)
class LogLine:
    """One readable line of a transcript: who (agent, tool, permission, client, error) and what."""

    kind: str
    text: str


#: What :func:`readable` asks of a tool call's ``content`` items: the lines to show for one, given the call's id.
ContentReader = Callable[[str, dict[str, Any]], Iterable[LogLine]]


def readable(lines: list[str], content: ContentReader | None = None) -> list[LogLine]:
    """A transcript as a person reads it: messages whole, tool calls with their final status, permission
    requests, the MCP servers handed over by name (never their values), and errors. ``content``, when given, is
    shown each ``content`` item of a tool call (a ``diff``, say) with the call's id, and may add lines for it."""
    out: list[LogLine] = []
    chunks: list[str] = []
    calls: dict[str, dict[str, Any]] = {}

    def flush() -> None:
        if chunks:
            out.append(LogLine("agent", "".join(chunks).strip()))
            chunks.clear()

    for line in lines:
        message = _decoded(line)
        if message is None:
            continue
        method, params = message.get("method"), message.get("params") or {}
        if method == NEW_SESSION:
            names = ", ".join(_server_names(params)) or "none"
            out.append(LogLine("session", f"started in {params.get('cwd')}; MCP servers: {names}"))
        elif method == PROMPT:
            flush()
            text = "".join(p.get("text", "") for p in params.get("prompt", []) if isinstance(p, dict))
            out.append(LogLine("prompt", _first_line(text)))
        elif method == UPDATE:
            update = params.get("update") or {}
            kind = update.get("sessionUpdate")
            if kind == MESSAGE_CHUNK:
                chunks.append((update.get("content") or {}).get("text", ""))
            elif kind in (TOOL_CALL, TOOL_CALL_UPDATE):
                flush()
                call = _tool_call(calls, update)
                status = call.get("status", "pending")
                if kind == TOOL_CALL or status in TOOL_ENDED:
                    out.append(LogLine("tool", f"{call.get('title', 'tool call')} [{call.get('kind', '?')}] {status}"))
                items = update.get("content")
                if content is not None and isinstance(items, list):
                    identifier = str(update.get("toolCallId", "?"))
                    out.extend(line for item in items if isinstance(item, dict) for line in content(identifier, item))
        elif method == REQUEST_PERMISSION:
            flush()
            tool = params.get("toolCall") or {}
            options = ", ".join(o.get("name", o.get("optionId", "?")) for o in params.get("options", []))
            out.append(LogLine("permission", f"{tool.get('title', tool.get('toolCallId', '?'))} ({options})"))
        elif "result" in message and isinstance(message["result"], dict) and "stopReason" in message["result"]:
            flush()
            out.append(LogLine("end", f"stop reason: {message['result']['stopReason']}"))
        elif "result" in message and isinstance(message["result"], dict) and "outcome" in message["result"]:
            outcome = message["result"]["outcome"]
            chosen = outcome.get("optionId") or outcome.get("outcome") if isinstance(outcome, dict) else outcome
            out.append(LogLine("permission", f"answered: {chosen}"))
        elif "error" in message:
            flush()
            error = message["error"] or {}
            out.append(LogLine("error", str(error.get("message") or error)))
    flush()
    return out


def _first_line(text: str) -> str:
    """A prompt's first line, whole (a path in it is not cut), and how many lines follow."""
    lines = text.strip().splitlines()
    if not lines:
        return "(empty prompt)"
    rest = len(lines) - 1
    return lines[0] + (f" (+{rest} more line{'s' if rest != 1 else ''}: the full prompt is prompt.md)" if rest else "")


# -- resuming the agent's session on a retry -------------------------------------------------------------------
#
# `exec` is one-shot: acpx starts the agent, runs one turn and stops it. To resume an agent's ACP session, acpx
# needs a named session (`sessions new --name N --resume-session <id>`) and `prompt -s N`, which hands the turn
# to a detached "queue owner" process that outlives the command for `--ttl` seconds. beflow keeps that owner on a
# short leash: a tiny TTL, `cancel -s` and `sessions close` when the run ends, and a kill of the owner's process
# group (found through acpx's queue lock, which names its pid and session) when it still lingers.

#: Seconds the queue owner may idle after the turn before it exits by itself.
OWNER_TTL = 0.5


def session_name(key: str) -> str:
    """The acpx session name of an issue's runs."""
    return f"beflow-{slug(key)}"


def _session_argv(config: Config, cwd: Path, *rest: str) -> list[str]:
    return [*config.acpx_argv(), "--cwd", str(cwd), "--format", "json", *agent_args(config), *rest]


def resume_argv(config: Config, *, cwd: Path, name: str, session_id: str) -> list[str]:
    """Create the named session ``name`` on top of the agent's earlier session ``session_id``."""
    return _session_argv(config, cwd, "sessions", "new", "--name", name, "--resume-session", session_id)


def prompt_argv(
    config: Config,
    *,
    cwd: Path,
    name: str,
    prompt: str,
    prompt_file: Path | None,
    permissions: str,
    timeout: float | None,
) -> list[str]:
    """``exec_argv``'s counterpart for a resumed session: ``prompt -s <name>``."""
    argv = [*config.acpx_argv(), "--cwd", str(cwd), "--format", "json", "--verbose", f"--{permissions}"]
    argv += ["--ttl", f"{OWNER_TTL:g}"]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return _with_prompt([*argv, *agent_args(config), "prompt", "-s", name], prompt, prompt_file)


def cancel_argv(config: Config, *, cwd: Path, name: str) -> list[str]:
    return _session_argv(config, cwd, "cancel", "-s", name)


def close_argv(config: Config, *, cwd: Path, name: str) -> list[str]:
    return _session_argv(config, cwd, "sessions", "close", name)


def queue_owner_pids(session_id: str, home: Path) -> list[int]:
    """Pids of acpx queue owners serving ``session_id``, from acpx's queue locks under ``home/.acpx``."""
    pids = []
    for lock in (home / ".acpx" / "queues").glob("*.lock"):
        try:
            data = json.loads(read_regular(lock, limit=1 << 16, follow_symlinks=False))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("sessionId") == session_id and isinstance(data.get("pid"), int):
            pids.append(data["pid"])
    return pids


def close_killed_runs(store: RunStore, home: Path | None = None) -> list[RunRecord]:
    """Close the records of runs whose beflow was killed (:meth:`~beflow.records.store.RunStore.close_orphans`), and
    stop the acpx queue owners still serving their sessions: a resumed turn runs in acpx's detached owner, which
    outlives a SIGKILLed beflow with its agent still at work in the worktree. The records closed."""
    closed = store.close_orphans()
    for record in closed:
        if not record.session:
            continue
        for pid in queue_owner_pids(record.session, home or acpx_home()):
            proc.kill_group_of(pid, marker="__queue-owner")
    return closed


def forget_session(session_id: str, home: Path) -> list[Path]:
    """Remove acpx's record of a session beflow named for a retry (``~/.acpx/sessions/<id>.json`` and its
    ``.stream.ndjson``): it holds the injected MCP servers, secret values included, and serves no later run (a
    retry names the agent's session afresh)."""
    if not session_id or "/" in session_id or session_id.startswith("."):
        return []
    sessions = home / ".acpx" / "sessions"
    removed = []
    for path in (sessions / f"{session_id}.json", sessions / f"{session_id}.stream.ndjson"):
        try:
            path.unlink()
        except OSError:
            continue
        removed.append(path)
    # The queue owner's socket directory, /tmp/acpx-<sha256(home)[:10]>: left empty once the owner is gone.
    with contextlib.suppress(OSError):
        (Path("/tmp") / f"acpx-{hashlib.sha256(str(home).encode()).hexdigest()[:10]}").rmdir()
    return removed


# -- one agent session of an unattended run: cold, or resuming the agent's earlier ACP session ---------------------

#: Seconds beyond ``timeout`` that beflow gives acpx to stop by itself before stopping it.
TIMEOUT_MARGIN = 15.0


class AgentSession:
    """acpx for one unattended run: a cold ``exec``, or, on a retry, ``prompt -s`` on the agent's earlier ACP session.

    Resuming needs the earlier run's session id and an agent that supports ``session/resume`` or ``session/load``;
    when acpx cannot resume, the run goes on cold and :attr:`resume_note` says why. :attr:`transcript` is the
    stream being read (a fresh one when a resume fell through to a cold start): feed it what acpx prints.
    """

    def __init__(
        self,
        config: Config,
        cwd: Path,
        *,
        env: dict[str, str] | None = None,
        unset: list[str] | None = None,
        sandbox: Confinement | None = None,
    ) -> None:
        self.config = config
        #: ``sandbox.enabled``: every acpx command line of the session runs in it (docs/safety.md#the-sandbox).
        self.sandbox = sandbox
        self.cwd = cwd
        self.env = env or {}
        self.unset = unset or []
        self.transcript = Transcript()
        #: The earlier session this run resumed, if it did; why it could not, if it tried and could not.
        self.resumed_session: str | None = None
        self.resume_note: str | None = None

    async def run(
        self,
        text: str,
        *,
        key: str,
        prompt_file: Path,
        earlier: str | None,
        on_stdout: proc.LinesHandler,
        on_stderr: proc.LinesHandler,
        on_cold_start: Callable[[str], None] = lambda why: None,
        earlier_usage: Usage | None = None,
    ) -> proc.Completed:
        """Run the agent on ``text`` (resuming ``earlier`` when given) to the end: how acpx ended. A resume that
        fell through calls ``on_cold_start(why)`` before the cold start. ``earlier_usage``: what the last run on
        ``earlier`` reported, so that a resumed run's cost is its own (ACP's is the session's, cumulative). In a
        sandbox that cannot start, nothing runs: :class:`~beflow.sandbox.box.SandboxError` says why."""
        if self.sandbox is None:
            return await self._run(text, key, prompt_file, earlier, on_stdout, on_stderr, on_cold_start, earlier_usage)
        async with self.sandbox.opened():
            return await self._run(text, key, prompt_file, earlier, on_stdout, on_stderr, on_cold_start, earlier_usage)

    def _argv(self, argv: list[str]) -> list[str]:
        return argv if self.sandbox is None else self.sandbox.wrap(argv, cwd=self.cwd)

    def _started(self, result: proc.Completed) -> proc.Completed:
        """``result``, once it is sure the sandbox started it: one that did not fails the run with its reason."""
        if self.sandbox is not None:
            self.sandbox.check(result)
        return result

    async def _run(
        self,
        text: str,
        key: str,
        prompt_file: Path,
        earlier: str | None,
        on_stdout: proc.LinesHandler,
        on_stderr: proc.LinesHandler,
        on_cold_start: Callable[[str], None],
        earlier_usage: Usage | None,
    ) -> proc.Completed:
        config, cwd = self.config, self.cwd
        timeout = config.timeout
        common: dict[str, Any] = {
            "cwd": cwd,
            "prompt": text,
            "prompt_file": prompt_file,
            "permissions": config.permissions,
            "timeout": timeout,
        }
        supervise: dict[str, Any] = {
            "cwd": cwd,
            "timeout": None if timeout is None else timeout + TIMEOUT_MARGIN,
            "on_stdout": on_stdout,
            "on_stderr": on_stderr,
            "grace": interrupts.grace(proc.DEFAULT_GRACE),
            "env": self.env,
            "unset": self.unset,
        }
        if earlier is not None:
            name = session_name(key)
            created = await proc.run(
                self._argv(resume_argv(config, cwd=cwd, name=name, session_id=earlier)),
                cwd=cwd,
                timeout=60,
                env=self.env,
                unset=self.unset,
            )
            self._started(created)
            if not created.ok:
                self.resume_note = f"could not name the earlier session: {tail(created)}; started cold"
            else:
                self.transcript.usage = Usage.resuming(earlier_usage)
                finished = False
                try:
                    result = self._started(
                        await proc.run(self._argv(prompt_argv(config, name=name, **common)), **supervise)
                    )
                    finished = self.transcript.stop_reason is not None
                finally:
                    await self._end(name, earlier, cancel=not finished)
                if self.transcript.prompted:
                    self.resumed_session = earlier
                    self.transcript.session_id = self.transcript.session_id or earlier  # the next retry resumes it
                    return result
                why = self.transcript.acpx_error or tail(result)
                self.resume_note = f"acpx could not resume session {earlier}: {why}; started cold"
                self.transcript = Transcript()
            on_cold_start(self.resume_note)
        return self._started(await proc.run(self._argv(exec_argv(config, **common)), **supervise))

    async def _end(self, name: str, session_id: str, *, cancel: bool) -> None:
        """Leave no queue owner behind: cancel an unfinished turn, close the session, stop a lingering owner."""
        config, cwd = self.config, self.cwd
        with anyio.CancelScope(shield=True):
            if cancel:
                await proc.run(
                    self._argv(cancel_argv(config, cwd=cwd, name=name)), cwd=cwd, timeout=10, unset=self.unset
                )
            await proc.run(self._argv(close_argv(config, cwd=cwd, name=name)), cwd=cwd, timeout=15, unset=self.unset)
            for pid in queue_owner_pids(session_id, acpx_home()):
                await proc.stop_group(pid, grace=2.0)
            forget_session(session_id, acpx_home())


def tail(result: proc.Completed) -> str:
    """What a failed acpx call said, for notes: its JSON error's message, else its last line."""
    lines = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return result.describe()
    last = lines[-1]
    with contextlib.suppress(ValueError, KeyError, TypeError):
        last = str(json.loads(last)["error"]["message"])
    return f"{result.describe()}: {last[:300]}"
