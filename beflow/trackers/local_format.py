"""The local tracker's file format: one Markdown file per issue, YAML front matter, the body, then the comments
after a marker line::

    ---
    key: 7
    title: Fix the login crash
    status: ready
    priority: 2
    labels: [bug]
    created: '2024-05-01T10:00:00Z'
    updated: '2024-05-01T10:00:00Z'
    ---

    The body, in Markdown.

    <!-- beflow:comments -->

    ### alice · 2024-05-01T10:05:00Z

    A comment.

:func:`render` writes it and :func:`parse` reads it back; the front matter goes through a YAML loader that refuses
anchors, aliases, deep nesting and repeated keys. Whatever is wrong with a file is an :class:`IssueFileError`
naming the file and the line. :mod:`beflow.trackers.local` is the tracker around it, as
:mod:`beflow.trackers.local_index` is its index.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator

from beflow.errors import ConfigError
from beflow.system import startup
from beflow.system.files import FileTooLarge, read_regular
from beflow.trackers.issue import (
    DEFAULT_PRIORITY,
    MAX_STORED_TEXT,
    Comment,
    FileProblem,
    Issue,
    Status,
    as_utc,
    format_time,
    normalize_text,
)
from beflow.validation import problems_of

if TYPE_CHECKING:
    import yaml
else:
    yaml = startup.module("yaml")  # reading from the index needs no YAML

#: The line that starts the comments section. Everything after it is comments under ``### author · time`` headings.
COMMENTS_MARKER = "<!-- beflow:comments -->"
FENCE = "---"
# A comment heading is any line that starts with "### " after the marker; the marker is that line (trailing blanks
# aside). Lines of text that would read as either are written with one more backslash in front, and read back
# without it, so that any text survives the round trip.
_HEADING = re.compile(r"^### ")
_ESCAPED_HEADING = re.compile(r"^\\*### ")
_ESCAPED_MARKER = re.compile(rf"^\\*{re.escape(COMMENTS_MARKER)}[ \t]*$")

#: Bytes an issue file may hold (a body, and every comment runs leave): a file beyond it is a problem, not a stall.
MAX_ISSUE_FILE = 4 << 20
#: Characters of front matter (key, title, status, priority, labels, times: a few hundred in practice).
MAX_FRONT_MATTER = 64 << 10
#: Nesting of YAML collections in the front matter (labels is a list: depth 2).
MAX_FRONT_MATTER_DEPTH = 8
#: Issues one issue may wait for (``blocked_by``).
MAX_BLOCKERS = 100


_CAREFUL: list[Any] = []


def _careful_loader() -> Any:
    """The careful front matter loader (made on first use: reading from the index needs no YAML)."""
    if _CAREFUL:
        return _CAREFUL[0]

    class _FrontMatterLoader(yaml.SafeLoader):
        """YAML as front matter needs it: no anchors or aliases (a few hundred bytes of aliases expand to gigabytes),
        no deep nesting (the composer recurses), and no key given twice in one mapping (YAML would silently keep the
        last value: a person who wrote ``status`` twice meant one of them, and beflow must not guess which)."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            event = self.peek_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise yaml.composer.ComposerError(
                    None, None, "anchors and aliases (& and *) are not allowed in front matter", event.start_mark
                )
            depth = getattr(self, "_depth", 0)
            if depth >= MAX_FRONT_MATTER_DEPTH:
                raise yaml.composer.ComposerError(
                    None, None, f"nested too deeply (more than {MAX_FRONT_MATTER_DEPTH} levels)", event.start_mark
                )
            self._depth = depth + 1
            try:
                return super().compose_node(parent, index)
            finally:
                self._depth = depth

    _FrontMatterLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
    _CAREFUL.append(_FrontMatterLoader)
    return _FrontMatterLoader


