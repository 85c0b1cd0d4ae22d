"""An agent's words in what beflow writes on Linear (and in a pull request of a Linear issue), quoted so that they
act on nothing (docs/safety.md).

Linear acts on words: an issue's identifier (``ENG-123``) links that issue, and after one of its magic words (``Fixes
ENG-1``, ``Closes``, ``Resolves``, ``Part of``, ``Refs``...) in a pull request's title or body its code-host
integration moves the issue when the pull request opens or merges; ``@name`` mentions a person, and a link to a
profile or an issue is a mention too. Jira's smart commits (``WID-1 #done``) act on the same shape of words. So, as
GitHub's quoting does (:mod:`beflow.trackers.quoting`), an invisible word joiner goes after each key before its dash,
after each ``@`` and ``#`` that would start a mention or a command, and into each link to ``linear.app``: none of them
is then read as a reference, and people read the same text.
"""

from __future__ import annotations

import re

from beflow.trackers import quoting
from beflow.trackers.quoting import JOINER

#: An issue identifier: a team key (a letter, then letters, digits or ``_``) and a number.
_IDENTIFIER = re.compile(r"(?<![\w\u2060-])([A-Za-z][A-Za-z0-9_]{0,19})(?=-\d)")
_LINEAR_LINK = re.compile(r"(linear)(\.app)", re.IGNORECASE)


def keys_inert(text: str) -> str:
    """``text`` with every identifier broken (``ENG\u2060-1``): no magic word (``Fixes ENG-1``) or smart commit
    (``WID-1 #done``) acts on it, wherever in a pull request it is (a code block included)."""
    return _IDENTIFIER.sub(lambda m: m.group(1) + JOINER, text)


def inert(text: str) -> str:
    """``text`` with every identifier (``ENG-1``, ``WID-1``), ``@mention``, ``#word`` and link to Linear broken by an
    invisible joiner (GitHub's references too: the same words go into pull requests)."""
    text = quoting.inert(text)
    text = _IDENTIFIER.sub(lambda m: m.group(1) + JOINER, text)
    return _LINEAR_LINK.sub(lambda m: m.group(1) + JOINER + m.group(2), text)
