"""GitLab as a code host, against the fake GitLab (its API checked against GitLab's description, the project's git
served over smart HTTP on the instance's own port): the push with the token as the password of ``oauth2``, for the
instance's host alone; one merge request per branch, opened once whatever answers are lost, updated in place; titles
and descriptions that act on nothing but beflow's own closing line."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from beflow.app import CODE_HOSTS, open_code_host, open_tracker
from beflow.codehosts.gitlab import GitLabCodeHost
from beflow.config import GitLabCodeHostSettings, load_project
from beflow.errors import BeflowError
from beflow.repository.remote import PushAuth
from beflow.trackers.base import ChecksAccess
from beflow.trackers.gitlab import GitLabTracker
from beflow.trackers.gitlab_api import Api, api_base
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab
from tests.support.gitlab_markdown import acted_on
from tests.support.projects import AutoProject

BRANCH = "beflow/1"
#: The project's API path, as requests carry it.
BASE = f"/api/v4/projects/{PROJECT.replace('/', '%2F')}"


def run_git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def host(gitlab: FakeGitLab) -> Iterator[GitLabCodeHost]:
    """The code host of the fake's project, ``origin`` its git (served once a test asks)."""
    api = Api(api_base(gitlab.url), TOKEN)
    settings = GitLabCodeHostSettings(kind="gitlab", project=PROJECT, url=gitlab.url)
    yield GitLabCodeHost(settings, PROJECT, api, gitlab.git_url)
    api.close()


@pytest.fixture
def served(gitlab: FakeGitLab, repo: Path, tmp_path: Path) -> Path:
    """The fake serves ``repo``'s history as the project's git; the bare repository it serves."""
    bare = gitlab.serve_git(repo, tmp_path / "served")
    run_git(repo, "branch", BRANCH)
    return bare


def test_the_branch_is_pushed_with_the_token_as_the_password_of_oauth2(
    host: GitLabCodeHost, gitlab: FakeGitLab, repo: Path, served: Path
) -> None:
    commit = run_git(repo, "rev-parse", "HEAD")

    assert host.push(repo, BRANCH) == commit

    assert run_git(served, "rev-parse", f"refs/heads/{BRANCH}") == commit
    assert gitlab.git is not None
    assert {s.user for s in gitlab.git.seen if s.status == 200} == {"oauth2"}
    assert TOKEN not in run_git(repo, "config", "--list")


def test_a_branch_pushed_elsewhere_is_fetched_with_the_same_credential(
    host: GitLabCodeHost, gitlab: FakeGitLab, repo: Path, served: Path
) -> None:
    theirs = run_git(served, "commit-tree", "HEAD^{tree}", "-p", "HEAD", "-m", "pushed elsewhere")
    run_git(served, "update-ref", f"refs/heads/{BRANCH}", theirs)

    assert host.fetch(repo, BRANCH) == theirs
    assert host.fetch(repo, "beflow/none") is None
    assert run_git(repo, "cat-file", "-t", theirs) == "commit"


def test_a_wrong_token_fails_the_push(gitlab: FakeGitLab, repo: Path, served: Path) -> None:
    api = Api(api_base(gitlab.url), "glpat-wrong")
    settings = GitLabCodeHostSettings(kind="gitlab", project=PROJECT, url=gitlab.url)
    with pytest.raises(BeflowError) as refused:
        GitLabCodeHost(settings, PROJECT, api, gitlab.git_url).push(repo, BRANCH)
    assert "glpat-wrong" not in str(refused.value)
    assert subprocess.run(["git", "rev-parse", "--verify", "-q", f"refs/heads/{BRANCH}"], cwd=served).returncode != 0


