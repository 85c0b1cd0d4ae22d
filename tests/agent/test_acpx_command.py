"""The acpx command lines of a run."""

from __future__ import annotations

from pathlib import Path

from beflow.agent import acpx_command
from beflow.config import Config


def config(**keys: object) -> Config:
    return Config.model_validate({"acpx": ["acpx"], **keys})


def test_exec_argv_for_a_registry_agent(tmp_path: Path) -> None:
    argv = acpx_command.exec_argv(
        config(agent="claude"), cwd=tmp_path, prompt="Fix it.", permissions=["--approve-all"], timeout=90
    )

    assert argv == [
        *["acpx", "--cwd", str(tmp_path), "--format", "json", "--verbose", "--approve-all", "--timeout", "90"],
        *["claude", "exec", "Fix it."],
    ]
    argv = acpx_command.exec_argv(
        config(agent="claude"), cwd=tmp_path, prompt="Fix it.", permissions=["--deny-all"], timeout=None
    )
    assert argv == [
        *["acpx", "--cwd", str(tmp_path), "--format", "json", "--verbose", "--deny-all"],
        *["claude", "exec", "Fix it."],
    ]


def test_exec_argv_for_a_raw_agent_command_and_a_long_prompt(tmp_path: Path) -> None:
    long_prompt = "x" * (acpx_command.MAX_ARGV_PROMPT + 1)
    prompt_file = tmp_path / "prompt.md"

    argv = acpx_command.exec_argv(
        config(agent={"command": "python3 agent.py"}, timeout=1.5),
        cwd=tmp_path,
        prompt=long_prompt,
        prompt_file=prompt_file,
        permissions=["--approve-reads"],
        timeout=1.5,
    )

    assert argv[-6:] == ["1.5", "--agent", "python3 agent.py", "exec", "--file", str(prompt_file)]


def test_permission_args_say_the_mode_what_a_person_decides_and_the_one_request_allowed() -> None:
    assert acpx_command.permission_args(config(permissions="approve-reads")) == ["--approve-reads"]
    asks = config(permissions={"mode": "approve-reads", "undecided": "ask", "escalate": ["execute", "fetch"]})
    assert acpx_command.permission_args(asks) == [
        *["--approve-reads", "--non-interactive-permissions", "fail"],
        *["--permission-policy", '{"escalate": ["execute", "fetch"]}'],
    ]
    # A grant is one argument of JSON, whatever the agent's title holds: never a flag, a file or a second rule.
    granted = acpx_command.permission_args(config(permissions="deny-all"), grant='Run x" --approve-all "{y}')
    assert granted == ["--deny-all", "--permission-policy", '{"autoApprove": ["Run x\\" --approve-all \\"{y}"]}']
