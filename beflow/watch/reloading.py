"""A watch's configuration, reloaded between ticks when its file changed: a config that no longer validates is
reported and the last good one kept; a running issue keeps the tracker it started with."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from beflow.codehosts.base import CodeHost, Opened
from beflow.config import Project, load_project
from beflow.errors import BeflowError
from beflow.events import WatchEmit
from beflow.trackers import Tracker


class Reloaded(NamedTuple):
    project: Project
    tracker: Tracker
    code_host: CodeHost | None


class ConfigReload:
    """Watches the config file of ``project`` (``config_option``: the one ``--config`` named) by its time and size;
    ``opens`` opens the tracker and code host a changed config names (:func:`beflow.app.open_project`)."""

    def __init__(
        self, project: Project, config_option: Path | None, emit: WatchEmit, opens: Callable[[Project], Opened]
    ) -> None:
        self.config_option = config_option
        self.emit = emit
        self.opens = opens
        self._config_seen = self._config_stamp(project)

    @staticmethod
    def _config_stamp(project: Project) -> tuple[float, int] | None:
        path = project.config_path
        try:
            stat = path.stat() if path else None
        except OSError:
            return None
        return (stat.st_mtime, stat.st_size) if stat else None

    def reload(self, current: Project) -> Reloaded | None:
        """The project, tracker and code host of the changed config; None when it did not change (or is broken)."""
        stamp = self._config_stamp(current)
        if stamp == self._config_seen:
            return None
        self._config_seen = stamp
        try:
            project = load_project(self.config_option or current.config_path, cwd=current.directory)
            opened = self.opens(project)
        except BeflowError as error:
            self.emit("error", message=f"config not reloaded, keeping the last good one: {error.message}")
            return None
        except Exception as error:  # whatever a hand edit does to the file, the watch goes on with what it has
            why = f"{type(error).__name__}: {error}"
            self.emit("error", message=f"config not reloaded, keeping the last good one: {why}")
            return None
        if project.config == current.config:
            return None
        self.emit("config_reloaded", path=str(project.config_path))
        return Reloaded(project, opened.tracker, opened.code_host)
