"""The agent's usage updates as acpx relays them: thousands a run, read straight off the line in acpx's common shape
(:data:`USAGE_LINE`: no JSON parse, no message made of it), a read of nothing else taken whole (:class:`Burst`);
and every usage figure, however it came, into :class:`beflow.guardrails.Usage` — a figure that is not valid is
counted and ignored (the others of the update still count): an agent's bad number never breaks a run, nor becomes
a figure.
"""

from __future__ import annotations

import re

from beflow.agent.acp_wire import TURN_TOKENS, TurnUsage, UsageUpdate
from beflow.guardrails import Usage, amount, currency_code, token_count

#: A usage update exactly as acpx relays the common shape (its serialisation: no spaces, these keys in this order,
#: whole numbers, no escapes), matched whole so that the thousands an agent may send are read without a JSON parse
#: each (a regular expression is about a tenth of it); any other line, a usage update of another shape included, is
#: parsed as JSON. What the match takes means the same as the parse would: nothing else can be in such a line.
USAGE_LINE = re.compile(
    rb'\{"jsonrpc":"2\.0","method":"session/update","params":\{"sessionId":"([A-Za-z0-9_.:-]{1,200})",'
    rb'"update":\{"sessionUpdate":"usage_update","used":(0|[1-9][0-9]{0,15}),"size":(0|[1-9][0-9]{0,15})'
    rb'(?:,"cost":\{"amount":(-?(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,20})?(?:[eE][+-]?[0-9]{1,3})?),'
    rb'"currency":"([A-Za-z]{3})"\})?\}\}\}'
)
USAGE_LINE_START = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"'


def usage_update(usage: Usage, update: UsageUpdate) -> None:
    """Take one ``usage_update`` into ``usage``."""
    if update.cost is None:
        take_usage(usage, update.used, update.size)
    else:
        take_usage(usage, update.used, update.size, update.cost.amount, update.cost.currency, costed=True)


class Burst:
    """The usage updates of one session as acpx relays a burst of them: lines alike but for their figures, taken a
    read at a time by one pattern instead of one by one. The figures it admits are bounded so that every one is
    valid (a token count below MAX_TOKENS; a cost below MAX_COST, without sign or exponent): a read it takes ends as
    taking its lines one by one would; a read with any other line, or whose costs would change more than the
    latest figure (a currency that changes, a resumed session's cost to count from), is left to that."""

    def __init__(self, session: bytes) -> None:
        self.session = session
        self.start = USAGE_LINE_START + session + b'","update":{"sessionUpdate":"usage_update","used":'
        count = rb"(?:0|[1-9][0-9]{0,14})"
        cost = rb'(?:,"cost":\{"amount":(?:0|[1-9][0-9]{0,10})(?:\.[0-9]{1,20})?,"currency":"[A-Za-z]{3}"\})?'
        # Only ``used`` is needed of every line (for the peak); the size and the cost that count are the last ones.
        self.pattern = re.compile(
            re.escape(b"\n" + self.start) + b"(" + count + b")" + rb',"size":' + count + cost + rb"\}\}\}(?=\n)"
        )

    def took(self, usage: Usage, lines: bytes) -> bool:
        """Whether every line of ``lines`` (joined by newlines) is such an update: then all are taken into ``usage``."""
        start, last = self.start, lines.rfind(b"\n") + 1
        if not (lines.startswith(start) and lines.startswith(start, last)):
            return False  # (a cheap look at the first and the last line: most reads of anything else end here)
        used = self.pattern.findall(b"\n" + lines + b"\n")  # (a match is a whole line, newline to newline)
        if len(used) != lines.count(b"\n") + 1:
            return False
        final = latest = USAGE_LINE.fullmatch(lines, last)
        costed = lines.count(COST_KEY)
        if costed:  # the line of the latest cost
            at = lines.rfind(COST_KEY)
            end = lines.find(b"\n", at)
            latest = USAGE_LINE.fullmatch(lines, lines.rfind(b"\n", 0, at) + 1, len(lines) if end < 0 else end)
        if final is None or latest is None:  # (never: what the pattern takes, USAGE_LINE takes too)
            return False
        currency = latest[5].decode().upper() if costed else ""
        if costed and (
            lines.count(b'"currency":"' + latest[5] + b'"') != costed  # one currency, as the agent wrote it
            or usage.earlier_cost is not None
            or usage.currency not in (None, currency)
        ):
            return False
        take_context(usage, list(map(int, used)), int(final[3]))
        if costed:  # the session's cumulative cost: its latest figure is all that counts
            usage.report_cost(float(latest[4]), currency)
        return True


#: What starts a usage update's cost in acpx's serialisation.
COST_KEY = b',"cost":{"amount":'


def take_context(usage: Usage, used: list[int], size: int) -> None:
    """A burst's context figures (all valid) into ``usage``, as :func:`_take_usage` takes them one by one."""
    usage.updates += len(used)
    usage.context_used = used[-1]
    peak = max(used)
    if usage.context_peak is None or peak > usage.context_peak:
        usage.context_peak = peak
    usage.context_size = size


def take_usage(
    usage: Usage, used: object, size: object, cost: object = None, currency: object = None, *, costed: bool = False
) -> None:
    """One usage update's figures into ``usage`` (``costed``: it had a ``cost``); a value that is not valid is
    counted and ignored (the others of the update still count): an agent's bad number never breaks a run, nor
    becomes a figure."""
    usage.updates += 1
    context, window = token_count(used), token_count(size)
    usage.rejected += (context is None) + (window is None)
    if context is not None:
        usage.context_used = context
        if usage.context_peak is None or context > usage.context_peak:
            usage.context_peak = context
    if window is not None:
        usage.context_size = window
    if not costed:
        return
    value, code = amount(cost), currency_code(currency)
    if value is None or code is None:
        usage.rejected += 1
        return
    usage.report_cost(value, code)


def number(text: bytes) -> int | float:
    """A JSON number :data:`USAGE_LINE` took, as the JSON parse reads it (an int unless it has a point or exponent)."""
    return float(text) if b"." in text or b"e" in text or b"E" in text else int(text)


def turn_usage(usage: Usage, reported: object) -> None:
    """The prompt response's ``usage`` (the turn's token counts) into ``usage``; one that is not an object counts
    as a bad figure."""
    if not isinstance(reported, dict):
        usage.rejected += 1
        return
    counts = TurnUsage.model_validate(reported)
    for name in TURN_TOKENS.values():
        value = getattr(counts, name)
        if value is None:
            continue
        count = token_count(value)
        if count is None:
            usage.rejected += 1
        else:
            setattr(usage, name, count)
