"""The agent's prompt: Jinja2 with strict variables, the built-in default, a template file or inline text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from beflow import prompt
from beflow.prompt import PromptError

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
    assert "issue, attempt, branch, run_id" in (error.value.fix or "")

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
