"""An agent's words on GitLab act on nothing: no mention, no reference, no closing keyword, no quick action — and
they read the same."""

from __future__ import annotations

import pytest

from beflow.run.summary import summary
from beflow.trackers.gitlab_quoting import inert, no_quick_actions
from beflow.trackers.quoting import JOINER, fenced
from tests.support.gitlab import acted_on

HOSTILE = [
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
]


@pytest.mark.parametrize("text", HOSTILE)
def test_inert_text_acts_on_nothing_and_reads_the_same(text: str) -> None:
    assert acted_on(text) or text.lstrip().startswith(("/", ">"))  # (the sample acts, as written)
    shown = inert(text)
    assert acted_on(shown) == []
    assert shown.replace(JOINER, "") == text
    assert not [line for line in shown.splitlines() if line.lstrip(" \t>").startswith("/")]
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


@pytest.mark.parametrize("text", HOSTILE)
def test_a_fenced_message_acts_on_nothing_on_gitlab_either(text: str) -> None:
    """The summary of a run quotes the agent's last message in a fenced block: GitLab reads no reference, and
    carries out no quick action, in code."""
    block = fenced(text)
    assert acted_on(block) == [] and text in block


def test_the_summary_of_a_run_holds_no_quick_action() -> None:
    from beflow.records.record import RunRecord, now

    record = RunRecord(id="r1", issue="1", title="t", mode="auto", agent="a", attempt=1, branch="beflow/1",
                       started_at=now())  # fmt: skip
    record.close("failed", "the agent said: stop")
    record.final_message = "\n".join(HOSTILE)
    text = no_quick_actions(summary(record))
    assert not [line for line in text.splitlines() if line.startswith("/")]
