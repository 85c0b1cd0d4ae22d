"""The ACP messages beflow reads from acpx's ``--format json`` stream, as models: the JSON-RPC envelope, the
``session/new`` and ``session/prompt`` requests, the agent's ``session/update`` notifications (message chunks, tool
calls, usage), its ``session/request_permission`` requests, and the answers (the prompt's ``stopReason`` and
``usage``, a permission's outcome, errors). An MCP server of ``session/new`` is :mod:`beflow.mcp.acp`'s model.

The ACP SDK (agent-client-protocol) is the reference: tests/agent/test_acp_wire.py checks these names against its
schema, and tests/agent/test_acpx.py feeds the reader messages built by its models. The SDK is not imported here:
loading its schema costs more CPU than a whole ``beflow --help``.

Tolerant by design: unknown fields are ignored (a newer agent adds some), and a field beflow only shows that is not
of its type reads as absent. A request or an update the reader reads that is not as ACP has it reads as another
(:func:`malformed` tells), and a line that is no JSON-RPC message at all raises :class:`ValidationError`: the
reader skips both, and a malformed line never stops a run. The figures of usage are kept as the agent sent them:
:mod:`beflow.guardrails` judges each, counting a bad one instead of failing on it.
"""

from __future__ import annotations

import functools
import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    field_validator,
)
from pydantic.alias_generators import to_camel

# -- ACP's names the reader acts on ------------------------------------------------------------------------------------

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


def from_agent(method: str) -> bool:
    """Whether a request of ``method`` is the agent's to acpx (not acpx's to the agent)."""
    return method in AGENT_REQUESTS or method.startswith(AGENT_REQUEST_PREFIXES)


# -- the models --------------------------------------------------------------------------------------------------------

T = TypeVar("T")


def _or_none(value: object, handler: ValidatorFunctionWrapHandler) -> object:
    try:
        return handler(value)
    except ValidationError:
        return None


#: A field beflow only shows: a value not of its type reads as absent rather than failing the message.
Loose = Annotated[T | None, WrapValidator(_or_none)]


def _objects(value: object) -> list[object]:
    """A list's items that are JSON objects: anything else in it, or in its place, is not ACP's, and is passed by
    (the list is only shown)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


class Wire(BaseModel):
    """ACP's camelCase on the wire, snake_case here; unknown fields ignored."""

    # Built on first use, not on import: a process that only imports the reader (a watch that runs nothing) pays none.
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True)

    def has(self, name: str) -> bool:
        """Whether the message carried the field ``name`` (``id``, ``result``, ``error``...), even as null."""
        return name in self.model_fields_set


class ErrorData(Wire):
    """What acpx adds to an error of its own: ``acpxCode`` (TIMEOUT, ...) and ``detailCode`` (AGENT_SPAWN_ENOENT...)."""

    acpx_code: Loose[StrictStr] = None
    detail_code: Loose[StrictStr] = None


class RpcError(Wire):
    """A JSON-RPC error: its code (-32000: authentication required) and message."""

    code: Loose[StrictInt] = None
    message: object = None
    data: Loose[ErrorData] = None

    def text(self) -> str:
        """Its message, or the whole error when it has none."""
        return str(self.message or self.model_dump(by_alias=True, exclude_unset=True))


def error_text(error: RpcError | None) -> str:
    """What an error answer says (an answer with ``"error": null`` says nothing)."""
    return "{}" if error is None else error.text()


class McpServerEntry(Wire):
    """An MCP server of ``session/new``, as a transcript needs it: its name, if it has one. Its values are never
    read here (the whole shapes are :mod:`beflow.mcp.acp`'s, which beflow writes; reading them back would load the
    ``.mcp.json`` machinery into every command that reads a transcript)."""

    name: Loose[StrictStr] = "?"


