"""The test project on the fake GitLab: its issues there, its ``origin`` the project's git repository the fake serves
over HTTP, the token in ``$GITLAB_TOKEN``; and what the tests read back from the fake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.projects import AutoProject, git

#: The environment a beflow process on the fake GitLab needs (its token, as a user exports it).
ENV = {"GITLAB_TOKEN": TOKEN}

#: GitLab's access levels (members API): Guest and Reporter may not give feedback; Developer and up may.
REPORTER, DEVELOPER, MAINTAINER = 20, 30, 40


def tracker_settings(fake: FakeGitLab, **more: Any) -> dict[str, Any]:
    """``"tracker"`` of a project whose issues are the fake GitLab's project's."""
    return {"kind": "gitlab", "project": PROJECT, "url": fake.url, **more}


def gitlab_origin(project: AutoProject, fake: FakeGitLab) -> Path:
    """The project's repository served by the fake GitLab over HTTP, as the checkout's ``origin``; the bare
    repository the fake serves (where pushes land)."""
    served = fake.serve_git(project.directory, project.directory.parent / "gitlab-git")
    git(project.directory, "remote", "add", "origin", fake.git_url)
    return served


def served(fake: FakeGitLab) -> Path:
    """The bare repository the fake GitLab serves as the project's git."""
    assert fake.git is not None, "the fake GitLab serves no git: call gitlab_origin() first"
    return fake.git.root / f"{PROJECT}.git"


def branch_on_gitlab(fake: FakeGitLab, branch: str) -> str:
    """The commit ``branch`` points at in the project's repository on the fake GitLab."""
    return git(served(fake), "rev-parse", f"refs/heads/{branch}").strip()


@pytest.fixture
def on_gitlab(auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    """The test project with its issues on the fake GitLab, its ``origin`` there and merge requests on."""
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    gitlab_origin(auto_project, gitlab)
    auto_project.configure(tracker=tracker_settings(gitlab, lease=30), after_run={"pull_request": True})
    return auto_project


def notes_of(fake: FakeGitLab, iid: int, kind: str = "Issue") -> list[dict[str, Any]]:
    """Every note on issue (or merge request) ``iid``, oldest first, internal ones included."""
    return [note for thread in fake.discussions.get((kind, iid), []) for note in thread["notes"]]


def public_notes(fake: FakeGitLab, iid: int, kind: str = "Issue") -> list[dict[str, Any]]:
    """The notes on ``iid`` everyone who sees it reads: not internal, not GitLab's own."""
    return [n for n in notes_of(fake, iid, kind) if not n.get("internal") and not n.get("system")]
