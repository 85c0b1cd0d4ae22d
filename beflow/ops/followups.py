"""What an agent may say about the issues it files (docs/safety.md: an agent cannot queue work for itself).

An agent's follow-up is filed ``open``: a person decides when it is ready and how urgent it is. Labels are how a
tracker keeps status and priority (GitHub: ``beflow:ready``, ``priority:0``), so an agent's labels that read as a
status or a priority are dropped, whatever their spelling: compared case-folded, stripped and in Unicode's NFKC form
(GitHub matches label names without regard to case; ``ｐｒｉｏｒｉｔｙ:０`` is ``priority:0`` once normalized), and
a priority more urgent than the default becomes the default.
"""

from __future__ import annotations

import re
import unicodedata

from beflow.trackers.issue import DEFAULT_PRIORITY

#: Prefixes of labels that carry a status on some tracker: beflow's own, whatever the project configured.
STATUS_PREFIXES = ("beflow:", "beflow/", "beflow-", "status:")
_PRIORITY = re.compile(r"^p(?:rio(?:rity)?)?\s*[:=/\-_ ]?\s*\d+$")


def fold(label: str) -> str:
    """A label as trackers compare it: NFKC, case-folded, without surrounding (or inner runs of) white space, and
    without the invisible characters a lookalike would hide in it."""
    text = unicodedata.normalize("NFKC", label).casefold()
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cf", "Cc"))
    return re.sub(r"\s+", " ", text).strip()


def is_status_or_priority(label: str, status_prefix: str | None = None) -> bool:
    """Whether ``label`` reads as a status (``beflow:ready``) or a priority (``priority:0``) on some tracker."""
    folded = fold(label)
    prefixes = (*STATUS_PREFIXES, *((fold(status_prefix),) if status_prefix else ()))
    return folded.startswith(prefixes) or bool(_PRIORITY.match(folded))


def agent_follow_up(
    labels: list[str], priority: int, status_prefix: str | None = None
) -> tuple[list[str], int, list[str]]:
    """The labels and priority an agent's follow-up is filed with, and the labels dropped (status, priority)."""
    kept = [label for label in labels if not is_status_or_priority(label, status_prefix)]
    dropped = [label for label in labels if label not in kept]
    return kept, max(priority, DEFAULT_PRIORITY), dropped
