"""How many candidates an issue gets (beflow.run.attempts.candidates_for): ``--attempts``, the label, the config."""

from __future__ import annotations

from pathlib import Path

import pytest

from beflow.config import Config, Project
from beflow.errors import UsageError
from beflow.records.record import now
from beflow.run.candidates import candidates_for
from beflow.trackers import Issue, Status
from tests.support.projects import git


def project(directory: Path, **attempts: object) -> Project:
    return Project(config=Config.model_validate({"attempts": attempts}), config_path=None, directory=directory)


def issue(*labels: str) -> Issue:
    return Issue(key="7", title="t", status=Status.READY, labels=list(labels), created=now(), updated=now())


def test_asked_then_the_label_then_the_config(repo: Path) -> None:
    assert candidates_for(project(repo), issue(), None) == (1, None)
    assert candidates_for(project(repo, count=2), issue(), None) == (2, None)
    assert candidates_for(project(repo, count=2), issue("attempts:3", "bug"), None) == (3, None)
    assert candidates_for(project(repo, count=2), issue("attempts:3"), 1) == (1, None)
    assert candidates_for(project(repo), issue("attempts:x", "attempts: 3 "), None) == (1, None)


def test_a_label_over_the_max_is_capped_and_said_and_an_asked_number_over_it_refused(repo: Path) -> None:
    count, notice = candidates_for(project(repo, max=3), issue("attempts:9"), None)

    assert count == 3 and notice == "issue 7 asks for 9 candidates; attempts.max is 3, so 3 run"
    with pytest.raises(UsageError, match=r"--attempts 4 is more than attempts.max \(3\)"):
        candidates_for(project(repo, max=3), issue(), 4)


def test_an_issue_whose_branch_exists_gets_one_run_that_continues_it(repo: Path) -> None:
    git(repo, "branch", "beflow/7")

    count, notice = candidates_for(project(repo), issue("attempts:2"), None)

    assert count == 1 and notice == "issue 7 already has its branch beflow/7: one run continues it"
