"""Every kind of config mistake: one message naming the file, the line, the dotted key and what was expected."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from beflow.cli import cli
from beflow.cli.common import App, out, pass_app
from beflow.config import load_config_file
from beflow.errors import ConfigError
from beflow.validation import Problem, line_of, read_json5
from tests.support.projects import config_file


def problem(tmp_path: Path, text: str) -> str:
    """The message loading ``text`` as config.json gives (it must fail)."""
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config_file(path)
    assert caught.value.exit_code == 2
    return caught.value.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # JSON5 syntax: the line of the mistake
        ('{\n  "agent": "codex",\n  "timeout": 5 5\n}', ':3: invalid JSON5: Unexpected "5"'),
        ("{\n  agent: 'codex'\n  timeout: 5\n}", ":3: invalid JSON5"),
        # unknown keys, with a did-you-mean, at every depth
        ('{\n  "agnt": "codex"\n}', ":2: agnt: unknown key (did you mean 'agent'?)"),
        ('{\n  "watch": {\n    "intervl": 5\n  }\n}', ":3: watch.intervl: unknown key (did you mean 'interval'?)"),
        ('{"mcp": {"slf": true}}', ":1: mcp.slf: unknown key (did you mean 'self'?)"),
        ('{"hooks": {"x": "y"}}', "hooks.x: unknown key (expected one of: after_create, after_run, before_remove"),
        # wrong types: JSON's own types, no guessing
        ('{"timeout": "60"}', 'timeout: expected a number (got "60")'),
        ('{"timeout": true}', "timeout: expected a number (got true)"),
        ('{"timeout": false}', "timeout: expected a number (got false)"),
        ('{"watch": {"interval": null}}', "watch.interval: expected a number (got null)"),
        ('{"watch": {"concurrency": 1.5}}', "watch.concurrency: expected a whole number (got 1.5)"),
        ('{"after_run": {"commit": "no"}}', 'after_run.commit: expected true or false (got "no")'),
        ('{"acpx": "acpx"}', 'acpx: expected a list (got "acpx")'),
        ('{"acpx": ["acpx", 5]}', "acpx.1: expected a string (got 5)"),
        ('{"acpx": []}', "acpx: expected at least 1 item (got [])"),
        ('{"open": {"claude": ["claude", 1]}}', "open.claude.1: expected a string (got 1)"),
        ('{"worktrees": "dir"}', 'worktrees: expected an object (got "dir")'),
        ('{"watch": [1, true]}', "watch: expected an object (got [1, true])"),
        # constraints
        ('{"timeout": 0}', "timeout: expected a number greater than 0 (got 0)"),
        ('{"limits": {"stall": 0}}', "limits.stall: expected a number greater than 0 (got 0)"),
        ('{"limits": {"cost_per_run": "2"}}', 'limits.cost_per_run: expected a number (got "2")'),
        ('{"limits": {"cost_per_day": -1}}', "limits.cost_per_day: expected a number greater than 0 (got -1)"),
        ('{"limits": {"tokens_per_run": 1.5}}', "limits.tokens_per_run: expected a whole number (got 1.5)"),
        ('{"limits": {"currency": "usd"}}', "limits.currency: expected an ISO 4217 currency code in capitals, such as"),
        ('{"limits": {"cost_per_rn": 1}}', "limits.cost_per_rn: unknown key (did you mean 'cost_per_run'?)"),
        ('{"watch": {"interval": 1e999}}', "watch.interval: expected a finite number (got Infinity)"),
        # enums
        (
            '{"permissions": "yes"}',
            "permissions: expected 'approve-all', 'approve-reads' or 'deny-all' or an object (got \"yes\")",
        ),
        ('{"attend": {"permissions": "all"}}', "attend.permissions: expected 'approve-all', 'approve-reads' or"),
        ('{"sandbox": {"enabled": "yes"}}', "sandbox.enabled: expected 'auto' or true or false (got \"yes\")"),
        ('{"sandbox": {"enabled": 1}}', "sandbox.enabled: expected 'auto' or true or false (got 1)"),
        ('{"sandbox": {"enabled": null}}', "sandbox.enabled: expected 'auto' or true or false (got null)"),
        # unions: a string or an object
        ('{"agent": 5}', "agent: expected a string or an object (got 5)"),
        ('{"agent": {"cmd": "x"}}', "agent.cmd: unknown key (did you mean 'command'?)"),
        ('{"agent": {"command": ""}}', 'agent.command: expected at least 1 character (got "")'),
        ('{"hooks": {"after_create": 5}}', "hooks.after_create: expected a string or an object (got 5)"),
        (
            '{"hooks": {"before_run": {"command": "x", "timeot": 3}}}',
            "hooks.before_run.timeot: unknown key (did you mean",
        ),
        (
            '{"hooks": {"after_run": {"command": "x", "timeout": -1}}}',
            "hooks.after_run.timeout: expected a number greater",
        ),
        ('{"hooks": {"after_run": {"timeout": 1}}}', "hooks.after_run.command: required key is missing"),
        # the tracker: its kind decides which keys exist
        (
            '{"tracker": {"kind": "trello"}}',
            "tracker.kind: expected 'local' or 'github' or 'gitlab' or 'linear' or 'jira' (got \"trello\")",
        ),
        (
            '{"tracker": {"kind": "jira", "site": "https://a.atlassian.net"}}',
            "tracker.project: required key is missing",
        ),
        (
            '{"tracker": {"kind": "jira", "site": "https://a.net", "project": "WID", "labels": ["two words"]}}',
            "tracker.labels.0: expected",
        ),
        ('{"tracker": {"kind": "github", "lease": 0}}', "tracker.lease: expected a number greater than 0"),
        ('{"tracker": {"kind": "github", "repo": "octo"}}', 'tracker.repo: expected "owner/name" (got "octo")'),
        ('{"tracker": {"kind": "local", "repo": "a/b"}}', "tracker.repo: unknown key (expected one of: dir, kind)"),
        ('{"tracker": {"kind": "github", "repo": "a/b", "labels": "x"}}', 'tracker.labels: expected a list (got "x")'),
        # the top level
        ('["agent"]', "expected a JSON object at the top level, got list"),
    ],
)
def test_each_mistake_names_file_line_key_and_expectation(tmp_path: Path, text: str, expected: str) -> None:
    message = problem(tmp_path, text)

    assert message.startswith(str(tmp_path / "config.json"))
    assert expected in message


def test_every_problem_is_reported_at_once_in_file_order(tmp_path: Path) -> None:
    message = problem(
        tmp_path,
        """{
          "watch": {"interval": -1},
          "agnt": "codex",
          "permissions": "yes",
        }""",
    )

    lines = message.splitlines()
    assert [line.split(": ")[1] for line in lines] == ["watch.interval", "agnt", "permissions"]
    assert [line.split(": ")[0].rsplit(":", 1)[1] for line in lines] == ["2", "3", "4"]


def test_a_commented_out_key_is_not_the_line_of_the_mistake(tmp_path: Path) -> None:
    message = problem(
        tmp_path,
        """{
          // "timeout": 60,
          /* "timeout": 90, */
          "timeout": "soon",
        }""",
    )

    assert ":4: timeout:" in message


def test_a_missing_key_points_at_the_object_that_lacks_it(tmp_path: Path) -> None:
    message = problem(tmp_path, '{\n  // "command": "make"\n  "hooks": {\n    "after_run": {"timeout": 5}\n  }\n}')

    assert ":4: hooks.after_run.command: required key is missing" in message


def test_line_of_follows_the_dotted_key() -> None:
    text = '{\n  "a": {\n    "x": 1\n  },\n  "b": {\n    x: 2\n  }\n}'

    assert line_of(text, ["b", "x"]) == 6
    assert line_of(text, ["a", "x"]) == 3
    assert line_of(text, ["nowhere"]) is None


def test_a_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(b'{"agent": "\xff"}')

    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config_file(path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # a line break is named, never printed raw inside the message
        ('{\n  "agent": "cod\nex"\n}', ":2: invalid JSON5: Unexpected newline at column 16"),
        ("{agent:\x01}", ':1: invalid JSON5: Unexpected "\\u0001" at column 8'),
        # a value at the start of a line after one that ends without a comma
        (
            '{\n  agent: "claude"\n  timeout: 5\n}',
            ':3: invalid JSON5: Unexpected "t" at column 3 (a missing comma at the end of line 2?)',
        ),
        (
            '{\n  agent: "claude" // which one\n\n  timeout: 5\n}',
            ':4: invalid JSON5: Unexpected "t" at column 3 (a missing comma at the end of line 2?)',
        ),
        (
            '{\n  "acpx": [\n    "npx"\n    "acpx"\n  ]\n}',
            ':4: invalid JSON5: Unexpected "\\"" at column 5 (a missing comma at the end of line 3?)',
        ),
        # json5 names the character after a doubled comma (its columns are 1-based): the hint names the comma
        ('{agent: "claude",, }', ':1: invalid JSON5: Unexpected " " at column 19 (two commas in a row at column 18?)'),
        (
            "{\n  timeout: 5,\n  ,\n}",
            ":3: invalid JSON5: Unexpected newline at column 4 (two commas in a row at column 3?)",
        ),
        # the end came with a bracket open: where it was opened (brackets in strings and comments do not count)
        (
            '{\n  "agent": "codex"\n',
            ":3: invalid JSON5: Unexpected end of input at column 1 (the { at line 1, column 1 is never closed: "
            "a } is missing?)",
        ),
        (
            '{"mcpServers": {"a": {"command": "x", "args": ["{", "[}"]} // {\n  /* [ */\n',
            ":3: invalid JSON5: Unexpected end of input at column 1 (the { at line 1, column 16 is never closed: "
            "a } is missing?)",
        ),
        (
            '{\n  "acpx": ["npx",\n',
            ":3: invalid JSON5: Unexpected end of input at column 1 (the [ at line 2, column 11",
        ),
        # no guess where there is nothing to guess
        ('{\n  "agent": "codex\n}', ":2: invalid JSON5: Unexpected newline at column 18"),
        ('{\n  "agent": "codex" "x"\n}', ':2: invalid JSON5: Unexpected "\\"" at column 20'),
    ],
)
def test_a_syntax_error_says_where_and_what_is_likely_wrong(tmp_path: Path, text: str, expected: str) -> None:
    message = problem(tmp_path, text)

    assert message.startswith(f"{tmp_path / 'config.json'}{expected}")
    assert "\n" not in message


def test_a_key_given_twice_is_an_error_at_its_second_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{\n  "agent": "claude",\n  "timeout": 5,\n  agent: "codex",\n}')

    with pytest.raises(ConfigError) as caught:
        load_config_file(path)

    assert caught.value.exit_code == 2
    assert caught.value.message == f"{path}:4: agent: key given twice (first at line 2)"
    assert caught.value.fix


def test_a_key_given_twice_is_found_in_its_own_object(tmp_path: Path) -> None:
    text = """{
      hooks: {
        after_run: {command: "make test"},
        before_run: {command: "make"},  // the same key in another object is fine
        after_run: "make lint",
      },
      "open": {"a": ["x"], "b": ["x"], 'b': ["y"]},
    }"""

    assert problem(tmp_path, text).splitlines() == [
        f"{tmp_path / 'config.json'}:5: hooks.after_run: key given twice (first at line 3)",
        f"{tmp_path / 'config.json'}:7: open.b: key given twice (first at line 7)",
    ]


def test_mcp_json_refuses_a_key_given_twice_too(tmp_path: Path) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text('{"mcpServers": [{"a": {"command": "x"}}, {"a": {"command": "x"},\n "a": {"command": "y"}}]}')

    with pytest.raises(ConfigError, match=r"\.mcp\.json:2: mcpServers\.1\.a: key given twice \(first at line 1\)"):
        read_json5(path)


@pytest.mark.parametrize(
    "text",
    [
        '{"mcpServers": {"a": {"command": "x", "args": ' + "[" * 2000 + "]" * 2000 + "}}}",
        '{"mcpServers": {"a": {"command": "x", "env": {"K": ' + "1" * 5000 + "}}}}",
    ],
)
def test_mcp_json_nested_too_deep_or_with_huge_numbers_is_a_config_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(text)

    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}"):
        read_json5(path)


@pytest.mark.parametrize(
    ("levels", "extra", "error_line"),
    [
        (64, "", None),
        (65, "", 3),
        # brackets in strings and comments are no nesting, however many (and however quoted)
        (30, '"' + "[{" * 100 + "\\\"[[\", '[[[', // [[[[\n /* {{{{ */", None),
        (65, '"' + "]}" * 100 + '", // ]]]', 3),
    ],
)
def test_nesting_is_counted_outside_strings_and_comments(
    tmp_path: Path, levels: int, extra: str, error_line: int | None
) -> None:
    path = tmp_path / "config.json"
    path.write_text("{\n" + '"a": [' + extra + "\n" + "[" * (levels - 2) + "]" * (levels - 1) + "\n}")
    if error_line is None:
        read_json5(path)
    else:
        with pytest.raises(ConfigError, match=rf":{error_line}: nested more than 64 levels deep"):
            read_json5(path)


def test_a_key_with_control_characters_is_shown_escaped() -> None:
    assert Problem(Path("f.json"), 3, "open.a\x00b", "unknown key").render() == "f.json:3: open.a\\x00b: unknown key"


# --- through the command line: exit 2, nothing changed ------------------------------------------------------------


@pytest.fixture
def command_loading_config() -> Iterator[str]:
    """A command that loads the project, as every command using the config does."""

    @click.command("show-agent", hidden=True)
    @pass_app
    def show_agent(app: App) -> None:
        out.print(app.project().config.agent_label())

    cli.add_command(show_agent)
    yield "show-agent"
    del cli.commands["show-agent"]


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{\n  "agent": "codex",,\n}', ":2: invalid JSON5"),
        ('{\n  "agnt": "codex"\n}', ":2: agnt: unknown key (did you mean 'agent'?)"),
        ('{\n  "timeout": "1h"\n}', ':2: timeout: expected a number (got "1h")'),
        (
            '{\n  "tracker": {"kind": "trello"}\n}',
            ":2: tracker.kind: expected 'local' or 'github' or 'gitlab' or 'linear' or 'jira' (got",
        ),
        # odd keys, huge numbers and deep nesting: errors, never a crash
        ('{\n  "¹": 1, "①": 2\n}', ":2: ¹: unknown key"),
        ('{\n  "' + "7" * 5000 + '": 1\n}', ":2: " + "7" * 79 + "…: unknown key"),
        ('{\n  "timeout": ' + "1" * 5000 + "\n}", ": invalid JSON5: a number of 5000 digits"),
        ('{\n  "open":\n' + '{"a": ' * 2000 + "1" + "}" * 2000 + "\n}", ":3: nested more than 64 levels deep"),
        ('{"open": {"x": ' + "[" * 2000 + "]" * 2000 + "}}", ":1: nested more than 64 levels deep"),
    ],
)
def test_a_bad_config_exits_2_with_one_message_and_changes_nothing(
    repo: Path, beflow, command_loading_config: str, text: str, expected: str
) -> None:
    config = config_file(repo)
    config.write_text(text)
    before = snapshot(repo)

    result = beflow("--config", str(config), command_loading_config)

    assert result.exit_code == 2
    assert result.stderr.startswith("error: ")
    assert f"{config}{expected}" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert snapshot(repo) == before


def test_a_named_config_that_does_not_exist_exits_2(repo: Path, beflow, command_loading_config: str) -> None:
    result = beflow("--config", "missing.json", command_loading_config)

    assert result.exit_code == 2
    assert f"{repo / 'missing.json'}: no such config file (named by --config)" in result.stderr
    assert not (repo / ".beflow").exists()


def test_beflow_config_naming_a_missing_file_exits_2(
    repo: Path, beflow, command_loading_config: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BEFLOW_CONFIG", str(repo / "gone.json"))

    result = beflow(command_loading_config)

    assert result.exit_code == 2
    assert "no such config file (named by BEFLOW_CONFIG)" in result.stderr


def test_a_good_config_is_used(repo: Path, beflow, command_loading_config: str) -> None:
    config_file(repo).write_text('{agent: "claude"}')

    result = beflow(command_loading_config)

    assert (result.exit_code, result.stdout.strip()) == (0, "claude")


def test_a_real_command_refuses_a_bad_config_and_changes_nothing(repo: Path, beflow) -> None:
    config = config_file(repo)
    config.write_text('{\n  "tracker": {"kind": "github", "repo": "octo"},\n}')
    before = snapshot(repo)

    result = beflow("issues", "list")

    assert result.exit_code == 2
    assert f'error: {config}:2: tracker.repo: expected "owner/name" (got "octo")' in result.stderr
    assert snapshot(repo) == before
