"""The GitLab REST client: conditional GETs of single resources, offset and keyset pages on the API's origin only,
rate limits waited out or failing fast, faults retried except for a POST, one write at a time, errors naming the
token's variable and never the token; and where the token, the API and the project come from."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from beflow.config import Config, GitLabTrackerSettings, Project
from beflow.errors import ConfigError
from beflow.trackers import gitlab_api
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import (
    Api,
    GitLabAuthError,
    GitLabError,
    RateLimited,
    Unavailable,
    api_base,
    project_from_remote,
    project_id,
    resolve_token,
    web_host,
)
from tests.support.gitlab import PROJECT, TOKEN, FakeGitLab
from tests.support.gitlab import gitlab as gitlab

BASE = f"/projects/{project_id(PROJECT)}"
SEEN = f"/api/v4{BASE}"


def client(fake: FakeGitLab, **kwargs: Any) -> Api:
    return Api(api_base(fake.url), TOKEN, **kwargs)


def mocked(handler: Any, *, base: str = "https://gitlab.example.com/api/v4", **kwargs: Any) -> Api:
    return Api(base, TOKEN, transport=httpx.MockTransport(handler), **kwargs)


# -- conditional requests ------------------------------------------------------------------------------------------


def test_a_single_resource_is_asked_again_with_its_etag_and_a_304_is_served_from_the_cache(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("One")
    api = client(gitlab)

    first = api.request("GET", f"{BASE}/issues/{issue['iid']}")
    again = api.request("GET", f"{BASE}/issues/{issue['iid']}")

    assert (first.cached, again.cached) == (False, True)
    assert again.data == first.data and again.data["title"] == "One"
    sent = gitlab.requests("GET", f"{SEEN}/issues/1")
    assert [s.status for s in sent] == [200, 304]
    assert sent[0].headers["authorization"] == f"Bearer {TOKEN}" and "if-none-match" not in sent[0].headers
    assert sent[1].headers["if-none-match"] == first.headers["etag"]
    assert api.stats.not_modified == 1

    issue["title"] = "Changed"
    assert api.get(f"{BASE}/issues/1")["title"] == "Changed"  # a changed resource is answered in full


def test_listings_are_never_kept_nor_asked_conditionally(gitlab: FakeGitLab) -> None:
    gitlab.add_issue("One")
    api = client(gitlab)

    api.get(f"{BASE}/issues")
    api.get(f"{BASE}/issues")

    assert [s.status for s in gitlab.requests("GET", f"{SEEN}/issues")] == [200, 200]
    assert all("if-none-match" not in s.headers for s in gitlab.seen)


def test_an_answer_that_is_no_json_is_its_text(gitlab: FakeGitLab) -> None:
    pipeline = gitlab.add_pipeline("a" * 40, "main", "failed", {"test": ("failed", "line 1\nboom\n")})
    api = client(gitlab)
    job = api.get(f"{BASE}/pipelines/{pipeline['id']}/jobs")[0]

    assert api.get(f"{BASE}/jobs/{job['id']}/trace") == "line 1\nboom\n"


# -- pages -----------------------------------------------------------------------------------------------------------


def test_offset_pages_are_followed_by_x_next_page_and_max_pages_stops_early(gitlab: FakeGitLab) -> None:
    for n in range(230):
        gitlab.add_issue(f"Issue {n}", labels=["beflow"])
    api = client(gitlab)

    issues = api.paginate(f"{BASE}/issues", {"labels": "beflow", "sort": "asc"})
    assert [i["iid"] for i in issues] == list(range(1, 231))
    pages = gitlab.requests("GET", f"{SEEN}/issues")
    assert [s.query.get("page") for s in pages] == [None, "2", "3"]
    assert all(s.query["per_page"] == "100" and s.query["labels"] == "beflow" for s in pages)

    first = api.paginate(f"{BASE}/issues", {"sort": "asc"}, max_pages=1)
    assert len(first) == 100 and len(gitlab.requests("GET", f"{SEEN}/issues")) == 4


def test_keyset_pages_are_followed_by_their_link(gitlab: FakeGitLab) -> None:
    gitlab.add_pipeline("a" * 40, "main", "failed", {f"job{n}": ("failed", "log") for n in range(5)})
    api = client(gitlab)

    jobs = api.paginate(f"{BASE}/jobs", {"pagination": "keyset", "per_page": 2, "order_by": "id", "sort": "asc"})

    assert [j["name"] for j in jobs] == [f"job{n}" for n in range(5)]
    cursors = [s.query.get("cursor") for s in gitlab.requests("GET") if s.path.endswith("/jobs")]
    assert cursors[0] is None and all(cursors[1:]) and len(cursors) == 3


@pytest.mark.parametrize(
    "elsewhere",
    [
        "https://evil.example.com/api/v4/projects/7/jobs?cursor=x",
        "http://gitlab.example.com/api/v4/projects/7/jobs?cursor=x",  # (the token would cross in clear)
        "https://gitlab.example.com:8443/api/v4/projects/7/jobs?cursor=x",
        "https://gitlab.example.com/other/api/v4/projects/7/jobs?cursor=x",
        "https://gitlab.example.com/api/v4/../../uploads/x?cursor=x",  # (outside the API, on its host)
        "https://gitlab.example.com/api/v4/%2e%2e/%2E%2E/uploads/x?cursor=x",
        "https://gitlab.example.com/api/v4/..%5c..%5cuploads/x?cursor=x",
        "https://user@gitlab.example.com/api/v4/projects/7/jobs?cursor=x",
    ],
)
def test_a_next_page_on_another_origin_is_never_asked_for(elsewhere: str) -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=[{"id": 1}], headers={"Link": f'<{elsewhere}>; rel="next"'})

    api = mocked(answer)
    with pytest.raises(GitLabError, match=r"the next page is outside https://gitlab\.example\.com/api/v4") as raised:
        api.paginate(f"{BASE}/jobs", {"pagination": "keyset"})
    assert [r.url.host for r in sent] == ["gitlab.example.com"] and len(sent) == 1
    assert TOKEN not in str(raised.value)


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Next-Page": "1"},  # (the page it is)
        {"Link": '<https://gitlab.example.com/api/v4/projects/7/jobs?cursor=same>; rel="next"'},
    ],
)
def test_a_listing_whose_next_page_is_one_it_gave_already_is_an_error_not_a_loop(headers: dict[str, str]) -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(200, json=[{"id": 1}], headers=headers)

    with pytest.raises(GitLabError, match="the listing does not end"):
        mocked(answer).paginate(f"{BASE}/jobs", {"page": 1} if "X-Next-Page" in headers else None)
    assert len(sent) <= 3


def test_a_listing_of_pages_without_end_stops_at_the_most_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitlab_api, "MAX_PAGES", 5)

    def answer(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        return httpx.Response(200, json=[{"id": page}], headers={"X-Next-Page": str(page + 1)})

    with pytest.raises(GitLabError, match="more than 5 pages"):
        mocked(answer).paginate(f"{BASE}/jobs")


def test_a_redirect_is_an_error_and_its_location_never_asked(gitlab: FakeGitLab) -> None:
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return httpx.Response(302, headers={"Location": "https://evil.example.com/api/v4/user"})

    with pytest.raises(GitLabError, match="302") as raised:
        mocked(answer).get("/user")
    assert [r.url.host for r in sent] == ["gitlab.example.com"] and raised.value.status == 302


def test_a_page_that_is_no_list_is_a_malformed_answer(gitlab: FakeGitLab) -> None:
    gitlab.add_issue("One")
    gitlab.tamper("GET", f"{SEEN}/issues", lambda issues: {"issues": issues})
    with pytest.raises(wire.MalformedAnswer, match="not a list"):
        client(gitlab).paginate(f"{BASE}/issues")
    gitlab.violations.clear()  # (the tampered answer strays from the description: that is this test's point)


# -- errors ---------------------------------------------------------------------------------------------------------


def test_a_refused_token_names_its_variable_and_never_the_token(gitlab: FakeGitLab) -> None:
    api = Api(api_base(gitlab.url), "glpat-wrong-token", token_name="MY_GITLAB")

    with pytest.raises(GitLabAuthError) as raised:
        api.get("/user")

    error = raised.value
    assert error.message == "GitLab refused the token in $MY_GITLAB (401 Unauthorized)"
    assert error.fix is not None and "MY_GITLAB" in error.fix and "glab auth login" in error.fix
    assert "glpat-wrong" not in error.message + error.fix
    assert error.exit_code == 2


def test_an_error_says_what_gitlab_said(gitlab: FakeGitLab) -> None:
    api = client(gitlab)
    with pytest.raises(GitLabError) as missing:
        api.get(f"{BASE}/issues/99")
    assert (missing.value.status, missing.value.message) == (404, f"GitLab: GET {BASE}/issues/99: 404 Not found")

    assert api.request("GET", f"{BASE}/issues/99", ok=(404,)).status == 404  # a status the caller expects

    gitlab.open_mr("beflow/1")
    with pytest.raises(GitLabError, match=r"409 .*Another open merge request already exists") as conflict:
        api.request("POST", f"{BASE}/merge_requests", json={"source_branch": "beflow/1", "target_branch": "main",
                                                             "title": "again"})  # fmt: skip
    assert conflict.value.status == 409

    gitlab.fail(400, body={"error": "labels is invalid"})
    with pytest.raises(GitLabError, match="400 labels is invalid"):
        api.get(f"{BASE}/labels")


def test_what_an_error_answer_says_is_quoted_short_and_without_its_control_characters() -> None:
    said = "\x1b]52;c;aGk=\x07 evil" + "y" * 100_000
    api = mocked(lambda request: httpx.Response(400, json={"message": {"title": [said]}}))

    with pytest.raises(GitLabError) as raised:
        api.get("/user")

    assert len(str(raised.value)) < 400 and "\x1b" not in str(raised.value) and "\x07" not in str(raised.value)
    assert "GitLab: GET /user: 400" in str(raised.value)


# -- faults ---------------------------------------------------------------------------------------------------------


def test_a_read_or_an_edit_is_tried_again_through_a_short_5xx_storm(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("One")
    api = client(gitlab)

    gitlab.fail(502, times=2, only="GET")
    assert api.get(f"{BASE}/issues/{issue['iid']}")["title"] == "One"
    gitlab.fail(503, times=2, only="PUT")
    assert api.request("PUT", f"{BASE}/issues/1", json={"title": "Two"}).data["title"] == "Two"
    assert [s.status for s in gitlab.requests("PUT")] == [503, 503, 200]

    gitlab.fail(502, times=3, only="GET")
    with pytest.raises(Unavailable, match="502") as storm:
        api.get(f"{BASE}/issues/1")
    assert storm.value.status == 502 and "GitLab is having trouble" in (storm.value.fix or "")


def test_a_post_whose_answer_was_lost_is_not_sent_again_unless_it_is_harmless(gitlab: FakeGitLab) -> None:
    issue = gitlab.add_issue("One")
    api = client(gitlab)
    notes = f"{BASE}/issues/{issue['iid']}/notes"

    gitlab.fail(502, only="POST", after=True)
    with pytest.raises(Unavailable):
        api.request("POST", notes, json={"body": "once"})
    assert [n["body"] for n in api.get(notes)] == ["once"]  # it was done: sending it again would say it twice

    gitlab.fail(502, only="POST")
    api.request("POST", notes, json={"body": "harmless"}, retry=True)
    assert [s.status for s in gitlab.requests("POST")] == [502, 502, 201]


def test_no_answer_is_unavailable_naming_the_instance_and_never_the_token() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    api = mocked(answer)
    with pytest.raises(Unavailable, match=r"GitLab \(https://gitlab.example.com/api/v4\) does not answer") as raised:
        api.request("PUT", "/projects/1/issues/1", json={})
    assert "tracker.url" in (raised.value.fix or "") and TOKEN not in str(raised.value)


def test_a_deadline_bounds_every_request_of_its_thread(gitlab: FakeGitLab) -> None:
    gitlab.add_issue("One")
    api = client(gitlab)

    with api.deadline(time.monotonic() - 1), pytest.raises(Unavailable, match="no answer in the time the lease had"):
        api.get(f"{BASE}/issues/1")
    assert gitlab.seen == []  # out of time: nothing is sent

    gitlab.fail(502, times=3)
    with api.deadline(time.monotonic() + 0.6), pytest.raises(Unavailable):
        api.get(f"{BASE}/issues/1")
    assert len(gitlab.seen) == 1  # no time left to wait before another try: it was not made
    assert api.get(f"{BASE}/issues/1")["title"] == "One"  # (outside the block, no deadline)


def test_writes_go_one_at_a_time_and_reads_do_not_wait_for_each_other() -> None:
    inside, most, reads = [0], [0], threading.Barrier(2, timeout=10)
    lock = threading.Lock()

    def answer(request: httpx.Request) -> httpx.Response:
        if request.method == "GET":
            reads.wait()  # both reads are in flight at once, or this times out
            return httpx.Response(200, json={"id": 1})
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        with lock:
            inside[0] -= 1
        return httpx.Response(200, json={"id": 1})

    api = mocked(answer)
    threads = [threading.Thread(target=api.request, args=("PUT", f"/x/{n}")) for n in range(4)]
    threads += [threading.Thread(target=api.get, args=(f"/y/{n}",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == [1]
    assert api.stats.by_method == {"PUT": 4, "GET": 2} and api.stats.requests == 6


# -- rate limits ------------------------------------------------------------------------------------------------------


def test_a_short_retry_after_is_waited_out_in_line(gitlab: FakeGitLab) -> None:
    gitlab.add_issue("One")
    api = client(gitlab, inline_wait=5.0)
    gitlab.fail(429, headers={"Retry-After": "1"}, body={"message": "Retry later"})

    assert api.get(f"{BASE}/issues/1")["title"] == "One"
    assert [s.status for s in gitlab.seen] == [429, 200]
    assert api.stats.rate_limited == 1


def test_a_spent_window_closes_the_gate_and_nothing_is_sent_until_gitlab_allows_it(gitlab: FakeGitLab) -> None:
    gitlab.add_issue("One")
    api = client(gitlab)
    gitlab.rate_remaining = 0  # GitLab answers 429 with Retry-After: 60

    with pytest.raises(RateLimited, match=r"GitLab asked beflow to slow down \(its rate limit\); waiting 60 s") as hit:
        api.get(f"{BASE}/issues/1")
    assert hit.value.until == pytest.approx(time.time() + 60, abs=10)
    assert "when GitLab allows it" in (hit.value.fix or "")
    sent = len(gitlab.seen)
    with pytest.raises(RateLimited):
        api.request("PUT", f"{BASE}/issues/1", json={"title": "x"})
    assert len(gitlab.seen) == sent  # the gate is closed
    assert api.stats.remaining == 0 and api.stats.rate_limited == 1


def test_a_429_without_retry_after_waits_for_the_reset_on_gitlab_s_clock() -> None:
    # GitLab's clock runs an hour ahead of this machine's: its reset is read on its own clock.
    ahead = time.time() + 3600
    reset = int(ahead) + 600

    def answer(request: httpx.Request) -> httpx.Response:
        date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(ahead))
        headers = {"Date": date, "RateLimit-Remaining": "0", "RateLimit-Reset": str(reset)}
        return httpx.Response(429, json={"message": "Retry later"}, headers=headers)

    api = mocked(answer)
    with pytest.raises(RateLimited) as hit:
        api.get("/user")
    assert hit.value.until == pytest.approx(time.time() + 600, abs=10)
    assert api.now() == pytest.approx(time.time() + 3600, abs=10)
    assert (api.stats.remaining, api.stats.reset) == (0, float(reset))


@pytest.mark.parametrize(
    "headers",
    [{"Retry-After": "99999999999999999999"}, {"RateLimit-Remaining": "0", "RateLimit-Reset": "99999999999999999999"}],
)
def test_an_absurd_wait_closes_the_gate_for_an_hour_at_most(headers: dict[str, str]) -> None:
    api = mocked(lambda request: httpx.Response(429, json={"message": "Retry later"}, headers=headers))

    with pytest.raises(RateLimited) as hit:
        api.get("/user")

    assert hit.value.until == pytest.approx(time.time() + 3600, abs=10)
    assert "Run the command again after" in (hit.value.fix or "")


def test_a_reset_in_the_past_is_tried_again_in_line_and_then_fails_as_a_rate_limit() -> None:
    sent: list[int] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(1)
        return httpx.Response(429, json={"message": "x"}, headers={"RateLimit-Remaining": "0", "RateLimit-Reset": "5"})

    with pytest.raises(RateLimited):
        mocked(answer).get("/user")
    assert len(sent) == 4


def test_gitlabs_clock_is_the_median_of_the_last_answers_one_far_off_moves_it_not() -> None:
    dates = [0.0, 10 * 365 * 86400.0, 0.0, -10 * 365 * 86400.0, 0.0, 3600.0, 3600.0, 3600.0]

    def answer(request: httpx.Request) -> httpx.Response:
        date = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + dates.pop(0)))
        return httpx.Response(200, json={"id": 1}, headers={"Date": date})

    api = mocked(answer)
    seen = []
    for _ in range(8):
        api.get("/user")
        seen.append(round((api.now() - time.time()) / 60))
    assert seen == [0, 0, 0, 0, 0, 0, 0, 60]  # (a clock that moved for good is followed, after a few answers)


# -- the token, the API, the project -------------------------------------------------------------------------------


def settings(**fields: Any) -> GitLabTrackerSettings:
    return GitLabTrackerSettings.model_validate({"kind": "gitlab", "url": "https://gitlab.example.com", **fields})


def test_the_token_is_its_variable_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_GITLAB", "  glpat-from-env\n")
    assert resolve_token(settings(token_env="MY_GITLAB")) == "glpat-from-env"


def test_the_token_is_else_glab_s_for_the_instance_s_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    glab = tmp_path / "glab"
    glab.write_text(
        '#!/bin/sh\nif [ "$*" = "config get token --host gitlab.example.com" ]; then echo glpat-glab; exit 0; fi\n'
        "exit 1\n"
    )
    glab.chmod(0o755)
    monkeypatch.delenv("GITLAB_TOKEN", raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")

    assert resolve_token(settings()) == "glpat-glab"
    with pytest.raises(GitLabAuthError, match=r"code_host: no GitLab token: \$GITLAB_TOKEN is not set, and glab has"):
        resolve_token(settings(url="https://other.example.com"), "code_host")


def test_no_token_anywhere_names_the_variable_and_glab(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GITLAB_TOKEN", "")
    monkeypatch.setenv("PATH", "/nonexistent")

    with pytest.raises(GitLabAuthError) as raised:
        resolve_token(settings())
    assert raised.value.message == (
        "tracker: no GitLab token: $GITLAB_TOKEN is not set, and the GitLab CLI (glab) is not installed"
    )
    assert "export GITLAB_TOKEN=" in (raised.value.fix or "") and "glab auth login" in (raised.value.fix or "")


def test_where_the_api_and_the_project_are() -> None:
    assert api_base("https://gitlab.com") == "https://gitlab.com/api/v4"
    assert api_base("https://example.com/gitlab/") == "https://example.com/gitlab/api/v4"
    assert project_id("acme/widgets") == "acme%2Fwidgets"
    assert project_id("acme/tools/my.widgets") == "acme%2Ftools%2Fmy.widgets"
    assert web_host("https://GitLab.Example.com:8443/gitlab") == "gitlab.example.com"


def checkout(tmp_path: Path, origin: str | None) -> Project:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    if origin is not None:
        subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", origin], check=True)
    return Project(config=Config(), config_path=tmp_path / ".beflow.json", directory=tmp_path)


@pytest.mark.parametrize(
    ("origin", "url", "expected"),
    [
        ("https://gitlab.example.com/acme/widgets.git", "https://gitlab.example.com", "acme/widgets"),
        ("https://ci:x@gitlab.example.com/acme/widgets", "https://gitlab.example.com", "acme/widgets"),
        ("https://gitlab.example.com:8443/acme/widgets/", "https://gitlab.example.com:8443", "acme/widgets"),
        ("https://example.com/gitlab/acme/widgets.git", "https://example.com/gitlab", "acme/widgets"),
        ("git@gitlab.example.com:acme/tools/widgets.git", "https://gitlab.example.com", "acme/tools/widgets"),
        ("gitlab.example.com:acme/widgets", "https://gitlab.example.com", "acme/widgets"),
        ("ssh://git@gitlab.example.com:2222/acme/a/b/widgets.git", "https://gitlab.example.com", "acme/a/b/widgets"),
        ("git@gitlab.com:acme/widgets.git", "https://gitlab.com", "acme/widgets"),
    ],
)
def test_the_project_is_read_from_origin_on_the_instance(tmp_path: Path, origin: str, url: str, expected: str) -> None:
    assert project_from_remote(checkout(tmp_path, origin), url) == expected


@pytest.mark.parametrize(
    ("origin", "said"),
    [
        ("https://github.com/acme/widgets.git", "origin is https://github.com/acme/widgets.git"),
        ("git@gitlab.com:acme/widgets.git", "origin is git@gitlab.com:acme/widgets.git"),
        ("https://gitlab.example.com/widgets.git", "origin is https://gitlab.example.com/widgets.git"),
        ("https://gitlab.example.com/acme/../widgets", "origin is https://gitlab.example.com/acme/../widgets"),
        (None, "the checkout has no origin remote"),
    ],
)
def test_an_origin_elsewhere_is_an_error_naming_the_setting(tmp_path: Path, origin: str | None, said: str) -> None:
    with pytest.raises(ConfigError) as raised:
        project_from_remote(checkout(tmp_path, origin), "https://gitlab.example.com", "code_host.project")
    assert raised.value.message == (
        f"{tmp_path / '.beflow.json'}: code_host.project: not set, and {said}, which is not a project on "
        "gitlab.example.com"
    )
    assert raised.value.fix == 'Set "project": "group/name" in the code_host settings.'


# -- the end of a long answer ----------------------------------------------------------------------------------------


def test_the_tail_of_an_answer_is_its_last_bytes_and_an_error_is_the_forges_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/jobs/1/trace"):
            return httpx.Response(200, content=iter([b"a" * 1000, b"b" * 1000, b"the end"]))
        if request.url.path.endswith("/jobs/2/trace"):
            return httpx.Response(429, headers={"Retry-After": "600"})
        return httpx.Response(404, content=iter([b'{"message": "404 Not found"}', b" " * 10_000_000]))

    api = mocked(handler)

    assert api.tail(f"{BASE}/jobs/1/trace", 10) == b"bbbthe end"
    with pytest.raises(GitLabError) as missing:
        api.tail(f"{BASE}/jobs/3/trace", 10)
    assert missing.value.status == 404 and TOKEN not in str(missing.value)
    with pytest.raises(RateLimited):
        api.tail(f"{BASE}/jobs/2/trace", 10)
