"""Feedback on a run's work, and the rounds it starts: what a reviewer, a check or a person said, as one shape.

A round is a follow-up run that continues ``beflow/<key>`` with the feedback in its prompt. Where feedback comes
from is a source's business (a code host's pull request, the tracker's issue): every source yields
:class:`Feedback` items, already filtered to the people allowed to give it and cleaned of what a person cannot see.
What a round consumed is remembered by :attr:`Feedback.id`, so that no piece is answered twice.

This module holds the shapes and the pure decisions; sources live with the code host and the tracker they read.
"""

from __future__ import annotations

import bisect
import datetime as dt
import re
from dataclasses import dataclass
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


@runtime_checkable
class MirrorsAnswers(Protocol):
    """A code host that says, in a branch's pull request, beflow's answer to feedback given elsewhere (a review on
    beflow's own page): the people reading the pull request see what the round answered, and to what."""

    def mirror(self, branch: str, piece: Feedback, body: str) -> None:
        """Post :func:`mirrored` ``piece`` and ``body`` once in the conversation of ``branch``'s open pull request,
        masked, inert and marked as beflow's (never feedback itself); nothing when there is none."""
        ...


# -- the pure decisions ----------------------------------------------------------------------------------------------

#: Characters a reader never sees: zero-width spaces and joiners, the bidirectional marks, embeddings, overrides and
#: isolates (which also reorder what is shown), invisible operators, the byte-order mark, soft hyphen and its kin, and
#: the Unicode tag characters and supplementary variation selectors (each can carry a hidden letter: "ASCII
#: smuggling").
INVISIBLE = frozenset(
    [chr(c) for c in range(0x200B, 0x2010)]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2060, 0x2065)]
    + [chr(c) for c in range(0x2066, 0x206A)]
    + [chr(c) for c in range(0xE0000, 0xE0080)]
    + [chr(c) for c in range(0xE0100, 0xE01F0)]
    + ["\ufeff", "\u00ad", "\u034f", "\u061c", "\u180e"]
)
_INVISIBLE = re.compile("[" + "".join(re.escape(c) for c in sorted(INVISIBLE)) + "]")
#: A fenced code block (its content is shown as it is: an HTML comment in it is visible text).
_FENCE = re.compile(r"^([ \t]{0,3})(`{3,}|~{3,})[^\n]*\n.*?(?:^[ \t]{0,3}\2[`~]*[ \t]*$|\Z)", re.S | re.M)
#: A code span (from the start of a run of backticks only: a search stays linear when runs are left unclosed).
_INLINE_CODE = re.compile(r"(?<!`)(`+)(?!`).+?(?<!`)\1(?!`)", re.S)
#: An HTML comment, or one left open (a browser hides everything after ``<!--`` that is never closed).
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
#: What a page never shows either: a processing instruction (``<?...?>``), a CDATA section and a declaration
#: (``<!DOCTYPE ...>``); one left open hides the rest, as a comment does.
_DECLARATION = re.compile(r"<\?.*?(?:\?>|\Z)|<!\[CDATA\[.*?(?:\]\]>|\Z)|<![A-Za-z][^>]*(?:>|\Z)", re.S)
#: Images: Markdown's ``![alt](url "title")`` and ``![alt][ref]``, and HTML's ``<img ...>``.
_IMAGE = re.compile(r"!\[(?:[^\[\]]|\[[^\[\]]*\])*\](?:\([^()]*(?:\([^()]*\)[^()]*)*\)|\[[^\]]*\])?")
_IMG_TAG = re.compile(r"<img\b[^>]{0,4000}>", re.I)
#: A link's title (shown only on hover): ``[text](url "title")``, and a reference definition's ``[ref]: url "t"``
#: (the definition line itself is never shown: ``[//]: # (words)`` is a known way to hide words).
_LINK_TITLE = re.compile(r"(\]\(\s*<?[^\s()<>]*>?)\s+(?:\"[^\"]{0,500}\"|'[^']{0,500}'|\([^()]{0,500}\))\s*\)")
_REFERENCE = re.compile(
    r"^[ \t]{0,3}\[[^\]\n]+\]:[ \t]*(?:<[^>\n]*>|\S+)(?:[ \t]+(?:\"[^\"\n]*\"|'[^'\n]*'|\([^)\n]*\)))?[ \t]*$", re.M
)
#: An HTML tag, and the attributes of one that a reader never sees as text (a tooltip, an alternative text, an
#: accessible label, data).
_TAG = re.compile(r"""<[A-Za-z][\w-]*(?:\s(?:"[^"]*"|'[^']*'|[^<>"']){0,4000})?/?>""")
#: Anything between angle brackets: one holding an invisible character is read by a browser otherwise than with it
#: removed (``<details o\u200bpen>`` is collapsed, ``</deta\u200bils>`` closes nothing).
_ANGLED = re.compile(r"<[^<>]{0,4000}>")
_HIDDEN_ATTRIBUTE = re.compile(
    r"""\s(?:title|alt|aria-[\w-]*|data-[\w-]*)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?(?=[\s/>])""", re.I
)
#: The elements that hide what is in them: a ``<details>`` that is not ``open`` (all but its summary), a
#: ``<template>`` (nothing of it), and ``<script>`` and ``<style>``, whose content is raw text up to their close.
_ELEMENT = re.compile(r"<(/?)(details|template|script|style)\b([^>]{0,4000})>", re.I)
_RAW = frozenset({"script", "style"})
_ATTRIBUTE_NAME = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'>]+))?""")
_SUMMARY = re.compile(r"<summary\b[^>]{0,4000}>(.*?)</summary\s*>", re.S | re.I)
COLLAPSED = "[collapsed section left out]"


