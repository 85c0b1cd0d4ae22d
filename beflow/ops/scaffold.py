"""``beflow init``: a commented ``.beflow/config.json`` and beflow's run state kept out of git."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from beflow.config import CONFIG_PATH
from beflow.errors import UsageError
from beflow.paths import state_dir
from beflow.system.files import atomic_write


def example_config() -> str:
    """The documented example configuration shipped with beflow."""
    return resources.files("beflow").joinpath("templates/config.example.json").read_text(encoding="utf-8")


@dataclass(frozen=True)
class InitResult:
    config_path: Path
    overwritten: bool
    state_dir: Path


def init_project(directory: Path, *, force: bool = False, config_path: Path | None = None) -> InitResult:
    """Write ``.beflow/config.json`` (or ``config_path``) from the example, never over an existing file unless
    ``force``, and keep the run state of ``directory`` out of git."""
    target = config_path or directory / CONFIG_PATH
    existed = target.exists()
    if existed and not force:
        raise UsageError(f"{target} already exists; nothing was changed", fix="Pass --force to overwrite it.")
    atomic_write(target, example_config())
    return InitResult(config_path=target, overwritten=existed, state_dir=state_dir(directory))
