"""``beflow docs``: the shipped pages, readable wherever beflow is installed."""

from __future__ import annotations

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
    assert result.stderr.splitlines()[1].startswith("fix: Topics: config, ")
