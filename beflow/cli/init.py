"""``beflow init``."""

from __future__ import annotations

import os
from pathlib import Path

import click

from beflow.cli.common import App, out, pass_app
from beflow.config import CONFIG_PATH
from beflow.errors import UsageError
from beflow.ops.scaffold import init_project
from beflow.paths import outside_git
from beflow.repository.git import toplevel as git_toplevel


def _labels(app: App) -> None:
    from beflow.trackers.base import SetsUpLabels

    project = app.project()
    tracker = app.tracker()
    if not isinstance(tracker, SetsUpLabels):
        raise UsageError(
            f"--labels: the tracker in {project.config_path or 'the defaults'} ({tracker.description}) has no "
            "labels to create",
            fix='--labels is for a tracker whose statuses are labels (GitHub, GitLab): set its "tracker" in '
            ".beflow/config.json, then run it again.",
        )
    created = tracker.ensure_labels()
    if created:
        out.print(f"Created the labels {', '.join(created)} in {tracker.labels_home}")
    else:
        out.print("Every label beflow needs is there already.")


@click.command("init", epilog="Example:  cd my-repo && beflow init")
@click.option("--force", is_flag=True, help="Overwrite an existing .beflow/config.json.")
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False, exists=True),
    help="Project directory (default: the git top level, else the current directory).",
)
@click.option(
    "--labels",
    "labels",
    is_flag=True,
    help="Create the labels the tracker needs (GitHub, GitLab) in its repository or project; the config is left as "
    "it is.",
)
@click.option("--github", "labels", is_flag=True, hidden=True)  # (its name before GitLab's tracker came)
@pass_app
def command(app: App, force: bool, directory: Path | None, labels: bool) -> None:
    """Write a commented .beflow/config.json; beflow's run state stays out of git.

    `.beflow/config.json` and `.beflow/issues/` are yours to commit; everything else in `.beflow/` is git-ignored.

    With `beflow --config PATH init`, the file is written to PATH and its directory is the project's.
    """
    if labels:
        _labels(app)
        return
    config_path = None
    if app.config_option is not None:
        if directory is not None:
            raise UsageError("--config and --dir both say where to write: give one of them")
        # As the other commands read it: relative to the current directory, the project is where the file is.
        config_path = Path(os.path.abspath(Path.cwd() / app.config_option.expanduser()))
        directory = config_path.parent
    else:
        directory = (directory or git_toplevel(Path.cwd()) or Path.cwd()).resolve()
    existing = next(d for d in (directory, *directory.parents) if d.is_dir())  # --config may name a new folder
    if git_toplevel(existing) is None:
        # beflow's runs are git worktrees and branches, and what it keeps out of git needs a git to keep it out of.
        raise outside_git(directory)
    result = init_project(directory, force=force, config_path=config_path)
    verb = "Overwrote" if result.overwritten else "Wrote"
    out.print(f"{verb} {result.config_path}")
    out.print(f"beflow's state lives in {result.state_dir} (git-ignored, but for config.json and issues/)")
    out.print(
        'Unattended runs and their hooks are sandboxed where the sandbox starts on this machine ("sandbox": '
        '{"enabled": "auto"}); `beflow doctor` says whether it does here.'
    )
    if config_path is None:
        out.print(f"Next: edit {CONFIG_PATH}, then run `beflow doctor`.")
    else:
        out.print(f"Next: edit {config_path.name}, then run `beflow --config {app.config_option} doctor`.")
