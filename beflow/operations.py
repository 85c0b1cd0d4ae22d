"""The one registry of beflow's operations (docs/architecture.md).

Each operation is declared once, with its name, a description written for agents (when to call it, what it
costs), a pydantic input model (whose JSON Schema is the MCP tool's input schema), a safety level and its handler.
The CLI commands and the MCP server (``beflow mcp serve``) both call operations through this registry, so the two
can never drift apart. Exposure to agents is opt-in per operation (``agent=True``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict, ValidationError

from beflow.config import Project
from beflow.errors import BeflowError, UsageError
from beflow.trackers.base import normalize_key
from beflow.validation import messages_of

Safety = Literal["read", "action", "destructive"]

I = TypeVar("I", bound=BaseModel)  # noqa: E741 - the conventional name for an input type


class Input(BaseModel):
    """Base of every operation input: unknown fields are errors, strings are stripped."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


@dataclass
class Context:
    """What an operation runs against: the project, who is acting, and (for agents) the issue it is bound to."""

    project: Project
    actor: str = "user"
    bound_issue: str | None = None
    services: dict[str, Any] = field(default_factory=dict)

    def service(self, name: str, factory: Callable[[Project], Any]) -> Any:
        """A per-context singleton (the tracker, the run store) built on first use."""
        if name not in self.services:
            self.services[name] = factory(self.project)
        return self.services[name]


@dataclass(frozen=True)
class Operation(Generic[I]):
    name: str
    title: str
    description: str
    input: type[I]
    safety: Safety
    handler: Callable[[Context, I], Any]
    agent: bool = False
    #: For agents: the input field that must name the bound issue; tool arguments can never pick another.
    issue_field: str | None = None

    def annotations(self) -> dict[str, bool]:
        """MCP tool annotations derived from the safety level."""
        return {
            "readOnlyHint": self.safety == "read",
            "destructiveHint": self.safety == "destructive",
            "idempotentHint": self.safety == "read",
            "openWorldHint": False,
        }

    def call(self, context: Context, arguments: dict[str, Any] | I) -> Any:
        """Validate ``arguments`` against the input model and run the handler."""
        if isinstance(arguments, BaseModel):
            payload = arguments
        else:
            try:
                payload = self.input.model_validate(arguments)
            except ValidationError as exc:
                # In the caller's terms, as config errors are: `issue.new: title: expected at least 1 character`.
                problems = messages_of(exc, model=self.input, data=arguments)
                raise UsageError("\n".join(f"{self.name}: {problem}" for problem in problems)) from None
        return self.handler(context, self._bound(context, payload))

    def _bound(self, context: Context, payload: I) -> I:
        """For a caller bound to one issue, the issue field names that issue: left out, it is filled in; naming
        another is refused. Enforced here, once, so that no handler can forget it."""
        if context.bound_issue is None or self.issue_field is None:
            return payload
        named = getattr(payload, self.issue_field)
        if named is None:
            return payload.model_copy(update={self.issue_field: context.bound_issue})
        if normalize_key(str(named)) != normalize_key(context.bound_issue):
            raise UsageError(
                f"{self.name}: this session works on issue {context.bound_issue} only; it cannot act on issue {named}",
                fix=f"Use {self.issue_field} {context.bound_issue!r}.",
            )
        return payload


REGISTRY: dict[str, Operation[Any]] = {}


def operation(
    name: str,
    *,
    title: str,
    description: str,
    safety: Safety,
    agent: bool = False,
    issue_field: str | None = None,
) -> Callable[[Callable[[Context, I], Any]], Operation[I]]:
    """Register the decorated ``handler(context, input)``; the input model is taken from its annotation."""

    def register(handler: Callable[[Context, I], Any]) -> Operation[I]:
        if name in REGISTRY:
            raise BeflowError(f"operation {name!r} is registered twice")
        hints = handler.__annotations__
        model = hints.get("payload") or hints.get("data")
        if isinstance(model, str):
            model = handler.__globals__[model]
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise TypeError(f"{name}: the handler's second parameter must be annotated with a pydantic model")
        op: Operation[I] = Operation(
            name, title, description, cast("type[I]", model), safety, handler, agent, issue_field
        )
        REGISTRY[name] = op
        return op

    return register


def get(name: str) -> Operation[Any]:
    return REGISTRY[name]
