"""What an agent's follow-up may carry: labels that read as a status or a priority are dropped whatever their
spelling, and a priority more urgent than the default becomes the default (docs/safety.md)."""

from __future__ import annotations

import pytest

from beflow.ops.agent_words import agent_follow_up, is_status_or_priority
from beflow.trackers.issue import DEFAULT_PRIORITY


@pytest.mark.parametrize(
    "label",
    [
        "beflow:ready",
        "Beflow:Ready",
        " beflow:ready ",
        "BEFLOW:IN-PROGRESS",
        "beflow:review",
        "ｂｅｆｌｏｗ:ｒｅａｄｙ",  # fullwidth: NFKC makes it ASCII
        "beflow\u200b:ready",  # a zero-width space hidden inside
        "beflow\ufe55ready",  # a small colon (NFKC: ':')
        "priority:0",
        "Priority: 0",
        "PRIORITY:1",
        "priority:０",  # a fullwidth digit, which GitHub's priority:N reading takes as 0
        "p0",
        "prio-1",
        "todo:ready",  # the project's own status prefix
    ],
)
def test_status_and_priority_labels_are_recognised_whatever_the_spelling(label: str) -> None:
    assert is_status_or_priority(label, status_prefix="todo:")


@pytest.mark.parametrize("label", ["bug", "ui", "beflow", "needs-review", "priority", "help wanted", "v2", "ready"])
def test_other_labels_are_kept(label: str) -> None:
    assert not is_status_or_priority(label, status_prefix="beflow:")


@pytest.mark.parametrize(
    ("priority", "filed"), [(0, DEFAULT_PRIORITY), (1, DEFAULT_PRIORITY), (2, 2), (3, 3), (1000, 1000)]
)
def test_a_priority_beyond_the_default_becomes_the_default(priority: int, filed: int) -> None:
    labels, got, dropped = agent_follow_up(["bug", "beflow:ready", "priority:0"], priority, "beflow:")
    assert (labels, got, dropped) == (["bug"], filed, ["beflow:ready", "priority:0"])
