"""The agent's usage as the stream carries it: every figure judged (a bad one counted, never fatal), and the
thousands of usage updates a run brings read without a JSON parse each, meaning what the parse would."""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from beflow import guardrails
from beflow.agent import acp_wire, acpx, usage_lines
from tests.support import acp_schema


def update(**fields: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s-1", "update": fields}}


def test_the_reader_keeps_the_usage_the_acp_sdk_writes() -> None:
    from acp import schema

    def notification(update: BaseModel) -> dict[str, object]:
        params = schema.SessionNotification(session_id="s", update=update)
        return {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": params.model_dump(by_alias=True, exclude_none=True),
        }

    lines = [
        {"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": "s", "prompt": []}},
        notification(schema.UsageUpdate(session_update="usage_update", used=1200, size=200_000)),
        notification(
            schema.UsageUpdate(
                session_update="usage_update", used=5000, size=200_000, cost=schema.Cost(amount=0.25, currency="USD")
            )
        ),
        notification(
            schema.UsageUpdate(
                session_update="usage_update", used=3000, size=200_000, cost=schema.Cost(amount=0.5, currency="USD")
            )
        ),
        {
            "jsonrpc": "2.0",
            "id": 2,
            "result": schema.PromptResponse(
                stop_reason="end_turn",
                usage=schema.Usage(total_tokens=9000, input_tokens=7000, output_tokens=2000, cached_read_tokens=100),
            ).model_dump(by_alias=True, exclude_none=True),
        },
    ]
    assert [acp_schema.message(line) for line in lines][1:] == ["session/update"] * 3 + ["PromptResponse"]
    transcript = acpx.Transcript()
    for line in lines:
        transcript.feed(json.dumps(line))

    usage = transcript.usage
    assert (usage.context_used, usage.context_peak, usage.context_size) == (3000, 5000, 200_000)
    assert (usage.cost, usage.currency) == (0.5, "USD")  # cumulative: the latest, not a sum
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.cached_read_tokens) == (
        7000,
        2000,
        9000,
        100,
    )
    assert usage.tokens == 9000 and usage.updates == 3 and usage.rejected == 0


def test_an_agent_that_reports_no_usage_has_none_and_no_price() -> None:
    transcript = acpx.Transcript()
    done = update(sessionUpdate="agent_message_chunk", content={"type": "text", "text": "Done."})
    for line in (done, {"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn"}}):
        transcript.feed(json.dumps(line))

    assert transcript.usage.empty and transcript.usage.cost is None and transcript.usage.tokens is None


GARBAGE = [
    # update fields, what is kept: (context_used, context_size, cost, currency), rejected values
    pytest.param({"used": -5, "size": 100}, (None, 100, None, None), 1, id="negative"),
    pytest.param({"used": "12", "size": "x"}, (None, None, None, None), 2, id="strings"),
    pytest.param({"used": 10**30, "size": 100}, (None, 100, None, None), 1, id="huge"),
    pytest.param({"used": 1.5, "size": True}, (None, None, None, None), 2, id="float-and-bool"),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": "NaN", "currency": "USD"}}, (7, 9, None, None), 1, id="str-amount"
    ),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": -1, "currency": "USD"}}, (7, 9, None, None), 1, id="neg-cost"
    ),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": 1e300, "currency": "USD"}}, (7, 9, None, None), 1, id="huge-cost"
    ),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": 1, "currency": "US Dollar"}}, (7, 9, None, None), 1, id="bad-code"
    ),
    pytest.param({"used": 7, "size": 9, "cost": "a lot"}, (7, 9, None, None), 1, id="cost-not-object"),
    pytest.param({}, (None, None, None, None), 2, id="empty"),
    pytest.param(
        {"used": 7, "size": 9, "cost": {"amount": 2, "currency": "eur"}}, (7, 9, 2.0, "EUR"), 0, id="lowercase"
    ),
]


@pytest.mark.parametrize(("fields", "kept", "rejected"), GARBAGE)
def test_usage_values_that_are_not_valid_are_counted_and_ignored(
    fields: dict[str, object], kept: tuple[object, ...], rejected: int
) -> None:
    transcript = acpx.Transcript()
    transcript.feed(json.dumps(update(sessionUpdate="usage_update", **fields)))

    usage = transcript.usage
    assert (usage.context_used, usage.context_size, usage.cost, usage.currency) == kept
    assert usage.rejected == rejected and usage.updates == 1


