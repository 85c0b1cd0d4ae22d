"""An agent's words in what beflow writes on GitLab act on nothing: no quick action, closing word, reference or
mention, but for beflow's own ``Closes #<key>`` line; a reader sees the same words."""

from __future__ import annotations

import pytest

from beflow.records.record import RunRecord, now
from beflow.run.summary import summary
from beflow.trackers.gitlab_quoting import inert, inert_markdown, no_quick_actions
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


#: More of what GitLab acts on: every kind of reference, closing words with a colon or an issue's link, quick
#: actions after blank lines, in quotes or indented.
MORE_HOSTILE = [
    "Fixes #2",
    "closes acme/widgets#3 and Resolves: #4, implements issue #5",
    "Closing https://gitlab.example.com/acme/widgets/-/issues/6",
    "see !3, acme/other!4, &5 (an epic), $6 (a snippet)",
    "cc @alice @acme/security-team @all",
    'label it ~bug ~"needs review" ~12 for %v1.0 %"Sprint 3" %7',
    "*iteration:12 and [vulnerability:3] [contact:eve@example.com]",
    "/close",
    "Done.\n/merge\n/approve\n/label ~done\n/assign @me\n/unassign\n/reopen",
    "  /close indented",
    "> /close in a quote",
    "/shrug",
    "fine text\n\n/spend 1h\n/due tomorrow",
    "\r/merge",  # (GitLab deletes carriage returns before it looks)
    "Done.\n\r\r/approve\n \r/label ~done\r\n>\r /unassign",
    "/MERGE\n/Approve",
]


@pytest.mark.parametrize("text", MORE_HOSTILE)
def test_more_hostile_texts_act_on_nothing_and_read_the_same(text: str) -> None:
    assert acted_on(text)  # (the sample acts, as written)
    shown = inert(text)
    assert acted_on(shown) == []
    assert shown.replace(JOINER, "") == text
    assert not [line for line in shown.replace("\r", "").split("\n") if line.lstrip(" \t>").startswith("/")]
    assert inert(shown) == shown  # twice is once


@pytest.mark.parametrize(
    "text",
    ["50% done", "a & b, R&D", "x = y ~ z", "costs $ 5", "wow!", "C# and F#", "ssh://host/a/b", "path/to/file.py"],
)
def test_words_that_act_on_nothing_are_left_as_they_are(text: str) -> None:
    assert inert(text) == text


def test_quick_actions_are_defused_in_every_line_and_nothing_else_changes() -> None:
    text = "first\n/close\n  /merge\n> /approve\nnot /a command"
    assert no_quick_actions(text) == f"first\n{JOINER}/close\n  {JOINER}/merge\n> {JOINER}/approve\nnot /a command"


def test_a_note_of_a_runs_summary_holds_no_quick_action() -> None:
    """What the tracker posts (a run's summary as its note) goes through no_quick_actions: not one line of it, in a
    fence or not, would run."""
    record = RunRecord(id="r1", issue="1", title="t", mode="auto", agent="a", attempt=1, branch="beflow/1",
                       started_at=now())  # fmt: skip
    record.close("failed", "the agent said: stop")
    record.final_message = "\n".join(MORE_HOSTILE)
    text = no_quick_actions(summary(record))
    assert not [line for line in text.splitlines() if line.startswith("/")]
