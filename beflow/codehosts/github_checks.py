"""The failed checks of a pull request's head commit, as feedback for review rounds (with ``feedback.checks``): its
failed check runs, each with up to :data:`MAX_ANNOTATIONS` of its annotations, and its failed commit statuses.
Checks say nothing of who may give feedback: a check is the repository's own."""

from __future__ import annotations

import datetime as dt
from typing import Any

from beflow.feedback import Feedback, strip_hidden
from beflow.trackers import github_wire as wire
from beflow.trackers.github_api import Api

#: The most annotations of one failed check run that reach a prompt.
MAX_ANNOTATIONS = 20
FAILED_CHECKS = frozenset({"failure", "timed_out", "action_required"})
FAILED_STATUSES = frozenset({"failure", "error"})


def when(value: dt.datetime | None) -> dt.datetime:
    """A time GitHub gave, or now when it gave none."""
    return value if value is not None else dt.datetime.now(dt.UTC)


def _get(api: Api, path: str, params: dict[str, Any]) -> Any:
    return api.request("GET", path, params=params).data


def failed_checks(api: Api, base: str, sha: str, pull: int | None) -> list[Feedback]:
    """The failed check runs and commit statuses of commit ``sha`` (two conditional requests, and one for the
    annotations of each failed run)."""
    pieces: list[Feedback] = []
    path = f"{base}/commits/{sha}/check-runs"
    runs = wire.parse(wire.CheckRuns, _get(api, path, {"per_page": 100}) or {}, f"GET {path}")
    for run in runs.check_runs or []:
        if run.conclusion not in FAILED_CHECKS:
            continue
        output = run.output or wire.CheckOutput()
        lines = [f"{run.name}: {run.conclusion}"]
        lines += [text for text in (output.title, output.summary) if text]
        if output.annotations_count:
            notes = f"{base}/check-runs/{run.id}/annotations"
            answer = _get(api, notes, {"per_page": MAX_ANNOTATIONS})
            for note in wire.parse_list(wire.Annotation, answer, f"GET {notes}")[:MAX_ANNOTATIONS]:
                where = f"{note.path}:{note.start_line}"
                title = f" {note.title}:" if note.title else ""
                lines.append(f"- {where} ({note.annotation_level}){title} {note.message}")
        app = run.app or wire.App()
        pieces.append(
            Feedback(
                id=f"check-run:{run.id}",
                kind="check",
                author=app.slug or app.name or run.name or "check",
                url=run.html_url,
                body=strip_hidden("\n".join(lines)),
                created=when(run.completed_at),
                conversation=pull,
            )
        )
    path = f"{base}/commits/{sha}/status"
    combined = wire.parse(wire.CombinedStatus, _get(api, path, {"per_page": 100}) or {}, f"GET {path}")
    for status in combined.statuses or []:
        if status.state not in FAILED_STATUSES:
            continue
        context = status.context or "status"
        text = "\n".join(str(v) for v in (f"{context}: {status.state}", status.description) if v)
        pieces.append(
            Feedback(
                id=f"status:{sha}:{context}",
                kind="check",
                author=context,
                url=status.target_url,
                body=strip_hidden(text),
                created=when(status.updated_at),
                conversation=pull,
            )
        )
    return pieces
