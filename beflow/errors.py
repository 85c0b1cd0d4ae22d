"""The one error root.

Every expected failure is a :class:`BeflowError`; the CLI prints its message (and fix) without a traceback and
exits with its ``exit_code``. The MCP server (``beflow mcp serve``) sends the same fields as
``{"code", "message", "fix", "docs"}``; every ``code`` is stable and listed in docs/mcp-server.md.
"""

from __future__ import annotations


class BeflowError(Exception):
    """An expected failure with a message for people and an optional fix."""

    exit_code: int = 1
    code: str = "error"
    #: Whether a run that fails with it would fail the same way again: ``beflow watch`` does not retry it.
    permanent: bool = False

    def __init__(self, message: str, *, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix


class UsageError(BeflowError):
    """Bad usage: wrong arguments or options. Nothing was changed."""

    exit_code = 2
    code = "usage"


class OutOfScopeError(UsageError):
    """A caller bound to one issue (an agent in a run) named another issue, a run of another issue, or an operation
    its launch does not expose."""

    code = "out_of_scope"


class TransitionError(UsageError):
    """An issue cannot go from its status to the one asked for."""

    code = "transition"


class NotBoundError(UsageError):
    """The operation needs a binding (a run, an issue) that this caller was not started with."""

    code = "not_bound"


class TooLargeError(UsageError):
    """An input is bigger than the limit the caller was started with."""

    code = "too_large"


class ConfigError(BeflowError):
    """A configuration or input file is invalid. Nothing was changed."""

    exit_code = 2
    code = "config"
    permanent = True


class PermanentFailure(BeflowError):
    """A run's failure that no retry can fix (MCP servers that do not resolve, a prompt that does not render)."""

    permanent = True


class NotFoundError(BeflowError):
    """Something named (an issue, a run) does not exist."""

    code = "not_found"


class LockedError(BeflowError):
    """Another beflow process holds what this one needs; ``holder`` names it when its claim says who it is."""

    code = "locked"

    def __init__(self, message: str, *, fix: str | None = None, holder: str | None = None) -> None:
        super().__init__(message, fix=fix)
        self.holder = holder


class ToolMissingError(BeflowError):
    """An external program (git, node, acpx, a native agent client) is not installed."""

    code = "tool_missing"


class ProgramMissingError(ConfigError):
    """A program every run needs (Node.js, which acpx runs on) is not installed: no run can start, and nothing was
    changed (exit 2, as for the config; the watch holds dispatching back until it is there)."""

    code = "tool_missing"


class Interrupted(BeflowError):
    """The user or the system asked beflow to stop (SIGINT, SIGTERM, SIGHUP); cleanup has run."""

    exit_code = 130
    code = "interrupted"

    def __init__(self, signal_name: str = "SIGINT") -> None:
        super().__init__(f"interrupted by {signal_name}")
        self.signal_name = signal_name


#: How much of a caller's input an error message quotes at most.
EXCERPT = 60


def excerpt(value: object, limit: int = EXCERPT, *, quote: bool = True) -> str:
    """``value`` as an error message may quote it: escaped (control and invisible characters as escapes, so that a
    terminal or a log shows what was sent, not what it does) and cut to about ``limit`` characters. With ``quote``
    false, a short value of printable characters stands as it is (``no issue 999``)."""
    text = str(value)
    cut = len(text) > limit
    if not quote and not cut and text.isprintable():
        return text
    quoted = repr(text[:limit])
    quoted = "".join(c if c.isprintable() else f"\\u{ord(c):04x}" for c in quoted)
    return f"{quoted}… ({len(text)} characters)" if cut else quoted
