"""The agent's prompt: Jinja2 with strict variables, the built-in default, a template file or inline text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from beflow.run import prompt
from beflow.run.prompt import PromptError

VARIABLES: dict[str, Any] = {
    "issue": {
        "key": "7",
        "title": "Add a farewell",
        "body": "We never say goodbye.",
        "labels": ["feature", "small"],
        "url": "https://example.com/issues/7",
        "comments": [{"author": "ada", "created": "2026-01-02T03:04:05+00:00", "body": "Tests too, please."}],
    },
    "attempt": 2,
    "branch": "beflow/7",
    "run_id": "20260102-030405-7-abcd",
    "mode": "auto",
}


def test_the_built_in_prompt_tells_the_agent_the_issue_and_how_to_work(tmp_path: Path) -> None:
    text = prompt.render(None, tmp_path, VARIABLES)

    assert "issue 7 of this repository (https://example.com/issues/7)" in text
    assert "# Add a farewell" in text and "We never say goodbye." in text
    assert "Labels: feature, small" in text
    assert "### ada (2026-01-02T03:04:05+00:00)\nTests too, please." in text
    assert "branch `beflow/7`; this is attempt 2: earlier work on this branch is already here" in text
    assert "Do not commit, push or switch branches" in text
    assert text.endswith("\n") and "{{" not in text


def test_the_built_in_prompt_leaves_out_what_an_issue_does_not_have(tmp_path: Path) -> None:
    bare = {**VARIABLES, "issue": {**VARIABLES["issue"], "labels": [], "url": None, "comments": []}, "attempt": 1}

    text = prompt.render(None, tmp_path, bare)

    assert "Labels:" not in text and "## Comments" not in text and "(None)" not in text
    assert "this is attempt 1." in text


def test_a_template_file_relative_to_the_project(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "fix.md").write_text("Fix {{ issue.key }} on {{ branch }} ({{ run_id }}).\n")

    assert prompt.render("prompts/fix.md", tmp_path, VARIABLES) == "Fix 7 on beflow/7 (20260102-030405-7-abcd).\n"


def test_an_inline_template(tmp_path: Path) -> None:
    template = "{{ issue.title }}{% for l in issue.labels %} #{{ l }}{% endfor %}"

    assert prompt.render(template, tmp_path, VARIABLES) == "Add a farewell #feature #small\n"


def test_an_undefined_variable_is_an_error_naming_the_template(tmp_path: Path) -> None:
    (tmp_path / "p.md").write_text("{{ issue.key }} {{ issue.assignee }}\n")

    with pytest.raises(PromptError, match=r"p\.md: 'dict object' has no attribute 'assignee'") as error:
        prompt.render("p.md", tmp_path, VARIABLES)
    assert "issue, attempt, candidate, branch, run_id" in (error.value.fix or "")

    with pytest.raises(PromptError, match=r"config\.json prompt: 'ticket' is undefined"):
        prompt.render("{{ ticket }}", tmp_path, VARIABLES)


def test_a_syntax_error_names_the_template_and_line(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match=r"config.json prompt:2: template syntax error"):
        prompt.render("fine\n{% if %}\n", tmp_path, VARIABLES)


def test_a_missing_template_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PromptError, match=r"template file .*missing\.md does not exist"):
        prompt.render("missing.md", tmp_path, VARIABLES)


def test_control_characters_from_an_issue_never_reach_the_prompt(tmp_path: Path) -> None:
    # NUL cannot be passed in a command line at all; an escape sequence would act on the terminal that shows it.
    variables = {**VARIABLES, "issue": {**VARIABLES["issue"], "body": "a\x00b\x1b[31mc\rd\r\ne\tf\x7fg\x85h"}}

    rendered = prompt.render("{{ issue.body }}", tmp_path, variables)

    assert rendered == "a\ufffdb\ufffd[31mc\nd\ne\tf\ufffdg\ufffdh\n"


def test_a_review_rounds_prompt_says_what_the_reviewers_asked_file_by_file_and_what_came_before(
    tmp_path: Path,
) -> None:
    import datetime as dt

    from beflow.feedback import Feedback, ThreadComment
    from beflow.ops import rounds
    from beflow.records.record import Consumed, RunRecord

    when = dt.datetime(2026, 1, 2, tzinfo=dt.UTC)
    pieces = [
        Feedback(
            id="review-comment:2",
            kind="inline",
            author="bo",
            body="Name it bye.",
            created=when,
            path="b.py",
            line=9,
            hunk="@@ -1 +1 @@\n-x\n+y",
            thread=[ThreadComment(author="cy", body="Why y?")],
        ),
        Feedback(id="review:1", kind="review", author="bo", body="Close, but see the comments.", created=when),
        Feedback(id="review-comment:3", kind="inline", author="bo", body="And a test.", created=when, path="a.py"),
    ]
    first = RunRecord(
        id="r0",
        issue="7",
        mode="auto",
        agent="a",
        started_at=when,
        outcome="succeeded",
        commit="c0ffee" * 7,
        changed_files=["A\thello.py"],
        final_message="Added hello.py.",
    )
    one = RunRecord(
        id="r1",
        issue="7",
        mode="watch",
        agent="a",
        started_at=when,
        outcome="no_changes",
        round=1,
        feedback=[Consumed(id="local:x", kind="rework", author="di", excerpt="Is it fine?")],
    )
    variables = {
        **VARIABLES,
        "attempt": 1,
        "round": 2,
        "feedback": rounds.prompt_feedback(pieces),
        "previous": rounds.previous([one, first], 2),
    }

    text = prompt.render(None, tmp_path, variables)

    assert "## Review round 2: what the reviewers asked" in text
    # What concerns the whole change first, then file by file.
    assert text.index("review by bo") < text.index("`a.py`: inline by bo") < text.index("`b.py` line 9: inline by bo")
    assert "```diff\n@@ -1 +1 @@\n-x\n+y\n```" in text and "- cy: Why y?" in text and "Name it bye." in text
    assert "The first run (commit c0ffeec0ffee) changed hello.py. It said: Added hello.py." in text
    assert "Round 1 changed no file." in text
    assert "this is review round 2, attempt 1: the earlier rounds' work is already here" in text


def test_a_template_may_use_round_feedback_and_previous(tmp_path: Path) -> None:
    prompt.check("{{ round }} {% for p in feedback %}{{ p.body }}{% endfor %} {{ previous | length }}", tmp_path)
    text = prompt.render("r{{ round }}: {{ feedback | length }}", tmp_path, {**VARIABLES, "round": 1, "feedback": []})
    assert text == "r1: 0\n"
