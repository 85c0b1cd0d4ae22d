"""A small syntax highlighter for the review's diff: comments, strings, numbers and keywords of the usual languages,
each a ``<span class="t-…">`` around text that is escaped first. No dependency: a reviewer needs the shape of the
code, not a grammar. A line is highlighted on its own (a string or comment spanning lines is not followed)."""

from __future__ import annotations

import re

from markupsafe import Markup, escape

from beflow.web.filters import plain

#: Characters of one line highlighted, at most (the rest is cut with a marker, as elsewhere on the page).
MAX_LINE = 1000

_KEYWORDS = [
    "and",
    "as",
    "assert",
    "async",
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "def",
    "default",
    "del",
    "do",
    "elif",
    "else",
    "enum",
    "except",
    "export",
    "extends",
    "false",
    "False",
    "final",
    "finally",
    "fn",
    "for",
    "from",
    "func",
    "function",
    "go",
    "if",
    "impl",
    "import",
    "in",
    "interface",
    "is",
    "let",
    "match",
    "mod",
    "module",
    "mut",
    "new",
    "nil",
    "None",
    "not",
    "null",
    "or",
    "package",
    "pass",
    "private",
    "protected",
    "pub",
    "public",
    "raise",
    "return",
    "self",
    "static",
    "struct",
    "super",
    "switch",
    "this",
    "throw",
    "true",
    "True",
    "try",
    "type",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
]
_HASH_COMMENTS = {".py", ".sh", ".bash", ".rb", ".toml", ".yaml", ".yml", ".pl", ".r", ".cfg", ".ini", ".mk"}
_HASH_NAMES = {"makefile", "dockerfile", ".gitignore", ".env"}


def _pattern(comment: str) -> re.Pattern[str]:
    return re.compile(
        rf"(?P<c>{comment}.*$)"
        r"|(?P<s>\"(?:[^\"\\]|\\.)*\"?|'(?:[^'\\]|\\.)*'?|`[^`]*`?)"
        r"|(?P<n>\b(?:0[xX][0-9a-fA-F_]+|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?)\b)"
        rf"|(?P<k>\b(?:{'|'.join(_KEYWORDS)})\b)"
    )


_HASH = _pattern("#")
_SLASH = _pattern(r"//|--\s|/\*")
_CLASSES = {"c": "t-com", "s": "t-str", "n": "t-num", "k": "t-key"}


def language_of(path: str) -> re.Pattern[str] | None:
    """The tokens of ``path``'s language family by its name; None for prose (Markdown, text) — shown plain."""
    name = path.rsplit("/", 1)[-1].lower()
    suffix = "." + name.rsplit(".", 1)[-1] if "." in name else ""
    if suffix in {".md", ".txt", ".rst", ".json", ".lock", ".csv", ".svg", ".html", ".xml"}:
        return None
    if suffix in _HASH_COMMENTS or name in _HASH_NAMES:
        return _HASH
    return _SLASH


def highlight(path: str, text: str) -> Markup:
    """``text`` (one line of ``path``) as escaped HTML with its tokens marked."""
    value = plain(text, MAX_LINE)
    pattern = language_of(path)
    if pattern is None:
        return escape(value)
    out: list[str] = []
    at = 0
    for found in pattern.finditer(value):
        kind = found.lastgroup
        if kind is None:
            continue
        out.append(str(escape(value[at : found.start()])))
        out.append(f'<span class="{_CLASSES[kind]}">{escape(found.group())}</span>')
        at = found.end()
    out.append(str(escape(value[at:])))
    return Markup("".join(out))
