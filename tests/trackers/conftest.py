"""Fixtures of the tracker tests: the test project with its tracker on the fake GitHub."""

from __future__ import annotations

import pytest

from tests.support.github import TOKEN, FakeGitHub
from tests.support.projects import AutoProject


@pytest.fixture
def gh(auto_project: AutoProject, github: FakeGitHub, monkeypatch: pytest.MonkeyPatch) -> AutoProject:
    """The test project with its tracker on the fake GitHub (a module that needs other leases has its own)."""
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "github", "repo": "octo/hello", "api_url": github.url, "lease": 30})
    return auto_project
