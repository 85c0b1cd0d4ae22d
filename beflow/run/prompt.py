"""Rendering the agent's prompt: Jinja2, undefined variables are errors, a built-in default."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import jinja2.meta
from jinja2 import nodes

from beflow.errors import ConfigError
from beflow.system.files import read_regular

DEFAULT_TEMPLATE = "templates/prompt.md.j2"

#: The variables every prompt is rendered with (docs/config.md).
VARIABLES = frozenset({"issue", "attempt", "candidate", "branch", "run_id", "mode", "round", "feedback", "previous"})
#: What a message about an unknown variable says to do.
USE_ONLY = "Use only issue, attempt, candidate, branch, run_id, mode, round, feedback and previous."
#: What ``issue`` has.
ISSUE_FIELDS = frozenset({"key", "title", "body", "labels", "url", "comments"})


#: How messages name a template written inline in the config (rather than in a file of its own).
INLINE = ".beflow/config.json prompt"

#: Control characters other than tab and line feed. NUL cannot be passed in a command line at all (the kernel
#: ends an argument there), and the others are invisible in an issue file yet act on a terminal that shows them.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
#: What a control character becomes: visible, and plainly not the character itself.
REPLACEMENT = "\ufffd"


def without_controls(text: str) -> str:
    """``text`` with every control character but tab and line feed replaced by U+FFFD (a carriage return is a line
    end: ``\r\n`` and a lone ``\r`` become ``\n``). What goes into a prompt, a command line or a commit message
    from an issue a person or an agent wrote."""
    return _CONTROLS.sub(REPLACEMENT, text.replace("\r\n", "\n").replace("\r", "\n"))


class PromptError(ConfigError):
    """The prompt template is missing or does not render: a permanent failure, never retried."""

    code = "prompt"


#: Bytes a prompt template file may hold.
MAX_TEMPLATE = 1 << 20


def load_template(setting: str | None, project_dir: Path) -> tuple[str, str]:
    """``(source, where)`` of the prompt: the configured file or inline text, else the built-in default.

    A setting that is one line without ``{{`` and names an existing file (relative to the project directory) is a
    file; anything else is an inline template.
    """
    if setting is None:
        return resources.files("beflow").joinpath(DEFAULT_TEMPLATE).read_text(encoding="utf-8"), "built-in prompt"
    looks_like_path = "\n" not in setting and "{{" not in setting and "{%" not in setting
    if looks_like_path:
        path = (project_dir / setting).expanduser()
        if path.is_file():
            try:
                return read_regular(path, limit=MAX_TEMPLATE).decode("utf-8"), str(path)
            except (OSError, UnicodeDecodeError) as exc:
                raise PromptError(f"prompt: cannot read template file {path}: {exc}") from None
        if Path(setting).suffix:
            fix = "Fix `prompt` in .beflow/config.json."
            raise PromptError(f"prompt: template file {path} does not exist", fix=fix)
    return setting, INLINE


def _environment() -> jinja2.Environment:
    return jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)


def check(setting: str | None, project_dir: Path) -> None:
    """Fail before any run when the template cannot work for any issue: missing, bad syntax, unknown variables.

    What depends on the issue (``{{ issue.labels[0] }}`` on an issue without labels) can only fail its own run.
    """
    source, where = load_template(setting, project_dir)
    environment = _environment()
    try:
        parsed = environment.parse(source)
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"{where}:{exc.lineno}: template syntax error: {exc.message}") from None
    unknown = sorted(jinja2.meta.find_undeclared_variables(parsed) - VARIABLES)
    if unknown:
        raise PromptError(
            f"{where}: unknown variable{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}",
            fix=USE_ONLY,
        )
    fields = sorted({node.attr for node in parsed.find_all(nodes.Getattr) if _is_issue(node.node)} - ISSUE_FIELDS)
    fields += sorted(
        {
            str(node.arg.value)
            for node in parsed.find_all(nodes.Getitem)
            if _is_issue(node.node) and isinstance(node.arg, nodes.Const)
        }
        - ISSUE_FIELDS
    )
    if fields:
        raise PromptError(
            f"{where}: issue has no field {', '.join(map(repr, fields))}",
            fix=f"The fields of issue are: {', '.join(sorted(ISSUE_FIELDS))}.",
        )


def _is_issue(node: nodes.Node) -> bool:
    return isinstance(node, nodes.Name) and node.name == "issue"


def render(setting: str | None, project_dir: Path, variables: dict[str, Any]) -> str:
    """The prompt for one run; a template error names the template and the line."""
    source, where = load_template(setting, project_dir)
    environment = _environment()
    try:
        return without_controls(environment.from_string(source).render(**variables)).strip() + "\n"
    except jinja2.TemplateSyntaxError as exc:
        raise PromptError(f"{where}:{exc.lineno}: template syntax error: {exc.message}") from None
    except jinja2.UndefinedError as exc:
        raise PromptError(f"{where}: {exc.message}", fix=USE_ONLY) from None
    except Exception as exc:  # a template can fail in its own ways ({{ 1 / 0 }}, a filter on the wrong type)
        raise PromptError(f"{where}: the template failed: {type(exc).__name__}: {exc}") from None
