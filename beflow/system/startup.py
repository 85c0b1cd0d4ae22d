"""Everything beflow does to start fast and leave fast, in one place, each with what it saves.

A command runs in a fresh interpreter, often many times a minute (scripts, `watch` hooks, shell completion), so
its start-up is paid again and again. Measured on a 2-core machine (user+system CPU):

- **Modules on first use** (:func:`module`): ``beflow issues list --json`` loads no git, YAML or terminal library.
- **Command summaries from source** (:func:`summary_from_source`): ``beflow --help`` lists every command from its
  module's source instead of importing them all: about 0.12 s instead of 0.8 s.
- **A frozen heap** (:func:`freeze`): the collector does not walk the models and commands built at start-up again.
- **A fast exit** (:func:`leave`): no interpreter teardown once output is flushed: about 0.05 s of a 0.35 s command.

``tests/cli/test_startup.py`` pins what each command may load; ``--help`` must stay under half of
``acpx --help``'s CPU.
"""

from __future__ import annotations

import ast
import gc
import importlib
import importlib.util
import os
import sys
from pathlib import Path
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


def summary_from_source(module_name: str, function: str, name: str, limit: int) -> str | None:
    """The one-line help of the click command that ``function`` of ``module_name`` defines, read from the module's
    source without importing it; None when it is not a plain decorated function (then load the command)."""
    import click  # (the command line has it loaded already; the core modules using `module` need none)

    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        return None
    for node in ast.parse(Path(spec.origin).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            # A `short_help=` of the decorator wins over the docstring, as it does once the command is loaded.
            short = [
                str(keyword.value.value)
                for decorator in node.decorator_list
                if isinstance(decorator, ast.Call)
                for keyword in decorator.keywords
                if keyword.arg == "short_help" and isinstance(keyword.value, ast.Constant)
            ]
            docstring = ast.get_docstring(node) or ""
            return click.Command(name, help=docstring, short_help=next(iter(short), None)).get_short_help_str(limit)
    return None


def freeze() -> None:
    """Keep the collector from walking what start-up built (models, commands): they live as long as the process."""
    gc.freeze()


def leave(status: int | str | None) -> None:
    """Exit at once with ``status`` once output is flushed: the interpreter's teardown (freeing every module and
    object one by one) is work nobody waits for. Returns, for a normal exit, when output cannot be flushed (so a
    broken pipe is reported as Python reports it) or when a profiler or coverage is watching (it reports at exit)."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return
    if isinstance(status, str):
        print(status, file=sys.stderr)
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    os._exit(status or 0)
