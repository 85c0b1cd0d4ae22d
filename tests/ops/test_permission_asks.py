"""Permission requests as a person's questions (docs/questions.md#permissions): what an ``allow once`` grants — one
request, by its whole title, never a kind or every request — and how an answer is read (anything but an allow
denies). In process: the pure decisions; tests/web/test_permission_answers.py runs it end to end."""

from __future__ import annotations

import datetime as dt

import pytest

from beflow.agent.acp_wire import ToolCallUpdate
from beflow.ops.permission_asks import allows, ask_of, grant_of, question_of
from beflow.ops.questions import answer_prompt
from beflow.records.record import Answer, Question

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("title", "grant"),
    [
        ("Write notes.txt", "Write notes.txt"),
        ("  Run   git  status ", "Run git status"),
        ("bash: ls", "bash: ls"),
        (None, None),
        ("", None),
        ("edit", None),  # a kind: every edit
        ("Execute", None),
        ("*", None),  # every request
        ("bash", None),  # one word: the first word (and tool name) of every bash call
        ("Write " + "x" * 300, None),
    ],
)
def test_a_grant_is_the_whole_title_and_only_when_it_names_no_more_than_that_request(
    title: str | None, grant: str | None
) -> None:
    assert grant_of(title) == grant


def answer(text: str) -> Answer:
    return Answer(text=text, author="ada", given=NOW, run="r1")


@pytest.mark.parametrize(
    ("said", "allowed"),
    [
        ("allow once", True),
        ("Allow once.", True),
        ("1", True),
        ("allow\n\nand then run the tests", True),
        ("deny", False),
        ("2", False),
        ("yes, allow once", False),  # not the choice itself: denied, the safe reading
        ("allow twice", False),
        ("", False),
    ],
)
def test_only_an_allow_answer_grants_and_anything_else_denies(said: str, allowed: bool) -> None:
    question = question_of(ask_of(ToolCallUpdate(title="Write notes.txt", kind="edit"), str))
    assert question.choices == ["allow once", "deny"]
    assert allows(answer(said), question) == ("Write notes.txt" if allowed else None)


def test_a_request_that_cannot_be_allowed_once_offers_deny_only_and_no_answer_grants_it() -> None:
    question = question_of(ask_of(ToolCallUpdate(title="bash", kind="execute"), str))
    assert question.choices == ["deny"] and "cannot be allowed once" in question.text
    assert allows(answer("allow once"), question) is None
    assert allows(answer("allow once"), Question(text="Red or blue?", choices=["red"])) is None  # the agent's own


def test_the_agents_words_are_masked_and_its_input_cut_short() -> None:
    secret = "s3cr3t-value"
    tool = ToolCallUpdate(title=f"Run curl -H {secret}", kind="execute", raw_input={"command": "x" * 2000})
    ask = ask_of(tool, lambda text: text.replace(secret, "***"))
    assert ask.title == "Run curl -H ***" and ask.grant == "Run curl -H ***"
    assert ask.input is not None and len(ask.input) <= 501 and ask.input.endswith("…")
    question = question_of(ask)
    assert secret not in question.model_dump_json()
    flood = ask_of(ToolCallUpdate(title="Write " + "x" * 100_000, kind="edit" * 1000), str)
    assert flood.title is not None and len(flood.title) <= 501 and flood.grant is None
    assert flood.kind is not None and len(flood.kind) <= 100


def test_the_resumed_turn_is_told_what_was_allowed_or_denied_and_the_persons_words() -> None:
    question = question_of(ask_of(ToolCallUpdate(title="Write notes.txt", kind="edit"), str))
    allowed = answer_prompt(answer("allow once\nthen stop"), question)
    assert "allowed your request once: Write notes.txt" in allowed and "then stop" in allowed
    denied = answer_prompt(answer("no, use the docs folder"), question)
    assert "did not allow your request" in denied and "use the docs folder" in denied
