"""The agent and model an issue's labels choose (docs/config.md#agents): ``agent:NAME`` / ``model:NAME`` (prefixes
``agents.label_prefix`` and ``agents.model_prefix``), within the config's lists.

A label is anyone's who may label the issue, so it only ever picks a name the config lists; one it does not list (or
two labels that disagree) refuses the run, saying why, rather than running another agent than the one asked for. The
choice is a copy of the project whose ``agent``/``model`` are the chosen ones: the sandbox's preset, the agent's
login variables, the acpx command and the run record all follow it, as they follow the config.
"""

from __future__ import annotations

from dataclasses import dataclass

from beflow.config import Project
from beflow.errors import BeflowError
from beflow.trackers import Issue


class AgentRefused(BeflowError):
    """An issue's labels name an agent or a model the config does not list: the run does not start."""

    code = "agent_refused"

    def __init__(self, message: str, *, fix: str | None = None, labels: tuple[str, ...] = ()) -> None:
        super().__init__(message, fix=fix)
        #: The issue's labels when they were refused (a watch says it once while they stay the same).
        self.labels = labels


#: The start of the comment an issue gets when its labels are refused (said once while nothing changes).
REFUSED = "beflow does not run this issue"


@dataclass(frozen=True)
class Choice:
    """What an issue's labels chose: the agent and model (None: the config's), and the labels that said so."""

    agent: str | None = None
    model: str | None = None
    labels: tuple[str, ...] = ()


def _named(labels: list[str], prefix: str) -> list[str]:
    """The names after ``prefix`` (any case) in ``labels``, each once."""
    found: list[str] = []
    for label in labels:
        if label[: len(prefix)].lower() == prefix.lower():
            name = label[len(prefix) :].strip()
            if name not in found:
                found.append(name)
    return found


def chosen(project: Project, issue: Issue) -> Choice:
    """What ``issue``'s labels choose; :class:`AgentRefused` saying why when they name what the config does not list."""
    settings, config = project.config.agents, project.config
    agents = _named(issue.labels, settings.label_prefix)
    models = _named(issue.labels, settings.model_prefix)
    fix = f"Change the issue's label, or list the name in agents of {project.config_name}."
    said = tuple(sorted(issue.labels))
    if len(agents) > 1 or len(models) > 1:
        which = agents if len(agents) > 1 else models
        message = f"issue {issue.key}'s labels name {len(which)} of them: {', '.join(which)}"
        raise AgentRefused(message, fix=fix, labels=said)
    allowed = [*settings.allowed, *([config.agent] if isinstance(config.agent, str) else [])]
    agent = agents[0] if agents else None
    if agent is not None and agent not in allowed:
        listed = ", ".join(dict.fromkeys(allowed)) or "none"
        raise AgentRefused(
            f"agent {agent!r} (label {settings.label_prefix}{agent}) is not in agents.allowed ({listed})",
            fix=fix,
            labels=said,
        )
    model = models[0] if models else None
    if model is not None and model not in settings.models:
        listed = ", ".join(settings.models) or "none"
        raise AgentRefused(
            f"model {model!r} (label {settings.model_prefix}{model}) is not in agents.models ({listed})",
            fix=fix,
            labels=said,
        )
    chose = tuple(
        f"{prefix}{name}" for prefix, name in ((settings.label_prefix, agent), (settings.model_prefix, model)) if name
    )
    return Choice(agent, model, chose)


def for_issue(project: Project, issue: Issue) -> tuple[Project, Choice]:
    """``project`` as ``issue``'s run sees it (its agent and model as the labels chose: the same project when they
    chose nothing), and the choice."""
    choice = chosen(project, issue)
    update: dict[str, object] = {}
    if choice.agent is not None and choice.agent != project.config.agent:
        update["agent"] = choice.agent
        update["model"] = None  # (the configured model is the configured agent's)
    if choice.model is not None:
        update["model"] = choice.model
    if not update:
        return project, choice
    return project.model_copy(update={"config": project.config.model_copy(update=update)}), choice
