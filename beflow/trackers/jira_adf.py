"""Jira's Atlassian Document Format (ADF) and beflow's Markdown, both ways.

**Writing** (:func:`document`): beflow writes Markdown; Jira Cloud's REST API v3 takes ADF. Paragraphs, headings,
fenced code blocks (code blocks, where Jira links and mentions nothing), inline code, ``[text](https://...)`` links
and bare ``https://`` links of beflow's own words. No node that acts is ever written: no mention, no smart link
(inline card), no emoji, no status; an agent's words, made inert first (:mod:`beflow.trackers.jira_quoting`), hold no
link either.

**Reading** (:func:`markdown`): an issue's description and its comments as Markdown for the prompt. What a person
cannot see without a click is left out — an ``expand`` (and a nested one) hides its content — so that nothing hidden
from the people who read the issue reaches an agent. Mentions read as ``@name``, cards as their URL; an unknown node
is read for its text. A document deeper than :data:`MAX_DEPTH` is read no deeper.
"""

from __future__ import annotations

import json
import re
from typing import Any

from beflow.trackers import quoting

#: How deep a document is read: a hostile one nested thousands deep is cut, not a recursion error.
MAX_DEPTH = 64
#: Nodes whose content is hidden behind a click: left out of what beflow reads.
HIDDEN = frozenset({"expand", "nestedExpand"})

#: The most a comment's document may weigh, as JSON: Jira refuses a comment over 32,767 characters.
MAX_COMMENT = 32_000
#: What ends a text beflow had to cut to fit.
CUT = "\n\n(cut here: Jira keeps comments of at most 32,767 characters)"

_FENCE = re.compile(r"^(`{3,})([^`\n]*)$")
_HEADING = re.compile(r"^(#{1,6}) +(.+)$")
_INLINE = re.compile(r"(`+)(.+?)\1|\[([^\]\n]+)\]\((https?://[^\s)]+)\)|(https?://[^\s<>()\"']+)")


# -- writing ---------------------------------------------------------------------------------------------------------


def document(text: str) -> dict[str, Any]:
    """Markdown ``text`` as an ADF document (see the module's description)."""
    content: list[dict[str, Any]] = []
    lines = text.replace("\r\n", "\n").split("\n")
    paragraph: list[str] = []

    def flush() -> None:
        if paragraph:
            content.append({"type": "paragraph", "content": _inline_lines(paragraph)})
            paragraph.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            close = fence.group(1)
            body: list[str] = []
            i += 1
            while i < len(lines) and not (lines[i].startswith(close) and lines[i].strip("`").strip() == ""):
                body.append(lines[i])
                i += 1
            block: dict[str, Any] = {"type": "codeBlock"}
            language = fence.group(2).strip()
            if language:
                block["attrs"] = {"language": language[:50]}
            if body:
                block["content"] = [{"type": "text", "text": "\n".join(body)}]
            content.append(block)
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            content.append({"type": "heading", "attrs": {"level": level}, "content": _inline(heading.group(2))})
        elif line.strip():
            paragraph.append(line)
        else:
            flush()
        i += 1
    flush()
    return {"type": "doc", "version": 1, "content": content}


