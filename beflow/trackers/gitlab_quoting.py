"""Words beflow writes on GitLab (notes, merge request titles and descriptions), quoted so that they act on nothing
(docs/safety.md): the GitLab tracker and the GitLab code host both use it.

GitLab acts on more than GitHub does. References link and leave a note on what they name: ``#1`` (an issue),
``!2`` (a merge request), ``&3`` (an epic), ``$4`` (a snippet), ``%5`` or ``%"v1"`` (a milestone), ``~bug`` (a label),
``@user`` and ``@group`` (which also notify), each also after a project path (``acme/widgets#1``). A closing word
(``Closes``, ``fixes``, ``Resolved``, ``implements``...) before a reference or an issue's URL closes that issue when
the merge request is merged. And a line that starts with ``/`` is a quick action (``/close``, ``/merge``,
``/approve``, ``/assign_reviewer``...), run when a note or a description is saved — GitLab looks for them outside
code blocks, which it finds by three backticks alone, so a longer fence beflow quotes with does not keep one out.

So every such character gets an invisible U+2060 WORD JOINER after it (a reference's sigil) or before it (a quick
action's slash), and every closing word one after its first letter: a reader sees the same words, and GitLab reads
none of them. Only beflow's own ``Closes #<key>`` line is left to act (:func:`inert_markdown`'s ``keep``).
"""

from __future__ import annotations

import re
from collections.abc import Collection

from beflow.trackers.quoting import JOINER

#: A reference's sigil before what it names (a word, a quoted name, a number).
_SIGIL = re.compile(r"([#!&$%~@])(?=[\w\"-])")
#: GitLab's closing words (its default ``issue_closing_pattern``), in any case.
_CLOSING = re.compile(r"\b(c)(?=(?:los(?:e[sd]?|ing))\b)|\b(f)(?=ix(?:e[sd]|ing)?\b)|\b(r)(?=esolv(?:e[sd]?|ing)\b)"
                      r"|\b(i)(?=mplement(?:s|ed|ing)?\b)", re.I)  # fmt: skip
#: A quick action: a line whose first character (after blanks) is a slash.
_QUICK_ACTION = re.compile(r"^([ \t]*)/", re.M)
#: The opening line of a fenced code block, and a closing one (nothing after its fence).
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_CLOSE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*$")


def no_quick_action(text: str) -> str:
    """``text`` with no line GitLab would run as a quick action (code included: see the module's description)."""
    return _QUICK_ACTION.sub(lambda m: f"{m.group(1)}{JOINER}/", text)


def inert(text: str) -> str:
    """``text`` (a title, a line of beflow's, an agent's short words) with no reference, mention, closing word or
    quick action that GitLab would act on."""
    text = _SIGIL.sub(lambda m: m.group(1) + JOINER, text)
    text = _CLOSING.sub(lambda m: next(g for g in m.groups() if g) + JOINER, text)
    return no_quick_action(text)


def inert_markdown(text: str, keep: Collection[str] = ()) -> str:
    """A Markdown text beflow wrote (a run's summary, with the agent's words in fenced blocks) made inert: outside
    fenced blocks as :func:`inert`, inside them with no quick action (what is in a block is shown as it is, neither
    linked nor notified). A line of ``keep`` (beflow's own ``Closes #<key>``) outside a block is left as it is."""
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        opened = _FENCE.match(line)
        if fence is None:
            if opened:
                fence = opened.group(1)
                out.append(no_quick_action(line))
            else:
                out.append(line if line in keep else inert(line))
            continue
        closed = _CLOSE.match(line)
        if closed and closed.group(1)[0] == fence[0] and len(closed.group(1)) >= len(fence):
            fence = None  # (as long as the opening fence or longer, of the same character)
        out.append(no_quick_action(line))
    return "\n".join(out)
