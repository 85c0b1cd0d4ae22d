"""An agent's words in what beflow writes on GitLab, made to act on nothing (docs/safety.md).

GitLab acts on more words than GitHub (:mod:`beflow.trackers.quoting`): ``@user`` and ``@group`` notify people;
``#12``, ``group/project#12``, ``!3``, ``&5`` (an epic), ``$7`` (a snippet) and a link to an issue or merge request
of the instance cross-reference it (a note "mentioned in" appears there, its people are told); ``~label``,
``%milestone``, ``*iteration:`` and ``[vulnerability:`` link what they name; ``Closes #12`` (or ``Fixes``,
``Resolves``, ``Implements``... with a reference or a link) closes the issue when a merge request is merged; and a
line starting with ``/`` is a quick action — ``/close``, ``/merge``, ``/approve``, ``/label ~x``, ``/assign @me`` —
which GitLab carries out as the user of beflow's token, in a note, an issue or a merge request description alike.

So every such word of an agent's gets an invisible word joiner (U+2060) where GitLab would start reading it: after
the ``@``, ``#``, ``!``, ``~``, ``%``, ``&``, ``$``, ``*`` or ``[``; after the first letter of a closing keyword;
inside the ``/-/`` of a link to an issue; and before the ``/`` of a line that would be a quick action. The words read
the same (the joiner shows as nothing) and GitLab acts on none of them. beflow's own ``Closes #<key>`` line, which it
adds after the agent's words when ``after_run.closes_issue`` asks for it, is the only one left to act.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from beflow.trackers.quoting import JOINER

#: A reference or a mention, at the character after which the joiner goes.
_REFERENCE = re.compile(
    r"""
    [@\#](?=[\w-])                  # @user, @group/sub, #12, group/project#12
    | [!&$](?=\d)                   # !3 (a merge request), &5 (an epic), $7 (a snippet)
    | [~%](?=[\w"])                 # ~label, ~"two words", %milestone, %"v 1.0"
    | \*(?=iteration:)              # *iteration:12
    | \[(?=(?:vulnerability|contact):)  # [vulnerability:12], [contact:x@example.com]
    """,
    re.VERBOSE | re.IGNORECASE,
)
#: GitLab's closing keywords (its default closing pattern): the joiner goes after their first letter.
_CLOSING = re.compile(r"(?i)\b(?:clos(?:e[sd]?|ing)|fix(?:e[sd]|ing)?|resolv(?:e[sd]?|ing)|implement(?:s|ed|ing)?)\b")
#: A link to an issue, merge request, epic or work item of the instance: its ``/-/`` gets the joiner.
_LINK = re.compile(r"(?<=/-)(?=/(?:issues|merge_requests|epics|work_items|snippets)/\d)", re.IGNORECASE)
#: A line that would be a quick action: its ``/`` (after any indent or quote marks) gets the joiner before it.
#: GitLab deletes every carriage return before it looks for quick actions: a line that starts with them is read as
#: starting with what follows (``\r/merge`` is ``/merge``).
_QUICK_ACTION = re.compile(r"^([ \t>\r]*)(?=/)", re.MULTILINE)


def inert(text: str) -> str:
    """``text`` with every mention, reference, closing keyword, link to an issue and quick action broken by an
    invisible joiner: it reads the same, and GitLab acts on nothing in it."""
    text = _REFERENCE.sub(lambda m: m.group(0) + JOINER, text)
    text = _CLOSING.sub(lambda m: m.group(0)[0] + JOINER + m.group(0)[1:], text)
    text = _LINK.sub(JOINER, text)
    return no_quick_actions(text)


def no_quick_actions(text: str) -> str:
    """``text`` with no line GitLab would carry out as a quick action: every line starting with ``/`` (after any
    indent or quote marks) gets an invisible joiner before it. Every note beflow writes goes through this, whatever
    it holds: beflow never means a quick action, and a line of an agent's that reached a note unquoted must not act."""
    return _QUICK_ACTION.sub(lambda m: m.group(1) + JOINER, text)


#: The opening line of a fenced code block, and a closing one (nothing after its fence).
_FENCE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})")
_CLOSE = re.compile(r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*$")


def inert_markdown(text: str, keep: Collection[str] = ()) -> str:
    """A Markdown text beflow wrote (a run's summary, with the agent's words in fenced blocks) made inert: outside
    fenced blocks as :func:`inert`, inside them with no quick action (what is in a block is shown as it is, neither
    linked nor notified; but GitLab's quick-action parser ends a block at any line of three backticks, so a longer
    fence does not keep a quick action out). A line of ``keep`` (beflow's own ``Closes #<key>``) outside a block is
    left as it is."""
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        if fence is None:
            opened = _FENCE.match(line)
            if opened:
                fence = opened.group(1)
                out.append(no_quick_actions(line))
            else:
                out.append(line if line in keep else inert(line))
            continue
        closed = _CLOSE.match(line)
        if closed and closed.group(1)[0] == fence[0] and len(closed.group(1)) >= len(fence):
            fence = None  # (as long as the opening fence or longer, of the same character)
        out.append(no_quick_actions(line))
    return "\n".join(out)