class NewSession(Wire):
    """``session/new``: where the session works and the MCP servers acpx hands the agent."""

    cwd: Loose[StrictStr] = None
    mcp_servers: list[McpServerEntry] = []

    _servers = field_validator("mcp_servers", mode="before")(_objects)

    def server_names(self) -> list[str]:
        """Their names (never their values)."""
        return [server.name or "?" for server in self.mcp_servers]


class TextBlock(Wire):
    """A content block; beflow reads the text of text blocks (an image or a resource has none)."""

    text: StrictStr | None = None


class PromptRequest(Wire):
    """``session/prompt``: the prompt, as content blocks."""

    prompt: list[TextBlock] = []

    _blocks = field_validator("prompt", mode="before")(_objects)

    def text(self) -> str:
        return "".join(block.text or "" for block in self.prompt)


class ToolCallUpdate(Wire):
    """A tool call as a ``tool_call`` or ``tool_call_update`` carries it, or a permission request names it; only
    the fields it carries change what is known of the call."""

    tool_call_id: Loose[StrictStr] = None
    title: Loose[StrictStr] = None
    kind: Loose[StrictStr] = None
    status: Loose[StrictStr] = None
    #: Its content items (a diff, text...), for a reader that shows them.
    content: list[dict[str, Any]] | None = None
    #: What the agent says the tool is given (a command, a path): shown to a person asked to allow it.
    raw_input: object = None

    _items = field_validator("content", mode="before")(_objects)


class MessageChunk(Wire):
    session_update: Literal["agent_message_chunk"]
    content: TextBlock | None = None


class ToolCall(ToolCallUpdate):
    session_update: Literal["tool_call", "tool_call_update"]


class Cost(Wire):
    """A session's cumulative cost, as the agent reported it."""

    amount: object = None
    currency: object = None


class UsageUpdate(Wire):
    """The agent's context (``used`` of ``size`` tokens) and its session's cumulative cost, figures as sent."""

    session_update: Literal["usage_update"]
    used: object = None
    size: object = None
    #: None: no cost reported; an empty :class:`Cost` for one that is not an object (its figures count as bad).
    cost: Cost | None = None

    @field_validator("cost", mode="before")
    @classmethod
    def _cost(cls, value: object) -> object:
        return value if value is None or isinstance(value, dict) else {}


class OtherUpdate(Wire):
    """An update the reader passes by (a plan, a thought, a mode change, a kind ACP adds later)."""

    session_update: object = None


#: The kinds of update read into a model of their own: one of them that is not one is :func:`malformed`.
_KINDS = frozenset({MESSAGE_CHUNK, TOOL_CALL, TOOL_CALL_UPDATE, USAGE_UPDATE})

#: An update of a kind the reader reads, told by its ``sessionUpdate`` (looked up, not tried member by member: the
#: agent's message chunks come in thousands); any other, or one not as ACP has it, is an :class:`OtherUpdate`.
SessionUpdate = Annotated[
    Annotated[MessageChunk | ToolCall | UsageUpdate, Field(discriminator="session_update")] | OtherUpdate,
    Field(union_mode="left_to_right"),
]


class SessionNotification(Wire):
    """``session/update``: one update of the agent's session."""

    update: SessionUpdate


class PermissionOption(Wire):
    option_id: Loose[StrictStr] = None
    name: Loose[StrictStr] = None


class PermissionRequest(Wire):
    """``session/request_permission``: the tool call the agent asks about, and the options."""

    tool_call: Loose[ToolCallUpdate] = None
    options: list[PermissionOption] = []

    _options = field_validator("options", mode="before")(_objects)


class TurnUsage(Wire):
    """The turn's token counts of a prompt's response, as sent (:data:`TURN_TOKENS`)."""

    input_tokens: object = None
    output_tokens: object = None
    total_tokens: object = None
    thought_tokens: object = None
    cached_read_tokens: object = None
    cached_write_tokens: object = None


class PromptResponse(Wire):
    """The answer to ``session/prompt``: why the turn stopped, and what it used (``usage``: as sent, judged by
    the reader)."""

    stop_reason: StrictStr
    usage: object = None


