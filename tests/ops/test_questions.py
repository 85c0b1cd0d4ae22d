"""``issue.ask`` and ``issue.answer`` (docs/questions.md), and how an answer is told from the other comments: in
process, against the local tracker."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from beflow.app import open_tracker
from beflow.config import load_project
from beflow.errors import NotBoundError, OutOfScopeError, UsageError
from beflow.ops import questions
from beflow.ops.operations import Context
from beflow.records.record import CandidateRow, Question, RunRecord
from beflow.records.store import RunStore
from beflow.trackers import Status
from beflow.trackers.issue import Comment
from beflow.trackers.quoting import JOINER, inert
from tests.support.projects import config_file

SECRET = "tok-4f1d9c2b7e0a5d3f"


@pytest.fixture
def project_dir(repo: Path) -> Path:
    config_file(repo).write_text("{}\n")
    open_tracker(load_project()).create("Pick a colour")
    return repo


def _agent(asked: list[Question], *, run: str | None = "r1") -> Context:
    return Context(
        project=load_project(),
        opens_tracker=open_tracker,
        actor="agent",
        bound_issue="1",
        bound_run=run,
        secrets=[SECRET],
        asks=asked.append if run is not None else None,
    )


def test_an_agents_question_goes_to_its_run_masked_and_unable_to_carry_beflows_marks(project_dir: Path) -> None:
    asked: list[Question] = []
    result = questions.ask_question.call(
        _agent(asked),
        {"question": f"Which token? {SECRET}\n{questions.ANSWER_MARK}", "choices": ["  keep\n it ", f"use {SECRET}"]},
    )
    (question,) = asked
    assert result.question == question and result.run == "r1" and result.key == "1"
    assert SECRET not in question.text and SECRET not in " ".join(question.choices)
    assert questions.ANSWER_MARK not in question.text  # its own "answer" mark would be a forged answer
    assert question.choices[0] == "keep it"
    assert "End your turn now" in result.next
    assert open_tracker(load_project()).get("1").comments == []  # posted when the turn ends, by the run


def test_a_question_is_an_agents_in_a_run_about_its_own_issue(project_dir: Path) -> None:
    op = questions.ask_question
    with pytest.raises(NotBoundError, match="not an unattended run's agent"):
        op.call(_agent([], run=None), {"question": "?"})
    with pytest.raises(NotBoundError):  # a person's session (no run): nobody waits
        op.call(Context(project=load_project(), opens_tracker=open_tracker), {"key": "1", "question": "?"})
    with pytest.raises(OutOfScopeError, match="issue 1 only"):
        op.call(_agent([]), {"key": "2", "question": "?"})
    with pytest.raises(UsageError, match="choices"):
        op.call(_agent([]), {"question": "?", "choices": [str(n) for n in range(11)]})
    with pytest.raises(UsageError, match="question"):
        op.call(_agent([]), {"question": "x" * (questions.MAX_QUESTION + 1)})


def test_the_question_comment_quotes_the_agents_words_inert() -> None:
    question = Question(text="Mention @octocat?\nCloses #2", choices=["ping @team", "no"])
    text = questions.question_comment("7", question, "r1", inert)
    assert text.startswith(questions.QUESTION_MARK.format(run="r1"))
    assert f"> Mention @{JOINER}octocat?" in text and f"> Closes #{JOINER}2" in text
    assert f"1. ping @{JOINER}team" in text and "2. no" in text
    assert "beflow issues answer 7" in text


ASKED = dt.datetime(2026, 5, 1, 10, 0, tzinfo=dt.UTC)


def _comment(text: str, *, author: str = "ada", at: int = 1, withheld: str | None = None) -> Comment:
    made = Comment(author=author, created=ASKED + dt.timedelta(seconds=at), text=text)
    return made.withholding(withheld)


@pytest.mark.parametrize(
    ("comments", "answer"),
    [
        ([], None),
        ([_comment("too early", at=-1)], None),
        ([_comment("red", withheld="a stranger: no write access")], None),  # GitHub's and GitLab's trust
        ([_comment("the question itself", author="beflow")], None),
        ([_comment("<!-- beflow -->\nbeflow's own")], None),
        ([_comment("<!-- hidden only -->")], None),
        ([_comment("red", withheld="stranger"), _comment("blue <!-- say red -->", at=2)], ("blue", "ada")),
        ([_comment(f"red\n{questions.ANSWER_MARK}\n<!-- beflow -->", author="me")], ("red", "me")),
        ([_comment("same second", at=0)], ("same second", "ada")),
        # The agent's own comment, in the very second its turn ended asking: it never answers itself (a permission
        # it would allow itself), on the local tracker where its comments are signed by the agent, not by beflow.
        ([_comment("allow once", author="agent", at=0), _comment("deny", at=1)], ("deny", "ada")),
    ],
)
def test_the_answer_is_the_first_trusted_comment_from_the_question_on(
    comments: list[Comment], answer: tuple[str, str] | None
) -> None:
    question = Question(text="Red or blue?", asked=ASKED)
    found = questions.answer_in(comments, question, "r1")
    assert (None if found is None else (found.text, found.author)) == answer
    assert found is None or found.run == "r1"


def _blocked(project_dir: Path) -> RunRecord:
    tracker = open_tracker(load_project())
    tracker.set_status("1", Status.IN_PROGRESS)
    record = RunRecord(id="20260501-100000-1-abcd", issue="1", mode="watch", agent="a", started_at=ASKED)
    record.question = Question(text="Red or blue?", asked=dt.datetime.now(dt.UTC).replace(microsecond=0))
    record.close("asked", "asked")
    store = RunStore(project_dir)
    store.create(record, "prompt")
    store.save(record)
    tracker.set_status("1", Status.BLOCKED, note="the question")
    return record


def test_a_persons_answer_is_a_comment_the_watch_takes_for_the_answer(project_dir: Path) -> None:
    person = Context(project=load_project(), opens_tracker=open_tracker, actor="Ada")
    with pytest.raises(UsageError, match="waits for no answer"):  # not blocked: nothing to answer
        questions.answer_question.call(person, {"key": "1", "text": "blue"})
    asking = _blocked(project_dir)
    answered = questions.answer_question.call(person, {"key": "1", "text": "blue"})
    assert answered.run == asking.id and answered.comment.author == "Ada"
    issue = open_tracker(load_project()).get("1")
    found = questions.answer_of(open_tracker(load_project()), issue, asking)
    assert found is not None and (found.text, found.author) == ("blue", "Ada")
    with pytest.raises(UsageError):  # never an agent's: not even through the registry's binding
        questions.answer_question.call(_agent([]), {"key": "1", "text": "blue"})


def _row(candidate: int, **fields: object) -> CandidateRow:
    values: dict[str, object] = {"run_id": f"r{candidate}", "agent": "codex", "outcome": "succeeded"}
    values |= {"commit": "a" * 40, "lines_changed": 3, "checks_passed": 1, "checks_total": 1, **fields}
    return CandidateRow.model_validate({"candidate": candidate, **values})


def test_a_persons_answer_chooses_a_candidate_that_passed_or_says_anyway_for_one_that_did_not() -> None:
    rows = [_row(1), _row(2, checks_passed=0), _row(3, commit=None, lines_changed=None, outcome="failed")]

    assert questions.decision("yes, go", rows, 1) == questions.Decision(1)
    assert questions.decision("\n  C1 \nlooks right", rows, 2) == questions.Decision(1)
    assert questions.decision("candidate 2 anyway", rows, 1) == questions.Decision(2, anyway=True)
    assert "did not pass: answer `c2 anyway`" in (questions.decision("c2", rows, 1).why or "")
    assert "committed nothing" in (questions.decision("c3 anyway", rows, 1).why or "")
    assert "no candidate 7 (there are c1, c2, c3)" in (questions.decision("7", rows, 1).why or "")
    assert "names no candidate" in (questions.decision("@someone whichever", rows, 1).why or "")
    assert "chose no candidate" in (questions.decision("ok", rows, None).why or "")


def test_an_agent_bound_to_its_issue_may_not_choose_its_candidate(repo: Path) -> None:
    project = load_project()
    context = Context(project, bound_issue="1", bound_run="r", opens_tracker=open_tracker)
    with pytest.raises(UsageError, match=r"candidate\.confirm is a person's"):
        questions.confirm_candidate.call(context, {"key": "1", "candidate": 1})
    assert not questions.confirm_candidate.agent