@dataclass(frozen=True)
class _Hit:
    """What a pass found at ``[begin, finish)``: code (kept as it is) or hidden text, with what takes its place."""

    begin: int
    finish: int
    code: bool = False
    instead: str = ""

    def start(self) -> int:
        return self.begin

    def end(self) -> int:
        return self.finish


class _Finder(Protocol):
    def search(self, text: str, at: int = 0, /) -> re.Match[str] | _Hit | None: ...


class _Hiding:
    """The elements of one text that hide their content (:data:`_ELEMENT`), found in one pass with their nesting:
    a ``<details>`` inside a collapsed one does not end it at the first ``</details>``, and one never closed hides
    everything after it, as a browser's parser does (open elements are closed at the end of the page). Tags inside
    code or an HTML comment are text, not tags. Linear, however the tags are nested or left open."""

    def __init__(self, text: str) -> None:
        literal = _literal_ranges(text)
        spans: list[_Hit] = []
        stack: list[tuple[str, re.Match[str], bool]] = []  # name, open tag, whether it hides
        at, index = 0, 0
        while (tag := _ELEMENT.search(text, at)) is not None:
            while index < len(literal) and literal[index][1] <= tag.start():
                index += 1
            if index < len(literal) and literal[index][0] <= tag.start():
                at = literal[index][1]  # (in code or a comment: text)
                continue
            closing, name = tag.group(1), tag.group(2).lower()
            if not closing and name in _RAW:  # its content is raw text to its close, whatever it holds
                close = re.compile(rf"</{name}\s*>", re.I).search(text, tag.end())
                finish = close.end() if close is not None else len(text)
                if not any(hides for _, _, hides in stack):
                    spans.append(_Hit(tag.start(), finish))
                at = finish
                continue
            if not closing:
                hides = name == "template" or not _is_open(tag.group(3))
                stack.append((name, tag, hides))
            else:
                depth = next((i for i in range(len(stack) - 1, -1, -1) if stack[i][0] == name), None)
                if depth is not None:  # (a close nothing opened is ignored, as a browser ignores it)
                    while len(stack) > depth:
                        self._closed(text, stack, tag.start(), tag.end(), spans)
            at = tag.end()
        while stack:  # never closed: to the end
            self._closed(text, stack, len(text), len(text), spans)
        self.spans = sorted(spans, key=lambda hit: hit.begin)
        self.starts = [hit.begin for hit in self.spans]

    @staticmethod
    def _closed(
        text: str, stack: list[tuple[str, re.Match[str], bool]], inner: int, finish: int, spans: list[_Hit]
    ) -> None:
        name, tag, hides = stack.pop()
        if not hides or any(outer for _, _, outer in stack):
            return  # shown, or inside an element that hides it anyway
        if name == "template":
            spans.append(_Hit(tag.start(), finish))
            return
        summary = _summary(text[tag.end() : inner])
        shown = _strip_markup(summary.group(1)).strip() if summary else "Details"
        spans.append(_Hit(tag.start(), finish, instead=f"{shown}\n{COLLAPSED}"))

    def search(self, text: str, at: int = 0, /) -> _Hit | None:
        index = bisect.bisect_left(self.starts, at)
        return self.spans[index] if index < len(self.spans) else None


def _is_open(attributes: str) -> bool:
    """Whether a ``<details>`` tag's attributes hold ``open`` (as an attribute, not inside another's value)."""
    return any(m.group(1).lower() == "open" for m in _ATTRIBUTE_NAME.finditer(attributes))


def _literal_ranges(text: str) -> list[tuple[int, int]]:
    """Where ``text`` has code or an HTML comment (or a declaration), in order: a tag there is no tag."""
    finders: tuple[re.Pattern[str], ...] = (_FENCE, _INLINE_CODE, _COMMENT, _DECLARATION)
    ranges: list[tuple[int, int]] = []
    at = 0
    ahead = [f.search(text, 0) for f in finders]
    while at < len(text):
        for rank, finder in enumerate(finders):
            held = ahead[rank]
            if held is not None and held.start() < at:
                ahead[rank] = finder.search(text, at)
        found = [(m.start(), rank, m) for rank, m in enumerate(ahead) if m is not None]
        if not found:
            break
        start, _, match = min(found, key=lambda f: (f[0], f[1]))
        ranges.append((start, match.end()))
        at = max(match.end(), start + 1)
    return ranges