class NewSessionResponse(Wire):
    session_id: StrictStr


class PermissionOutcome(Wire):
    outcome: Loose[StrictStr] = None
    option_id: Loose[StrictStr] = None


class PermissionResponse(Wire):
    """The answer to a permission request: the option chosen, or how it was left (cancelled)."""

    outcome: PermissionOutcome | StrictStr


# -- a line of the stream ----------------------------------------------------------------------------------------------


class Message(Wire):
    """One JSON object of acpx's output: a JSON-RPC request, notification or answer, or an event of acpx's own
    (``action``: ``session_ensured`` names the record acpx made of a session, ``acpxRecordId``). The requests the
    reader reads are the subclasses, their ``params`` typed."""

    #: Present (:meth:`has`) on requests and answers; null on acpx's own errors.
    id: StrictInt | StrictStr | None = None
    method: StrictStr | None = None
    #: Any JSON: what it is depends on the request it answers.
    result: Any = None
    error: RpcError | None = None
    action: Loose[StrictStr] = None
    acpx_record_id: Loose[StrictStr] = None


class OtherMessage(Message):
    """A request or notification the reader does not read the params of, or an answer, or acpx's own."""

    params: dict[str, Any] | None = None


class NewSessionMessage(Message):
    method: Literal["session/new"]
    params: NewSession | None = None


class PromptMessage(Message):
    method: Literal["session/prompt"]
    params: PromptRequest | None = None


class UpdateMessage(Message):
    method: Literal["session/update"]
    params: SessionNotification | None = None


class PermissionMessage(Message):
    method: Literal["session/request_permission"]
    params: PermissionRequest | None = None


#: The requests whose params are read into a model of their own: one of them that is not one is :func:`malformed`.
_METHODS = frozenset({NEW_SESSION, PROMPT, UPDATE, REQUEST_PERMISSION})

#: A request the reader reads, told by its ``method``; anything else, or one not as ACP has it, an
#: :class:`OtherMessage`.
AnyMessage = Annotated[
    Annotated[NewSessionMessage | PromptMessage | UpdateMessage | PermissionMessage, Field(discriminator="method")]
    | OtherMessage,
    Field(union_mode="left_to_right"),
]


@functools.cache
def _adapter() -> TypeAdapter[AnyMessage]:
    """Built the first time a line is read."""
    return TypeAdapter(AnyMessage)


#: How a JSON object starts.
_OPEN = (b"{", "{")


def malformed(message: AnyMessage) -> bool:
    """Whether ``message`` claims to be a request or an update the reader reads, and is not as ACP has it (it
    fell through to :class:`OtherMessage` or :class:`OtherUpdate`)."""
    if isinstance(message, OtherMessage):
        return message.method in _METHODS
    if isinstance(message, UpdateMessage) and message.params is not None:
        update = message.params.update
        return isinstance(update, OtherUpdate) and update.session_update in _KINDS
    return False


def decode(line: bytes | str) -> AnyMessage | None:
    """One line of acpx's output as a message, parsed and checked in one pass; None for anything that is not a
    JSON object (acpx's other output). An object that is no JSON-RPC message at all raises
    :class:`ValidationError`; one that is not the request or update it claims to be is read as another
    (:func:`malformed` tells)."""
    if line[:1] not in _OPEN and line.lstrip()[:1] not in _OPEN:
        return None
    validator = _adapter().validator  # (itself: no Python of the adapter's around each line)
    try:
        message: AnyMessage = validator.validate_json(line)
        return message
    except ValidationError as error:
        if error.errors(include_url=False)[0]["type"] != "json_invalid":
            raise
    # What this parser refuses, Python's takes, as acpx's JSON has it: an agent's lone surrogate (``\\ud800``), say.
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(data, dict):
        return None
    message = validator.validate_python(data)
    return message
