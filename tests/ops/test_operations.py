"""``Operation.call``: arguments are validated against the input model, and bad ones are explained field by field."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

import beflow.ops.issues
import beflow.ops.runs  # noqa: F401 - registers the run operations
from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import UsageError
from beflow.ops.operations import REGISTRY, Context, Input, Operation


class Greeting(Input):
    name: str = Field(min_length=1)
    times: int = Field(default=1, gt=0)
    loud: bool = False


class Greeted(BaseModel):
    text: str


def greet(context: Context, payload: Greeting) -> Greeted:
    return Greeted(text=" ".join([f"hello {payload.name}"] * payload.times))


GREET = Operation("demo.greet", "Greet", "Says hello.", Greeting, "read", greet, Greeted)


@pytest.fixture
def context(repo: Path) -> Context:
    return Context(project=load_project(), opens_tracker=open_tracker)


def test_valid_arguments_reach_the_handler_validated(context: Context) -> None:
    assert GREET.call(context, {"name": "  ada ", "times": 2}).text == "hello ada hello ada"


def test_each_bad_argument_is_one_line_with_its_dotted_field(context: Context) -> None:
    with pytest.raises(UsageError) as caught:
        GREET.call(context, {"name": "", "times": 0, "loud": "maybe", "nam": "x"})

    assert caught.value.exit_code == 2
    assert caught.value.message.splitlines() == [
        'demo.greet: name: expected at least 1 character (got "")',
        "demo.greet: times: expected a number greater than 0 (got 0)",
        'demo.greet: loud: expected true or false (got "maybe")',
        "demo.greet: nam: unknown key (did you mean 'name'?)",
    ]


def test_a_missing_argument_is_named(context: Context) -> None:
    with pytest.raises(UsageError, match=r"^demo\.greet: name: required key is missing$"):
        GREET.call(context, {})


def test_a_bound_caller_can_never_name_another_issue(repo: Path) -> None:
    """The binding is enforced by the registry for every operation with an issue field, not by each handler."""
    import beflow.ops.issues
    import beflow.ops.runs  # noqa: F401 - registers the run operations
    from beflow.config import load_project
    from beflow.errors import UsageError
    from beflow.ops.operations import Context

    context = Context(project=load_project(), opens_tracker=open_tracker, actor="agent", bound_issue="2")
    REGISTRY["issue.new"].call(Context(project=load_project(), opens_tracker=open_tracker), {"title": "one"})
    REGISTRY["issue.new"].call(Context(project=load_project(), opens_tracker=open_tracker), {"title": "two"})

    for name, arguments in [
        ("issue.show", {"key": "1"}),
        ("issue.comment", {"key": "#1", "text": "hi"}),
        ("issue.set_status", {"key": "1", "status": "review"}),
        ("run.list", {"issue": "1"}),
    ]:
        with pytest.raises(UsageError, match="works on issue 2 only"):
            REGISTRY[name].call(context, arguments)
    assert REGISTRY["issue.show"].call(context, {"key": "0002"}).key == "2"
    assert REGISTRY["run.list"].call(context, {}).runs == []  # left out: the bound issue's runs
