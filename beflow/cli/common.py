"""What every command shares: the lazily loaded project, consoles, JSON output, the error handler."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import click

from beflow.errors import BeflowError
from beflow.paths import beflow_home
from beflow.system.files import NotRegularError, atomic_write

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console
    from rich.table import Table

    from beflow.config import Project
    from beflow.ops.operations import Context, Operation
    from beflow.trackers.base import Tracker

T = TypeVar("T")
P = ParamSpec("P")
I = TypeVar("I", bound="BaseModel")  # noqa: E741 - an operation's input, as in beflow.ops.operations
O = TypeVar("O", bound="BaseModel")  # noqa: E741 - and its output
S = TypeVar("S")  # an output as a stream


#: What makes rich take a stream for a terminal, or not, whatever ``isatty`` says.
_TERMINAL_OVERRIDES = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


class _LazyConsole:
    """A rich console made on first use: commands that print JSON or nothing never load rich."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def _made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    # Dunders are looked up on the type, never through __getattr__: rich's Live enters its console (`with
    # console:`) when it stops, at the end of every `--auto` and `watch` on a terminal.
    def __enter__(self) -> Console:
        return self._made().__enter__()

    def __exit__(self, *exc_info: Any) -> None:
        self._made().__exit__(*exc_info)

    @property
    def is_terminal(self) -> bool:
        """Whether the stream is a terminal, asked without loading rich (a pipe never needs it) unless the
        environment overrides rich's own answer."""
        if self._console is None and not any(name in os.environ for name in _TERMINAL_OVERRIDES):
            return (sys.stderr if self._options.get("stderr") else sys.stdout).isatty()
        return self._made().is_terminal


out: Console = _LazyConsole(highlight=False, soft_wrap=True)  # type: ignore[assignment]
err: Console = _LazyConsole(stderr=True, highlight=False, soft_wrap=True)  # type: ignore[assignment]


def say(plain: str, markup: Callable[[], str]) -> None:
    """One line on stdout: on a terminal, styled (``markup()``, rich markup); elsewhere ``plain``, the same words,
    without loading rich (a script reading ``beflow issues new`` pays nothing for styling it never shows)."""
    if sys.stdout.isatty():
        out.print(markup())
    else:
        click.echo(visible(plain))


