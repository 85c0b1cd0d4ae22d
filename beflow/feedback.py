"""Feedback on a run's work, and the rounds it starts: what a reviewer, a check or a person said, as one shape.

A round is a follow-up run that continues ``beflow/<key>`` with the feedback in its prompt. Where feedback comes
from is a source's business (a code host's pull request, the tracker's issue): every source yields
:class:`Feedback` items, already filtered to the people allowed to give it and cleaned of what a person cannot see.
What a round consumed is remembered by :attr:`Feedback.id`, so that no piece is answered twice.

This module holds the shapes and the pure decisions; sources live with the code host and the tracker they read.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

#: What kind of feedback: a submitted review's own text, one inline comment on a line (each inline comment of a
#: review is a piece of its own, with the earlier comments of its review thread as ``thread``, so that each thread
#: gets its own reply), a conversation comment that mentions the trigger, a failed check run or commit status, a
#: tracker comment left with ``--rework``.
Kind = Literal["review", "inline", "comment", "check", "rework"]


class ThreadComment(BaseModel):
    """One earlier comment of the review thread an inline comment belongs to, oldest first."""

    model_config = ConfigDict(frozen=True)

    author: str
    body: str


class Feedback(BaseModel):
    """One piece of feedback, ready for a prompt: its text has had hidden content stripped."""

    model_config = ConfigDict(frozen=True)

    #: Unique across the issue's sources and stable across polls and machines (``review:123``,
    #: ``review-comment:456``, ``issue-comment:789``, ``check-run:12``, ``status:<sha>:<context>``,
    #: ``local:<comment created iso>``): what a round records as consumed.
    id: str
    kind: Kind
    author: str
    url: str | None = None
    body: str
    #: When it was given (for ``feedback.settle``: a round waits that long after the latest piece).
    created: dt.datetime
    #: Inline comments: the file, the line and the diff hunk it was left on, and the thread it belongs to.
    path: str | None = None
    line: int | None = None
    hunk: str | None = None
    thread: list[ThreadComment] = Field(default_factory=list)
    #: What a reply in this piece's thread goes to (a review comment id on GitHub), when it can have one.
    reply_to: str | None = None
    #: The pull request or issue (its number on the code host) the piece was given on: where its reply goes.
    conversation: int | None = None


class Ignored(BaseModel):
    """A piece of feedback left out, and why (not a collaborator, beflow's own comment...), for the round's record."""

    model_config = ConfigDict(frozen=True)

    id: str
    author: str
    why: str


class Gathered(BaseModel):
    """What a source found for one issue since it last looked: the pieces to answer and those left out."""

    pieces: list[Feedback] = Field(default_factory=list)
    ignored: list[Ignored] = Field(default_factory=list)
    #: The pull request was merged or closed, or the issue closed: the rounds end (``merged`` moves it to done).
    ended: Literal["merged", "closed"] | None = None


@runtime_checkable
class FeedbackSource(Protocol):
    """Where feedback on an issue's work is read, and answered. Methods may block (worker threads call them) and
    raise :class:`~beflow.errors.BeflowError` subclasses only."""

    def gather(self, key: str, branch: str) -> Gathered:
        """The feedback on issue ``key`` and the pull request of ``branch``, trusted and cleaned; cheap to call on
        every poll (conditional requests where the source offers them)."""
        ...

    def reply(self, piece: Feedback, body: str) -> None:
        """Answer ``piece`` where it was given (in its review thread on GitHub), once the round's work is
        delivered. Every piece of a round is offered to every source: one a source did not give, it ignores."""
        ...


@runtime_checkable
class LooksAgain(Protocol):
    """A source that reads its changes at most every few seconds (GitHub's repository-wide listings), and can be
    asked to read them afresh at the next gather (a person pressed refresh)."""

    def look_again(self) -> None: ...


# -- the pure decisions ----------------------------------------------------------------------------------------------

#: Characters a reader never sees: zero-width spaces and joiners, the bidirectional marks, embeddings, overrides and
#: isolates (which also reorder what is shown), invisible operators, the byte-order mark, soft hyphen and its kin.
INVISIBLE = frozenset(
    [chr(c) for c in range(0x200B, 0x2010)]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2060, 0x2065)]
    + [chr(c) for c in range(0x2066, 0x206A)]
    + ["\ufeff", "\u00ad", "\u034f", "\u061c", "\u180e"]
)
_INVISIBLE = re.compile("[" + "".join(sorted(INVISIBLE)) + "]")
#: A fenced code block (its content is shown as it is: an HTML comment in it is visible text).
_FENCE = re.compile(r"^([ \t]{0,3})(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]{0,3}\2[`~]*[ \t]*$|\Z)", re.S | re.M)
#: A code span (from the start of a run of backticks only: a search stays linear when runs are left unclosed).
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
#: An HTML comment, or one left open (a browser hides everything after ``<!--`` that is never closed).
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
#: Images: Markdown's ``![alt](url "title")`` and ``![alt][ref]``, and HTML's ``<img ...>``.
_IMAGE = re.compile(r"!\[(?:[^\[\]]|\[[^\[\]]*\])*\](?:\([^()]*(?:\([^()]*\)[^()]*)*\)|\[[^\]]*\])?")
_IMG_TAG = re.compile(r"<img\b[^>]{0,4000}>", re.I)
#: A link's title (shown only on hover): ``[text](url "title")``, and a reference definition's ``[ref]: url "t"``
#: (the definition line itself is never shown: ``[//]: # (words)`` is a known way to hide words).
_LINK_TITLE = re.compile(r"(\]\(\s*<?[^\s()<>]*>?)\s+(?:\"[^\"]{0,500}\"|'[^']{0,500}'|\([^()]{0,500}\))\s*\)")
_REFERENCE = re.compile(
    r"^[ \t]{0,3}\[[^\]\n]+\]:[ \t]*(?:<[^>\n]*>|\S+)(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$", re.M
)
#: A ``<details>`` that is not ``open`` (an open one is shown, and read as text).
_DETAILS = re.compile(r"<details\b(?![^>\n]{0,500}\bopen\b)[^>\n]{0,500}>(.*?)</details\s*>", re.S | re.I)
_CLOSE_DETAILS = re.compile(r"</details\s*>")
_SUMMARY = re.compile(r"<summary\b[^>\n]{0,500}>(.*?)</summary\s*>", re.S | re.I)


class _Finder(Protocol):
    def search(self, text: str, at: int = 0, /) -> re.Match[str] | None: ...


class _CollapsedDetails:
    """Finds the next collapsed ``<details>`` block: a regular expression searched from every ``<details`` to its
    close would take quadratic time on many that are never closed; here each start is tried only while a close is
    still ahead."""

    def search(self, text: str, at: int = 0, /) -> re.Match[str] | None:
        lower = text.lower()
        start = lower.find("<details", at)
        while start != -1 and _CLOSE_DETAILS.search(lower, start) is not None:
            found = _DETAILS.match(text, start)
            if found is not None:
                return found
            start = lower.find("<details", start + 1)
        return None


#: What a pass looks for, by rank (an earlier rank wins a tie: a fence is also the start of a code span).
_TOKENS: tuple[_Finder, ...] = (_FENCE, _INLINE_CODE, _COMMENT, _CollapsedDetails())
COLLAPSED = "[collapsed section left out]"


def strip_hidden(text: str) -> str:
    """``text`` as a person reading the rendered page sees it: what could carry instructions no reviewer saw is
    removed before it reaches a prompt (a known attack on agents that read GitHub).

    - HTML comments (and one left open, to the end), outside code: GitHub shows none of them.
    - Zero-width and bidirectional control characters, everywhere (in code too: they are no more visible there).
    - Images become ``[image]``: their alt text is shown to nobody who sees the picture.
    - Link titles (a tooltip) and reference definitions (never rendered) are dropped; the link text and URL stay.
    - A ``<details>`` block that is not ``open`` keeps its summary, and its content is left out, marked: a reader of
      the page sees only the summary unless they choose to expand it, so its content is not what the reviewer was
      seen to ask for. (An ``open`` one is shown as it is and is kept.)

    Code (fenced blocks and inline spans) is shown literally and is kept as it is, but for invisible characters.
    Stripping again changes nothing: the steps repeat until nothing more comes out (a removal may join what was
    around it into something new, ``<<!-- -->!-- x -->``)."""
    while True:
        cleaned = _strip_once(text)
        if cleaned == text:
            return cleaned
        text = cleaned


def _strip_once(text: str) -> str:
    """One pass, in the order a Markdown reader meets things: whichever of a fenced block, a code span, an HTML
    comment or a collapsed ``<details>`` starts first decides (a comment holding code hides the code; code holding
    ``<!--`` shows it)."""
    text = _INVISIBLE.sub("", text)
    out: list[str] = []
    at = 0
    # Each pattern's next match, searched again only once the scan has passed its start: linear in the text.
    ahead: list[re.Match[str] | None] = [r.search(text, 0) for r in _TOKENS]
    while at < len(text):
        for rank, pattern in enumerate(_TOKENS):
            held = ahead[rank]
            if held is not None and held.start() < at:
                ahead[rank] = pattern.search(text, at)
        found = [(m.start(), rank, m) for rank, m in enumerate(ahead) if m is not None]
        if not found:
            break
        start, rank, match = min(found, key=lambda f: (f[0], f[1]))
        out.append(_strip_markup(text[at:start]))
        if rank <= 1:  # code, shown as it is
            out.append(match.group(0))
        elif rank == 3:  # a collapsed <details>: its summary, its content marked as left out
            summary = _summary(match.group(1))
            shown = _strip_markup(summary.group(1)).strip() if summary else "Details"
            out.append(f"{shown}\n{COLLAPSED}")
        at = max(match.end(), start + 1)  # (an HTML comment: nothing of it)
    out.append(_strip_markup(text[at:]))
    return "".join(out)


def _summary(inner: str) -> re.Match[str] | None:
    """The first ``<summary>`` of a details block's content (tried at its start only: linear, however many)."""
    lower = inner.lower()
    start = lower.find("<summary")
    return _SUMMARY.match(inner, start) if start != -1 and "</summary" in lower[start:] else None


def _strip_markup(text: str) -> str:
    text = _IMAGE.sub("[image]", text)
    text = _IMG_TAG.sub("[image]", text)
    text = _LINK_TITLE.sub(r"\1)", text)
    return _REFERENCE.sub("", text)


def mentions(text: str, trigger: str) -> bool:
    """Whether ``text`` mentions ``trigger`` as a word, in any case, outside code and hidden text (an HTML comment, a
    collapsed details block...): not inside an email address
    (``me@beflow.dev``), a longer handle (``@beflowbot``), a team (``@beflow/core``) or a domain (``@beflow.dev``)."""
    text = _FENCE.sub("", strip_hidden(text))  # a hidden mention asks for nothing
    text = _INLINE_CODE.sub("", text)
    word = re.escape(trigger.strip())
    pattern = rf"(?<![\w@.+\-]){word}(?![\w\-/]|\.\w)"
    return re.search(pattern, text, re.I) is not None


#: GitHub's ``author_association`` values of people with write access to the repository.
TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})


