"""The command lines beflow gives acpx: a cold ``exec`` (unattended or attended), and the named session a retry
resumes the agent's earlier ACP session through (``sessions new --resume-session``, ``prompt -s``, ``cancel``,
``sessions close``); and what acpx's exit and its last words say.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from beflow.config import AgentCommand, Config
from beflow.paths import slug
from beflow.system import proc

#: acpx's exit codes beyond 0 (success) and 1 (error).
ACPX_TIMEOUT = 3
ACPX_PERMISSION_DENIED = 5
#: acpx's ``detailCode`` s that mean the agent itself cannot be started.
AGENT_MISSING = {"AGENT_SPAWN_ENOENT", "AGENT_SPAWN_EACCES"}

#: Prompts longer than this go through a file (``exec -f``) instead of argv, which the kernel limits per argument.
MAX_ARGV_PROMPT = 64 * 1024


def agent_args(config: Config) -> list[str]:
    """How acpx is told which agent to run: a registry name, or ``--agent <command>`` for a raw one; with
    ``--model <id>`` first when a model is configured (or an issue's label chose one)."""
    model = ["--model", config.model] if config.model else []
    if isinstance(config.agent, AgentCommand):
        return [*model, "--agent", config.agent.command]
    return [*model, config.agent]


def permission_args(config: Config, grant: str | None = None) -> list[str]:
    """How acpx decides the agent's permission requests in an unattended run (docs/config.md#permissions): the mode;
    requests left to a person fail the turn (``--non-interactive-permissions fail``) or are escalated
    (``--permission-policy`` ``escalate``); ``grant``, the one request a person allowed for this turn
    (:mod:`beflow.ops.permission_asks`), is approved before any other rule."""
    policy = config.permission_policy
    argv = [f"--{policy.mode}"]
    if policy.undecided == "ask":
        argv += ["--non-interactive-permissions", "fail"]
    rules: dict[str, list[str]] = {}
    if grant is not None:
        rules["autoApprove"] = [grant]
    if policy.escalate:
        rules["escalate"] = list(policy.escalate)
    if rules:  # (JSON inline: acpx reads a value starting with "{" as the policy itself, never as a file's path)
        argv += ["--permission-policy", json.dumps(rules, ensure_ascii=False)]
    return argv


def exec_argv(
    config: Config,
    *,
    cwd: Path,
    prompt: str,
    prompt_file: Path | None = None,
    permissions: list[str],
    timeout: float | None,
) -> list[str]:
    """``acpx --cwd <cwd> --format json --verbose <permissions> [--timeout T] <agent> exec <prompt>``
    (``permissions``: :func:`permission_args`).

    ``--verbose`` passes the agent's own stderr on to acpx's: when an agent dies mid-turn, its last words are
    the only account of why."""
    argv = [*config.acpx_argv(), "--cwd", str(cwd), "--format", "json", "--verbose", *permissions]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return _with_prompt([*argv, *agent_args(config), "exec"], prompt, prompt_file)


def _with_prompt(argv: list[str], prompt: str, prompt_file: Path | None) -> list[str]:
    """``argv`` with the prompt last: as an argument, or, when too long for one, as ``--file`` (where the run
    record keeps it)."""
    if len(prompt.encode("utf-8")) > MAX_ARGV_PROMPT and prompt_file is not None:
        return [*argv, "--file", str(prompt_file)]
    return [*argv, prompt]


def attend_argv(
    config: Config, *, cwd: Path, prompt: str, permissions: str, prompt_file: Path | None = None
) -> list[str]:
    """Attended: text output on the user's terminal, permission prompts answered there (no ``--timeout``: the
    person decides when to stop)."""
    argv = [*config.acpx_argv(), "--cwd", str(cwd), f"--{permissions}", *agent_args(config), "exec"]
    return _with_prompt(argv, prompt, prompt_file)


# -- the named session a retry resumes the agent's earlier session through (beflow.agent.session) ----------------------

#: Seconds the queue owner may idle after the turn before it exits by itself.
OWNER_TTL = 0.5


def session_name(key: str) -> str:
    """The acpx session name of an issue's runs."""
    return f"beflow-{slug(key)}"


def _session_argv(config: Config, cwd: Path, *rest: str) -> list[str]:
    return [*config.acpx_argv(), "--cwd", str(cwd), "--format", "json", *agent_args(config), *rest]


def resume_argv(config: Config, *, cwd: Path, name: str, session_id: str) -> list[str]:
    """Create the named session ``name`` on top of the agent's earlier session ``session_id``."""
    return _session_argv(config, cwd, "sessions", "new", "--name", name, "--resume-session", session_id)


def prompt_argv(
    config: Config,
    *,
    cwd: Path,
    name: str,
    prompt: str,
    prompt_file: Path | None,
    permissions: list[str],
    timeout: float | None,
) -> list[str]:
    """``exec_argv``'s counterpart for a resumed session: ``prompt -s <name>``."""
    argv = [*config.acpx_argv(), "--cwd", str(cwd), "--format", "json", "--verbose", *permissions]
    argv += ["--ttl", f"{OWNER_TTL:g}"]
    if timeout is not None:
        argv += ["--timeout", f"{timeout:g}"]
    return _with_prompt([*argv, *agent_args(config), "prompt", "-s", name], prompt, prompt_file)


def cancel_argv(config: Config, *, cwd: Path, name: str) -> list[str]:
    return _session_argv(config, cwd, "cancel", "-s", name)


def close_argv(config: Config, *, cwd: Path, name: str) -> list[str]:
    return _session_argv(config, cwd, "sessions", "close", name)


def tail(result: proc.Completed) -> str:
    """What a failed acpx call said, for notes: its JSON error's message, else its last line."""
    lines = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return result.describe()
    last = lines[-1]
    with contextlib.suppress(ValueError, KeyError, TypeError):
        last = str(json.loads(last)["error"]["message"])
    return f"{result.describe()}: {last[:300]}"
