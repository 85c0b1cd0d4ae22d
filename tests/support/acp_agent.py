#!/usr/bin/env python3
"""Scriptable Agent Client Protocol (ACP) agent for beflow's tests.

This is a tiny stand-in for a real coding agent (Codex,
Claude Code, ...).  It speaks ACP -- JSON-RPC 2.0, one JSON object per line --
over stdin/stdout, so a real ``acpx`` can drive it end to end::

    acpx --agent "python3 /path/to/acp_agent.py" --cwd DIR --format json \\
         --approve-all exec "acp-test: write hello.txt hi"

Protocol coverage
-----------------
Requests answered (agent side):

``initialize``
    Protocol version 1, no auth methods (one with ``ACP_TEST_AUTH=required``).
    Advertises ``loadSession`` and ``sessionCapabilities.resume`` /
    ``.close`` (see ``ACP_TEST_RESUME``).
``authenticate``
    Accepted and ignored (never needed: no auth methods are advertised);
    with ``ACP_TEST_AUTH=required``, refused as ``session/new`` is.
``session/new``
    Creates a session bound to ``params.cwd`` and remembers ``mcpServers``.
    Advertises its models as ACP's (unstable) ``SessionModelState`` does:
    ``models: {availableModels: [{modelId, name}], currentModelId}`` (see
    ``ACP_TEST_MODELS``), as ``session/load`` and ``session/resume`` do too.
``session/set_model``
    Makes ``params.modelId`` the session's model (acpx's ``--model``); a model
    not advertised is refused with -32602.
    With ``ACP_TEST_AUTH=required`` it answers ACP's auth-required error
    instead (JSON-RPC error -32000 "Authentication required"), as an agent
    whose user never logged in does.
``session/load`` / ``session/resume``
    Re-attach to any session id (a fresh process has no history, so nothing
    is replayed).  When a new agent process picks up a saved acpx session
    (``prompt -s NAME``, ``sessions new --resume-session ID``), acpx sends
    ``session/resume`` if advertised, else ``session/load``.
``session/close``
    Forgets the session.
``session/prompt``
    Runs the directives found in the prompt (see below) on a worker thread,
    so ``session/cancel`` and permission answers keep flowing meanwhile.

Notifications handled: ``session/cancel`` (the running prompt stops at the
next directive boundary, a ``sleep`` is interrupted at once, and the prompt
is answered with ``stopReason: "cancelled"``).

Requests sent to the client: ``session/request_permission`` (``ask`` verb).
Like real agents, their ids count up from 1, so they can coincide with the
client's own request ids in acpx's ``--format json`` stream.
Notifications sent: ``session/update`` with ``agent_message_chunk``,
``tool_call`` and ``tool_call_update``.  Any other request gets JSON-RPC
error -32601 (method not found).

Directive language
------------------
Every prompt line of the form ``acp-test: <verb> <args>`` is a directive;
other lines are ignored.  Directives run in order.  In text arguments the
escapes ``\\n``, ``\\t``, ``\\\\`` and ``\\uXXXX`` are decoded.  Relative paths resolve
against the session cwd.

``say <text>``
    Send ``<text>`` as one ``agent_message_chunk`` (a newline is appended).
``write <relpath> <content...>``
    Write ``<content>`` (exactly; may be empty) to the file, creating parent
    directories, and report it as a ``tool_call`` + ``tool_call_update`` of
    kind ``edit`` carrying a ``diff``.
``ask <relpath> <content...>``
    Like ``write``, but first send ``session/request_permission`` with the
    options ``allow`` (allow_once) and ``reject`` (reject_once); the file is
    written only if allowed.  The outcome is reported in an agent message:
    ``permission granted: wrote <relpath>``, ``permission denied: <relpath>
    not written`` or ``permission cancelled: <relpath> not written``.
``sleep <seconds>``
    Wait; interrupted by ``session/cancel``.
``fail [message]``
    Answer the prompt with JSON-RPC error -32603 (internal error).
``crash [exitcode]``
    Exit the process immediately (default code 1) without answering.
``model``
    Say ``model: <id>``: the session's current model.
``mcp``
    Say ``mcp servers: <name>, ...`` (or ``mcp servers: (none)``) listing the
    ``mcpServers`` names received when the session was created or loaded.
``mcp-call <server> <tool> [json-arguments]``
    Connect, as an MCP client with the official ``mcp`` SDK (the one
    dependency, imported only here), to the stdio server named ``<server>``
    among the session's ``mcpServers`` -- started exactly as acpx handed it
    over: command, args and env -- call ``<tool>`` with the JSON object of
    arguments (default ``{}``), and report it as a ``tool_call`` (kind
    ``other``, title ``mcp <server>.<tool>``) + ``tool_call_update``.  The
    outcome is said as ``mcp <tool>: ok <structured JSON>`` or ``mcp <tool>:
    error <code>``; a server that is not there or does not answer fails the
    prompt.
``run <shell command...>``
    Run the command with ``sh -c`` in the session cwd (as an agent's shell
    tool would: ``git add -A && git commit -m x``), reported as a
    ``tool_call`` of kind ``execute``; its exit code and output are said in an
    agent message.  A failing command does not fail the prompt.
``usage <used> <size> [<amount> <currency>]``
    Send one ``usage_update`` (context tokens used, window size, and the
    session's cumulative cost when given).
``spend <used> <size> <amount> <currency>``
    Like ``usage``, but ``<amount>`` is what this turn adds to the session's
    cumulative cost, and the update carries the new total.  The total is
    kept in ``$HOME/.acp-test/spent/<session id>``, so that a session loaded
    or resumed by a later process goes on from it, as a real agent's cost
    does.
``usage-burst <count> [thought|cost]``
    Send ``<count>`` ``usage_update`` s (``used`` counting up, no cost):
    for the benchmark of following them; with ``cost``, each with the
    session's cost so far (in USD); with ``thought``, as many
    ``agent_thought_chunk`` s of about the same size instead (the same
    traffic, none of it usage).
``update <json>``
    Send the JSON object as a ``session/update``'s ``update``, exactly (for
    shapes no other verb sends: garbage usage values, say).
``tokens <input> <output>``
    Answer the prompt with ``usage`` (``inputTokens``, ``outputTokens``,
    ``totalTokens``) besides its ``stopReason``.
``tool-stream <seconds> <interval>``
    A tool call (kind ``execute``) that stays ``in_progress`` for
    ``<seconds>``, sending a ``tool_call_update`` with a line of output
    every ``<interval>`` seconds, then completes (a long build that prints).
``stderr-loop <seconds> <interval>``
    Say nothing on the ACP stream for ``<seconds>`` but log a line to stderr
    every ``<interval>`` seconds (an agent stuck in a retry loop).
``mark <abspath>``
    Not executed in order: wraps the whole prompt, appending
    ``start <epoch> <pid>`` before the first directive and
    ``end <epoch> <pid>`` after the last one (also after ``fail`` and
    cancellation, but not after ``crash``).  Meant for concurrency tests.

Without directives the agent says a short message and changes nothing.  A
prompt ends with ``stopReason: "end_turn"`` unless it fails, crashes or is
cancelled.  A malformed directive makes the prompt fail with -32602 before
anything runs.

Environment
-----------
``ACP_TEST_RECORD``
    If set, append one JSON line per received request or notification:
    ``{"method": ..., "params": ..., "pid": ..., "time": ...}``.
``ACP_TEST_RESUME``
    Which reconnection capabilities to advertise: ``resume`` (default:
    ``loadSession`` and ``sessionCapabilities.resume``), ``load``
    (``loadSession`` only) or ``none``.
``ACP_TEST_AUTH``
    ``required``: the user is not logged in (see ``session/new``).
``ACP_TEST_MODELS``
    The model ids advertised, comma-separated, the first one current
    (default ``acp-test-default,opus,sonnet``); empty: no models advertised
    (an agent without model selection).

The process exits with 0 on stdin EOF (acpx's normal shutdown) and with
128+signum on SIGTERM/SIGINT/SIGHUP, as a real agent sharing acpx's process
group would on Ctrl-C.  Only JSON-RPC is written to stdout; diagnostics go to
stderr (acpx shows them only with ``--verbose``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

JsonObject = dict[str, Any]
RequestId = int | str

PROTOCOL_VERSION = 1
AGENT_NAME = "acp-test-agent"
AGENT_VERSION = "1.0.0"

# JSON-RPC / ACP error codes.
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603
RESOURCE_NOT_FOUND = -32002
AUTH_REQUIRED = -32000

#: The auth method advertised with ``ACP_TEST_AUTH=required``.
AUTH_METHOD = {"id": "acp-test-login", "name": "acp-test login", "description": "Run `acp-test login` first."}

DIRECTIVE_RE = re.compile(r"^\s*acp-test:\s*(?P<verb>\S+)(?:\s+(?P<args>.*?))?\s*$")
ESCAPE_RE = re.compile(r"\\(.)")
UNICODE_RE = re.compile(r"(?<!\\)\\u([0-9a-fA-F]{4})")
ESCAPES = {"n": "\n", "t": "\t", "\\": "\\"}
VERBS = frozenset(
    {
        "say",
        "write",
        "ask",
        "sleep",
        "fail",
        "crash",
        "mcp",
        "model",
        "mcp-call",
        "mark",
        "run",
        "usage",
        "spend",
        "usage-burst",
        "update",
        "tokens",
        "tool-stream",
        "stderr-loop",
    }
)

#: The models advertised unless ``ACP_TEST_MODELS`` says otherwise (the first is current).
DEFAULT_MODELS = "acp-test-default,opus,sonnet"

ALLOW_OPTION_ID = "allow"
REJECT_OPTION_ID = "reject"


def log(message: str) -> None:
    """Write a diagnostic line to stderr (never stdout)."""
    print(f"[{AGENT_NAME} {os.getpid()}] {message}", file=sys.stderr, flush=True)


def unescape(text: str) -> str:
    r"""Decode ``\n``, ``\t``, ``\\`` and ``\uXXXX`` (a lone surrogate too); other backslashes are kept."""
    text = UNICODE_RE.sub(lambda m: chr(int(m.group(1), 16)), text)
    return ESCAPE_RE.sub(lambda m: ESCAPES.get(m.group(1), m.group(0)), text)


class DirectiveError(ValueError):
    """A directive line that cannot be parsed."""


class PromptCancelled(Exception):
    """Raised inside a prompt once ``session/cancel`` was received."""


class PromptFailed(Exception):
    """Raised by the ``fail`` verb; answered as a JSON-RPC error."""


@dataclass(frozen=True)
class Directive:
    verb: str
    args: str

    @classmethod
    def parse(cls, line: str) -> Directive | None:
        """Return the directive on ``line``, ``None`` if it is plain text."""
        match = DIRECTIVE_RE.match(line)
        if match is None:
            return None
        directive = cls(match["verb"], match["args"] or "")
        directive.check()
        return directive

    def check(self) -> None:
        """Raise :class:`DirectiveError` unless the arguments fit the verb."""
        if self.verb not in VERBS:
            raise DirectiveError(f"unknown verb {self.verb!r}")
        if self.verb in ("write", "ask", "run") and not self.args:
            raise DirectiveError(f"{self.verb} needs <relpath> [content]")
        if self.verb == "mcp-call":
            self.mcp_call()
        if self.verb == "mark" and not os.path.isabs(self.args):
            raise DirectiveError("mark needs an absolute path")
        if self.verb == "sleep":
            self.seconds()
        if self.verb == "crash":
            self.exit_code()
        if self.verb == "update":
            self.raw_update()
        if self.verb == "usage" and len(self.args.split()) not in (2, 4):
            raise DirectiveError("usage needs <used> <size> [<amount> <currency>]")
        if self.verb == "spend" and len(self.args.split()) != 4:
            raise DirectiveError("spend needs <used> <size> <amount> <currency>")
        if self.verb in ("usage-burst", "tokens", "tool-stream", "stderr-loop") and not self.args:
            raise DirectiveError(f"{self.verb} needs numbers")

    def path_and_content(self) -> tuple[str, str]:
        relpath, _, content = self.args.partition(" ")
        return relpath, unescape(content)

    def seconds(self) -> float:
        try:
            seconds = float(self.args)
        except ValueError:
            raise DirectiveError(f"sleep needs seconds, got {self.args!r}") from None
        if seconds < 0:
            raise DirectiveError("sleep needs a non-negative number of seconds")
        return seconds

    def mcp_call(self) -> tuple[str, str, JsonObject]:
        server, _, rest = self.args.partition(" ")
        tool, _, arguments = rest.strip().partition(" ")
        if not server or not tool:
            raise DirectiveError("mcp-call needs <server> <tool> [json-arguments]")
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            raise DirectiveError(f"mcp-call arguments are not JSON: {arguments!r}") from None
        if not isinstance(parsed, dict):
            raise DirectiveError("mcp-call arguments must be a JSON object")
        return server, tool, parsed

    def usage_update(self) -> JsonObject:
        parts = self.args.split()
        update: JsonObject = {"sessionUpdate": "usage_update", "used": int(parts[0]), "size": int(parts[1])}
        if len(parts) == 4:
            update["cost"] = {"amount": float(parts[2]), "currency": parts[3]}
        return update

    def raw_update(self) -> JsonObject:
        try:
            update = json.loads(self.args)
        except ValueError:
            raise DirectiveError(f"update needs a JSON object, got {self.args!r}") from None
        if not isinstance(update, dict):
            raise DirectiveError("update needs a JSON object")
        return update

    def exit_code(self) -> int:
        try:
            return int(self.args) if self.args else 1
        except ValueError:
            raise DirectiveError(f"crash needs an integer exit code, got {self.args!r}") from None


def spend(session_id: str, amount: float) -> float:
    """Add ``amount`` to the session's cumulative cost, kept on disk across processes; the new total."""
    path = Path(os.environ.get("HOME", ".")) / ".acp-test" / "spent" / session_id
    path.parent.mkdir(parents=True, exist_ok=True)
    spent = (float(path.read_text()) if path.exists() else 0.0) + amount
    path.write_text(repr(spent))
    return spent


