"""What ``beflow doctor`` finds of GitLab: the token and its scopes, the project, the right to push; each wrong one
named with the setting to change, and never the token."""

from __future__ import annotations

from typing import Any

import pytest

from beflow.config import GitLabTrackerSettings, load_project
from beflow.doctor import check_access, check_tracker
from beflow.trackers.base import Finding
from beflow.trackers.gitlab_access import access_checks
from beflow.trackers.gitlab_api import Api, api_base
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.projects import AutoProject

SEEN = "/api/v4/projects/acme%2Fwidgets"


def checks(fake: FakeGitLab, project: str = PROJECT, token: str = TOKEN, what: str = "tracker") -> list[Finding]:
    settings = GitLabTrackerSettings(kind="gitlab", project=project, url=fake.url)
    return access_checks(Api(api_base(fake.url), token), project, settings, what)


def test_a_developer_s_api_token_on_a_visible_project_is_all_well(gitlab: FakeGitLab) -> None:
    found = checks(gitlab)

    assert found == [
        Finding("gitlab", True, "the token in $GITLAB_TOKEN (@beflow-bot) has the api scope"),
        Finding("gitlab", True, f"project {PROJECT} on {gitlab.url}"),
        Finding("gitlab", True, f"@beflow-bot may push to {PROJECT} (Maintainer)"),
    ]
    assert len(gitlab.requests("GET", f"{SEEN}/members/all/")) == 1


def test_a_token_without_the_api_scope_is_named_with_what_it_has(gitlab: FakeGitLab) -> None:
    gitlab.tokens["glpat-read"] = (gitlab.bot["id"], ["read_api", "read_repository"])

    token = checks(gitlab, token="glpat-read")[0]

    assert not token.ok
    assert (
        token.detail
        == "the token in $GITLAB_TOKEN (@beflow-bot) lacks the api scope (it has: read_api, read_repository)"
    )
    assert token.fix is not None and "with the api scope" in token.fix and "tracker.token_env" in token.fix


def test_a_refused_token_is_the_only_finding_and_never_shown(gitlab: FakeGitLab) -> None:
    found = checks(gitlab, token="glpat-wrong")

    assert [(f.ok, f.detail) for f in found] == [
        (False, "GitLab refused the token in $GITLAB_TOKEN (401 Unauthorized)")
    ]
    assert "glpat-wrong" not in repr(found)


def test_a_token_that_is_no_personal_access_token_still_works_but_its_scopes_are_unknown(gitlab: FakeGitLab) -> None:
    gitlab.fail(404, only="GET", prefix="/api/v4/personal_access_tokens/self", body={"message": "404 Not Found"})

    token = checks(gitlab)[0]

    assert token.ok and token.warning
    assert token.detail == (
        "the token in $GITLAB_TOKEN works (@beflow-bot); its scopes could not be read (not a personal access token)"
    )


def test_a_revoked_token_says_so(gitlab: FakeGitLab) -> None:
    gitlab.tamper("GET", "/api/v4/personal_access_tokens/self", lambda t: {**t, "revoked": True, "active": False})

    found = checks(gitlab)

    assert (found[0].ok, found[0].detail) == (False, "the token in $GITLAB_TOKEN (@beflow-bot) is revoked")
    assert len(found) == 2  # the project is still looked at; whose right to push is not known


def test_a_project_the_token_cannot_see_names_the_setting(gitlab: FakeGitLab) -> None:
    found = checks(gitlab, project="acme/gadgets", what="code_host")

    assert len(found) == 2 and found[0].ok
    assert not found[1].ok
    assert found[1].detail == (
        f"code_host.project: acme/gadgets is not a project the token in $GITLAB_TOKEN can see on {gitlab.url} (404)"
    )
    assert found[1].fix is not None and 'Check "project" in the code_host settings' in found[1].fix