def test_git_gets_the_token_for_exactly_the_instances_scheme_host_and_port(
    host: GitLabCodeHost, gitlab: FakeGitLab
) -> None:
    netloc = gitlab.url.removeprefix("http://")
    assert host.git_credentials(gitlab.git_url) == PushAuth(TOKEN, netloc, "http", "oauth2")
    assert host.git_credentials(f"http://oauth2:other@{netloc}/{PROJECT}.git") == PushAuth(
        TOKEN, netloc, "http", "oauth2"
    )
    host_only, port = netloc.split(":")
    for other in (
        f"https://{netloc}/{PROJECT}.git",  # another scheme than the instance's
        f"http://{host_only}:{int(port) + 1}/{PROJECT}.git",
        f"http://localhost:{port}/{PROJECT}.git",
        f"git@{host_only}:{PROJECT}.git",
        f"ssh://git@{host_only}/{PROJECT}.git",
        "/srv/git/widgets.git",
        None,
    ):
        assert host.git_credentials(other) is None, other


def test_on_an_https_instance_only_https_on_its_port_gets_the_token() -> None:
    api = Api("https://gitlab.example.com/api/v4", TOKEN)
    settings = GitLabCodeHostSettings(kind="gitlab", project=PROJECT, url="https://gitlab.example.com")
    host = GitLabCodeHost(settings, PROJECT, api, None)
    assert host.git_credentials(f"https://gitlab.example.com/{PROJECT}.git") == PushAuth(
        TOKEN, "gitlab.example.com", "https", "oauth2"
    )
    assert host.git_credentials(f"https://gitlab.example.com:443/{PROJECT}.git") is not None
    for other in (f"http://gitlab.example.com/{PROJECT}.git", f"https://gitlab.example.com:8443/{PROJECT}.git"):
        assert host.git_credentials(other) is None, other
    api.close()


def test_the_push_goes_only_to_the_code_hosts_project(gitlab: FakeGitLab, repo: Path, served: Path) -> None:
    api = Api(api_base(gitlab.url), TOKEN)
    settings = GitLabCodeHostSettings(kind="gitlab", project=PROJECT, url=gitlab.url)
    elsewhere = GitLabCodeHost(settings, PROJECT, api, f"{gitlab.url}/acme/other.git")
    with pytest.raises(BeflowError, match="beflow pushes only to the code host's project"):
        elsewhere.push(repo, BRANCH)
    with pytest.raises(BeflowError, match="no origin remote"):
        GitLabCodeHost(settings, PROJECT, api, None).push(repo, BRANCH)
    assert gitlab.git is not None and gitlab.git.seen == []
    api.close()


# -- merge requests ----------------------------------------------------------------------------------------------------


def test_one_merge_request_is_opened_to_the_default_branch_and_updated_in_place(
    host: GitLabCodeHost, gitlab: FakeGitLab
) -> None:
    opened = host.propose(BRANCH, "Add notes", "First round.", draft=True)

    (mr,) = gitlab.mrs.values()
    assert opened.opened and opened.url == mr["web_url"]
    assert (mr["source_branch"], mr["target_branch"], mr["title"], mr["draft"]) == (
        BRANCH,
        "main",
        "Draft: Add notes",
        True,
    )
    assert host.find(BRANCH) is not None and host.find("beflow/2") is None

    again = host.propose(BRANCH, "Add notes", "Second round.", draft=True)

    assert not again.opened and again.url == mr["web_url"] and len(gitlab.mrs) == 1
    assert mr["description"] == "Second round." and mr["title"] == "Draft: Add notes"
    assert len(gitlab.requests("PUT", f"{BASE}/merge_requests/")) == 1


def test_an_update_keeps_the_draft_state_people_gave_it(host: GitLabCodeHost, gitlab: FakeGitLab) -> None:
    host.propose(BRANCH, "Add notes", "First.", draft=True)
    (mr,) = gitlab.mrs.values()
    mr["title"], mr["draft"] = "Add notes", False  # marked ready by a person

    host.propose(BRANCH, "Add notes", "Second.", draft=True)

    assert (mr["title"], mr["draft"]) == ("Add notes", False)
    host.propose("beflow/2", "Other", "Body.", draft=False)
    assert gitlab.mrs[2]["title"] == "Other"


