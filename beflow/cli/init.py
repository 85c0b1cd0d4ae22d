"""``beflow init``."""

from __future__ import annotations

from pathlib import Path

import click

from beflow.cli.common import out
from beflow.git import toplevel as git_toplevel
from beflow.scaffold import init_project


@click.command("init", epilog="Example:  cd my-repo && beflow init")
@click.option("--force", is_flag=True, help="Overwrite an existing config.json.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Project directory (default: the git top level, else the current directory).",
)
def command(force: bool, directory: Path | None) -> None:
    """Write a commented config.json and keep beflow's state (.beflow/, but for issues/) out of git."""
    directory = (directory or git_toplevel(Path.cwd()) or Path.cwd()).resolve()
    result = init_project(directory, force=force)
    verb = "Overwrote" if result.overwritten else "Wrote"
    out.print(f"{verb} {result.config_path}")
    out.print(f"beflow's state lives in {result.state_dir} (git-ignored, but for issues/)")
    out.print("Next: edit config.json, then run `beflow doctor`.")