def trusted(association: str | None, login: str, allow: list[str]) -> str | None:
    """None when ``login`` may give feedback (an owner, member or collaborator of the repository, or a login of
    ``feedback.allow``, in any case); else why not, for the round's record."""
    if (association or "").upper() in TRUSTED_ASSOCIATIONS:
        return None
    if login.lower() in {name.lower() for name in allow}:
        return None
    said = (association or "none").lower().replace("_", " ")
    return f"{login} has no write access to the repository ({said}) and is not in feedback.allow"


def unanswered(pieces: list[Feedback], consumed: set[str]) -> list[Feedback]:
    """The pieces no round has consumed yet (by :attr:`Feedback.id`), in their order."""
    return [piece for piece in pieces if piece.id not in consumed]


def settled(pieces: list[Feedback], now: dt.datetime, settle: float) -> bool:
    """Whether a round may start on ``pieces``: there is one, and the latest was given ``settle`` seconds ago or
    more (reviewers batch their comments: those that come together make one round)."""
    if not pieces:
        return False
    latest = max(_aware(piece.created) for piece in pieces)
    return (_aware(now) - latest).total_seconds() >= settle


def _aware(when: dt.datetime) -> dt.datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=dt.UTC)


# -- what a round consumed, and when it may start (the run side of rounds: beflow/rounds.py) ------------------------

