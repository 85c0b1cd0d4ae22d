"""The ``beflow`` command line: parse, call the core, render. Nothing here decides anything."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from beflow import __version__
from beflow.cli import demo, doctor, init, issues, mcp, restore, run, runs, watch
from beflow.cli.common import App, guarded

# `beflow --auto KEY ...`, `beflow --attend KEY`, `beflow --open KEY` are modes of the root command (DESIGN §1);
# they are dispatched to hidden subcommands of the same names.
MODE_FLAGS = {"--auto": "auto", "--attend": "attend", "--open": "open"}


class BeflowGroup(click.Group):
    """The root group: knows the mode flags and lists commands in a useful order."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        for index, arg in enumerate(args):
            if arg in MODE_FLAGS and MODE_FLAGS[arg] in self.commands:
                args[index] = MODE_FLAGS[arg]
                break
            if not arg.startswith("-") and index and args[index - 1] != "--config":
                break  # a subcommand came first: its own options are not modes
        return super().parse_args(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("beflow", "[--config PATH] COMMAND [ARGS]...")
        modes = [f"beflow {flag} ..." for flag, name in MODE_FLAGS.items() if name in self.commands]
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
    help="config.json to use (else $BEFLOW_CONFIG, ./config.json, or the one at the git top level).",
)
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None) -> None:
    """beflow turns issues into coding-agent runs: it runs an agent on each issue through acpx in a throwaway
    git worktree, with per-run MCP servers, and commits the result to a branch."""
    ctx.obj = App(config_option=config_path)
    # A beflow killed mid-run (SIGKILL, power loss) left a managed .acpxrc.json: put it back before anything else.
    if ctx.invoked_subcommand != "restore":
        restore.recover_quietly()


cli.add_command(init.command)
cli.add_command(doctor.command)
cli.add_command(issues.group)
cli.add_command(mcp.group)
cli.add_command(restore.command)
cli.add_command(runs.group)
cli.add_command(run.auto)
cli.add_command(demo.command)
cli.add_command(watch.command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point."""
    args = argv if argv is not None else sys.argv[1:]
    code = guarded(lambda: cli.main(args=args, prog_name="beflow", standalone_mode=False))
    sys.exit(code if isinstance(code, int) else 0)
