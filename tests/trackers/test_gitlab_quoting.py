"""An agent's words in what beflow writes on GitLab act on nothing: no quick action, closing word, reference or
mention, but for beflow's own ``Closes #<key>`` line; a reader sees the same words."""

from __future__ import annotations

import pytest

from beflow.records.record import RunRecord, now
from beflow.run.summary import summary
from beflow.trackers.gitlab_quoting import inert, inert_markdown
from beflow.trackers.quoting import JOINER, fenced
from tests.support.gitlab_markdown import acted_on

HOSTILE = [
    "Fixes #2",
    "closes acme/other#3 and Implements !4",
    "Resolving https://gitlab.example.com/acme/widgets/-/issues/5",
    'cc @security-team @user ~bug %v1.0 &7 $8 %"Next release"',
    "/close",
    "  /merge",
    "/approve\n/assign_reviewer @me",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_the_hostile_texts_would_act(text: str) -> None:
    assert acted_on(text) != []  # (the check below can fail)


@pytest.mark.parametrize("text", HOSTILE)
def test_inert_text_acts_on_nothing_and_reads_the_same(text: str) -> None:
    assert acted_on(inert(text)) == []
    assert inert(text).replace(JOINER, "") == text
    assert inert(inert(text)) == inert(text)


def test_ordinary_words_are_left_alone() -> None:
    text = "a closet of fixtures, resolute; see a/b and 50 % off, mail me at x.y"
    assert inert(text) == text


def test_a_fence_does_not_keep_a_quick_action_out_but_inert_markdown_does() -> None:
    """GitLab's quick-action parser ends a code block at any line of three backticks: a longer fence around the
    agent's words does not keep its quick actions from running."""
    said = "```\n/close"
    block = fenced(said)
    assert acted_on(block) == ["/close"]
    made = inert_markdown(block)
    assert acted_on(made) == [] and made.replace(JOINER, "") == block


def test_a_summary_on_gitlab_acts_only_through_beflows_own_line() -> None:
    record = RunRecord(id="r1", issue="1", title="t", mode="auto", agent="a", attempt=1, branch="beflow/1",
                       started_at=now())  # fmt: skip
    record.close("failed", "the agent said: Fixes !9 ~urgent /close")
    record.final_message = "\n".join(HOSTILE)
    record.changed_files = ["M\tfixes #7 @user`.py"]
    text = f"{summary(record)}\n\nCloses #1"
    assert acted_on(text) != ["Closes #1"]  # as GitHub's quoting leaves it

    made = inert_markdown(text, keep=["Closes #1"])

    assert acted_on(made) == ["Closes #1"]
    assert made.replace(JOINER, "") == text.replace(JOINER, "")
    assert acted_on(inert_markdown(text)) == []
