"""The dashboard's HTML pages: the live page (``/``, which keeps the token a link brings as a cookie), a run's, an
issue's and the lists of every issue and every run, rendered from the same views as the API
(:mod:`beflow.web.views`) with the templates' filters (:mod:`beflow.web.filters`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from beflow import guardrails
from beflow.ops.reviews import ReviewView
from beflow.records.reviews import PageComment
from beflow.trackers.issue import Status
from beflow.web import api, candidates
from beflow.web.fields import record_fields
from beflow.web.guard import COOKIE
from beflow.web.lists import number, paging

if TYPE_CHECKING:
    from beflow.web.server import Server
    from beflow.web.views import Views


def placed(review: ReviewView) -> tuple[dict[tuple[str, int], list[PageComment]], list[PageComment]]:
    """Where the page shows each comment: under the line it was given on — ``(path, line)``; ``(path, 0)``: atop its
    file — when the diff still shows it; else (the branch moved on, the file is no longer changed), with those on the
    whole change, so that none is lost from sight."""
    shown: set[tuple[str, int]] = set()
    for change in review.diff.files if review.diff is not None else []:
        shown.add((change.path, 0))
        for hunk in change.hunks:
            for line in hunk.lines:
                at = line.old if change.status == "deleted" else line.new
                if at is not None:
                    shown.add((change.path, at))
    by_line: dict[tuple[str, int], list[PageComment]] = {}
    elsewhere: list[PageComment] = []
    for comment in review.comments:
        where = (comment.path, comment.line or 0) if comment.path is not None else None
        if where is not None and where in shown:
            by_line.setdefault(where, []).append(comment)
        else:
            elsewhere.append(comment)
    return by_line, elsewhere


def page_routes(server: Server, views: Views) -> list[Route]:
    """The pages' routes."""

    async def index(request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None:  # the link `beflow watch --http` prints: keep the token as a cookie, drop it from the URL
            if not server.policy.token_ok(token):
                return server.problem(401, "unauthorized", "that token is not this server's")
            response = RedirectResponse("/", status_code=303)
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
            return response

        async def page() -> Response:
            state = await server.off_loop(views.state)
            return server.html("index.html", state=state, now=time.time())

        return await server.answer(page)

    async def run_page(request: Request) -> Response:
        run_id = request.path_params["id"]
        offset = number(request.query_params.get("offset"), 0)

        async def page() -> Response:
            record = await server.off_loop(server.call, "run.show", {"id": run_id})
            transcript = await server.off_loop(views.transcripts.page, record.id, offset, api.MAX_PAGE)
            fields = record_fields(record, server.project.directory)
            used = guardrails.describe(record.usage)  # what the agent reported, as `beflow runs show` says it
            return server.html("run.html", record=record, fields=fields, used=used, transcript=transcript)

        return await server.answer(page)

    async def issue_page(request: Request) -> Response:
        async def page() -> Response:
            detail = await server.off_loop(views.issue, request.path_params["key"])
            review, review_error = await server.off_loop(views.review, detail.issue.key)
            latest = detail.runs[0].id if detail.runs else None
            tail = await server.off_loop(views.transcripts.tail, latest) if latest and review is not None else []
            shown = detail.best_of
            sides = await server.off_loop(candidates.diffs, server.project.directory, shown) if shown else {}
            return server.html(
                "issue.html",
                detail=detail,
                sides=sides,
                review=review,
                review_error=review_error,
                latest=latest,
                tail=tail,
                placed=placed,
            )

        return await server.answer(page)

    async def issues_page(request: Request) -> Response:
        status = request.query_params.get("status") or None

        async def page() -> Response:
            listing = await server.off_loop(views.issues, status, *paging(request.query_params))
            return server.html("issues.html", listing=listing, statuses=[s.value for s in Status])

        return await server.answer(page)

    async def runs_page(request: Request) -> Response:
        issue = request.query_params.get("issue") or None

        async def page() -> Response:
            listing = await server.off_loop(views.runs, issue, *paging(request.query_params))
            return server.html("runs.html", listing=listing)

        return await server.answer(page)

    return [
        Route("/", index),
        Route("/runs", runs_page),
        Route("/runs/{id}", run_page),
        Route("/issues", issues_page),
        Route("/issues/{key}", issue_page),
    ]
