"""The supervised modes' core (beflow/modes.py): which native client, what a session changed in the checkout, the
warning about an un-ignored .acpxrc.json, and one attended run per checkout."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from beflow import modes
from beflow.config import load_project
from beflow.errors import ConfigError, LockedError
from beflow.records import RunRecord, now
from tests.support.projects import config_file


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def configure(repo: Path, **config: object) -> None:
    config_file(repo).write_text(json.dumps(config))


# --- which native client --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "argv"),
    [
        ("claude", ["claude", "{prompt}"]),
        ("codex", ["codex", "{prompt}"]),
        ("gemini", ["gemini", "-i", "{prompt}"]),
        ("opencode", ["opencode", "--prompt", "{prompt}"]),
        ("cursor", ["cursor-agent", "{prompt}"]),
        ("cursor-agent", ["cursor-agent", "{prompt}"]),
    ],
)
def test_the_built_in_table_names_each_agents_interactive_client(repo: Path, agent: str, argv: list[str]) -> None:
    configure(repo, agent=agent)
    choice = modes.native_client(load_project())
    assert choice.argv == argv
    assert choice.source == "built-in table"
    assert choice.install  # every built-in client says how to install it


def test_open_in_config_overrides_the_table(repo: Path) -> None:
    configure(repo, agent="claude", open={"claude": ["claude", "--model", "opus", "{prompt}"]})
    choice = modes.native_client(load_project())
    assert choice.argv == ["claude", "--model", "opus", "{prompt}"]
    assert choice.source.startswith("open.claude in ")


def test_open_default_serves_an_agent_the_table_does_not_know(repo: Path) -> None:
    configure(repo, agent="kimi", open={"default": ["kimi", "--prompt={prompt}"]})
    assert modes.native_client(load_project()).argv == ["kimi", "--prompt={prompt}"]


def test_a_raw_agent_command_needs_an_open_entry(repo: Path) -> None:
    configure(repo, agent={"command": "my-acp-agent --stdio"})
    with pytest.raises(ConfigError) as caught:
        modes.native_client(load_project())
    assert "raw ACP command (my-acp-agent --stdio)" in caught.value.message
    assert '"open": {"default": ["my-client", "{prompt}"]}' in (caught.value.fix or "")


def test_an_unknown_agent_names_the_known_ones(repo: Path) -> None:
    configure(repo, agent="pi")
    with pytest.raises(ConfigError, match=r"no native client is known for agent 'pi' \(built in: claude, codex"):
        modes.native_client(load_project())


def test_an_open_entry_without_prompt_mark_is_a_config_error_naming_the_entry(repo: Path) -> None:
    configure(repo, agent="claude", open={"claude": ["claude"]})
    with pytest.raises(ConfigError) as caught:
        modes.native_client(load_project())
    assert f"{repo / '.beflow' / 'config.json'}: open.claude: no {{prompt}}" in caught.value.message


def test_the_prompt_replaces_every_mark_even_inside_a_larger_argument() -> None:
    argv = modes.client_argv(["client", "--message={prompt}", "{prompt}"], "fix it")
    assert argv == ["client", "--message=fix it", "fix it"]


@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (-2, 130), (-15, 143), (None, 1)])
def test_beflow_exits_with_the_clients_code(code: int | None, status: int) -> None:
    record = RunRecord(id="r", issue="1", mode="open", agent="claude", started_at=now(), exit_code=code)
    assert modes.exit_status(record) == status


# --- what a session changed -----------------------------------------------------------------------------------


def test_a_session_is_credited_only_with_what_changed_during_it(repo: Path) -> None:
    (repo / "tracked.txt").write_text("one\n")
    (repo / "reverted.txt").write_text("committed\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "more")
    (repo / "README.md").write_text("# edited by the user, before\n")  # dirty before, untouched
    (repo / "tracked.txt").write_text("user's edit\n")  # dirty before, changed again during the session
    (repo / "reverted.txt").write_text("user's edit\n")  # dirty before, put back by the session
    (repo / "notes.txt").write_text("user's untracked file\n")  # untracked before, deleted by the session
    before = modes.snapshot(repo, [])

    (repo / "tracked.txt").write_text("the agent's edit\n")
    (repo / "reverted.txt").write_text("committed\n")
    (repo / "notes.txt").unlink()
    (repo / "new dir").mkdir()
    (repo / "new dir" / "ünïcode.txt").write_text("new\n")
    changed, untouched = modes.compare(repo, before, modes.snapshot(repo, []))

    assert changed == ["A\tnew dir/ünïcode.txt", "D\tnotes.txt", "M\treverted.txt", "M\ttracked.txt"]
    assert untouched == ["M\tREADME.md"]


def test_excluded_directories_are_never_reported(repo: Path) -> None:
    issues = repo / ".beflow" / "issues"
    issues.mkdir(parents=True)
    before = modes.snapshot(repo, [issues])
    (issues / "0001-task.md").write_text("status: in_progress\n")
    assert modes.compare(repo, before, modes.snapshot(repo, [issues])) == ([], [])


# --- the .acpxrc.json warning -----------------------------------------------------------------------------------


def test_an_unignored_acpxrc_gets_the_line_to_add(repo: Path) -> None:
    notice = modes.acpxrc_notice(repo)
    assert notice is not None
    assert "is not git-ignored" in notice
    assert notice.endswith(f"add this line to {repo / '.gitignore'}:\n    .acpxrc.json")


def test_an_ignored_acpxrc_gets_no_warning(repo: Path) -> None:
    (repo / ".gitignore").write_text("*.json\n")
    assert modes.acpxrc_notice(repo) is None


def test_a_tracked_acpxrc_is_warned_about_differently(repo: Path) -> None:
    (repo / ".acpxrc.json").write_text("{}\n")
    git(repo, "add", ".acpxrc.json")
    git(repo, "commit", "-q", "-m", "acpx config")
    notice = modes.acpxrc_notice(repo)
    assert notice is not None and "is tracked by git" in notice


# --- one attended run per checkout ------------------------------------------------------------------------------


def test_a_second_attended_run_in_the_same_checkout_is_refused_naming_the_first(repo: Path) -> None:
    with modes.checkout_lock(repo, "7", "run-seven"), pytest.raises(LockedError) as caught:
        modes.checkout_lock(repo, "9", "run-nine").__enter__()
    message = caught.value.message
    assert message.startswith(f"an attended run is already going on in {repo}: issue 7 (run run-seven), beflow pid ")
    with modes.checkout_lock(repo, "9", "run-nine"):  # free again once the first is done
        pass


def test_attended_runs_in_different_checkouts_do_not_block_each_other(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with modes.checkout_lock(tmp_path / "a", "1", "r1"), modes.checkout_lock(tmp_path / "b", "1", "r2"):
        pass