def test_a_lost_answer_to_the_opening_is_found_not_done_twice(host: GitLabCodeHost, gitlab: FakeGitLab) -> None:
    gitlab.fail(502, only="POST", prefix=f"{BASE}/merge_requests", after=True)

    opened = host.propose(BRANCH, "Add notes", "Body.", draft=False)

    assert opened.opened and len(gitlab.mrs) == 1
    assert opened.url == gitlab.mrs[1]["web_url"]


def test_a_merge_request_from_a_fork_with_the_same_branch_name_is_left_as_its_author_wrote_it(
    host: GitLabCodeHost, gitlab: FakeGitLab
) -> None:
    theirs = gitlab.fork_mr(BRANCH, "Their change", description="Theirs.")

    assert host.find(BRANCH) is None
    opened = host.propose(BRANCH, "Ours", "Body.", draft=False)

    assert opened.opened and opened.url.endswith(f"/merge_requests/{theirs + 1}")
    assert (gitlab.mrs[theirs]["title"], gitlab.mrs[theirs]["description"]) == ("Their change", "Theirs.")
    assert not gitlab.requests("PUT", f"{BASE}/merge_requests/{theirs}")
    again = host.propose(BRANCH, "Ours", "Second.", draft=False)
    assert not again.opened and gitlab.mrs[theirs + 1]["description"] == "Second."


def test_one_opened_meanwhile_elsewhere_is_updated(host: GitLabCodeHost, gitlab: FakeGitLab) -> None:
    gitlab.open_mr(BRANCH, "Theirs")
    # Not seen when looked for (an answer from just before), then a 409 for the opening: found, and updated.

    def not_yet_once(data: object) -> object:
        gitlab.tampers.clear()
        return []

    gitlab.tamper("GET", f"{BASE}/merge_requests", not_yet_once)

    result = host.propose(BRANCH, "Ours", "Body.", draft=False)

    assert not result.opened and len(gitlab.mrs) == 1 and gitlab.mrs[1]["title"] == "Ours"
    assert [s.status for s in gitlab.requests("POST")] == [409]


def test_titles_and_descriptions_act_on_nothing_but_beflows_closing_line(
    host: GitLabCodeHost, gitlab: FakeGitLab
) -> None:
    title = "Fix #2 for @alice /close"
    body = (
        "beflow run: **succeeded** — fixes !4 ~bug\n\n```\n/merge\n```\n/approve\n\nCloses #1 (https://x.example/i/1)"
    )

    host.propose(BRANCH, title, body, draft=False)

    (mr,) = gitlab.mrs.values()
    assert acted_on(title) != [] and acted_on(mr["title"]) == []
    assert acted_on(mr["description"]) == ["Closes #1"]
    assert mr["description"].replace("\u2060", "") == body
    host.propose(BRANCH, title, "Closes #1\nand more", draft=False)  # not the last line: not beflow's
    assert acted_on(mr["description"]) == []


def test_the_issues_link_on_the_last_line_is_kept_whole(host: GitLabCodeHost, gitlab: FakeGitLab) -> None:
    link = f"https://gitlab.example.com/{PROJECT}/-/issues/1"
    host.propose(BRANCH, "Add notes", f"see {link}\n\nIssue: {link}", draft=False)
    (mr,) = gitlab.mrs.values()
    shown, last = mr["description"].rsplit("\n", 1)
    assert last == f"Issue: {link}" and "\u2060" in shown  # beflow's own link works; the agent's act on nothing


# -- opening -------------------------------------------------------------------------------------------------------


