"""Modules imported when first used, so that commands which never need them do not pay for loading them."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class OnFirstUse:
    """Stands for module ``name``; the first attribute looked up imports it (``yaml.safe_load`` and the like)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attribute)


def module(name: str) -> Any:
    """A stand-in for module ``name``, imported on first use."""
    return OnFirstUse(name)
