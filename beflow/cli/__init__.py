"""The ``beflow`` command line: parse, call the core, render. Nothing here decides anything."""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import sys
from pathlib import Path

import click

from beflow import __version__
from beflow.cli.common import App, HelpGroup, guarded
from beflow.paths import beflow_home
from beflow.system import startup

# `beflow --auto KEY ...`, `beflow --attend KEY`, `beflow --open KEY` are modes of the root command (docs/modes.md);
# they are dispatched to hidden subcommands of the same names.
MODE_FLAGS = {"--auto": "auto", "--attend": "attend", "--open": "open"}


#: Every command, imported only when it is used: `beflow --version` and `beflow issues list` do not pay for
#: loading the run machinery.
COMMANDS = {
    "init": "beflow.cli.init:command",
    "doctor": "beflow.cli.doctor:command",
    "issues": "beflow.cli.issues:group",
    "runs": "beflow.cli.runs:group",
    "mcp": "beflow.cli.mcp:group",
    "restore": "beflow.cli.restore:command",
    "watch": "beflow.cli.watch:command",
    "worker": "beflow.cli.fleet:worker",
    "temporal": "beflow.cli.fleet:group",
    "serve": "beflow.cli.serve:command",
    "demo": "beflow.cli.demo:command",
    "docs": "beflow.cli.docs:command",
    "auto": "beflow.cli.run:auto",
    "attend": "beflow.cli.run:attend",
    "open": "beflow.cli.run:open_",
}


class BeflowGroup(HelpGroup):
    """The root group: knows the mode flags, and loads each command on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *self.commands})

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            name, command, rest = super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as missing:
            # Click suggests among the commands loaded so far, and ours load on first use: offer them all.
            visible = [n for n in self.list_commands(ctx) if n not in MODE_FLAGS.values()]
            raise click.exceptions.NoSuchCommand(missing.command_name, possibilities=visible, ctx=ctx) from None
        # Usage and errors say `beflow --auto ...`, as the user typed it, not the hidden command's name.
        modes = {mode: flag for flag, mode in MODE_FLAGS.items()}
        return (modes.get(name, name) if name else name), command, rest

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in self.commands and name in COMMANDS:
            module, attribute = COMMANDS[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return self.commands.get(name)

    def summary_of(self, ctx: click.Context, name: str, limit: int) -> str:
        """A command's one-line help for ``beflow --help``, read from its module's source when the command is not
        loaded: listing the commands does not import them all."""
        if name in self.commands or name not in COMMANDS:
            command = self.get_command(ctx, name)
            return command.get_short_help_str(limit) if command is not None else ""
        module, attribute = COMMANDS[name].split(":")
        summary = startup.summary_from_source(module, attribute, name, limit)
        if summary is not None:
            return summary
        command = self.get_command(ctx, name)  # not a plain decorated function: load it
        return command.get_short_help_str(limit) if command is not None else ""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        for index, arg in enumerate(args):
            if arg.startswith("--") and arg.split("=")[0] not in {*MODE_FLAGS, *self._long_options(ctx)}:
                # `beflow --atend 7`: click's own suggestion, among the modes too (they are not options to it).
                known = [*MODE_FLAGS, *self._long_options(ctx)]
                closest = difflib.get_close_matches(arg.split("=")[0], known, n=1)
                raise click.exceptions.NoSuchOption(arg, possibilities=closest, ctx=ctx)
            if arg in MODE_FLAGS and MODE_FLAGS[arg] in COMMANDS:
                others = [a for a in args[index + 1 :] if a in MODE_FLAGS and a != arg]
                if others:
                    raise click.UsageError(f"{arg} and {others[0]} are two modes: choose one", ctx)
                args[index] = MODE_FLAGS[arg]
                break
            if not arg.startswith("-") and (index == 0 or args[index - 1] != "--config"):
                break  # a subcommand came first: its own options are neither modes nor the root's
        return super().parse_args(ctx, args)

    def _long_options(self, ctx: click.Context) -> list[str]:
        return [o for param in self.get_params(ctx) for o in getattr(param, "opts", []) if o.startswith("--")]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Modes"):
            formatter.write_dl(
                [
                    (
                        "--auto [KEY]...",
                        "Run issues unattended, each in a throwaway worktree (default: every ready one).",
                    ),
                    ("--attend KEY", "Run acpx in your checkout; its permission prompts come to this terminal."),
                    ("--open KEY", "Open the agent's own client in your checkout with the issue's prompt."),
                ]
            )
        names = [n for n in self.list_commands(ctx) if n not in MODE_FLAGS.values()]  # the modes are listed above
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        with formatter.section("Commands"):
            formatter.write_dl([(n, self.summary_of(ctx, n, limit)) for n in names])

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("beflow", "[--config PATH] COMMAND [ARGS]...")
        modes = [f"beflow {flag} ..." for flag, name in MODE_FLAGS.items() if name in COMMANDS]
        for mode in modes:
            formatter.write_usage("", mode, prefix="   or: ")


@click.group(
    cls=BeflowGroup,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog="Example:  beflow init && beflow doctor",
)
@click.version_option(__version__, "-V", "--version", prog_name="beflow", message="%(prog)s %(version)s")
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path, dir_okay=False),
    metavar="PATH",
    help="The config file (else $BEFLOW_CONFIG, else the nearest .beflow/config.json up to the git top level).",
)
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None) -> None:
    """beflow turns issues into coding-agent runs: it runs an agent on each issue through acpx in a throwaway
    git worktree, with per-run MCP servers, and commits the result to a branch."""
    ctx.obj = App(config_option=config_path)
    # A beflow killed mid-run (SIGKILL, power loss) left a managed .acpxrc.json: put it back before anything else.
    if ctx.invoked_subcommand != "restore" and _journal_has_entries():
        from beflow.cli.restore import recover_quietly

        recover_quietly()
    # A sandboxed run killed outright left its scratch directory (with its proxy's socket) behind.
    from beflow.sandbox import scratch

    with contextlib.suppress(OSError):
        scratch.sweep()


def _journal_has_entries() -> bool:
    """Whether any managed file may need restoring (a look at one directory, without loading the machinery)."""
    with contextlib.suppress(OSError):  # a guarded repository's snapshot (beflow.repository.repoguard); damaged/ aside
        if any(name.endswith(".json") for name in os.listdir(beflow_home() / "git-journal")):
            return True
    try:
        return any(name.endswith(".json") for name in os.listdir(beflow_home() / "journal"))
    except OSError:  # no journal yet, or not readable: the restore itself reports what it cannot do
        return not isinstance(sys.exc_info()[1], FileNotFoundError)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    args = argv if argv is not None else sys.argv[1:]
    # Start-up builds many long-lived objects (models, commands): keep the collector from walking them again.
    startup.freeze()
    try:
        code = guarded(lambda: cli.main(args=args, prog_name="beflow", standalone_mode=False))
        status: int | str | None = code if isinstance(code, int) else 0
    except SystemExit as done:
        status = done.code
    if argv is None:  # the console script, not a test calling main()
        startup.leave(status)
    sys.exit(status)