def test_the_registry_opens_a_gitlab_code_host_for_another_trackers_issues(
    auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "gitlab" in CODE_HOSTS
    monkeypatch.setenv("HOSTPAT", TOKEN)
    auto_project.configure(
        code_host={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    project = load_project(auto_project.config_path)

    opened = open_code_host(project, open_tracker(project))

    assert isinstance(opened, GitLabCodeHost)
    assert (opened.project, opened.api.base_url, opened.held_secrets()) == (PROJECT, api_base(gitlab.url), [TOKEN])
    assert opened.description == f"GitLab project {PROJECT}"
    assert isinstance(opened, ChecksAccess) and all(finding.ok for finding in opened.access_checks())


# -- a run -----------------------------------------------------------------------------------------------------------


@pytest.fixture
def local_on_gitlab(
    auto_project: AutoProject, gitlab: FakeGitLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AutoProject:
    """The test project with its local tracker, GitLab as its code host (its token in a variable of its own), the
    fake's git of the project as ``origin`` and merge requests on."""
    monkeypatch.setenv("HOSTPAT", TOKEN)  # a name no drop list matches: withheld as the code host's
    monkeypatch.delenv("GITLAB_TOKEN", raising=False)
    gitlab.serve_git(auto_project.directory, tmp_path / "served")
    run_git(auto_project.directory, "remote", "add", "origin", gitlab.git_url)
    auto_project.configure(
        code_host={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "token_env": "HOSTPAT"},
        after_run={"pull_request": True},
    )
    return auto_project


@pytest.mark.slow
def test_a_local_issue_is_proposed_as_a_gitlab_merge_request(
    local_on_gitlab: AutoProject, gitlab: FakeGitLab, tmp_path: Path, beflow
) -> None:
    key = local_on_gitlab.new_issue("write notes.txt first", "say Fixes #3 /close @alice", title="Add notes /merge")

    done = beflow("--auto", key)

    assert done.exit_code == 0, done.stderr
    (mr,) = gitlab.mrs.values()
    record = local_on_gitlab.only_record()
    assert (mr["source_branch"], mr["target_branch"], mr["draft"]) == (f"beflow/{key}", "main", True)
    assert mr["title"].replace("\u2060", "") == "Draft: Add notes /merge" and acted_on(mr["title"]) == []
    assert "**succeeded**" in mr["description"] and "notes.txt" in mr["description"]
    assert acted_on(mr["description"]) == [] and "Closes" not in mr["description"]  # closes_issue is off
    assert run_git(tmp_path / "served" / f"{PROJECT}.git", "rev-parse", f"refs/heads/beflow/{key}") == record.commit
    assert record.pull_request == mr["web_url"]
    assert gitlab.git is not None and {s.user for s in gitlab.git.seen if s.status == 200} == {"oauth2"}

    seen = done.stdout + done.stderr
    assert TOKEN not in seen
    roots = [local_on_gitlab.directory, tmp_path / "served"]
    assert [p for root in roots for p in root.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()] == []


def test_with_the_gitlab_tracker_the_code_host_is_its_project_and_shares_its_client(
    auto_project: AutoProject, gitlab: FakeGitLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", TOKEN)
    auto_project.configure(
        tracker={"kind": "gitlab", "project": PROJECT, "url": gitlab.url}, after_run={"pull_request": True}
    )
    project = load_project(auto_project.config_path)
    tracker = open_tracker(project)

    opened = open_code_host(project, tracker)

    assert isinstance(opened, GitLabCodeHost) and isinstance(tracker, GitLabTracker)
    assert opened.api is tracker.api and opened.project == PROJECT
    monkeypatch.setenv("OTHER_TOKEN", TOKEN)
    auto_project.configure(
        code_host={"kind": "gitlab", "project": PROJECT, "url": gitlab.url, "token_env": "OTHER_TOKEN"}
    )
    project = load_project(auto_project.config_path)
    apart = open_code_host(project, open_tracker(project))
    assert isinstance(apart, GitLabCodeHost) and apart.api is not tracker.api  # another token: a client of its own


def test_a_branch_is_linked_on_the_instance(host: GitLabCodeHost, gitlab: FakeGitLab) -> None:
    assert host.branch_url("beflow-attempts/7 x/c2") == f"{gitlab.url}/{PROJECT}/-/tree/beflow-attempts/7%20x/c2"
