"""The test project on the fake GitLab: its issues there, its ``origin`` the project's git repository the fake serves
over HTTP, the token in ``$GITLAB_TOKEN``; and what GitLab would act on in a text beflow wrote there."""

from __future__ import annotations

import re
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
    served = fake.serve_git(project.directory)
    git(project.directory, "remote", "add", "origin", fake.git_url)
    return served


def branch_on_gitlab(fake: FakeGitLab, branch: str) -> str:
    """The commit ``branch`` points at in the project's repository on the fake GitLab."""
    return git(fake.repository, "rev-parse", f"refs/heads/{branch}").strip()


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


def outside_code(markdown: str) -> str:
    """``markdown`` without its fenced blocks and inline code (which GitLab neither links, mentions nor acts on)."""
    text = re.sub(r"^(`{3,}|~{3,})[^\n]*\n.*?^\1[`~]*[ \t]*$", "", markdown, flags=re.S | re.M)
    return re.sub(r"(`+)(?!`).+?(?<!`)\1(?!`)", "", text)


def acted_on(markdown: str) -> list[str]:
    """What GitLab would act on in ``markdown``: quick actions (a line starting with ``/command``, in a quote too),
    closing keywords with a reference, mentions (``@all`` and groups included), and references to issues and merge
    requests — all outside code."""
    text = outside_code(markdown)
    actions = re.findall(r"(?m)^[ \t>]*(/[a-z_]+)", text)
    keywords = re.findall(r"(?i)\b(?:close[sd]?|closing|fix(?:e[sd]|ing)?|resolv(?:e[sd]?|ing)|implement(?:s|ed|ing)?)"
                          r":?\s+[\w./-]*[#!]\d+", text)  # fmt: skip
    mentions = re.findall(r"(?<![\w`/])@[\w.-]+(?:/[\w.-]+)*", text)
    references = re.findall(r"(?<![\w`&])(?:[\w.-]+/[\w.-]+)?[#!]\d+", text)
    return actions + keywords + mentions + references
