"""The review diff's highlighter escapes before it marks."""

from beflow.web.highlight import highlight


def test_tokens_are_marked_and_markup_stays_text() -> None:
    shown = str(highlight("x.py", 'def f(): return "<script>" # <b>'))
    assert '<span class="t-key">def</span>' in shown
    assert "<script>" not in shown and "&lt;script&gt;" in shown
    assert '<span class="t-com"># &lt;b&gt;</span>' in shown
    assert str(highlight("notes.md", "<i>def</i>")) == "&lt;i&gt;def&lt;/i&gt;"