def strip_hidden(text: str) -> str:
    """``text`` as a person reading the rendered page sees it: what could carry instructions no reviewer saw is
    removed before it reaches a prompt (a known attack on agents that read GitHub).

    - HTML comments (and one left open, to the end), processing instructions (``<?...?>``), CDATA sections and
      declarations (``<!DOCTYPE ...>``), outside code: GitHub shows none of them.
    - Zero-width and bidirectional control characters, Unicode tag characters (U+E0000-U+E007F) and supplementary
      variation selectors, everywhere (in code too: they are no more visible there).
    - Images become ``[image]``: their alt text is shown to nobody who sees the picture.
    - Link titles (a tooltip) and reference definitions (never rendered) are dropped; the link text and URL stay.
      So are the attributes of an HTML tag that are never shown as text: ``title``, ``alt``, ``aria-*``, ``data-*``.
    - A ``<details>`` block that is not ``open`` keeps its summary, and its content is left out, marked: a reader of
      the page sees only the summary unless they choose to expand it, so its content is not what the reviewer was
      seen to ask for. (An ``open`` one is shown as it is and is kept.) Nested ones end at their own close; one
      never closed hides the rest of the text, as it does on the page.
    - ``<template>``, ``<script>`` and ``<style>`` elements, with all they hold (one never closed: the rest).

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
    comment, a declaration or an element that hides its content starts first decides (a comment holding code hides
    the code; code holding ``<!--`` shows it)."""
    text = _INVISIBLE.sub("", _ANGLED.sub(_invisible_in_tag, text))
    finders: tuple[_Finder, ...] = (_FENCE, _INLINE_CODE, _COMMENT, _DECLARATION, _Hiding(text))
    out: list[str] = []
    at = 0
    # Each finder's next match, searched again only once the scan has passed its start: linear in the text.
    ahead = [f.search(text, 0) for f in finders]
    while at < len(text):
        for rank, finder in enumerate(finders):
            held = ahead[rank]
            if held is not None and held.start() < at:
                ahead[rank] = finder.search(text, at)
        found = [(m.start(), rank, m) for rank, m in enumerate(ahead) if m is not None]
        if not found:
            break
        start, rank, match = min(found, key=lambda f: (f[0], f[1]))
        out.append(_strip_markup(text[at:start]))
        if rank <= 1:  # code, shown as it is
            out.append(match.group(0) if isinstance(match, re.Match) else "")
        elif isinstance(match, _Hit):  # an element that hides: what a reader sees of it (a summary), if anything
            out.append(match.instead)
        at = max(match.end(), start + 1)  # (a comment, a declaration: nothing of it)
    out.append(_strip_markup(text[at:]))
    return "".join(out)


def _invisible_in_tag(tag: re.Match[str]) -> str:
    """A tag with an invisible character in it, as it would be read once the character is gone, on the safe side: a
    ``<details>`` one is collapsed whatever its attributes say, and a closing one (which closes nothing in a
    browser) is dropped, so that nothing hidden comes out."""
    raw = tag.group(0)
    if _INVISIBLE.search(raw) is None:
        return raw
    seen = _INVISIBLE.sub("", raw)
    if seen.startswith("</"):
        return ""
    return "<details>" if seen[1:].lower().startswith("details") else raw


def _summary(inner: str) -> re.Match[str] | None:
    """The first ``<summary>`` of a details block's content (tried at its start only: linear, however many)."""
    lower = inner.lower()
    start = lower.find("<summary")
    return _SUMMARY.match(inner, start) if start != -1 and "</summary" in lower[start:] else None


def _strip_markup(text: str) -> str:
    text = _IMAGE.sub("[image]", text)
    text = _IMG_TAG.sub("[image]", text)
    text = _LINK_TITLE.sub(r"\1)", text)
    text = _TAG.sub(lambda tag: _HIDDEN_ATTRIBUTE.sub("", tag.group(0)), text)
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


def mirrored(piece: Feedback, body: str) -> str:
    """What a pull request is told of ``piece``, given on beflow's page, and beflow's answer ``body``: who said what,
    where (quoted, what a reader never sees left out), then the answer."""
    where = f" on `{piece.path}`" if piece.path else " on the whole change"
    where += f" line {piece.line}" if piece.path and piece.line else ""
    lines = strip_hidden(piece.body).splitlines() or [""]
    quoted = "\n".join(f"> {line}" for line in lines[:MIRRORED_LINES])
    more = f"\n> … ({len(lines) - MIRRORED_LINES} more lines)" if len(lines) > MIRRORED_LINES else ""
    return f"{piece.author} commented on beflow's page{where}:\n\n{quoted}{more}\n\n{body}"


#: Lines of a page comment quoted in the pull request, at most.
MIRRORED_LINES = 20


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


# -- what a round consumed, and when it may start (the run side of rounds: beflow/ops/rounds.py)
# ------------------------

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
