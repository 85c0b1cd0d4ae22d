"""Reviews given on beflow's own page (the dashboard): a person's comments on an issue's branch — on a line of a
file, or on the whole change — kept in the project's state (``.beflow/reviews/<issue>.json``).

The page is a feedback source of its own (:class:`PageReviews`): each comment is a piece of feedback (``inline``
with its path, line and hunk, as a GitHub review comment is; ``review`` for the whole change), its id
``page:<n>``; a round answers it as it answers any other, and the answer is kept beside the comment, where the page
shows it. Whoever reaches the page's actions holds the server's token: there is nobody to leave out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field, ValidationError

from beflow.errors import BeflowError
from beflow.feedback import Feedback, Gathered
from beflow.paths import slug, state_dir
from beflow.system import startup
from beflow.system.files import FileTooLarge, NotRegularError, atomic_write, make_directory, read_regular

if TYPE_CHECKING:
    import filelock
else:
    filelock = startup.module("filelock")

#: The prefix of a page comment's feedback id.
PREFIX = "page:"
#: Comments kept per issue, at most: a page that is asked for more is refused.
MAX_COMMENTS = 500
#: The largest reviews file read (its comments and their answers).
MAX_FILE = 8 << 20
#: Characters of one comment, at most (as an issue's comment).
MAX_TEXT = 64_000
#: Seconds a writer waits for another one.
WRITE_WAIT = 10.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


class PageComment(BaseModel):
    """One comment of a page review, and its answer once a round gave one."""

    number: int = Field(ge=1)
    author: str = Field(max_length=200)
    body: str = Field(min_length=1, max_length=MAX_TEXT)
    created: dt.datetime
    path: str | None = Field(default=None, max_length=4096)
    line: int | None = Field(default=None, ge=1)
    #: The lines of the diff around it, as the page showed them (the round's prompt quotes them).
    hunk: str | None = None
    #: The branch's tip the comment was given on.
    commit: str = Field(max_length=64)
    answer: str | None = None
    answered: dt.datetime | None = None

    @property
    def id(self) -> str:
        return f"{PREFIX}{self.number}"


class PageReview(BaseModel):
    """An issue's page comments, oldest first."""

    issue: str
    comments: list[PageComment] = Field(default_factory=list)


class ReviewsDamaged(BeflowError):
    """The reviews file of an issue cannot be read as beflow wrote it."""

    code = "reviews_damaged"


class PageReviews:
    """The page reviews of the project at ``directory``: a :class:`~beflow.feedback.FeedbackSource`."""

    def __init__(self, directory: Path, mirror: Callable[[Feedback, str], None] | None = None) -> None:
        self.directory = directory
        #: Where the answer is said besides the page (the code host's pull request), if anywhere.
        self.mirror = mirror

    def _path(self, key: str) -> Path:
        return self.directory / ".beflow" / "reviews" / f"{slug(key)}.json"

    def read(self, key: str) -> PageReview:
        """Issue ``key``'s page review (none yet: an empty one)."""
        path = self._path(key)
        try:
            data = read_regular(path, limit=MAX_FILE, below=self.directory)
        except FileNotFoundError:
            return PageReview(issue=key)
        except (NotRegularError, FileTooLarge, OSError) as error:
            raise ReviewsDamaged(
                f"the page reviews of issue {key} cannot be read: {error}",
                fix=f"Remove .beflow/reviews/{path.name} (its comments are lost).",
            ) from None
        try:
            return PageReview.model_validate_json(data)
        except ValidationError:
            raise ReviewsDamaged(
                f"the page reviews of issue {key} (.beflow/reviews/{path.name}) are not as beflow wrote them",
                fix=f"Remove .beflow/reviews/{path.name} (its comments are lost).",
            ) from None

    def waiting(self) -> set[str]:
        """The issues with a page comment no round answered yet, from beflow's own files alone (no tracker asked): a
        watch whose only feedback is the page's surveys these, not every issue in review, on each tick. A damaged
        file names no issue: it is skipped here (the issue's page and a run of it say what is wrong with it)."""
        waiting: set[str] = set()
        folder = self.directory / ".beflow" / "reviews"
        try:
            files = sorted(folder.glob("*.json"))
        except OSError:
            return waiting
        for path in files:
            try:
                data = read_regular(path, limit=MAX_FILE, below=self.directory)
                review = PageReview.model_validate_json(data)
            except (NotRegularError, FileTooLarge, OSError, ValidationError):
                continue  # (not a file of beflow's: it names no issue to survey)
            if any(comment.answer is None for comment in review.comments):
                waiting.add(review.issue)
        return waiting

    def _write(self, review: PageReview) -> None:
        atomic_write(self._path(review.issue), review.model_dump_json(indent=1) + "\n", below=self.directory)

    def _lock(self, key: str) -> filelock.FileLock:
        state_dir(self.directory)
        lock = self._path(key).with_suffix(".lock")
        make_directory(lock.parent, below=self.directory)
        return filelock.FileLock(str(lock), timeout=WRITE_WAIT, thread_local=False)

    def add(
        self,
        key: str,
        *,
        author: str,
        body: str,
        commit: str,
        path: str | None = None,
        line: int | None = None,
        hunk: str | None = None,
    ) -> PageComment:
        """Keep a new comment on issue ``key``'s branch (at ``commit``); it is a piece of feedback from now on."""
        with self._lock(key):
            review = self.read(key)
            if len(review.comments) >= MAX_COMMENTS:
                raise BeflowError(
                    f"issue {key} has {MAX_COMMENTS} page comments already: no more are kept",
                    fix="Answer them with a round first, or comment on the code host.",
                )
            number = max((c.number for c in review.comments), default=0) + 1
            comment = PageComment(
                number=number,
                author=author,
                body=body,
                created=_now(),
                path=path,
                line=line,
                hunk=hunk,
                commit=commit,
            )
            review.comments.append(comment)
            self._write(review)
            return comment

    # -- the feedback source (beflow.feedback.FeedbackSource) ------------------------------------------------------

    def gather(self, key: str, branch: str) -> Gathered:
        """Every page comment on issue ``key`` as a piece of feedback (what a round answered is beflow's record's)."""
        pieces = [
            Feedback(
                id=c.id,
                kind="inline" if c.path is not None else "review",
                author=c.author,
                body=c.body,
                created=c.created,
                path=c.path,
                line=c.line,
                hunk=c.hunk,
                reply_to=key,
            )
            for c in self.read(key).comments
        ]
        return Gathered(pieces=pieces)

    def reply(self, piece: Feedback, body: str) -> None:
        """Keep the round's answer beside the comment it answers, then mirror it (a piece another source gave is not
        ours). The page's answer is kept whether or not the mirror can be said."""
        if not piece.id.startswith(PREFIX) or piece.reply_to is None:
            return
        key = piece.reply_to
        with self._lock(key):
            review = self.read(key)
            for comment in review.comments:
                if comment.id == piece.id:
                    comment.answer, comment.answered = body, _now()
            self._write(review)
        if self.mirror is not None:
            self.mirror(piece, body)