def test_nan_and_infinite_costs_in_the_stream_are_ignored_and_a_currency_change_is_noted() -> None:
    transcript = acpx.Transcript()
    for text in (
        '{"method": "session/update", "params": {"update": {"sessionUpdate": "usage_update", "used": 1, "size": 2, '
        '"cost": {"amount": NaN, "currency": "USD"}}}}',
        '{"method": "session/update", "params": {"update": {"sessionUpdate": "usage_update", "used": 1, "size": 2, '
        '"cost": {"amount": Infinity, "currency": "USD"}}}}',
    ):
        transcript.feed(text)
    assert transcript.usage.cost is None and transcript.usage.rejected == 2
    for currency in ("USD", "EUR"):
        transcript.feed(
            json.dumps(update(sessionUpdate="usage_update", used=1, size=2, cost={"amount": 1, "currency": currency}))
        )
    assert (transcript.usage.cost, transcript.usage.currency) == (1.0, "EUR")
    assert transcript.usage.note is not None and "from USD to EUR" in transcript.usage.note
    # A prompt response whose usage is garbage leaves the turn's counts unset.
    transcript.feed(
        json.dumps({"id": 2, "result": {"stopReason": "end_turn", "usage": {"inputTokens": -1, "totalTokens": "9"}}})
    )
    assert transcript.usage.total_tokens is None and transcript.usage.input_tokens is None


def test_a_real_acpx_stream_carries_the_test_agents_usage_as_acp_defines_it(
    tmp_path: Path, acpx_bin: Path, test_agent_command: str
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    prompt = "acp-test: usage 1500 100000\nacp-test: usage 2500 100000 0.75 USD\nacp-test: tokens 3000 400"
    argv = [str(acpx_bin), "--cwd", str(workdir), "--format", "json", "--approve-all"]
    result = subprocess.run(
        [*argv, "--agent", test_agent_command, "exec", prompt], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    checked = [acp_schema.message(line) for line in lines]
    assert checked.count("session/update") == 2 and "PromptResponse" in checked

    transcript = acpx.Transcript()
    for line in lines:
        transcript.feed(line)
    usage = transcript.usage
    assert (usage.context_used, usage.context_size, usage.cost, usage.currency) == (2500, 100000, 0.75, "USD")
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens, usage.tokens) == (3000, 400, 3400, 3400)


def _acpx_line(update: dict[str, object], session: str = "acp-test-23d7cb88c7034cbe969d1ae352154943") -> bytes:
    """A session/update line as acpx prints it (compact JSON, its order of keys)."""
    message = {"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": session, "update": update}}
    return json.dumps(message, separators=(",", ":")).encode()


USAGE_LINES = [
    # (the update, whether the line is read without a JSON parse)
    ({"sessionUpdate": "usage_update", "used": 1500, "size": 200000}, True),
    ({"sessionUpdate": "usage_update", "used": 0, "size": 0}, True),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"amount": 0.25, "currency": "usd"}}, True),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"amount": 3, "currency": "EUR"}}, True),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"amount": -1.5e2, "currency": "EUR"}}, True),
    ({"sessionUpdate": "usage_update", "used": 10**15 + 1, "size": 9}, True),  # beyond any context: rejected either way
    ({"sessionUpdate": "usage_update", "used": 10**16, "size": 9}, False),
    ({"sessionUpdate": "usage_update", "used": 1.5, "size": 9}, False),
    ({"sessionUpdate": "usage_update", "used": -1, "size": 9}, False),
    ({"sessionUpdate": "usage_update", "size": 9, "used": 7}, False),  # another order
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "_meta": {"used": 99}}, False),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": {"currency": "USD", "amount": 1}}, False),
    ({"sessionUpdate": "usage_update", "used": 7, "size": 9, "cost": None}, False),
    ({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "used 7"}}, False),
]


@pytest.mark.parametrize(("update", "fast"), USAGE_LINES)
def test_a_usage_update_read_without_a_json_parse_means_what_the_parse_would(
    update: dict[str, object], fast: bool
) -> None:
    line = _acpx_line(update)
    assert (usage_lines.USAGE_LINE.fullmatch(line) is not None) is fast
    read, parsed = acpx.Transcript(), acpx.Transcript()

    message = read.feed(line)
    parsed.feed(line.decode())  # (text goes through the JSON parse)
    followed = acpx.Transcript()
    followed.follow(line)  # as the run's stream is read: no message made of a usage line

    assert read.usage == parsed.usage == followed.usage
    assert message == acp_wire.decode(line)


def _usage(used: object, size: object = 200_000, cost: object = None, currency: str = "USD") -> dict[str, object]:
    update: dict[str, object] = {"sessionUpdate": "usage_update", "used": used, "size": size}
    if cost is not None:
        update["cost"] = {"amount": cost, "currency": currency}
    return update


