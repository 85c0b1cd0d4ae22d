"""The lists of every issue and every run (``/issues``, ``/runs`` and their API), a page at a time, through the
same operations as ``beflow issues list`` and ``beflow runs list``; and the page a request asks for."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from beflow.web import api

#: How the server calls an operation of the registry: its name and its arguments (``Server.call``).
Call = Callable[[str, dict[str, Any]], Any]


def issues(call: Call, status: str | None, page: int, per_page: int) -> api.IssuePage:
    """A page of the project's issues, by key, as ``beflow issues list`` lists them (``issue.list``)."""
    listing = call("issue.list", {"status": status} if status else {})
    total = len(listing.issues)
    shown = listing.issues[(page - 1) * per_page : page * per_page]
    return api.IssuePage(
        issues=[
            api.IssueRow(
                key=i.key,
                title=i.title,
                status=i.status.value,
                priority=i.priority,
                labels=list(i.labels),
                created=i.created.isoformat(),
                updated=i.updated.isoformat(),
            )
            for i in shown
        ],
        status=status,
        page=page,
        per_page=per_page,
        total=total,
        pages=max(1, -(-total // per_page)),
        unreadable=[problem.render() for problem in listing.problems],
    )


def runs(call: Call, issue: str | None, page: int, per_page: int) -> api.RunPage:
    """A page of the project's runs, newest first, as ``beflow runs list`` lists them (``run.list``): one more
    than the page is asked for, to know whether there is a next page."""
    arguments: dict[str, Any] = {"limit": per_page + 1, "offset": (page - 1) * per_page}
    if issue:
        arguments["issue"] = issue
    found = call("run.list", arguments).runs
    return api.RunPage(
        runs=[api.RecentRun.of(r) for r in found[:per_page]],
        issue=issue,
        page=page,
        per_page=per_page,
        next=page + 1 if len(found) > per_page else None,
    )


def paging(query: Mapping[str, str]) -> tuple[int, int]:
    """The page a query asks for (``page``, from 1) and its size (``per_page``, at most api.MAX_PER_PAGE)."""
    page = max(1, number(query.get("page"), 1))
    per_page = min(api.MAX_PER_PAGE, max(1, number(query.get("per_page"), api.PER_PAGE)))
    return page, per_page


def number(text: str | None, default: int) -> int:
    """A number a request gives (in its query, a header): never negative, ``default`` when absent or not one."""
    try:
        return max(0, int(text)) if text is not None else default
    except ValueError:
        return default
