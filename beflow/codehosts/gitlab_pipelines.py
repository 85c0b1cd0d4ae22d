"""A merge request's failed pipeline, as feedback for review rounds (with ``feedback.checks``): the latest pipeline of
its head commit, when it failed, as one piece naming its failed jobs, each with the tail of its log (at most
:data:`MAX_LOG_LINES` lines and :data:`MAX_LOG_BYTES` bytes). A pipeline says nothing of who may give feedback: it is
the project's own.

What the latest pipeline of a commit is comes from the project-wide listing of changed pipelines
(:meth:`Pipelines.saw`, read once a poll by :mod:`beflow.codehosts.gitlab_feedback`); a commit not seen there yet is
looked up once. A failed pipeline's jobs and logs are read once, while it stays as it is.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from beflow.feedback import Feedback, strip_hidden
from beflow.trackers import gitlab_wire as wire
from beflow.trackers.gitlab_api import Api, GitLabError, RateLimited
from beflow.trackers.quoting import code, fenced

#: The most lines, and bytes, of a failed job's log that reach a prompt (its end: where a failure shows).
MAX_LOG_LINES = 40
MAX_LOG_BYTES = 4000
#: The most of a log's end that is read to find them (colours and section markers take room).
MAX_LOG_READ = 64 * 1024
#: The most failed jobs of one pipeline whose logs are read.
MAX_JOBS = 5
#: The commits whose latest pipeline is remembered (the oldest forgotten first).
MAX_COMMITS = 2048
#: Terminal colours and GitLab's collapsible section markers in a job's log: no reader sees them as text.
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|section_(?:start|end):\d+:[\w.\[\]-]+(?:\r?\x1b\[0K)?")


def tail(log: str, lines: int = MAX_LOG_LINES, size: int = MAX_LOG_BYTES) -> str:
    """The end of a job's log as a terminal shows it: colours and section markers gone, a line rewritten by a
    carriage return as its last writing, at most ``lines`` lines and ``size`` bytes (UTF-8)."""
    shown = [line.split("\r")[-1] if line.strip("\r") else "" for line in _ESCAPES.sub("", log).split("\n")]
    while shown and not shown[-1].strip():
        shown.pop()
    text = "\n".join(shown[-lines:])
    data = text.encode("utf-8")
    if len(data) > size:
        text = data[-size:].decode("utf-8", "ignore")
        text = text.partition("\n")[2] or text  # (from the start of a line)
    return text


class Pipelines:
    """The latest pipeline of each commit seen, and the failed ones as feedback."""

    def __init__(self, api: Api, base: str) -> None:
        self.api = api
        self._base = base
        self._latest: dict[str, wire.Pipeline] = {}
        self._looked: set[str] = set()
        self._pieces: dict[tuple[int, str, Any], Feedback] = {}

    def saw(self, pipeline: wire.Pipeline) -> None:
        """A pipeline the project's listing showed: the latest of its commit when no later one is known."""
        held = self._latest.get(pipeline.sha)
        if held is None or pipeline.id >= held.id:
            self._latest.pop(pipeline.sha, None)
            self._latest[pipeline.sha] = pipeline
            while len(self._latest) > MAX_COMMITS:
                forgotten = next(iter(self._latest))
                self._latest.pop(forgotten)
                self._looked.discard(forgotten)
        self._looked.add(pipeline.sha)

    def failed(self, sha: str, mr: int) -> list[Feedback]:
        """The failed latest pipeline of commit ``sha`` (the head of merge request ``mr``) as a piece, if it
        failed."""
        if sha not in self._looked:
            path = f"{self._base}/pipelines"
            found = self.api.paginate(path, {"sha": sha, "order_by": "id", "sort": "desc"}, max_pages=1)
            listed, _ = wire.read_each(wire.Pipeline, found, f"GET {path}")
            for pipeline in listed:
                self.saw(pipeline)
            self._looked.add(sha)
        latest = self._latest.get(sha)
        if latest is None or not latest.failed:
            return []
        key = (latest.id, latest.status, latest.updated_at)
        piece = self._pieces.get(key)
        if piece is None:
            piece = self._piece(latest, mr)
            self._pieces = {k: v for k, v in self._pieces.items() if k[0] != latest.id} | {key: piece}
        return [piece]

    def _piece(self, pipeline: wire.Pipeline, mr: int) -> Feedback:
        path = f"{self._base}/pipelines/{pipeline.id}/jobs"
        jobs, _ = wire.read_each(wire.Job, self.api.paginate(path, {"scope": "failed"}, max_pages=1), f"GET {path}")
        failed = [job for job in jobs if job.failed]
        lines = [f"Pipeline {pipeline.id} failed on commit {code(pipeline.sha[:12])}."]
        if not failed:
            lines.append("No job of it says it failed (it may have been canceled, or failed to start).")
        for job in failed[:MAX_JOBS]:
            why = f" ({job.failure_reason})" if job.failure_reason else ""
            lines.append(f"\nJob {code(job.name)}" + (f" of stage {code(job.stage)}" if job.stage else "") + f"{why}:")
            log = self._log(job)
            lines.append(fenced(log, "") if log else "(its log is empty)")
        if len(failed) > MAX_JOBS:
            lines.append(f"\n… and {len(failed) - MAX_JOBS} more failed jobs: " + ", ".join(
                code(job.name) for job in failed[MAX_JOBS:]
            ))  # fmt: skip
        return Feedback(
            id=f"pipeline:{pipeline.id}",
            kind="check",
            author="GitLab CI",
            url=pipeline.web_url,
            body=strip_hidden("\n".join(lines)),
            created=pipeline.updated_at or pipeline.created_at or dt.datetime.now(dt.UTC),
            conversation=mr,
        )

    def _log(self, job: wire.Job) -> str:
        path = f"{self._base}/jobs/{job.id}/trace"
        try:
            # Its end only, streamed: a job's log may be hundreds of megabytes.
            data = self.api.tail(path, MAX_LOG_READ).decode("utf-8", "replace")
        except RateLimited:
            raise
        except GitLabError as error:
            if error.status in (403, 404):
                return f"(its log cannot be read: {error.status})"
            raise
        return tail(data)
