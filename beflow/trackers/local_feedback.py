"""Feedback on the local tracker: a comment left with ``beflow issues comment KEY TEXT --rework``.

Such a comment starts with :data:`REWORK_MARK` (an HTML comment: the issue file still reads as Markdown) and is a
piece of feedback of kind ``rework``, its id ``local:<the comment's time>`` (``#2``, ``#3``... for more in the same
second: the file keeps seconds). Whoever can write the issue files is trusted: there is nobody to leave out. A
reply is a comment on the issue.
"""

from __future__ import annotations

from beflow.feedback import Feedback, Gathered
from beflow.trackers.issue import Comment, Issue, Status, format_time

#: The first line of a comment that asks for rework.
REWORK_MARK = "<!-- beflow:rework -->"


def rework_text(text: str) -> str:
    """The comment's text that records ``text`` as rework feedback."""
    return f"{REWORK_MARK}\n{text}"


def is_rework(comment: Comment) -> bool:
    return comment.text.startswith(REWORK_MARK)


def shown(text: str) -> str:
    """A comment's text as a person reads it (the mark left out)."""
    return text.removeprefix(REWORK_MARK).lstrip("\n")


def gathered(issue: Issue) -> Gathered:
    """The rework comments of ``issue`` as feedback; a closed issue ends the rounds, and so does one a person
    moved to done."""
    pieces: list[Feedback] = []
    seen: dict[str, int] = {}
    for comment in issue.comments:
        if not is_rework(comment):
            continue
        stamp = format_time(comment.created)
        seen[stamp] = seen.get(stamp, 0) + 1
        piece = f"local:{stamp}" + (f"#{seen[stamp]}" if seen[stamp] > 1 else "")
        body = shown(comment.text)
        if not body.strip():
            continue
        url = f"{issue.url}#{piece}" if issue.url else None
        pieces.append(
            Feedback(
                id=piece,
                kind="rework",
                author=comment.author,
                url=url,
                body=body,
                created=comment.created,
                reply_to=issue.key,
            )
        )
    ended = {Status.CLOSED: "closed", Status.DONE: "merged"}.get(issue.status)
    return Gathered(pieces=pieces, ended=ended)  # type: ignore[arg-type]
