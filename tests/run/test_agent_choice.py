"""The agent and model an issue's labels choose (docs/config.md#agents): within the config's lists only, the rest
refused; the acpx command, the login variables, the sandbox's preset and the record follow the choice. In process,
but for one short run end to end through the real acpx (the registry's ``claude`` mapped to the test agent)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from beflow.agent import acpx_command, agent_env
from beflow.config import Config, Project
from beflow.run.agent_choice import REFUSED, AgentRefused, chosen, for_issue
from beflow.sandbox.box import preset_name
from beflow.trackers import Issue, Status
from beflow.web.fields import record_fields
from tests.support.projects import AutoProject

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def project(**config: object) -> Project:
    return Project(config=Config.model_validate(config), config_path=None, directory=Path("/nowhere"))


def issue(*labels: str) -> Issue:
    return Issue(key="7", title="t", status=Status.READY, labels=list(labels), created=NOW, updated=NOW)


LISTED = project(agent="codex", agents={"allowed": ["claude", "gemini"], "models": ["opus", "gpt-5.2"]})


def test_no_label_is_the_configured_agent_and_the_very_same_project() -> None:
    assert for_issue(LISTED, issue("bug", "beflow:ready"))[0] is LISTED


def test_a_listed_agent_and_model_are_chosen_and_everything_follows_them() -> None:
    chose, choice = for_issue(LISTED, issue("Agent:claude", "model:opus"))

    assert (chose.config.agent, chose.config.model) == ("claude", "opus")
    assert choice.labels == ("agent:claude", "model:opus")
    assert acpx_command.agent_args(chose.config) == ["--model", "opus", "claude"]
    assert "ANTHROPIC_API_KEY" in agent_env.agent_keys(chose.config)
    assert "OPENAI_API_KEY" not in agent_env.agent_keys(chose.config)  # codex's login stays out
    assert preset_name(chose.config) == "claude"
    assert LISTED.config.agent == "codex"  # the project itself is unchanged


def test_the_configured_agent_may_always_be_named_and_a_model_alone_keeps_it() -> None:
    chose, _ = for_issue(LISTED, issue("agent:codex", "model:gpt-5.2"))
    assert (chose.config.agent, chose.config.model) == ("codex", "gpt-5.2")


@pytest.mark.parametrize(
    ("labels", "said"),
    [
        (["agent:aider"], "agent 'aider' (label agent:aider) is not in agents.allowed (claude, gemini, codex)"),
        (["agent:claude", "agent:gemini"], "labels name 2 of them: claude, gemini"),
        (["model:o3"], "model 'o3' (label model:o3) is not in agents.models (opus, gpt-5.2)"),
        (["agent:--agent=sh -c evil"], "is not in agents.allowed"),
        (["agent:/bin/sh"], "is not in agents.allowed"),
    ],
)
def test_anything_the_config_does_not_list_is_refused_saying_why(labels: list[str], said: str) -> None:
    with pytest.raises(AgentRefused) as refused:
        chosen(LISTED, issue(*labels))
    assert said in refused.value.message and "agents of" in (refused.value.fix or "")


def test_without_lists_every_agent_or_model_label_is_refused() -> None:
    with pytest.raises(AgentRefused, match=r"agents.models \(none\)"):
        chosen(project(), issue("model:opus"))
    with pytest.raises(AgentRefused, match=r"agents.allowed \(codex\)"):
        chosen(project(), issue("agent:claude"))


def test_the_prefixes_are_configurable_and_a_name_is_never_an_option() -> None:
    custom = project(agents={"allowed": ["claude"], "label_prefix": "use/", "model_prefix": "llm/"})
    assert for_issue(custom, issue("agent:gemini", "use/claude"))[0].config.agent == "claude"
    with pytest.raises(ValueError, match=r"agents\.allowed"):
        Config.model_validate({"agents": {"allowed": ["--agent"]}})
    with pytest.raises(ValueError, match="model"):
        Config.model_validate({"model": "-x"})


@pytest.mark.slow
def test_labels_run_the_listed_agent_and_model_and_an_unlisted_one_is_refused_without_running(
    auto_project: AutoProject, codex_is_the_test_agent: Path, beflow
) -> None:  # type: ignore[no-untyped-def]
    auto_project.configure(agent="codex", agents={"allowed": ["claude"], "models": ["opus"]})
    tracker = auto_project.tracker
    body = "acp-test: model\nacp-test: write a.txt a"
    picked = tracker.create("Write it", body=body, labels=["agent:claude", "model:opus"]).key
    refused = tracker.create("Write it", body="acp-test: write b.txt b", labels=["agent:gemini"]).key

    ran = beflow("--auto", picked)
    assert ran.exit_code == 0, ran.stdout + ran.stderr
    (record,) = auto_project.records(picked)
    assert record.agent == "claude" and record.outcome == "succeeded"
    assert record.model == "opus" and record.chosen_by == ["agent:claude", "model:opus"]
    # acpx set the model the agent advertised (session/set_model): the agent itself says it runs on it.
    transcript = (auto_project.run_dir(record) / "transcript.jsonl").read_text()
    assert '"method":"session/set_model"' in transcript and "model: opus" in transcript
    shown = {field.name: field.value for field in record_fields(record, auto_project.directory)}
    assert shown["model"] == "opus" and shown["chosen_by"] == ["agent:claude", "model:opus"]  # (the run's page)

    stopped = beflow("--auto", refused)
    assert stopped.exit_code != 0 and "agents.allowed" in stopped.stderr
    assert auto_project.records(refused) == []  # no run, no agent
    left = auto_project.issue(refused)
    assert left.status == Status.OPEN and left.comments[-1].text.startswith(REFUSED)