#: What text from issues, comments, agents and files may not send to a terminal as it is: C0 controls but tab and
#: line feed (ESC starts clear-screen, cursor moves and OSC 52 clipboard writes), DEL, C1 controls (U+009B is a CSI
#: on its own), the bidirectional overrides, embeddings, isolates and marks that reorder what follows (a title that
#: reads backwards), the line and paragraph separators, and lone surrogates (undecodable bytes).
_INVISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _visibly(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x20 or code == 0x7F:  # caret notation, as `cat -v` and terminals show them: ESC is ^[
        return "^" + chr(code ^ 0x40)
    return f"<U+{code:04X}>"


def visible(text: str) -> str:
    """``text`` with everything that would drive the terminal shown instead (``\x1b`` as ``^[``, U+202E as
    ``<U+202E>``); tabs and line ends kept (``\r\n`` as a line end). What every renderer of the CLI prints of
    text beflow did not write itself; ``--json`` keeps the text exact (JSON escapes it)."""
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    return _INVISIBLE.sub(_visibly, text)


def escape(text: str) -> str:
    """Text shown as it is in rich markup, every control in it made :func:`visible` (rich's own ``escape``,
    loaded when something is printed)."""
    from rich.markup import escape as rich_escape

    return rich_escape(visible(text))


@dataclass
class App:
    """Per-invocation state: the ``--config`` option, the project loaded from it on first use, and who acts
    (``None``: the CLI's user)."""

    config_option: Path | None = None
    _project: Project | None = field(default=None, repr=False)
    actor: str | None = None
    _tracker: Tracker | None = field(default=None, repr=False)

    def acting_as(self, actor: str | None) -> App:
        """The same invocation, acting as ``actor`` (``None``: as the CLI's user)."""
        return dataclasses.replace(self, actor=actor)

    def project(self) -> Project:
        if self._project is None:
            from beflow.config import load_project

            self._project = load_project(self.config_option)
        return self._project

    def tracker(self) -> Tracker:
        """The project's tracker (:func:`beflow.app.open_tracker`), opened once per invocation."""
        if self._tracker is None:
            from beflow.app import open_tracker

            self._tracker = open_tracker(self.project())
        return self._tracker


def print_table(table: Table) -> None:
    """A table fits the terminal; off a terminal (a pipe, a file) nothing is cut or wrapped: it is as wide as its
    widest values."""
    from rich.measure import Measurement

    if not out.is_terminal:
        table.width = Measurement.get(out, out.options.update(max_width=100_000), table).maximum
    out.print(table)


class HelpGroup(click.Group):
    """A command group whose command list shows each command's first sentence whole, never cut with "..."."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.get_short_help_str(limit=10_000)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def app() -> App:
    return click.get_current_context().ensure_object(App)


pass_app = click.make_pass_decorator(App, ensure=True)


def emit_json(value: Any) -> None:
    """One JSON document (or one event line) on stdout."""
    click.echo(json_text(value))


def json_text(value: Any) -> str:
    """``value`` (a model, or plain data) as one line of JSON, as :func:`emit_json` writes it."""
    if hasattr(value, "model_dump_json"):  # straight from the model: no copy of it as Python objects in between
        return str(value.model_dump_json())
    return json.dumps(value, default=_json_default, ensure_ascii=False)


def emit_json_chunks(chunks: Iterable[str]) -> None:
    """One JSON document on stdout, written as its pieces come (a listing of 100k issues is never held whole)."""
    pending: list[str] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size >= 1 << 16:
            click.echo("".join(pending), nl=False)
            pending, size = [], 0
    click.echo("".join(pending))


def _json_default(value: Any) -> Any:
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, dt.datetime):
        return value.isoformat()
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def fail(error: BeflowError) -> NoReturn:
    """Print an expected error (message, then the fix) and exit with its code."""
    head, _, rest = error.message.partition("\n")
    # The terminal may be gone (a closed window sent SIGHUP): the exit code must still say what happened.
    with contextlib.suppress(OSError):
        err.print(f"[bold red]error:[/] {escape(head)}")
        if rest:
            err.print(escape(rest))
        if error.fix:
            err.print(f"[bold]fix:[/] {escape(error.fix)}")
    sys.exit(error.exit_code)


def crash(exc: BaseException) -> NoReturn:
    """An unexpected error: the traceback goes to a log file under BEFLOW_HOME, its path to the terminal."""
    # Microseconds: two crashes in one second (parallel beflows) keep both logs.
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    log = beflow_home() / "logs" / f"crash-{stamp}.log"
    try:
        atomic_write(log, "".join(traceback.format_exception(exc)), mode=0o600)
        where = str(log)
    except OSError:
        where = "(could not write the log; traceback follows)"
        traceback.print_exception(exc)
    err.print(f"[bold red]beflow failed unexpectedly:[/] {escape(f'{type(exc).__name__}: {exc}')}")
    err.print(f"The traceback is in {where} — please include it when you report this.", markup=False)
    sys.exit(1)


def guarded(fn: Callable[[], T]) -> T:
    """Run the CLI with the one top-level handler for expected, unexpected and interrupt errors."""
    try:
        return fn()
    except BeflowError as error:
        fail(error)
    except KeyboardInterrupt:
        with contextlib.suppress(OSError):
            err.print("interrupted")
        sys.exit(130)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.exceptions.Abort:
        with contextlib.suppress(OSError):
            err.print("interrupted")
        sys.exit(130)
    except click.ClickException as usage:
        usage.show()
        sys.exit(usage.exit_code)
    except NotRegularError as refused:
        # A symlink, FIFO or device where beflow expected its own file or directory (an agent's, as a rule).
        fix = "beflow follows no link and opens nothing but a file there: move it away, and run the command again."
        fail(BeflowError(str(refused), fix=fix))
    except BrokenPipeError:
        # The reader went away (`beflow ... --json | head`): stop writing, quietly, as a pipeline expects.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)
    except (SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # the last resort: never a bare traceback on the user's terminal
        crash(exc)


def call_operation(
    app: App, operation: Operation[I, O], make: Callable[P, I], /, *args: P.args, **kwargs: P.kwargs
) -> O:
    """Run ``operation`` with the input ``make`` (the operation's input model) builds from the arguments, as the
    CLI's user (git's user.name, else the login name) unless ``app`` acts as another.

    Typed end to end: mypy checks each argument against the input model's fields and the result against the
    operation's output model. Bad values are the same usage errors the MCP server's callers get."""
    payload = operation.validated(lambda: make(*args, **kwargs), kwargs)
    return operation.call(_context(app, operation), payload)


def call_streamed(
    app: App,
    operation: Operation[I, O],
    stream: Callable[[Context, I], S],
    make: Callable[P, I],
    /,
    *args: P.args,
    **kwargs: P.kwargs,
) -> S:
    """:func:`call_operation` for a result written as it comes: ``stream`` gives ``operation``'s result in pieces
    (``issues.stream_issues`` gives ``issue.list``'s), its input checked and bound the same way."""
    payload = operation.validated(lambda: make(*args, **kwargs), kwargs)
    return operation.call_stream(_context(app, operation), payload, stream)


def _context(app: App, operation: Operation[I, O]) -> Context:
    from beflow.ops.operations import Context

    project = app.project()
    who = app.actor
    # Reading acts as nobody: asking git who the user is (a git process) is for operations that record it.
    if who is None and operation.needs_actor:
        from beflow.repository.authors import user_name

        who = user_name(project.directory)
    return Context(project=project, actor=who or "user", opens_tracker=lambda _project: app.tracker())