def fitting(text: str, limit: int = MAX_COMMENT) -> dict[str, Any]:
    """Markdown ``text`` as an ADF document of at most ``limit`` characters of JSON: cut, and said so, when longer (an
    agent's long last message would otherwise be refused whole)."""
    made = document(text)
    size = len(json.dumps(made))
    while size > limit and text:
        text = text[: max(0, len(text) * limit // size - len(CUT) - 64)]
        made = document(text + CUT)
        size = len(json.dumps(made))
    return made


def _inline_lines(lines: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n, line in enumerate(lines):
        if n:
            out.append({"type": "hardBreak"})
        out.extend(_inline(line))
    return out


def _inline(text: str) -> list[dict[str, Any]]:
    """One line's text nodes: inline code, links of beflow's own words, plain text."""
    out: list[dict[str, Any]] = []
    at = 0
    for found in _INLINE.finditer(text):
        if found.start() > at:
            out.append({"type": "text", "text": text[at : found.start()]})
        if found.group(1):
            out.append({"type": "text", "text": found.group(2), "marks": [{"type": "code"}]})
        elif found.group(3):
            mark = {"type": "link", "attrs": {"href": found.group(4)}}
            out.append({"type": "text", "text": found.group(3), "marks": [mark]})
        else:
            url = found.group(5)
            out.append({"type": "text", "text": url, "marks": [{"type": "link", "attrs": {"href": url}}]})
        at = found.end()
    if at < len(text):
        out.append({"type": "text", "text": text[at:]})
    return out


# -- reading ---------------------------------------------------------------------------------------------------------


def markdown(doc: Any) -> str:
    """ADF ``doc`` as Markdown (see the module's description); anything that is no document reads as nothing, and a
    plain string (Jira's API v2 shape) as itself."""
    if isinstance(doc, str):
        return doc
    if not isinstance(doc, dict):
        return ""
    return "\n\n".join(b for b in _blocks(doc.get("content"), 0) if b.strip()).strip()


def _children(node: Any) -> list[Any]:
    content = node.get("content") if isinstance(node, dict) else None
    return content if isinstance(content, list) else []


def _attrs(node: dict[str, Any]) -> dict[str, Any]:
    attrs = node.get("attrs")
    return attrs if isinstance(attrs, dict) else {}


def _blocks(nodes: Any, depth: int) -> list[str]:
    if depth > MAX_DEPTH or not isinstance(nodes, list):
        return []
    out: list[str] = []
    for node in nodes:
        if isinstance(node, dict):
            out.append(_block(node, depth + 1))
    return out


def _block(node: dict[str, Any], depth: int) -> str:
    kind = node.get("type")
    if kind in HIDDEN or depth > MAX_DEPTH:
        return ""
    if kind == "paragraph":
        return _text(_children(node), depth)
    if kind == "heading":
        level = _attrs(node).get("level")
        hashes = "#" * (level if isinstance(level, int) and 1 <= level <= 6 else 1)
        return f"{hashes} {_text(_children(node), depth)}"
    if kind == "codeBlock":
        language = _attrs(node).get("language")
        info = language if isinstance(language, str) and re.fullmatch(r"[\w+#.-]{1,50}", language) else "text"
        return quoting.fenced(_plain(_children(node), depth), info)
    if kind in ("bulletList", "orderedList"):
        items = []
        for n, item in enumerate(_children(node), start=1):
            inner = "\n\n".join(b for b in _blocks(_children(item), depth) if b.strip())
            bullet = f"{n}. " if kind == "orderedList" else "- "
            items.append(bullet + inner.replace("\n", "\n" + " " * len(bullet)))
        return "\n".join(items)
    if kind == "blockquote":
        inner = "\n\n".join(b for b in _blocks(_children(node), depth) if b.strip())
        return "\n".join("> " + line for line in inner.split("\n"))
    if kind == "rule":
        return "---"
    if kind == "table":
        rows = []
        for row in _children(node):
            cells = [" ".join(_blocks(_children(cell), depth)).replace("\n", " ") for cell in _children(row)]
            rows.append("| " + " | ".join(cells) + " |")
        return "\n".join(rows)
    if kind in ("mediaSingle", "mediaGroup", "media"):
        return ""
    if kind == "blockCard" or kind == "embedCard":
        url = _attrs(node).get("url")
        return url if isinstance(url, str) else ""
    # A panel, a layout, a decision list, and whatever Jira adds next: its content, read as blocks (a text node among
    # them, as text).
    inline = [n for n in _children(node) if isinstance(n, dict) and n.get("type") in ("text", "hardBreak")]
    if inline:
        return _text(_children(node), depth)
    return "\n\n".join(b for b in _blocks(_children(node), depth) if b.strip())


def _text(nodes: list[Any], depth: int) -> str:
    out: list[str] = []
    for node in nodes:
        if not isinstance(node, dict) or depth > MAX_DEPTH:
            continue
        kind = node.get("type")
        attrs = _attrs(node)
        if kind == "text":
            out.append(_marked(node))
        elif kind == "hardBreak":
            out.append("\n")
        elif kind == "mention":
            said = attrs.get("text")
            out.append(said if isinstance(said, str) and said.startswith("@") else f"@{said or 'someone'}")
        elif kind in ("inlineCard",):
            url = attrs.get("url")
            out.append(url if isinstance(url, str) else "")
        elif kind in ("emoji", "status"):
            said = attrs.get("text") or attrs.get("shortName")
            out.append(said if isinstance(said, str) else "")
        elif kind in HIDDEN:
            continue
        else:
            out.append(_text(_children(node), depth + 1))
    return "".join(out)


def _plain(nodes: list[Any], depth: int) -> str:
    out: list[str] = []
    for node in nodes:
        if not isinstance(node, dict) or depth > MAX_DEPTH:
            continue
        if node.get("type") == "text":
            text = node.get("text")
            out.append(text if isinstance(text, str) else "")
        elif node.get("type") == "hardBreak":
            out.append("\n")
        else:
            out.append(_plain(_children(node), depth + 1))
    return "".join(out)


def _marked(node: dict[str, Any]) -> str:
    text = node.get("text")
    if not isinstance(text, str):
        return ""
    marks = node.get("marks")
    kinds = {m.get("type"): m for m in marks if isinstance(m, dict)} if isinstance(marks, list) else {}
    if "code" in kinds:
        return quoting.code(text)
    if "strong" in kinds:
        text = f"**{text}**"
    if "em" in kinds:
        text = f"*{text}*"
    if "strike" in kinds:
        text = f"~~{text}~~"
    link = kinds.get("link")
    if link is not None:
        href = _attrs(link).get("href")
        if isinstance(href, str) and href != text:
            text = f"[{text}]({href})"
    return text
