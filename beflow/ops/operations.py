"""The one registry of beflow's operations (docs/architecture.md).

Each operation is declared once, with its name, a description written for agents (when to call it, what it
costs), a pydantic input model (whose JSON Schema is the MCP tool's input schema), a pydantic output model (the
tool's output schema), a safety level, tags, a category and its handler. The CLI commands, the MCP server
(``beflow mcp serve``) and its schema export (``beflow mcp schema``) all read this registry, so they can never drift
apart. Exposure to agents is opt-in per operation (``agent=True``): only those may be served to an agent bound to
one issue.
"""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import PydanticCustomError

from beflow.config import Project
from beflow.errors import BeflowError, OutOfScopeError, UsageError, excerpt
from beflow.guardrails import Usage
from beflow.records.record import Question
from beflow.trackers.base import Tracker
from beflow.trackers.issue import normalize_key
from beflow.validation import messages_of

Safety = Literal["read", "action", "destructive"]
Access = Literal["read", "write"]

#: What MCP clients accept as a tool name (some accept more; none of them less).
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")

I = TypeVar("I", bound=BaseModel)  # noqa: E741 - the conventional name for an input type
O = TypeVar("O", bound=BaseModel)  # noqa: E741 - and for an output type
S = TypeVar("S")  # what a stream of an output is (see Operation.call_stream)


class Input(BaseModel):
    """Base of every operation input: unknown fields are errors, strings are stripped."""

    # Built on first use: a command validates one input, and only the MCP server needs them all.
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, defer_build=True)


def _whole_number_as_text(value: object) -> object:
    """A key sent as a whole number is its text: clients read "e.g. 7" and send 7 (the MCP Inspector does). A float
    or a bool is no key (``type(...) is int``: a bool is an int to ``isinstance``), and the refusal says what is
    one: pydantic's own words ("expected a string") would refuse the whole numbers it takes."""
    if type(value) is int:
        return str(value)
    if not isinstance(value, str):
        raise PydanticCustomError("key_type", "expected a string or a whole number")
    return value


#: An issue key in an operation's input: a string, or a whole number taken as one (its schema stays a string).
Key = Annotated[str, BeforeValidator(_whole_number_as_text)]


#: Who a run's agent acts as through beflow's own server: what it writes is signed so, and is never a person's word
#: (an answer to its own question, say).
AGENT_ACTOR = "agent"


@dataclass
class Context:
    """What an operation runs against: the project, who is acting, and (for agents) the issue and run it is bound
    to. All of it comes from the launch (the CLI, ``beflow mcp serve --issue --run --actor``), never from input."""

    project: Project
    actor: str = "user"
    bound_issue: str | None = None
    bound_run: str | None = None
    #: How the project's tracker is opened (:func:`beflow.app.open_tracker`), when an operation needs it first.
    opens_tracker: Callable[[Project], Tracker] | None = None
    #: The tracker, once opened (a run's channel hands over the run's own).
    tracker: Tracker | None = None
    #: Every secret the bound run holds, that its agent's words are masked with (its channel hands them over: a
    #: token from ``gh auth token`` is in no variable); None: those of beflow's environment.
    secrets: list[str] | None = None
    #: What the bound run's agent reported so far (its record has it only at the end).
    live_usage: Usage | None = None
    #: The caller is on another machine (MCP over HTTP): what it is told names no file of this one, which it cannot
    #: read (the docs are topics of ``beflow docs TOPIC``).
    remote: bool = False
    #: Where the bound run takes its agent's question (``issue.ask``): its channel hands it to the run's process,
    #: which ends the run ``asked`` once the turn ends. None: no run waits for a question.
    asks: Callable[[Question], None] | None = None
    #: What operations built once for this context (the run store, the masker of an agent's words).
    cache: dict[str, object] = field(default_factory=dict)

    def open_tracker(self) -> Tracker:
        """The project's tracker, opened on first use."""
        if self.tracker is None:
            if self.opens_tracker is None:
                raise RuntimeError("this context was given neither a tracker nor how to open one")
            self.tracker = self.opens_tracker(self.project)
        return self.tracker


