"""``beflow docs``: the shipped pages, readable wherever beflow is installed."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import REPO_ROOT


def test_docs_lists_every_topic_with_its_title(beflow) -> None:
    result = beflow("docs")

    assert result.exit_code == 0
    topics = {path.stem for path in (REPO_ROOT / "beflow" / "docs").glob("*.md")}
    listed = {line.split()[0] for line in result.stdout.splitlines()[:-1]}
    assert listed == topics
    assert "config           Configuration: .beflow/config.json" in result.stdout


def test_docs_prints_a_page_and_its_path(beflow) -> None:
    page = beflow("docs", "troubleshooting")
    path = beflow("docs", "troubleshooting", "--path")

    assert page.exit_code == path.exit_code == 0
    assert page.stdout == (REPO_ROOT / "beflow" / "docs" / "troubleshooting.md").read_text()
    assert Path(path.stdout.strip()).read_text() == page.stdout


def test_an_unknown_topic_is_a_usage_error_with_a_suggestion(beflow) -> None:
    result = beflow("docs", "confg")

    assert result.exit_code == 2
    assert result.stderr.splitlines()[0] == "error: no documentation topic 'confg' (did you mean 'config'?)"
    assert result.stderr.splitlines()[1].startswith("fix: Topics: ")
    assert " config, " in result.stderr.splitlines()[1]


def messages_in_the_code() -> list[tuple[str, str]]:
    """Every string in beflow's code that is not a docstring: what users can be shown."""
    found = []
    for path in (REPO_ROOT / "beflow").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                found.append((str(path.relative_to(REPO_ROOT)), node.value))
    return found


def test_messages_point_at_beflow_docs_never_at_a_docs_file_an_installed_user_does_not_have() -> None:
    pointing = [(path, text) for path, text in messages_in_the_code() if re.search(r"docs/\w+\.md", text)]

    assert not pointing, pointing


def test_every_topic_a_message_names_exists() -> None:
    topics = {path.stem for path in (REPO_ROOT / "beflow" / "docs").glob("*.md")}
    named = {m for _, text in messages_in_the_code() for m in re.findall(r"beflow docs ([a-z][\w-]*)", text)}
    template = (REPO_ROOT / "beflow" / "templates" / "config.example.json").read_text()
    named |= set(re.findall(r"beflow docs ([a-z][\w-]*)", template))

    assert named and named <= topics, named - topics