#: The trailer a round's commit carries once per piece of feedback it answered: read back from the branch's history
#: (by every watcher, on every machine that fetches the branch), it is what was answered.
TRAILER = "Beflow-Feedback"


def trailer_lines(ids: list[str]) -> str:
    """The trailer block of a round's commit message for the pieces ``ids`` (one line each, in order)."""
    return "\n".join(f"{TRAILER}: {piece}" for piece in dict.fromkeys(ids))


def pending(pieces: list[Feedback], answered: set[str]) -> list[Feedback]:
    """The pieces no round has answered yet, oldest first, each once."""
    seen: set[str] = set()
    left: list[Feedback] = []
    for piece in sorted(pieces, key=lambda p: p.created):
        if piece.id not in answered and piece.id not in seen:
            seen.add(piece.id)
            left.append(piece)
    return left


def due_at(pieces: list[Feedback], settle: float) -> dt.datetime | None:
    """When a round for ``pieces`` may start: ``settle`` seconds after the latest of them (None: no piece)."""
    if not pieces:
        return None
    return max(piece.created for piece in pieces) + dt.timedelta(seconds=settle)


def merged(found: list[Gathered]) -> Gathered:
    """What several sources of one issue found, as one: every piece once, and the rounds' end if any source saw it
    (merged wins over closed)."""
    pieces = {piece.id: piece for each in found for piece in each.pieces}
    ignored = {item.id: item for each in found for item in each.ignored}
    ends = {each.ended for each in found if each.ended is not None}
    ended: Literal["merged", "closed"] | None = "merged" if "merged" in ends else ("closed" if ends else None)
    return Gathered(pieces=list(pieces.values()), ignored=list(ignored.values()), ended=ended)
