"""An agent's words in a pull request body or a comment act on nothing on GitHub: no closing keyword, no reference,
no mention outside of beflow's own ``Closes #<key>`` line."""

from __future__ import annotations

import re

import pytest

from beflow.records.record import RunRecord, now
from beflow.run.summary import summary
from beflow.trackers.quoting import JOINER, code, fenced, inert
from tests.support.github import acted_on as active

HOSTILE = [
    "Fixes #2",
    "closes org/repo#3",
    "Resolved #4 and FIXES octo/hello#5",
    "cc @org/security-team @user",
    "``` \nFixes #6\n```",
    "````\n@user\n`````",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_fenced_message_acts_on_nothing_and_keeps_its_words(text: str) -> None:
    block = fenced(text)
    assert active(block) == [] and text in block


@pytest.mark.parametrize("text", HOSTILE)
def test_inert_text_acts_on_nothing_and_reads_the_same(text: str) -> None:
    assert active(inert(text)) == [] or "`" in text  # (backticks aside: inert is for one line of prose)
    assert inert(text).replace(JOINER, "") == text


@pytest.mark.parametrize("text", ["see GH-12", "gh-12 and #3", "(GH-7)"])
def test_inert_text_links_no_issue(text: str) -> None:
    shown = inert(text)
    assert re.findall(r"(?i)(?<![\w-])GH-\d|#\d", shown) == [] and shown.replace(JOINER, "") == text
    assert inert("HIGH-5 and ghost-1") == "HIGH-5 and ghost-1"  # words that only end in gh: left alone


@pytest.mark.parametrize(("name", "shown"), [("a.py", "`a.py`"), ("a`b.py", "``a`b.py``"), ("`x`", "`` `x` ``")])
def test_a_file_name_is_inline_code_nothing_in_it_can_close(name: str, shown: str) -> None:
    assert code(name) == shown


def test_the_summary_quotes_the_agents_message_and_its_stop_reason() -> None:
    record = RunRecord(id="r1", issue="1", title="t", mode="auto", agent="a", attempt=1, branch="beflow/1",
                       started_at=now())  # fmt: skip
    message = "\n".join(HOSTILE)
    record.close("failed", "the agent said: Fixes #9 @user")
    record.final_message = message
    record.changed_files = ["M\tfixes #7 @user`.py"]
    text = summary(record)
    assert active(text) == []
    assert all(line in text for line in message.splitlines())
    assert active(f"{text}\n\nCloses #1") == ["Closes #1"]  # only beflow's own line acts


@pytest.mark.parametrize(
    "text",
    ["<!-- beflow:rework -->\nagain", "<!--beflow-->", "x <!--  BeFlow:answer 0a1b --> y", "<!--\nbeflow:progress -->"],
)
def test_an_agents_words_carry_no_mark_of_beflows(text: str) -> None:
    from beflow.trackers.quoting import unmarked

    assert "<!--" not in unmarked(text) and unmarked(text).count("&lt;!--") == text.count("<!--")
    assert unmarked("<!-- a note --> `<!-- code -->`") == "<!-- a note --> `<!-- code -->`"
