"""Issue bodies and comments as the page renders them: Markdown that runs nothing and loads nothing."""

from __future__ import annotations

import re

import pytest

from beflow.web.filters import markdown

EVIL = "https://evil.example"


def test_markdown_renders_what_a_person_writes() -> None:
    html = str(markdown("# Plan\n\n- **one**\n- `two`\n\n| a | b |\n|---|---|\n| 1 | ~~2~~ |\n\n> quoted"))
    assert "<h1>Plan</h1>" in html and "<strong>one</strong>" in html and "<code>two</code>" in html
    assert "<td>1</td>" in html and "<s>2</s>" in html and "<blockquote>" in html
    assert html.startswith('<div class="markdown">')


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "<svg onload=alert(1)></svg>",
        '<a href="javascript:alert(1)">a</a>',
        "<iframe src=https://evil.example></iframe>",
        "<details open ontoggle=alert(1)>x</details>",
        '<span style="display:none">hidden</span>',
        "<style>body{display:none}</style>",
        "<!-- <script>alert(1)</script> -->",
        "<math><mi xlink:href=javascript:alert(1)>x</mi></math>",
    ],
)
def test_html_in_markdown_is_shown_as_characters(hostile: str) -> None:
    html = str(markdown(f"before {hostile} after"))
    assert "<" + hostile[1:] not in html  # no tag of it survives as a tag
    assert not re.search(r"<(script|img|svg|iframe|details|style|math|span|a)\b", html)
    assert not [tag for tag in re.findall(r"<[^>]*>", html) if " on" in tag or "style" in tag]


@pytest.mark.parametrize(
    "link",
    [
        "javascript:alert(1)",
        "JaVaScRiPt:alert(1)",
        "&#106;avascript:alert(1)",
        " javascript:alert(1)",
        "vbscript:msgbox(1)",
        "data:text/html,<script>alert(1)</script>",
        "file:///etc/passwd",
        "//evil.example/x",
        "/api/v1/runs/latest/cancel",
    ],
)
def test_a_link_goes_only_to_the_web_or_a_mail_client(link: str) -> None:
    html = str(markdown(f"[click]({link}) and <{link}>"))
    assert "href" not in html


def test_web_and_mail_links_leave_with_no_referrer() -> None:
    html = str(markdown("[site](https://example.org/a) [mail](mailto:ann@example.org)"))
    assert '<a href="https://example.org/a" rel="noreferrer noopener nofollow">site</a>' in html
    assert '<a href="mailto:ann@example.org" rel="noreferrer noopener nofollow">mail</a>' in html


def test_an_image_is_never_loaded_a_placeholder_names_its_host() -> None:
    html = str(markdown(f"![tracker pixel]({EVIL}/p.png) ![]({EVIL}/q.png) ![x](data:image/png;base64,AA)"))
    assert "<img" not in html
    assert "[image from evil.example: tracker pixel]" in html and "[image from evil.example]" in html
    assert f'href="{EVIL}/p.png" rel="noreferrer noopener nofollow"' in html
    assert 'href="data:' not in html


def test_terminal_escapes_go_and_a_huge_text_is_cut() -> None:
    html = str(markdown("\x1b[31mred\x1b[0m " + "y" * 30_000))
    assert "\x1b" not in html and "[31m" not in html and "red" in html
    assert "more characters]" in html and len(html) < 21_000
