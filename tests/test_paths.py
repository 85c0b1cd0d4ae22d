"""Where beflow keeps state, and the slugs that name branches, worktrees and files."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from beflow.paths import beflow_home, path_key, slug, state_dir

SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def git_accepts_branch(name: str) -> bool:
    done = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True)
    return done.returncode == 0


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_a_slug_is_always_a_safe_branch_component_and_file_name(text: str) -> None:
    result = slug(text)

    assert SAFE.fullmatch(result), result
    assert ".." not in result
    assert not result.endswith((".", ".lock"))
    assert len(result) <= 48 + 9
    assert git_accepts_branch(f"beflow/{result}"), result


@given(st.text(max_size=80), st.text(max_size=80))
def test_distinct_texts_get_distinct_slugs(first: str, second: str) -> None:
    if first != second:
        assert slug(first) != slug(second)


@given(st.from_regex(r"[a-z0-9][a-z0-9_-]{0,30}[a-z0-9]", fullmatch=True))
def test_a_text_that_is_already_safe_is_kept(text: str) -> None:
    if not re.search(r"-[0-9a-f]{8}$", text):
        assert slug(text) == text


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ("Fix: the bug", "Fix the bug"),  # both clean to "Fix-the-bug"
        ("a" * 60, "a" * 61),  # both truncated to the same prefix
        ("", "x"),
        ("release.lock", "release-lock"),
    ],
)
def test_texts_that_clean_up_alike_stay_distinct(first: str, second: str) -> None:
    assert slug(first) != slug(second)


def test_a_text_that_looks_like_a_hashed_slug_does_not_collide_with_one() -> None:
    hashed = slug("")  # "x-<hash>"

    assert slug(hashed) != hashed


def test_slug_examples() -> None:
    assert slug("issue-12") == "issue-12"
    assert slug("GH-7") == "GH-7"
    assert slug("Fix: the bug!").startswith("Fix-the-bug-")
    assert slug("a" * 100, max_length=10).startswith("a" * 10 + "-")


def test_path_key_is_stable_and_tells_paths_apart(tmp_path: Path) -> None:
    one, other = tmp_path / "a" / "config.json", tmp_path / "b" / "config.json"

    assert path_key(one) == path_key(one)
    assert path_key(one) != path_key(other)
    assert path_key(one).startswith("config.json-")


def test_beflow_home_is_the_environment_variable_else_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    assert beflow_home() == isolated_home

    monkeypatch.setenv("BEFLOW_HOME", "~/elsewhere")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: tmp_path / "home"))
    assert beflow_home() == tmp_path / "home" / "elsewhere"

    monkeypatch.delenv("BEFLOW_HOME")
    assert beflow_home() == tmp_path / "home" / ".beflow"


def test_a_relative_beflow_home_is_made_absolute_where_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BEFLOW_HOME", "state/beflow")
    monkeypatch.chdir(tmp_path)

    home = beflow_home()

    assert home.is_absolute()
    assert home == tmp_path / "state" / "beflow"


def test_the_state_directory_ignores_itself_but_for_the_config_and_issues(repo: Path) -> None:
    directory = state_dir(repo)

    assert directory == repo / ".beflow"
    assert (directory / ".gitignore").read_text().splitlines()[1:] == ["/*", "!/config.json", "!/issues/"]


def test_an_ignore_file_of_an_earlier_version_is_brought_up_to_date_and_a_users_own_is_kept(repo: Path) -> None:
    earlier = "# Written by beflow: run records, locks and caches stay out of git; the local tracker's issues do not.\n"
    ignore = repo / ".beflow" / ".gitignore"
    ignore.parent.mkdir()
    ignore.write_text(earlier + "/*\n!/issues/\n")

    state_dir(repo)

    assert "!/config.json" in ignore.read_text().splitlines()

    ignore.write_text("# mine\n/*\n")
    state_dir(repo)

    assert ignore.read_text() == "# mine\n/*\n"
