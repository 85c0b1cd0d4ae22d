"""Reading what acpx streams back: with ``--format json`` acpx prints the ACP JSON-RPC traffic between itself and the
agent, one message a line: ``initialize``, ``session/new`` (with the ``mcpServers`` it handed over),
``session/prompt``, the agent's ``session/update`` notifications (message chunks, tool calls, usage),
``session/request_permission`` requests, and the prompt's result (``stopReason``) or error.

:class:`Transcript` follows that stream for progress and the summary; :func:`readable` shows a transcript as a person
reads it. The messages are read as :mod:`beflow.agent.acp_wire`'s models: a line that is not ACP's is skipped (and
counted), never a failure of the run. The command lines that start acpx are :mod:`beflow.agent.acpx_command`'s; the
session of an unattended run, cold or resumed, :mod:`beflow.agent.session`'s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from beflow.agent.acp_wire import (
    TOOL_CALL,
    TOOL_ENDED,
    TOOL_FIELDS,
    UPDATE,
    USAGE_UPDATE,
    AnyMessage,
    Cost,
    MessageChunk,
    NewSession,
    NewSessionMessage,
    NewSessionResponse,
    PermissionMessage,
    PermissionOutcome,
    PermissionRequest,
    PermissionResponse,
    PromptMessage,
    PromptRequest,
    PromptResponse,
    SessionNotification,
    ToolCall,
    ToolCallUpdate,
    UpdateMessage,
    UsageUpdate,
    decode,
    error_text,
    from_agent,
    malformed,
)
from beflow.agent.usage_lines import (
    USAGE_LINE,
    USAGE_LINE_START,
    Burst,
    number,
    take_usage,
    turn_usage,
    usage_update,
)
from beflow.guardrails import Usage
from beflow.records.record import clean_text

#: Characters of one agent message kept (its end), and how many messages, tool calls and permission requests:
#: an agent that floods the stream leaves beflow's memory flat (the transcript file has it all, up to its cap).
MAX_MESSAGE = 1 << 20
MAX_KEPT = 1000


@dataclass
class ToolCallState:
    """What the stream said of one tool call so far (each update changes only the fields it carries)."""

    title: str | None = None
    kind: str | None = None
    status: str | None = None

    def describe(self) -> str:
        return f"{'tool call' if self.title is None else self.title} ({self.status or 'pending'})"


@dataclass
class Transcript:
    """What the JSON-RPC stream of one acpx run said, followed line by line (in bounded memory)."""

    session_id: str | None = None
    mcp_servers: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # the agent's text, one entry per turn of chunks
    tool_calls: dict[str, ToolCallState] = field(default_factory=dict)
    permission_requests: list[ToolCallUpdate] = field(default_factory=list)  # the tool calls asked about
    #: The first permission request acpx left to a person: answered ``cancelled`` (``--non-interactive-permissions
    #: fail``) or escalated (``--permission-policy`` ``escalate``), so that the run can put it to one.
    undecided: ToolCallUpdate | None = None
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
    #: JSON objects of the stream that were not the ACP messages they claimed to be: skipped, counted here.
    malformed: int = 0
    _chunks: list[str] = field(default_factory=list)
    _chunk_bytes: int = 0
    _tail: str = ""
    _prompt_ids: set[int | str | None] = field(default_factory=set)
    _requests: dict[int | str | None, str] = field(default_factory=dict)  # acpx's requests still unanswered
    _asking: dict[int | str | None, ToolCallUpdate] = field(default_factory=dict)  # permission requests unanswered
    _burst: Burst | None = field(default=None, repr=False, compare=False)

    @property
    def prompted(self) -> bool:
        """Whether acpx got as far as sending the prompt to the agent."""
        return bool(self._prompt_ids)

    def follow(self, lines: bytes) -> None:
        """Take the lines one read of acpx's output brought (joined by their newlines, as
        :data:`beflow.system.proc.LinesHandler` has them), as :meth:`feed` takes each. The agent's usage updates,
        thousands a run, are taken straight into :attr:`usage` when they have acpx's common shape
        (:data:`~beflow.agent.usage_lines.USAGE_LINE`): no JSON parse, no message made of them; a read of nothing
        else (a burst of them) is taken whole (:class:`~beflow.agent.usage_lines.Burst`)."""
        usage, burst = self.usage, self._burst
        if burst is not None and burst.took(usage, lines):
            return
        start, whole = USAGE_LINE_START, USAGE_LINE.fullmatch
        for line in lines.split(b"\n"):
            match = whole(line) if line.startswith(start) else None
            if match is None:
                self._line(line)  # (not a usage line of the common shape: just tried)
                continue
            session, used, size, cost, currency = match.groups()
            if cost is None:
                take_usage(usage, int(used), int(size))
            else:
                take_usage(usage, int(used), int(size), number(cost), currency.decode(), costed=True)
            if burst is None or burst.session != session:  # the session whose bursts the next reads may bring
                burst = self._burst = Burst(session)

    def feed(self, line: bytes | str) -> AnyMessage | None:
        """Take one line of acpx output; returns the message (None for anything that is not one: acpx's other
        output, or a JSON object that is not the ACP message it claims to be, counted in :attr:`malformed`)."""
        if type(line) is bytes and line.startswith(USAGE_LINE_START):
            usage = USAGE_LINE.fullmatch(line)
            if usage is not None:  # the agent's usage updates, thousands a run: no JSON parse each
                return self._usage_line(usage)
        return self._line(line)

    def _line(self, line: bytes | str) -> AnyMessage | None:
        try:
            message = decode(line)
            if message is None:
                return None
            if not malformed(message):
                self._take(message)  # (an answer that is not what ACP says it is raises here)
                return message
        except ValidationError:
            pass
        self.malformed += 1
        return None

    def _take(self, message: AnyMessage) -> None:
        method, ident = message.method, message.id
        if method is not None and message.has("id") and not from_agent(method):
            self._requests[ident] = method
        # Ids are per direction: the agent's own requests count from 1 too, so a request is forgotten once answered.
        answered = self._requests.pop(ident, None) if method is None and ident is not None else None
        if isinstance(message, NewSessionMessage):
            self.mcp_servers = (message.params or NewSession()).server_names()
        elif isinstance(message, PromptMessage):
            self._prompt_ids.add(ident)
            self._flush()
        elif isinstance(message, UpdateMessage):
            if message.params is not None:
                self._update(message.params.update)
        elif isinstance(message, PermissionMessage):
            tool = (message.params or PermissionRequest()).tool_call or ToolCallUpdate()
            self.permission_requests.append(tool)
            del self.permission_requests[:-MAX_KEPT]
            if len(self._asking) < MAX_KEPT:
                self._asking[ident] = tool
            self.latest = f"permission requested: {tool.title or tool.tool_call_id or '?'}"
        elif message.has("result") and isinstance(message.result, dict):
            result = message.result
            if "outcome" in result and ident in self._asking:
                self._permission_answered(self._asking.pop(ident), result)
            if "sessionId" in result and self.session_id is None:
                self.session_id = NewSessionResponse.model_validate(result).session_id
            if "stopReason" in result:
                response = PromptResponse.model_validate(result)
                self.stop_reason = response.stop_reason
                self._flush()
                if response.has("usage"):
                    turn_usage(self.usage, response.usage)
        elif message.has("error") and ident is None:
            self.acpx_error = error_text(message.error)
            data = message.error.data if message.error is not None else None
            self.acpx_code = data.acpx_code if data is not None else None
            self.acpx_detail = data.detail_code if data is not None else None
            self._flush()
        elif message.has("error") and ident in self._prompt_ids:
            self.error = error_text(message.error)
            self.error_code = message.error.code if message.error is not None else None
            self._flush()
        elif message.has("error") and answered is not None:
            self.request_error_method = answered
            self.request_error = error_text(message.error)
            self.request_error_code = message.error.code if message.error is not None else None

    def _permission_answered(self, tool: ToolCallUpdate, result: dict[str, Any]) -> None:
        """acpx answered a permission request: one it left to a person is the first :attr:`undecided`."""
        meta = result.get("_meta")
        said = meta.get("acpx") if isinstance(meta, dict) else None
        escalated = isinstance(said, dict) and "permissionEscalation" in said
        outcome = result.get("outcome")
        cancelled = isinstance(outcome, dict) and outcome.get("outcome") == "cancelled"
        if (escalated or cancelled) and self.undecided is None:
            self.undecided = tool

    def _usage_line(self, match: re.Match[bytes]) -> UpdateMessage:
        """A usage update :data:`~beflow.agent.usage_lines.USAGE_LINE` took: into :attr:`usage`, and the message
        it is (made of what the match took, as the parse would have made it)."""
        session, used, size, cost, currency = match.groups()
        if cost is None:
            take_usage(self.usage, int(used), int(size))
            update = UsageUpdate.model_construct(session_update=USAGE_UPDATE, used=int(used), size=int(size))
        else:
            spent = Cost.model_construct(amount=number(cost), currency=currency.decode())
            take_usage(self.usage, int(used), int(size), spent.amount, spent.currency, costed=True)
            update = UsageUpdate.model_construct(
                session_update=USAGE_UPDATE, used=int(used), size=int(size), cost=spent
            )
        params = SessionNotification.model_construct(session_id=session.decode(), update=update)
        return UpdateMessage.model_construct(method=UPDATE, params=params)

    def _update(self, update: object) -> None:
        if isinstance(update, MessageChunk):
            text = clean_text(update.content.text or "") if update.content is not None else ""
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
        elif isinstance(update, ToolCall):
            self._flush()  # text around a tool call is a message of its own, as readable() shows it
            if len(self.tool_calls) >= MAX_KEPT and _call_id(update) not in self.tool_calls:
                self.tool_calls.pop(next(iter(self.tool_calls)))
            self.latest = _tracked(self.tool_calls, update).describe()
        elif isinstance(update, UsageUpdate):
            usage_update(self.usage, update)

    def _flush(self) -> None:
        if self._chunks:
            self.messages.append("".join(self._chunks).strip())
            self._chunks, self._chunk_bytes, self._tail = [], 0, ""
            del self.messages[:-MAX_KEPT]

    @property
    def final_message(self) -> str | None:
        self._flush()
        return self.messages[-1] if self.messages else None


def _call_id(update: ToolCallUpdate) -> str:
    return "?" if update.tool_call_id is None else update.tool_call_id


def _tracked(calls: dict[str, ToolCallState], update: ToolCallUpdate) -> ToolCallState:
    """The tool call a ``tool_call`` or ``tool_call_update`` is about, with what the update changed."""
    call = calls.setdefault(_call_id(update), ToolCallState())
    for name in TOOL_FIELDS:
        if name in update.model_fields_set:
            setattr(call, name, getattr(update, name))
    return call


# -- a transcript as a person reads it ---------------------------------------------------------------------------------


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
    shown each ``content`` item of a tool call (a ``diff``, say) with the call's id, and may add lines for it. A
    line that is not the ACP message it claims to be is left out."""
    out: list[LogLine] = []
    chunks: list[str] = []
    calls: dict[str, ToolCallState] = {}

    def flush() -> None:
        if chunks:
            out.append(LogLine("agent", "".join(chunks).strip()))
            chunks.clear()

    for line in lines:
        try:
            message = decode(line)
            if message is not None and not malformed(message):
                _read(message, out, chunks, calls, flush, content)
        except ValidationError:
            continue
    flush()
    return out


