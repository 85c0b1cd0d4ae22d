"""Permission requests a run's policy leaves to a person (docs/questions.md#permissions).

acpx decides every permission request itself, by the run's ``permissions``. Where they name requests to escalate, or
ask for the ones ``approve-reads`` leaves undecided, acpx answers such a request no for now (escalated) or cancelled
(``--non-interactive-permissions fail``) and fails the turn; the run then ends ``asked`` with the request as its
question, choices ``allow once`` and ``deny``. A trusted person's ``allow once`` resumes the agent's session with
that request allowed for the resumed turn — by acpx's only means: a matcher (``--permission-policy``
``autoApprove``) that is the request's title, whole. acpx matches a request's kind, title, tool name and the title's
first word: a title that is one word, or names a kind, would allow more than that request, so it cannot be allowed
once (the person may deny it, or change ``permissions``). What the agent asks is its own description: an agent that
reuses the allowed title for another call is allowed that call in the resumed turn too — the limit docs/questions.md
states; the sandbox (docs/safety.md) is what holds against an agent that will not ask at all.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from beflow.agent.acp_wire import ToolCallUpdate
from beflow.records.record import Answer, PermissionAsk, Question

ALLOW = "allow once"
DENY = "deny"
#: The answers that allow (case aside, a trailing period aside); anything else denies: the safe reading of a reply.
_ALLOWING = {"1", "1. allow once", ALLOW, "allow"}

#: The kinds acpx infers or the agent names (ACP's ``ToolKind``, and acpx's ``other``): a matcher equal to one
#: allows every request of that kind.
KINDS = frozenset({"read", "edit", "delete", "move", "search", "execute", "think", "fetch", "switch_mode", "other"})
#: The longest title a grant takes (a longer one is no narrower, and is not put on acpx's command line).
MAX_GRANT = 200
MAX_INPUT = 500


def grant_of(title: str | None) -> str | None:
    """The matcher that allows the request titled ``title`` in acpx's policy and, as far as acpx matches, no other
    request: None when there is none (no title, one word, a kind's name, ``*``, too long)."""
    if title is None:
        return None
    grant = " ".join(title.split())
    if not grant or len(grant) > MAX_GRANT or grant.lower() in KINDS or grant == "*":
        return None
    if not re.search(r"[\s:]", grant):  # one word: also the first word, or the tool name, of other requests
        return None
    return grant


def ask_of(tool: ToolCallUpdate, mask: Callable[[str], str]) -> PermissionAsk:
    """The request ``tool`` as a person is asked about it, the agent's words masked (``mask``)."""
    title = mask(" ".join(tool.title.split())) if tool.title else None
    grant = grant_of(title)
    if title is not None and len(title) > MAX_INPUT:  # (an agent's flood of a title: its start is shown)
        title = title[:MAX_INPUT] + "…"
    shown = None
    if tool.raw_input is not None:
        shown = mask(json.dumps(tool.raw_input, ensure_ascii=False, sort_keys=True, default=str))
        shown = shown if len(shown) <= MAX_INPUT else shown[:MAX_INPUT] + "…"
    kind = tool.kind[:100] if tool.kind else None
    return PermissionAsk(tool_call=tool.tool_call_id, title=title, kind=kind, input=shown, grant=grant)


def question_of(ask: PermissionAsk) -> Question:
    """The question a permission request puts to people: what the agent wants to do, and the choices."""
    what = ask.title or "a tool call with no title"
    lines = [f"The agent asks permission for: {what}" + (f" ({ask.kind})" if ask.kind else "")]
    if ask.input:
        lines.append(f"With: {ask.input}")
    if ask.grant is not None:
        lines.append(f"Answer `{ALLOW}` (or 1) to allow this request in the resumed turn; anything else denies it.")
        choices = [ALLOW, DENY]
    else:
        lines.append(
            "It cannot be allowed once: its title would allow other requests too. Answer to deny it (the agent "
            "goes on without it), or change `permissions` in the config."
        )
        choices = [DENY]
    return Question(text="\n".join(lines), choices=choices, permission=ask)


def allows(answer: Answer, question: Question | None) -> str | None:
    """The grant an answer gives: the request's matcher when a person answered ``allow once`` to a permission
    question that can be allowed, else None (denied, or not a permission question)."""
    ask = question.permission if question is not None else None
    if ask is None or ask.grant is None:
        return None
    said = answer.text.strip().splitlines()[0].strip().rstrip(".").strip().lower() if answer.text.strip() else ""
    return ask.grant if said in _ALLOWING else None


def told(answer: Answer, question: Question) -> list[str]:
    """What the resumed turn is told of a permission question's answer."""
    ask = question.permission
    assert ask is not None
    what = ask.title or "the tool call"
    if allows(answer, question) is not None:
        return [
            f"{answer.author} allowed your request once: {what}. They said:",
            "",
            answer.text,
            "",
            "Make that same request again now, exactly as before; nothing else is allowed beyond your usual "
            "permissions.",
        ]
    return [f"{answer.author} did not allow your request: {what}. They said:", "", answer.text, "", "Do without it."]
