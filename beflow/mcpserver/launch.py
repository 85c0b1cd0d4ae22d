"""What ``beflow mcp serve`` is started with (:class:`Launch`): the operations (``--allow``), the issue and run the
server is bound to (``--issue``, ``--run``), who is acting (``--actor``) and the limits; nothing here can come from
a tool argument. :func:`check_launch` refuses a server bound to something that does not exist before it serves.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from beflow.config import Project
from beflow.errors import NotFoundError, UsageError, excerpt
from beflow.mcpserver.channel import client_from_environment
from beflow.mcpserver.schema import exposed, load_all
from beflow.ops.operations import AGENT_ACTOR, Context
from beflow.repository.authors import user_name
from beflow.trackers.base import Tracker
from beflow.trackers.issue import normalize_key

KIB = 1024
DEFAULT_MAX_INPUT = 256 * KIB
DEFAULT_MAX_OUTPUT = 1024 * KIB
#: Seconds between two looks at the bound issue and the subscribed resources.
DEFAULT_POLL = 2.0


@dataclass(frozen=True)
class Limits:
    max_input: int = DEFAULT_MAX_INPUT
    max_output: int = DEFAULT_MAX_OUTPUT

    @property
    def max_frame(self) -> int:
        """The longest protocol frame read: room for an input at the limit, so that it gets its ``too_large``."""
        return max(1024 * KIB, 4 * self.max_input)


@dataclass(frozen=True)
class Launch:
    """Everything ``beflow mcp serve`` was started with; nothing here can come from a tool argument."""

    project: Project
    allow: list[str] | None = None
    issue: str | None = None
    run: str | None = None
    #: Who comments and reports (None: :func:`acting_as` says: an agent for a run's own server, else the person).
    actor: str | None = None
    limits: Limits = field(default_factory=Limits)
    poll: float = DEFAULT_POLL
    #: ``mcp.self``: the run's channel (its socket); every operation is forwarded to the run's process.
    channel: str | None = None
    #: How the project's tracker is opened (:func:`beflow.app.open_tracker`), for the operations that need it.
    opens_tracker: Callable[[Project], Tracker] | None = None
    #: Served over HTTP (``/mcp``): its clients are on other machines, and are told no path of this one.
    remote: bool = False


def acting_as(launch: Launch) -> str:
    """Who a server's comments and reports are signed by: ``--actor``; else, for a run's own server (its channel),
    ``agent``; else the person whose client this is (git's ``user.name``, else the login name): a session that is not
    a run's is a person's, whatever client it is."""
    if launch.actor is not None:
        return launch.actor
    return AGENT_ACTOR if launch.channel else user_name(launch.project.directory)


#: What an issue key given at launch may look like: a tracker's key (``7``, ``#7``, ``PROJ-12``), never a path.
LAUNCH_KEY = re.compile(r"^#?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def existing_issue(issue: str, show: Callable[[str], Any], *, remote: bool = False) -> str:
    """The key of the issue ``--issue`` names, through ``show`` (``issue.show``); a usage error (exit 2) for a key
    that is not one or an issue that does not exist. ``remote``: the key came in a URL (``/mcp/issues/KEY``), not
    in ``--issue``: not found, saying so without the option."""
    if not LAUNCH_KEY.match(issue) or ".." in issue:
        if remote:
            raise NotFoundError(f"no issue {excerpt(issue)}: that is not an issue key")
        raise UsageError(f"--issue {excerpt(issue)} is not an issue key", fix="Give an issue's key, e.g. --issue 7.")
    try:
        key: str = show(issue).key
    except NotFoundError as error:
        if remote:
            raise
        raise UsageError(f"--issue: {error.message}", fix=error.fix) from None
    return key


def check_launch(launch: Launch) -> Launch:
    """The launch, with the issue and run it names checked (and the issue taken from the run when only ``--run``
    is given): a server bound to something that does not exist refuses to start."""
    issue = launch.issue
    context = Context(project=launch.project, opens_tracker=launch.opens_tracker)
    registry = load_all()
    forward = client_from_environment(launch.channel, issue) if launch.channel else None

    def call(name: str, arguments: dict[str, Any]) -> Any:
        if forward is not None:  # a run's own server: the run's process answers (it holds the tracker)
            return forward.call(name, arguments)
        return registry[name].call(context, arguments)

    if launch.run is not None:
        record = call("run.show", {"id": launch.run})
        if issue is not None and normalize_key(issue) != record.issue:
            raise UsageError(f"--run {launch.run} is a run of issue {record.issue}, not of issue {issue}")
        issue = record.issue
        launch = dataclasses.replace(launch, run=record.id, issue=issue)
    if issue is not None:
        shown = existing_issue(issue, lambda key: call("issue.show", {"key": key}), remote=launch.remote)
        launch = dataclasses.replace(launch, issue=shown)
    exposed(launch.allow, bound=launch.issue is not None)  # a bad --allow fails before serving
    if forward is not None:
        forward.close()
    return dataclasses.replace(launch, actor=acting_as(launch))
