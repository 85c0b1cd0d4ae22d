"""Which native client ``--open`` starts, and how its argv takes the prompt."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from beflow.agent import native
from beflow.config import load_project
from beflow.errors import ConfigError
from tests.support.projects import config_file


def configure(repo: Path, **config: object) -> None:
    config_file(repo).write_text(json.dumps(config))


# --- which native client --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "argv"),
    [
        ("claude", ["claude", "{prompt}"]),
        ("codex", ["codex", "{prompt}"]),
        ("gemini", ["gemini", "-i", "{prompt}"]),
        ("opencode", ["opencode", "--prompt", "{prompt}"]),
        ("cursor", ["cursor-agent", "{prompt}"]),
        ("cursor-agent", ["cursor-agent", "{prompt}"]),
    ],
)
def test_the_built_in_table_names_each_agents_interactive_client(repo: Path, agent: str, argv: list[str]) -> None:
    configure(repo, agent=agent)
    choice = native.native_client(load_project())
    assert choice.argv == argv
    assert choice.source == "built-in table"
    assert choice.install  # every built-in client says how to install it


def test_open_in_config_overrides_the_table(repo: Path) -> None:
    configure(repo, agent="claude", open={"claude": ["claude", "--model", "opus", "{prompt}"]})
    choice = native.native_client(load_project())
    assert choice.argv == ["claude", "--model", "opus", "{prompt}"]
    assert choice.source.startswith("open.claude in ")


def test_open_default_serves_an_agent_the_table_does_not_know(repo: Path) -> None:
    configure(repo, agent="kimi", open={"default": ["kimi", "--prompt={prompt}"]})
    assert native.native_client(load_project()).argv == ["kimi", "--prompt={prompt}"]


def test_a_raw_agent_command_needs_an_open_entry(repo: Path) -> None:
    configure(repo, agent={"command": "my-acp-agent --stdio"})
    with pytest.raises(ConfigError) as caught:
        native.native_client(load_project())
    assert "raw ACP command (my-acp-agent --stdio)" in caught.value.message
    assert '"open": {"default": ["my-client", "{prompt}"]}' in (caught.value.fix or "")


def test_an_unknown_agent_names_the_known_ones(repo: Path) -> None:
    configure(repo, agent="pi")
    with pytest.raises(ConfigError, match=r"no native client is known for agent 'pi' \(built in: claude, codex"):
        native.native_client(load_project())


def test_an_open_entry_without_prompt_mark_is_a_config_error_naming_the_entry(repo: Path) -> None:
    configure(repo, agent="claude", open={"claude": ["claude"]})
    with pytest.raises(ConfigError) as caught:
        native.native_client(load_project())
    assert f"{repo / '.beflow' / 'config.json'}: open.claude: no {{prompt}}" in caught.value.message


def test_the_prompt_replaces_every_mark_even_inside_a_larger_argument() -> None:
    argv = native.client_argv(["client", "--message={prompt}", "{prompt}"], "fix it")
    assert argv == ["client", "--message=fix it", "fix it"]