def _read(
    message: AnyMessage,
    out: list[LogLine],
    chunks: list[str],
    calls: dict[str, ToolCallState],
    flush: Callable[[], None],
    content: ContentReader | None,
) -> None:
    """One message of :func:`readable`'s transcript, into its lines."""
    if isinstance(message, NewSessionMessage):
        session = message.params or NewSession()
        names = ", ".join(session.server_names()) or "none"
        out.append(LogLine("session", f"started in {session.cwd}; MCP servers: {names}"))
    elif isinstance(message, PromptMessage):
        flush()
        out.append(LogLine("prompt", _first_line((message.params or PromptRequest()).text())))
    elif isinstance(message, UpdateMessage):
        update = message.params.update if message.params is not None else None
        if isinstance(update, MessageChunk):
            chunks.append(update.content.text or "" if update.content is not None else "")
        elif isinstance(update, ToolCall):
            flush()
            call = _tracked(calls, update)
            status = call.status or "pending"
            if update.session_update == TOOL_CALL or status in TOOL_ENDED:
                title = "tool call" if call.title is None else call.title
                out.append(LogLine("tool", f"{title} [{call.kind or '?'}] {status}"))
            if content is not None and update.content is not None:
                out.extend(line for item in update.content for line in content(_call_id(update), item))
    elif isinstance(message, PermissionMessage):
        flush()
        request = message.params or PermissionRequest()
        tool = request.tool_call or ToolCallUpdate()
        options = ", ".join(o.name if o.name is not None else o.option_id or "?" for o in request.options)
        out.append(LogLine("permission", f"{tool.title if tool.title is not None else _call_id(tool)} ({options})"))
    elif message.has("result") and isinstance(message.result, dict) and "stopReason" in message.result:
        flush()
        out.append(LogLine("end", f"stop reason: {PromptResponse.model_validate(message.result).stop_reason}"))
    elif message.has("result") and isinstance(message.result, dict) and "outcome" in message.result:
        outcome = PermissionResponse.model_validate(message.result).outcome
        chosen = outcome.option_id or outcome.outcome if isinstance(outcome, PermissionOutcome) else outcome
        out.append(LogLine("permission", f"answered: {chosen}"))
    elif message.has("error"):
        flush()
        out.append(LogLine("error", error_text(message.error)))


def _first_line(text: str) -> str:
    """A prompt's first line, whole (a path in it is not cut), and how many lines follow."""
    lines = text.strip().splitlines()
    if not lines:
        return "(empty prompt)"
    rest = len(lines) - 1
    return lines[0] + (f" (+{rest} more line{'s' if rest != 1 else ''}: the full prompt is prompt.md)" if rest else "")