SESSION = "acp-test-23d7cb88c7034cbe969d1ae352154943"
MIXED_STREAM = [
    json.dumps({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {"sessionId": SESSION}}).encode(),
    *(_acpx_line(_usage(used)) for used in (10, 900, 30)),  # a burst without cost: its peak is not its last
    *(_acpx_line(update) for update, _ in USAGE_LINES),  # every shape, fast or not, valid or not
    _acpx_line({"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "working\nstill"}}),
    *(_acpx_line(_usage(used, cost=used / 100)) for used in (50, 60, 70)),  # a burst with a cost
    _acpx_line(_usage(80, cost=0.9, currency="eur")),  # the currency changes
    _acpx_line(_usage(85, cost=1)),
    _acpx_line(_usage(90, 10**15)),  # a figure beyond what a burst admits, then one it does
    _acpx_line(_usage(95, cost=2e3)),  # a cost with an exponent, after JSON's own writing
    _acpx_line(_usage(5), session="another-session"),
    _acpx_line({"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "edit", "status": "pending"}),
    *(_acpx_line(_usage(used)) for used in range(100, 140)),
    b"not json at all",
    b"",
    json.dumps({"jsonrpc": "2.0", "id": 2, "result": {"stopReason": "end_turn", "usage": {"totalTokens": 5}}}).encode(),
]


@pytest.mark.parametrize("seed", [*range(12), None])
def test_following_the_lines_of_each_read_keeps_what_feeding_them_one_by_one_keeps(seed: int | None) -> None:
    """The run's reader takes the lines a read brought together (a burst of usage updates at once, the others one
    by one without a parse); however the stream falls into reads, what it keeps is what feeding each line keeps.
    (Reads cut at random, one read in all, and a read a line.)"""
    count = len(MIXED_STREAM)
    cuts = sorted(random.Random(seed).sample(range(1, count), k=seed % 7)) if seed is not None else [*range(1, count)]
    reads = [MIXED_STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(MIXED_STREAM)], strict=True)]
    one_by_one, together = acpx.Transcript(), acpx.Transcript()
    for line in MIXED_STREAM:
        one_by_one.feed(line)
    for read in reads:
        together.follow(b"\n".join(read))

    assert together == one_by_one
    usage = together.usage
    assert (usage.updates, usage.context_used, usage.context_peak, usage.context_size) == (64, 139, 1500, 200_000)
    assert (usage.cost, usage.currency) == (2000.0, "USD")
    assert usage.note == "the agent changed its cost's currency from EUR to USD during the run"
    assert (together.latest, together.stop_reason, usage.total_tokens) == ("edit (pending)", "end_turn", 5)


def test_a_read_of_usage_updates_alone_is_taken_whole_and_any_other_read_is_left_to_the_lines() -> None:
    burst = usage_lines.Burst(SESSION.encode())
    plain = b"\n".join(_acpx_line(_usage(used)) for used in (3, 9, 4))
    costed = b"\n".join(_acpx_line(_usage(used, cost=used / 10)) for used in (3, 9, 4))
    usage = guardrails.Usage()

    assert burst.took(usage, plain) and burst.took(usage, costed)
    assert (usage.updates, usage.context_used, usage.context_peak, usage.cost) == (6, 4, 9, 0.4)
    for other in (
        plain + b"\n" + _acpx_line({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "x"}}),
        plain + b"\n",  # an empty line
        plain.replace(b'"used":9', b'"used":9.5'),
        plain + b"\n" + _acpx_line(_usage(1), session="another"),
        _acpx_line(_usage(10**15)),
        _acpx_line(_usage(1, cost=-1)),
        costed.replace(b'"USD"', b'"usd"', 1),  # a currency written two ways
        _acpx_line(_usage(1, cost=1, currency="EUR")),  # another currency than the run's so far
    ):
        assert not burst.took(usage, other)
    assert usage.updates == 6  # (nothing of a read it left was taken)
    # A resumed session's cost counts from the earlier run's figure: each of its updates is taken one by one.
    earlier = guardrails.Usage(cost=0.2, currency="USD", session_cost=0.2)
    assert not burst.took(guardrails.Usage.resuming(earlier), costed)


def test_a_session_id_the_pattern_does_not_take_goes_through_the_json_parse() -> None:
    update = {"sessionUpdate": "usage_update", "used": 7, "size": 9}
    line = _acpx_line(update, session='a\\"b')
    assert usage_lines.USAGE_LINE.fullmatch(line) is None
    transcript = acpx.Transcript()
    transcript.feed(line)
    assert transcript.usage.context_used == 7
