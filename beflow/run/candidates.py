"""How many best-of-N candidates an issue gets (docs/runs.md#best-of-n): ``--attempts``, its label ``attempts:N``,
the config; read without loading the run machinery (a watch counts its lanes with it)."""

from __future__ import annotations

import re

from beflow.config import Attempts, Project
from beflow.errors import UsageError
from beflow.repository import refs
from beflow.trackers import Issue

#: The label that asks for N candidates on one issue.
LABEL = re.compile(r"^attempts:(\d{1,3})$")


def candidates_for(project: Project, issue: Issue, asked: int | None) -> tuple[int, str | None]:
    """How many candidates ``issue`` gets (:func:`asked_for`) and what to say of it; 1 is a plain run, and so is
    the run of an issue whose ``beflow/<key>`` exists (rounds continue that branch)."""
    count, notice = asked_for(project.config.attempts, issue, asked)
    if count > 1 and refs.branch_tip(project.directory, refs.branch_for(issue.key)) is not None:
        why = f"issue {issue.key} already has its branch {refs.branch_for(issue.key)}: one run continues it"
        return 1, f"{notice}; {why}" if notice else why
    return count, notice


def asked_for(settings: Attempts, issue: Issue, asked: int | None) -> tuple[int, str | None]:
    """How many candidates are asked for ``issue`` — ``asked`` (``--attempts``), else its label ``attempts:N``, else
    ``attempts.count`` — and a notice when its label asked for more than ``attempts.max`` (capped there)."""
    if asked is not None and asked > settings.max:
        raise UsageError(f"--attempts {asked} is more than attempts.max ({settings.max})", fix="beflow docs config")
    count, notice = asked, None
    if count is None:
        labelled = [int(m.group(1)) for label in issue.labels if (m := LABEL.match(label.strip()))]
        if labelled:
            count = max(labelled)
            if count > settings.max:
                most = settings.max
                notice = f"issue {issue.key} asks for {count} candidates; attempts.max is {most}, so {most} run"
                count = most
    if count is None:
        count = settings.configured()
    return max(1, count), notice
