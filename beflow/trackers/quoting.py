"""An agent's words in what beflow writes on GitHub, quoted so that they act on nothing (docs/safety.md).

GitHub acts on words in a pull request body and in comments: ``Fixes #2`` closes issue 2 when the pull request is
merged, ``closes org/repo#3`` another repository's, ``#2`` and ``GH-2`` link issue 2 (which then shows the link),
``@user`` and ``@org/team`` notify people. An agent's message is
the agent's (or the issue's planted instructions'), so beflow quotes it: its final message goes into a fenced code
block (whose fence is longer than any run of backticks in it, so nothing inside can close it), where GitHub neither
links references nor notifies anyone; a shorter text inside one of beflow's own lines (a stop reason, the activity
of a progress comment) gets an invisible word joiner after each ``#`` and ``@`` that would start a reference or a
mention. beflow's own ``Closes #<key>`` line is the only one left to act.
"""

from __future__ import annotations

import re

#: U+2060 WORD JOINER: invisible, and it ends what GitHub reads as a reference or a mention.
JOINER = "\u2060"
_ACTIVE = re.compile(r"([#@])(?=[\w-])|(?<![\w-])(GH)(?=-\d)", re.IGNORECASE)
_BACKTICKS = re.compile(r"`+")


def inert(text: str) -> str:
    """``text`` with every ``#N``, ``owner/repo#N``, ``GH-N``, ``@user`` and ``@org/team`` broken by an invisible
    joiner."""
    return _ACTIVE.sub(lambda m: (m.group(1) or m.group(2)) + JOINER, text)


#: The start of every mark beflow reads in a tracker's text: ``<!-- beflow -->`` (its own comment),
#: ``<!-- beflow:rework -->`` (feedback on the local tracker), ``<!-- beflow:progress -->``, ``<!-- beflow:answer
#: ... -->``, ``<!-- beflow:comments -->``... in any case and spacing.
_MARK = re.compile(r"<!--(?=\s*beflow)", re.IGNORECASE)


def unmarked(text: str) -> str:
    """``text`` (an agent's words) unable to carry any of beflow's marks: each ``<!--`` that would start one is
    written ``&lt;!--``, shown as the characters it is and read by beflow as no mark, on any tracker."""
    return _MARK.sub("&lt;!--", text)


def fenced(text: str, info: str = "text") -> str:
    """``text`` as a fenced code block that nothing in it can close."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


def code(text: str) -> str:
    """``text`` as inline code that nothing in it can close (a file name holding backticks, say)."""
    text = " ".join(text.splitlines())  # inline code is one line: a blank line would end it
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"