@dataclass(frozen=True)
class Operation(Generic[I, O]):
    """One operation: typed in what it takes (``I``) and what it returns (``O``), so that a caller holding the
    object (the CLI) is checked by mypy, while a caller holding a name (the MCP server) goes through the same
    validation."""

    name: str
    title: str
    description: str
    input: type[I]
    safety: Safety
    handler: Callable[[Context, I], O]
    #: The model of what the handler returns (an object: MCP output schemas are objects).
    output: type[O]
    agent: bool = False
    #: For agents: the input field that must name the bound issue; tool arguments can never pick another.
    issue_field: str | None = None
    category: str = "general"
    tags: tuple[str, ...] = ()
    #: It reads or writes the tracker: an outside service when the tracker is not the local one.
    tracker: bool = False
    #: Where the whole result can be read when a size limit cut it (for the note that says so).
    whole: str | None = None
    #: It records who acted (a comment's author): a caller that does not say must find out (the CLI asks git).
    #: None: every operation that writes does.
    names_actor: bool | None = None

    @property
    def needs_actor(self) -> bool:
        return self.safety != "read" if self.names_actor is None else self.names_actor

    @property
    def tool_name(self) -> str:
        """The MCP tool name: ``issue.comment`` is ``issue_comment``."""
        return self.name.replace(".", "_")

    @property
    def access(self) -> Access:
        return "read" if self.safety == "read" else "write"

    def annotations(self, project: Project | None = None) -> dict[str, bool]:
        """MCP tool annotations derived from the safety level; ``openWorldHint`` is true only for tracker operations
        on a tracker that is an outside service (GitHub), which needs ``project`` to know."""
        remote = project is not None and project.config.tracker.outside_service()
        return {
            "readOnlyHint": self.safety == "read",
            "destructiveHint": self.safety == "destructive",
            "idempotentHint": self.safety == "read",
            "openWorldHint": self.tracker and remote,
        }

    def metadata(self) -> dict[str, Any]:
        """What MCP has no field for, under ``_meta["beflow/operation"]``."""
        return {
            "name": self.name,
            "safety": self.safety,
            "access": self.access,
            "category": self.category,
            "tags": list(self.tags),
            "agent": self.agent,
            "issueField": self.issue_field,
        }

    def call(self, context: Context, arguments: dict[str, Any] | I) -> O:
        """Validate ``arguments`` against the input model and run the handler."""
        if isinstance(arguments, BaseModel):
            payload = arguments
        else:
            if context.bound_issue is not None and self.issue_field and arguments.get(self.issue_field) is None:
                # Bound, the issue is implied: an agent leaves it out.
                arguments = {**arguments, self.issue_field: context.bound_issue}
            payload = self.validated(lambda: self.input.model_validate(arguments), arguments)
        return self.handler(context, self._bound(context, payload))

    def call_stream(self, context: Context, payload: I, stream: Callable[[Context, I], S]) -> S:
        """``stream`` — the operation's result in pieces, for a caller that writes it as it comes (a listing of 100k
        issues) — with the input bound as :meth:`call` binds it."""
        return stream(context, self._bound(context, payload))

    def validated(self, build: Callable[[], I], arguments: dict[str, Any]) -> I:
        """The input ``build`` makes from ``arguments``; invalid, a usage error in the caller's terms, as config
        errors are: ``issue.new: title: expected at least 1 character``."""
        try:
            return build()
        except ValidationError as exc:
            problems = messages_of(exc, model=self.input, data=arguments)
            raise UsageError("\n".join(f"{self.name}: {problem}" for problem in problems)) from None

    def _bound(self, context: Context, payload: I) -> I:
        """For a caller bound to one issue, the issue field names that issue: left out, it is filled in; naming
        another is refused. Enforced here, once, so that no handler can forget it."""
        if context.bound_issue is None or self.issue_field is None:
            return payload
        named = getattr(payload, self.issue_field)
        if named is None:
            return payload.model_copy(update={self.issue_field: context.bound_issue})
        if normalize_key(str(named)) != normalize_key(context.bound_issue):
            other = excerpt(named, quote=False)
            raise OutOfScopeError(
                f"{self.name}: this session works on issue {context.bound_issue} only; it cannot act on issue {other}",
                fix=f"Use {self.issue_field} {context.bound_issue!r}.",
            )
        return payload


REGISTRY: dict[str, Operation[Any, Any]] = {}


def operation(
    name: str,
    *,
    title: str,
    description: str,
    safety: Safety,
    agent: bool = False,
    issue_field: str | None = None,
    category: str = "general",
    tags: tuple[str, ...] = (),
    tracker: bool = False,
    whole: str | None = None,
    names_actor: bool | None = None,
) -> Callable[[Callable[[Context, I], O]], Operation[I, O]]:
    """Register the decorated ``handler(context, input) -> output``; the input and output models are taken from its
    annotations."""

    def register(handler: Callable[[Context, I], O]) -> Operation[I, O]:
        if name in REGISTRY:
            raise BeflowError(f"operation {name!r} is registered twice")
        model, output = _models(handler)
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{name}: the handler's second parameter must be annotated with a pydantic model")
        if not (isinstance(output, type) and issubclass(output, BaseModel)):
            raise TypeError(f"{name}: the handler must be annotated to return a pydantic model (an object)")
        op = Operation(
            name,
            title,
            description,
            cast("type[I]", model),
            safety,
            handler,
            cast("type[O]", output),
            agent,
            issue_field,
            category=category,
            tags=tags,
            tracker=tracker,
            whole=whole,
            names_actor=names_actor,
        )
        if not TOOL_NAME.match(op.tool_name):
            raise BeflowError(f"operation {name!r}: {op.tool_name!r} is not a tool name every MCP client accepts")
        REGISTRY[name] = op
        return op

    return register


def _models(handler: Callable[..., Any]) -> tuple[Any, Any]:
    """The handler's input model (its second parameter's type, whatever the parameter is called) and its output
    model (its return type), with string annotations resolved in the handler's module."""
    hints = typing.get_type_hints(handler)
    parameters = list(inspect.signature(handler).parameters)
    return (hints.get(parameters[1]) if len(parameters) > 1 else None), hints.get("return")