def prompt_text(blocks: list[JsonObject]) -> str:
    """Concatenate the text of ``text`` blocks and embedded text resources."""
    parts: list[str] = []
    for block in blocks:
        if block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        elif block.get("type") == "resource":
            parts.append(str(block.get("resource", {}).get("text", "")))
    return "\n".join(parts)


@dataclass
class Session:
    session_id: str
    cwd: Path
    mcp_servers: list[JsonObject]
    cancelled: threading.Event = field(default_factory=threading.Event)
    turn_usage: JsonObject | None = None
    model: str | None = None


class PendingRequest:
    """An agent-to-client request waiting for its response."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self.result: JsonObject | None = None
        self.error: JsonObject | None = None

    def resolve(self, message: JsonObject) -> None:
        self.result = message.get("result")
        self.error = message.get("error")
        self._done.set()

    def wait(self) -> None:
        self._done.wait()


class Agent:
    def __init__(
        self, record_path: str | None, resume_mode: str, auth_required: bool = False, models: list[str] | None = None
    ) -> None:
        self._models = models or []
        self._record_path = record_path
        self._resume_mode = resume_mode
        self._auth_required = auth_required
        self._write_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._sessions: dict[str, Session] = {}
        self._pending: dict[RequestId, PendingRequest] = {}
        self._next_request_id = 0
        self._next_tool_call = 0

    # ------------------------------------------------------------------ I/O

    def send(self, message: JsonObject) -> None:
        line = json.dumps({"jsonrpc": "2.0", **message}, separators=(",", ":"))
        with self._write_lock:
            try:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            except BrokenPipeError:
                exit_now(0, "stdout closed")

    def respond(self, request_id: RequestId, result: JsonObject) -> None:
        self.send({"id": request_id, "result": result})

    def respond_error(self, request_id: RequestId, code: int, message: str) -> None:
        self.send({"id": request_id, "error": {"code": code, "message": message}})

    def notify(self, method: str, params: JsonObject) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: JsonObject) -> PendingRequest:
        """Send a request to the client and block until it answers."""
        pending = PendingRequest()
        with self._state_lock:
            self._next_request_id += 1
            request_id = self._next_request_id
            self._pending[request_id] = pending
        self.send({"id": request_id, "method": method, "params": params})
        pending.wait()
        return pending

    def record(self, message: JsonObject) -> None:
        if not self._record_path:
            return
        entry = {
            "method": message["method"],
            "params": message.get("params"),
            "pid": os.getpid(),
            "time": time.time(),
        }
        line = (json.dumps(entry) + "\n").encode()
        # One O_APPEND write per entry keeps lines whole across processes.
        fd = os.open(self._record_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    # ------------------------------------------------------------ dispatch

    def serve(self) -> None:
        """Read messages from stdin until EOF."""
        for raw in sys.stdin.buffer:
            if not raw.strip():
                continue
            try:
                message = json.loads(raw)
            except ValueError:
                log(f"ignoring non-JSON input: {raw[:200]!r}")
                continue
            if not isinstance(message, dict):
                log(f"ignoring non-object message: {message!r}")
                continue
            self.dispatch(message)

    def dispatch(self, message: JsonObject) -> None:
        method = message.get("method")
        if method is None:
            self.handle_response(message)
            return
        self.record(message)
        params = message.get("params") or {}
        if not isinstance(params, dict):
            log(f"ignoring {method} with non-object params")
            if "id" in message:
                self.respond_error(message["id"], INVALID_PARAMS, "params must be an object")
            return
        if "id" not in message:
            self.handle_notification(method, params)
            return
        request_id = message["id"]
        if self._auth_required and method in ("authenticate", "session/new"):
            self.respond_error(request_id, AUTH_REQUIRED, "Authentication required")
            return
        if method == "session/prompt":
            self.start_prompt(request_id, params)
            return
        handler = {
            "initialize": self.on_initialize,
            "authenticate": lambda _params: {},
            "session/new": self.on_session_new,
            "session/load": self.on_session_attach,
            "session/resume": self.on_session_attach,
            "session/close": self.on_session_close,
            "session/set_model": self.on_set_model,
        }.get(method)
        if handler is None:
            self.respond_error(request_id, METHOD_NOT_FOUND, f"Method not found: {method}")
            return
        try:
            self.respond(request_id, handler(params))
        except KeyError as error:
            self.respond_error(request_id, INVALID_PARAMS, f"missing parameter {error}")
        except ValueError as error:
            self.respond_error(request_id, INVALID_PARAMS, str(error))

    def handle_response(self, message: JsonObject) -> None:
        with self._state_lock:
            pending = self._pending.pop(message.get("id", ""), None)
        if pending is None:
            log(f"ignoring response to unknown request: {message!r}")
            return
        pending.resolve(message)

    def handle_notification(self, method: str, params: JsonObject) -> None:
        if method != "session/cancel":
            log(f"ignoring notification {method}")
            return
        session = self._sessions.get(params.get("sessionId", ""))
        if session is not None:
            log(f"cancel requested for {session.session_id}")
            session.cancelled.set()

    # ------------------------------------------------------ session methods

    def on_initialize(self, _params: JsonObject) -> JsonObject:
        capabilities: JsonObject = {
            "loadSession": self._resume_mode in ("resume", "load"),
            "promptCapabilities": {"image": False, "audio": False, "embeddedContext": True},
            "mcpCapabilities": {"http": True, "sse": True},
            "sessionCapabilities": {"close": {}},
        }
        if self._resume_mode == "resume":
            capabilities["sessionCapabilities"]["resume"] = {}
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": capabilities,
            "agentInfo": {"name": AGENT_NAME, "version": AGENT_VERSION},
            "authMethods": [AUTH_METHOD] if self._auth_required else [],
        }

    def on_session_new(self, params: JsonObject) -> JsonObject:
        session_id = f"acp-test-{uuid.uuid4().hex}"
        self._register(session_id, params)
        return {"sessionId": session_id, **self.advertised(self._sessions[session_id])}

    def on_session_attach(self, params: JsonObject) -> JsonObject:
        self._register(params["sessionId"], params)
        return self.advertised(self._sessions[params["sessionId"]])

    def advertised(self, session: Session) -> JsonObject:
        """The ``models`` field of a session's answer (none when no models are advertised)."""
        if not self._models:
            return {}
        available = [{"modelId": model, "name": f"acp-test {model}"} for model in self._models]
        return {"models": {"availableModels": available, "currentModelId": session.model or self._models[0]}}

    def on_set_model(self, params: JsonObject) -> JsonObject:
        session = self._sessions.get(params["sessionId"])
        model = params["modelId"]
        if session is None or model not in self._models:
            raise ValueError(f"unknown modelId {model!r} (advertised: {', '.join(self._models) or 'none'})")
        session.model = model
        return {}

    def on_session_close(self, params: JsonObject) -> JsonObject:
        self._sessions.pop(params["sessionId"], None)
        return {}

    def _register(self, session_id: str, params: JsonObject) -> None:
        self._sessions[session_id] = Session(
            session_id=session_id,
            cwd=Path(params["cwd"]),
            mcp_servers=list(params.get("mcpServers") or []),
        )

    # --------------------------------------------------------------- prompt

    def start_prompt(self, request_id: RequestId, params: JsonObject) -> None:
        """Validate a prompt, then run it on a worker thread.

        Runs on the reader thread, so clearing the cancel flag here cannot race
        with a ``session/cancel`` that follows the prompt on the wire.
        """
        session = self._sessions.get(params.get("sessionId", ""))
        if session is None:
            self.respond_error(request_id, RESOURCE_NOT_FOUND, "Session not found")
            return
        try:
            directives = [
                directive
                for line in prompt_text(params.get("prompt") or []).splitlines()
                if (directive := Directive.parse(line)) is not None
            ]
        except DirectiveError as error:
            self.respond_error(request_id, INVALID_PARAMS, f"bad acp-test directive: {error}")
            return
        session.cancelled.clear()
        threading.Thread(target=self.run_prompt, args=(request_id, session, directives), daemon=True).start()

    def run_prompt(self, request_id: RequestId, session: Session, directives: list[Directive]) -> None:
        marks = [Path(d.args) for d in directives if d.verb == "mark"]
        append_marks(marks, "start")
        try:
            if all(d.verb == "mark" for d in directives):
                self.say(session, "acp-test agent: no directives, nothing to do")
            for directive in directives:
                if session.cancelled.is_set():
                    raise PromptCancelled
                self.execute(session, directive)
            if session.cancelled.is_set():
                raise PromptCancelled
        except PromptCancelled:
            self.respond(request_id, {"stopReason": "cancelled"})
        except PromptFailed as error:
            self.respond_error(request_id, INTERNAL_ERROR, str(error))
        except Exception as error:  # report anything else rather than leave the client hanging
            log(f"prompt failed unexpectedly: {error!r}")
            self.respond_error(request_id, INTERNAL_ERROR, f"acp-test agent error: {error}")
        else:
            result: JsonObject = {"stopReason": "end_turn"}
            if session.turn_usage is not None:
                result["usage"] = session.turn_usage
            self.respond(request_id, result)
        finally:
            session.turn_usage = None
            append_marks(marks, "end")

    def execute(self, session: Session, directive: Directive) -> None:
        verb, args = directive.verb, directive.args
        if verb == "say":
            self.say(session, unescape(args))
        elif verb == "write":
            self.write_file(session, *directive.path_and_content())
        elif verb == "ask":
            self.ask_and_write(session, *directive.path_and_content())
        elif verb == "sleep":
            if session.cancelled.wait(directive.seconds()):
                raise PromptCancelled
        elif verb == "fail":
            raise PromptFailed(unescape(args) or "acp-test failure")
        elif verb == "crash":
            exit_now(directive.exit_code(), "crash directive")
        elif verb == "model":
            self.say(session, f"model: {session.model or (self._models[0] if self._models else '(none)')}")
        elif verb == "mcp":
            names = [str(server.get("name")) for server in session.mcp_servers]
            self.say(session, f"mcp servers: {', '.join(names) or '(none)'}")
        elif verb == "mcp-call":
            self.call_mcp_tool(session, *directive.mcp_call())
        elif verb == "run":
            self.run_command(session, unescape(args))
        elif verb == "usage":
            self.update(session, directive.usage_update())
        elif verb == "spend":
            update = directive.usage_update()
            update["cost"]["amount"] = spend(session.session_id, update["cost"]["amount"])
            self.update(session, update)
        elif verb == "usage-burst":
            count, _, kind = args.partition(" ")
            for used in range(int(count)):
                if kind == "thought":  # the same traffic, of a kind a client lets pass by
                    thought = {"type": "text", "text": f"{used:06d} of 200000"}
                    self.update(session, {"sessionUpdate": "agent_thought_chunk", "content": thought})
                elif kind == "cost":
                    cost = {"amount": round(used * 0.0001, 4), "currency": "USD"}
                    self.update(session, {"sessionUpdate": "usage_update", "used": used, "size": 200_000, "cost": cost})
                else:
                    self.update(session, {"sessionUpdate": "usage_update", "used": used, "size": 200_000})
        elif verb == "update":
            self.update(session, directive.raw_update())
        elif verb == "tokens":
            given, output = (int(n) for n in args.split())
            session.turn_usage = {"inputTokens": given, "outputTokens": output, "totalTokens": given + output}
        elif verb == "tool-stream":
            self.stream_tool(session, *(float(n) for n in args.split()))
        elif verb == "stderr-loop":
            seconds, interval = (float(n) for n in args.split())
            end, attempt = time.monotonic() + seconds, 0
            while time.monotonic() < end:
                attempt += 1
                log(f"rate limited (429), retrying: attempt {attempt}")
                if session.cancelled.wait(interval):
                    raise PromptCancelled
        # "mark" is handled around the whole prompt in run_prompt.

    def run_command(self, session: Session, command: str) -> None:
        tool_call_id = self.new_tool_call_id("run")
        self.update(
            session,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": tool_call_id,
                "title": f"Run {command}",
                "kind": "execute",
                "status": "pending",
                "rawInput": {"command": command},
            },
        )
        done = subprocess.run(["sh", "-c", command], cwd=session.cwd, capture_output=True, text=True, check=False)
        status = "completed" if done.returncode == 0 else "failed"
        self.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": status})
        self.say(session, f"ran {command!r}: exit {done.returncode}: {(done.stdout + done.stderr).strip()[-500:]}")

    def stream_tool(self, session: Session, seconds: float, interval: float) -> None:
        tool_call_id = self.new_tool_call_id("stream")
        start = {"sessionUpdate": "tool_call", "toolCallId": tool_call_id, "title": "Run a long build"}
        self.update(session, {**start, "kind": "execute", "status": "in_progress"})
        end, line = time.monotonic() + seconds, 0
        while time.monotonic() < end:
            if session.cancelled.wait(interval):
                raise PromptCancelled
            line += 1
            output = {"type": "content", "content": {"type": "text", "text": f"build step {line}\n"}}
            self.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "content": [output]})
        self.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": "completed"})

    def call_mcp_tool(self, session: Session, server_name: str, tool: str, arguments: JsonObject) -> None:
        """Call ``tool`` on the session's stdio MCP server ``server_name``, as a real agent does."""
        entry = next((s for s in session.mcp_servers if s.get("name") == server_name and "command" in s), None)
        if entry is None:
            raise PromptFailed(f"no stdio MCP server named {server_name!r} in this session")
        tool_call_id = self.new_tool_call_id("mcp")
        self.update(
            session,
            {
                "sessionUpdate": "tool_call",
                "toolCallId": tool_call_id,
                "title": f"mcp {server_name}.{tool}",
                "kind": "other",
                "status": "in_progress",
                "rawInput": arguments,
            },
        )
        try:
            result = run_mcp_call(entry, tool, arguments, session.cwd)
        except Exception as error:
            self.update(session, {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": "failed"})
            raise PromptFailed(f"mcp-call {server_name} {tool}: {error!r}") from error
        failed = bool(result.get("isError"))
        self.update(
            session,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": tool_call_id,
                "status": "failed" if failed else "completed",
            },
        )
        structured = {"error": (result.get("_meta") or {}).get("beflow/error")} if failed else {}
        structured = structured if structured.get("error") else result.get("structuredContent") or {}
        if failed:
            self.say(session, f"mcp {tool}: error {structured.get('error', {}).get('code')}")
        else:
            self.say(session, f"mcp {tool}: ok {json.dumps(structured, sort_keys=True)}")

    def say(self, session: Session, text: str) -> None:
        self.update(
            session,
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text + "\n"}},
        )

    def update(self, session: Session, update: JsonObject) -> None:
        self.notify("session/update", {"sessionId": session.session_id, "update": update})

    def new_tool_call_id(self, prefix: str) -> str:
        with self._state_lock:
            self._next_tool_call += 1
            return f"{prefix}-{self._next_tool_call}"

    @staticmethod
    def edit_tool_call(tool_call_id: str, relpath: str, target: Path, content: str) -> JsonObject:
        """The ACP ToolCall describing a pending write of ``target``."""
        return {
            "toolCallId": tool_call_id,
            "title": f"Write {relpath}",
            "kind": "edit",
            "status": "pending",
            "locations": [{"path": str(target)}],
            "rawInput": {"path": str(target), "content": content},
        }

    def perform_edit(self, session: Session, tool_call_id: str, target: Path, content: str) -> None:
        """Write the file and report the finished tool call with its diff."""
        old_text = target.read_text() if target.is_file() else None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
        except OSError as error:
            self.update(
                session,
                {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": "failed"},
            )
            raise PromptFailed(f"cannot write {target}: {error}") from error
        self.update(
            session,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": tool_call_id,
                "status": "completed",
                "content": [{"type": "diff", "path": str(target), "oldText": old_text, "newText": content}],
            },
        )

    def write_file(self, session: Session, relpath: str, content: str) -> None:
        target = session.cwd / relpath
        tool_call = self.edit_tool_call(self.new_tool_call_id("write"), relpath, target, content)
        tool_call_id = tool_call["toolCallId"]
        self.update(session, {"sessionUpdate": "tool_call", **tool_call})
        self.perform_edit(session, tool_call_id, target, content)

    def ask_and_write(self, session: Session, relpath: str, content: str) -> None:
        target = session.cwd / relpath
        tool_call = self.edit_tool_call(self.new_tool_call_id("ask"), relpath, target, content)
        tool_call_id = tool_call["toolCallId"]
        self.update(session, {"sessionUpdate": "tool_call", **tool_call})
        answer = self.request(
            "session/request_permission",
            {
                "sessionId": session.session_id,
                "toolCall": tool_call,
                "options": [
                    {"optionId": ALLOW_OPTION_ID, "name": "Allow", "kind": "allow_once"},
                    {"optionId": REJECT_OPTION_ID, "name": "Reject", "kind": "reject_once"},
                ],
            },
        )
        outcome = (answer.result or {}).get("outcome") or {}
        if outcome.get("outcome") == "selected" and outcome.get("optionId") == ALLOW_OPTION_ID:
            self.perform_edit(session, tool_call_id, target, content)
            self.say(session, f"permission granted: wrote {relpath}")
            return
        self.update(
            session,
            {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": "failed"},
        )
        if answer.error is not None:
            log(f"permission request failed: {answer.error!r}")
        verdict = "denied" if outcome.get("outcome") == "selected" else "cancelled"
        self.say(session, f"permission {verdict}: {relpath} not written")
        if session.cancelled.is_set():
            raise PromptCancelled


def run_mcp_call(entry: JsonObject, tool: str, arguments: JsonObject, cwd: Path) -> JsonObject:
    """Start the ACP stdio server ``entry`` with the official MCP SDK's stdio client, initialize, call ``tool``;
    the result as JSON (wire field names)."""
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(
        command=str(entry["command"]),
        args=[str(a) for a in entry.get("args") or []],
        env={str(pair["name"]): str(pair["value"]) for pair in entry.get("env") or []},
        cwd=str(cwd),
    )

    async def call() -> JsonObject:
        async with stdio_client(parameters) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            await client.list_tools()
            result = await client.call_tool(tool, arguments, read_timeout_seconds=60)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    return anyio.run(call)


def append_marks(paths: list[Path], event: str) -> None:
    for path in paths:
        with path.open("a") as handle:
            handle.write(f"{event} {time.time():.6f} {os.getpid()}\n")


def exit_now(code: int, reason: str) -> NoReturn:
    """Leave immediately, skipping interpreter shutdown (threads may be busy).

    Nothing is lost: :meth:`Agent.send` flushes stdout after every message.
    """
    log(f"exiting with code {code}: {reason}")
    os._exit(code)


def main() -> None:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda num, _frame: exit_now(128 + num, signal.Signals(num).name))
    resume_mode = os.environ.get("ACP_TEST_RESUME", "resume")
    if resume_mode not in ("resume", "load", "none"):
        log(f"unknown ACP_TEST_RESUME={resume_mode!r}; using 'resume'")
        resume_mode = "resume"
    auth_required = os.environ.get("ACP_TEST_AUTH") == "required"
    models = [m.strip() for m in os.environ.get("ACP_TEST_MODELS", DEFAULT_MODELS).split(",") if m.strip()]
    agent = Agent(os.environ.get("ACP_TEST_RECORD") or None, resume_mode, auth_required, models)
    log("ready")
    agent.serve()
    exit_now(0, "stdin closed")


if __name__ == "__main__":
    main()