class _FrontMatter(BaseModel):
    """The front matter as a person may write it; unknown keys are errors so that a typo never goes unnoticed."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # (reading from the index needs no parsing)

    key: int = Field(ge=1)
    title: str
    status: Status
    priority: int = Field(default=DEFAULT_PRIORITY, ge=0)
    labels: list[str] = Field(default_factory=list)
    created: dt.datetime | None = None
    updated: dt.datetime | None = None
    #: The keys of the issues this one waits for (``blocked_by: [3, 5]``).
    blocked_by: list[int] = Field(default_factory=list, max_length=MAX_BLOCKERS)

    @field_validator("key", "priority", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected a whole number")
        if isinstance(value, int) and value.bit_length() > 63:  # (and never printed: it may be thousands of digits)
            raise ValueError("expected a number below 2^63")
        return value

    @field_validator("title", mode="before")
    @classmethod
    def _title(cls, value: Any) -> Any:
        # YAML reads `title: 2024` as a number; the person meant the text.
        return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value

    @field_validator("labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):  # `labels: bug, ui` reads as one string
            return [part for part in (p.strip() for p in value.split(",")) if part]
        if isinstance(value, list):
            return [str(v) if isinstance(v, int | float) and not isinstance(v, bool) else v for v in value]
        return value

    @field_validator("blocked_by", mode="before")
    @classmethod
    def _blockers(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, int | str) and not isinstance(value, bool):  # `blocked_by: 3`, `blocked_by: "#3"`
            value = [value]
        if not isinstance(value, list):
            return value
        keys = []
        for item in value:
            if isinstance(item, str) and item.strip().removeprefix("#").isascii() and item.strip("# ").isdigit():
                item = int(item.strip().removeprefix("#"))
            if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item < 2**63:
                raise ValueError(f"expected issue keys (whole numbers, as in [3, 5]), not {_shown(item)}")
            keys.append(item)
        return list(dict.fromkeys(keys))


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        with contextlib.suppress(TypeError):  # (an unhashable key is YAML's own error, below)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (first at line {seen[key] + 2})", key_node.start_mark
                )
            seen[key] = key_node.start_mark.line
    return loader.construct_mapping(node)


class IssueFileError(ConfigError):
    """An issue file that cannot be read: names the file and the line."""

    def __init__(self, problems: list[FileProblem]) -> None:
        super().__init__(
            "\n".join(p.render() for p in problems),
            fix="Fix the file at that line (`beflow docs trackers` describes the format), or `git checkout` it.",
        )
        self.problems = problems


# --- the file format -----------------------------------------------------------------------------------------------


def _escape(text: str, pattern: re.Pattern[str]) -> str:
    """Add one backslash to every line that would otherwise be read as structure (a heading, the marker)."""
    return "\n".join("\\" + line if pattern.match(line) else line for line in text.split("\n"))


def _unescape(lines: list[str], pattern: re.Pattern[str]) -> str:
    """The inverse of :func:`_escape`: one backslash less on every line it escaped."""
    return "\n".join(line[1:] if line.startswith("\\") and pattern.match(line) else line for line in lines)


def render(issue: Issue) -> str:
    """The text of an issue file; :func:`parse` reads it back to an equal issue."""
    front = {
        "key": int(issue.key),
        "title": issue.title,
        "status": issue.status.value,
        "priority": issue.priority,
        "labels": list(issue.labels),
        "created": format_time(issue.created),
        "updated": format_time(issue.updated),
    }
    if issue.blocked_by:  # (only when set: every other file reads as it always did)
        front["blocked_by"] = [int(key) for key in issue.blocked_by]
    dumped = yaml.safe_dump(front, sort_keys=False, allow_unicode=True, default_flow_style=None, width=2**31)
    parts = [f"{FENCE}\n{dumped}{FENCE}\n"]
    if issue.body:
        parts.append(_escape(issue.body, _ESCAPED_MARKER) + "\n")
    parts.append(COMMENTS_MARKER + "\n")
    for comment in issue.comments:
        parts.append(f"### {comment.author} · {format_time(comment.created)}\n")
        parts.append(_escape(comment.text, _ESCAPED_HEADING) + "\n")
    return "\n".join(parts)


def parse(path: Path, text: str, *, mtime: dt.datetime | None = None) -> Issue:
    """The issue in ``text`` (read from ``path``); any problem is an :class:`IssueFileError` with its line."""

    def fail(line: int | None, message: str) -> IssueFileError:
        return IssueFileError([FileProblem(path=path, line=line, message=message)])

    if len(text) > MAX_ISSUE_FILE:
        raise fail(None, f"the file is larger than {MAX_ISSUE_FILE // (1 << 20)} MiB; beflow does not read it")
    text = text.replace("\r\n", "\n").replace("\r", "\n").removeprefix("\ufeff")
    lines = text.split("\n")

    if not lines or lines[0].rstrip() != FENCE:
        raise fail(1, "expected the file to start with a '---' line (the front matter: key, title, status, ...)")
    end = next((i for i in range(1, len(lines)) if lines[i].rstrip() in (FENCE, "...")), None)
    if end is None:
        raise fail(1, "the front matter that starts here has no closing '---' line")
    front_lines = lines[1:end]
    front_text = "\n".join(front_lines)
    if len(front_text) > MAX_FRONT_MATTER:
        raise fail(
            2, f"the front matter is longer than {MAX_FRONT_MATTER // 1024} KiB (it holds key, title, status...)"
        )
    try:
        data = _load_front_matter(front_text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        hint = " (put quotes around a value that contains ': ')" if "mapping values" in problem else ""
        context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if context and context_mark and mark and context_mark.line != mark.line:
            hint += f" ({context} at line {context_mark.line + 2})"
        raise fail(mark.line + 2 if mark else 2, f"invalid YAML in the front matter: {problem}{hint}") from None
    except RecursionError:
        raise fail(2, "the front matter is nested too deeply to read (it holds 'key: value' lines)") from None
    except ValueError:  # a number longer than Python reads (4300 digits)
        raise fail(2, "the front matter holds a number too long to read") from None
    if not isinstance(data, dict):
        raise fail(2, "the front matter must be 'key: value' lines (key, title, status, ...)")
    for line in front_lines:  # YAML 1.1 reads `key: 0010` as octal 8; a person copying the file name means 10
        padded = re.match(r"^key\s*:\s*(0\d+)\s*$", line)
        if padded and len(padded.group(1)) <= 100:
            data["key"] = int(padded.group(1), 10)
    try:
        front = _FrontMatter.model_validate(data)
    except pydantic.ValidationError as exc:
        found = problems_of(exc, model=_FrontMatter, data=data, path=path, text="")
        raise IssueFileError(
            [
                FileProblem(
                    path=path, line=_line_of_key(front_lines, p.key.split(".")[0]), message=f"{p.key}: {p.message}"
                )
                for p in found
            ]
        ) from None

    rest = lines[end + 1 :]
    marker_at = next((i for i, line in enumerate(rest) if line.rstrip(" \t") == COMMENTS_MARKER), None)
    body_lines = rest if marker_at is None else rest[:marker_at]
    comments = [] if marker_at is None else _parse_comments(path, rest[marker_at + 1 :], end + 2 + marker_at + 1)

    body = _unescape(body_lines, _ESCAPED_MARKER)
    if len(body) > MAX_STORED_TEXT and len(normalize_text(body)) > MAX_STORED_TEXT:
        size = len(normalize_text(body))
        raise fail(end + 2, f"the body is {size:,} characters long; an issue's body is at most {MAX_STORED_TEXT:,}")
    if front.key in front.blocked_by:
        raise fail(_line_of_key(front_lines, "blocked_by"), f"blocked_by: issue {front.key} cannot wait for itself")
    created = front.created or mtime or dt.datetime.now(dt.UTC)
    try:
        return Issue(
            key=str(front.key),
            title=front.title,
            status=front.status,
            priority=front.priority,
            labels=front.labels,
            created=created,
            updated=front.updated or mtime or created,
            body=body,
            comments=comments,
            path=path,
            url=path.absolute().as_uri(),
            blocked_by=[str(key) for key in front.blocked_by],
        )
    except pydantic.ValidationError as exc:  # a title or label that is empty or spans lines
        key = str(exc.errors()[0]["loc"][0]) if exc.errors()[0]["loc"] else ""
        message = str(exc.errors()[0]["msg"]).removeprefix("Value error, ")
        raise fail(_line_of_key(front_lines, key) or 2, f"{key}: {message}") from None


def _load_front_matter(text: str) -> Any:
    """The front matter's YAML value. Text without ``&`` and ``*`` can hold no anchor or alias, so libyaml reads it
    as safely as the careful loader; anything else, and any error (for the careful loader's message), goes to
    the careful :class:`_FrontMatterLoader`."""
    fast = _fast_loader()
    # Nor can it nest deeper than it has brackets: the careful loader's depth limit (tighter than libyaml's own)
    # applies to anything that could go past it (block nesting needs ever more indentation, which size bounds).
    shallow = text.count("[") + text.count("{") <= MAX_FRONT_MATTER_DEPTH
    if fast is not None and shallow and "&" not in text and "*" not in text:
        with contextlib.suppress(yaml.YAMLError):
            return yaml.load(text, Loader=fast)  # a SafeLoader (libyaml's), refusing repeated keys the same way
    return yaml.load(text, Loader=_careful_loader())  # a SafeLoader


_FAST: list[Any] = []


def _fast_loader() -> Any:
    """libyaml's safe loader, when PyYAML was built with it (several times faster), with the same constructors as
    :class:`_FrontMatterLoader`; None without libyaml."""
    if not _FAST:
        base = getattr(yaml, "CSafeLoader", None)
        loader: Any = None
        if base is not None:
            loader = type("_FastFrontMatterLoader", (base,), {})
            loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)
        _FAST.append(loader)
    return _FAST[0]


def _line_of_key(front_lines: list[str], key: str) -> int:
    """The file line of a top-level front matter key (1, the opening '---', when it is missing)."""
    pattern = re.compile(rf"^['\"]?{re.escape(key)}['\"]?\s*:")
    for index, line in enumerate(front_lines):
        if pattern.match(line):
            return index + 2
    return 1


def _parse_comments(path: Path, lines: list[str], first_line: int) -> list[Comment]:
    """Comments from the lines after the marker; ``first_line`` is the file line of ``lines[0]``."""
    comments: list[Comment] = []
    heading: tuple[int, str, dt.datetime] | None = None
    text: list[str] = []

    def finish() -> None:
        if heading is None:
            return
        line, author, created = heading
        body = normalize_text(_unescape(text, _ESCAPED_HEADING))
        if not body:
            raise IssueFileError(
                [FileProblem(path=path, line=line, message="this comment has no text (delete the heading too)")]
            )
        comments.append(Comment(author=author, created=created, text=body))

    for offset, line in enumerate(lines):
        number = first_line + offset
        if _HEADING.match(line):
            finish()
            heading, text = _parse_heading(path, number, line), []
        elif heading is None:
            if line.strip():
                raise IssueFileError(
                    [
                        FileProblem(
                            path=path,
                            line=number,
                            message="text after the comments marker must be under a '### <author> · <time>' heading",
                        )
                    ]
                )
        else:
            text.append(line)
    finish()
    return comments


def _parse_heading(path: Path, number: int, line: str) -> tuple[int, str, dt.datetime]:
    author, sep, stamp = line[4:].rstrip().rpartition(" · ")
    example = "'### alice · 2024-05-01T10:00:00Z'"
    if not sep or not author.strip():
        raise IssueFileError(
            [FileProblem(path=path, line=number, message=f"a comment heading must look like {example}")]
        )
    try:
        created = as_utc(dt.datetime.fromisoformat(stamp.strip()))
    except ValueError:
        raise IssueFileError(
            [FileProblem(path=path, line=number, message=f"{stamp.strip()!r} is not an ISO 8601 time, as in {example}")]
        ) from None
    return number, author.strip(), created


def file_name(key: str, title: str) -> str:
    """``0007-fix-the-login-crash.md``: the key padded to sort, and the title as a person would shorten it."""
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode("ascii").lower()
    words = re.sub(r"[^a-z0-9]+", "-", ascii_title).strip("-")
    if len(words) > 40:
        words = words[:40].rsplit("-", 1)[0] if "-" in words[:40] else words[:40]
    return f"{int(key):04d}-{words or 'issue'}.md"


def read_text(path: Path) -> tuple[str, dt.datetime]:
    """The text of the issue file at ``path`` and when it was last changed; a file too large, unreadable or not
    UTF-8 is an :class:`IssueFileError`."""
    try:
        raw = read_regular(path, limit=MAX_ISSUE_FILE)
        mtime = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC)
    except FileTooLarge:
        message = f"the file is larger than {MAX_ISSUE_FILE // (1 << 20)} MiB; beflow does not read it"
        raise IssueFileError([FileProblem(path=path, message=message)]) from None
    except OSError as exc:
        raise IssueFileError([FileProblem(path=path, message=f"cannot read: {exc.strerror or exc}")]) from None
    try:
        return raw.decode("utf-8"), mtime
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise IssueFileError([FileProblem(path=path, line=line, message="not UTF-8 text")]) from None