@pytest.mark.parametrize(
    ("level", "ok", "detail"),
    [
        (30, True, "@beflow-bot may push to acme/widgets (Developer)"),
        (20, False, "@beflow-bot is Reporter in acme/widgets: it may not push"),
        (None, False, "@beflow-bot is no member of acme/widgets: it may not push"),
    ],
)
def test_the_token_s_user_may_push_as_a_developer_or_above(
    gitlab: FakeGitLab, level: int | None, ok: bool, detail: str
) -> None:
    if level is None:
        del gitlab.members[gitlab.bot["id"]]
    else:
        gitlab.members[gitlab.bot["id"]] = level

    push = checks(gitlab)[-1]

    assert (push.ok, push.detail) == (ok, detail)
    assert (
        ok
        or push.fix
        == "Give @beflow-bot the Developer role (or higher) in acme/widgets: beflow pushes its runs' branches."
    )


@pytest.mark.parametrize(
    ("permissions", "ok"),
    [
        ({"project_access": {"access_level": 30, "notification_level": 3}, "group_access": None}, True),
        ({"project_access": None, "group_access": {"access_level": 50, "notification_level": 3}}, True),
        ({"project_access": {"access_level": 10, "notification_level": 3}, "group_access": None}, False),
    ],
)
def test_the_project_s_own_permissions_answer_without_asking_for_the_member(
    gitlab: FakeGitLab, permissions: dict[str, Any], ok: bool
) -> None:
    gitlab.tamper("GET", f"{SEEN}", lambda p: {**p, "permissions": permissions})

    push = checks(gitlab)[-1]

    assert push.ok is ok
    assert gitlab.requests("GET", f"{SEEN}/members/") == []


def test_gitlab_not_answering_is_a_finding_not_a_crash(gitlab: FakeGitLab) -> None:
    gitlab.fail(503, times=3, prefix=f"{SEEN}")

    found = checks(gitlab)

    assert found[0].ok and not found[1].ok
    assert found[1].detail.startswith("GitLab: GET /projects/acme%2Fwidgets: 503")


def test_doctor_shows_what_gitlab_allows_and_init_labels_makes_the_missing_labels(
    auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch, beflow
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url})
    project = load_project(auto_project.config_path)

    tracker = check_tracker(project)
    assert tracker.ok and tracker.warning
    assert tracker.detail.endswith(
        "labels not created yet: beflow, beflow:ready, beflow:in-progress, beflow:blocked, beflow:review, "
        "beflow:failed, beflow:closed"
    )
    assert tracker.fix == "`beflow init --labels` creates them (or beflow does on its first write)."
    assert [(c.name, c.ok, c.detail) for c in check_access(project)] == [
        ("gitlab", True, "the token in $GITLAB_TOKEN (@beflow-bot) has the api scope"),
        ("gitlab", True, f"project {PROJECT} on {gitlab.url}"),
        ("gitlab", True, f"@beflow-bot may push to {PROJECT} (Maintainer)"),
    ]

    made = beflow("init", "--labels")
    assert made.exit_code == 0, made.stderr
    assert made.stdout.startswith("Created the labels beflow, beflow:ready")
    assert f"in GitLab project {PROJECT}" in made.stdout
    assert not check_tracker(project).warning


def test_doctor_says_the_findings_of_a_gitlab_tracker_and_code_host_on_one_project_once(
    auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    # (no code_host: the GitLab tracker's project is the code host, with the tracker's client)
    auto_project.configure(
        tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url}, after_run={"pull_request": True}
    )

    found = check_access(load_project(auto_project.config_path))

    assert [c.detail for c in found] == [
        "the token in $GITLAB_TOKEN (@beflow-bot) has the api scope",
        f"project {PROJECT} on {gitlab.url}",
        f"@beflow-bot may push to {PROJECT} (Maintainer)",
    ]
    assert len(gitlab.requests("GET", "/api/v4/personal_access_tokens/self")) == 2  # both asked, each said once


def test_doctor_asks_a_gitlab_code_host_beside_local_issues(
    auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_GITLAB", TOKEN)
    gitlab.members[gitlab.bot["id"]] = 20
    auto_project.configure(
        code_host={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "token_env": "MY_GITLAB"},
        after_run={"pull_request": True},
    )

    found = check_access(load_project(auto_project.config_path))

    assert [(c.ok, c.detail) for c in found] == [
        (True, "the token in $MY_GITLAB (@beflow-bot) has the api scope"),
        (True, f"project {PROJECT} on {gitlab.url}"),
        (False, f"@beflow-bot is Reporter in {PROJECT}: it may not push"),
    ]
