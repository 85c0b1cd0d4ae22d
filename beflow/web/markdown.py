"""Issue bodies and comments as the page shows them: Markdown rendered to inert HTML.

The renderer is markdown-it-py (CommonMark, plus tables and strikethrough), which beflow has already through
``rich``. What an issue says may be hostile (anyone who can file an issue wrote it), so the renderer is set to
produce only what it generates itself: raw HTML is off (a ``<script>`` in a body is shown as characters, and so is
any tag with an event handler or a ``style``), a link goes only to ``http:``, ``https:`` or ``mailto:`` (a
``javascript:`` or ``data:`` link stays text) and leaves with no referrer, and an image is never loaded: it
becomes a placeholder naming its host, a link to it for whoever wants to look (a remote image would tell its
server who reads the issue, and when). The page's Content-Security-Policy refuses other origins' images and
scripts as well: two locks, not one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.token import Token
from markupsafe import Markup

_SCHEMES = ("http", "https", "mailto")


def _safe_link(url: str) -> bool:
    """Only links that leave for the web or a mail client: never a script, a data document or a local file."""
    scheme = urlsplit(url.strip()).scheme.lower()
    return scheme in _SCHEMES


def _image(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    alt = "".join(child.content for child in token.children or [])
    host = urlsplit(src).hostname or "an unknown host"
    label = f"image from {host}" + (f": {alt}" if alt else "")
    if _safe_link(src):
        return (
            f'<a class="image-placeholder" href="{escapeHtml(src)}" rel="noreferrer noopener nofollow" '
            f'title="not loaded: opens the image">[{escapeHtml(label)}]</a>'
        )
    return f'<span class="image-placeholder">[{escapeHtml(label)}]</span>'


def _link_open(renderer: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    token.attrSet("rel", "noreferrer noopener nofollow")
    return f"<a{_attrs(token)}>"


def _attrs(token: Token) -> str:
    return "".join(f' {escapeHtml(name)}="{escapeHtml(str(value))}"' for name, value in token.attrs.items())


def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    md.validateLink = _safe_link  # type: ignore[method-assign]
    md.add_render_rule("image", _image)
    md.add_render_rule("link_open", _link_open)
    return md


_MD = _renderer()


def markdown(text: str) -> Markup:
    """``text`` (an issue's body, a comment) as HTML that runs nothing and loads nothing. (The pages give it
    plain text: terminal escapes removed, a huge text cut — ``filters.markdown``.)"""
    return Markup(f'<div class="markdown">{_MD.render(text)}</div>')
