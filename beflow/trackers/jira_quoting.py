"""An agent's words in what beflow writes on Jira, made to act on nothing (docs/safety.md).

Jira acts on words: an issue key (``WID-42``) in a comment links that issue, a key in a branch, a commit or a pull
request ties it to the issue's development panel, and a smart commit (``WID-42 #done``) moves it; a URL in text
becomes a link (a smart link once Jira unfurls it). Mentions are nodes of the document beflow never writes
(:mod:`beflow.trackers.jira_adf`), so ``@name`` is text already. As for Linear
(:mod:`beflow.trackers.linear_quoting`), an invisible word joiner goes after each key before its dash, after each
``#`` and ``@``, and into each ``://``: people read the same words, Jira acts on none of them.
"""

from __future__ import annotations

import re

from beflow.trackers import linear_quoting, quoting
from beflow.trackers.quoting import JOINER

_URL = re.compile(r"(?<=[A-Za-z])(:)(//)")


def inert(text: str) -> str:
    """``text`` with every key, ``@``, ``#`` and URL broken by an invisible joiner."""
    return _URL.sub(lambda m: m.group(1) + JOINER + m.group(2), linear_quoting.keys_inert(quoting.inert(text)))


def keys_inert(text: str) -> str:
    """``text`` with every issue key broken: no smart commit or development-panel link acts on a pull request's
    words (a code block included)."""
    return linear_quoting.keys_inert(text)
