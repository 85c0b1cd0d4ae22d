"""The user docs (README.md and ``beflow docs``' pages) name only what exists: every ``beflow …`` command line they
show is a command of the click app with options it takes, every ``beflow docs TOPIC`` a page, every config key (in
a JSON example or as ``key.sub``) a key of the config models, and the lists they give of the topics, the prompt's
variables and the runs' outcomes are the code's lists."""

from __future__ import annotations

import json
import re
import shlex
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import json5
import pydantic
import pytest

import beflow
from beflow.cli import MODE_FLAGS, cli
from beflow.config import Config, load_config_file
from beflow.records.record import Outcome
from beflow.run.prompt import VARIABLES

PACKAGE = Path(beflow.__file__).parent
ROOT = PACKAGE.parent
PAGES = [ROOT / "README.md", *sorted((PACKAGE / "docs").glob("*.md"))]
TOPICS = {page.stem for page in (PACKAGE / "docs").glob("*.md")}


@dataclass(frozen=True)
class Named:
    """Something a page names, and where: the page and its line, for the failure message."""

    text: str
    page: str
    line: int

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


# -- reading the pages ------------------------------------------------------------------------------------------------


def fenced(path: Path) -> Iterator[tuple[str | None, int, str]]:
    """Every line of ``path`` with its number and the language of the fenced block it is in (None: outside any)."""
    language: str | None = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            language = line.strip("`").strip() if language is None else None
            continue
        yield language, number, line


def spans(line: str) -> list[str]:
    """The inline code spans of a line of Markdown."""
    return [match.group(2) for match in re.finditer(r"(`+)(.+?)\1", line)]


#: How a shell line reaches beflow: an installed ``beflow``, the repository's ``.venv/bin/beflow``, ``python -m
#: beflow``, after any ``VAR=value`` assignments.
_INVOCATION = re.compile(r"^(?:\w+=\S*\s+)*(?:\S*/)?(?:beflow|python\S*\s+-m\s+beflow)(?=\s|$)")


def command_lines() -> list[Named]:
    """Every ``beflow …`` command line of the pages: each command of a shell block (``sh``, ``bash``), each
    prompted line (``$ …``) of a console or text block, a command line alone in a block without a language, and
    every inline code span that starts with ``beflow`` (in a block's output too)."""
    found = []
    for page in PAGES:
        for language, number, line in fenced(page):
            candidates = []
            if language in ("sh", "bash"):
                candidates += _commands_of_shell(line)
            else:
                if language is not None and line.startswith("$ "):
                    candidates += _commands_of_shell(line[2:])
                elif language == "" and _INVOCATION.match(line.strip()):
                    candidates += _commands_of_shell(line.strip())
                # beflow's own words (a message, a comment it writes) can start with "beflow" too: `beflow gives up
                # on this issue: 3 attempt(s).` A span with ": " outside quotes is such a sentence (no command
                # line has one).
                candidates += [s for s in spans(line) if _INVOCATION.match(s) and ": " not in _unquoted(s)]
            found += [Named(text, page.name, number) for text in candidates]
    return found


def _unquoted(text: str) -> str:
    return re.sub(r"\"[^\"]*\"|'[^']*'", "", text)


def _commands_of_shell(line: str) -> list[str]:
    """The beflow commands of one shell line: its pipeline and list split apart, comments and ``$(…)`` left out."""
    line = re.sub(r"\$\([^)]*\)", "VALUE", line)
    line = re.sub(r"(^|\s)#.*", "", line)
    return [part.strip() for part in re.split(r"&&|\|\||;|\|", line) if _INVOCATION.match(part.strip())]


# -- the click app --------------------------------------------------------------------------------------------------


def problems_of(line: str) -> list[str]:
    """What in ``line`` the click app does not have: a command or subcommand, an option of the command it is given
    to, a ``beflow docs`` topic. Positional arguments are not checked (the pages write placeholders: KEY, ID)."""
    tokens = shlex.split(_INVOCATION.sub("beflow", line, count=1))[1:]
    context = click.Context(cli)
    command: click.Command = cli
    said = "beflow"
    problems = []
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if token == "--":
            break
        if command is cli and token in MODE_FLAGS:  # `beflow --auto KEY`: the mode's hidden command takes the rest
            command, said = cli.get_command(context, MODE_FLAGS[token]) or cli, f"beflow {token}"
            continue
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            option = _option(command, name)
            if option is None:
                problems.append(f"{said} has no option {name}")
            elif not option.is_flag and "=" not in token and not option.count:
                index += option.nargs  # its value (a placeholder, often)
            continue
        if isinstance(command, click.Group):
            sub = command.get_command(context, token)
            if sub is None:
                problems.append(f"{said} has no command {token!r}")
                break
            command, said = sub, f"{said} {token}"
        elif said == "beflow docs" and re.fullmatch(r"[a-z][\w-]*", token) and token not in TOPICS:
            problems.append(f"beflow docs has no topic {token!r}")
    return problems


def _option(command: click.Command, name: str) -> click.Option | None:
    if name in ("-h", "--help"):  # every command's (the root's context settings)
        return click.Option(["--help"], is_flag=True)
    for param in command.params:
        if isinstance(param, click.Option) and name in (*param.opts, *param.secondary_opts):
            return param
    return None


def test_the_pages_show_command_lines_to_check() -> None:
    lines = {named.text for named in command_lines()}

    # A sample of every way a page shows one: a shell block, a console prompt, inline, a mode, an option's value.
    assert {"beflow init", "beflow --auto", "beflow watch --json", "beflow issues show KEY"} <= lines
    assert any(line.startswith("BEFLOW_HTTP_TOKEN=VALUE beflow watch --http") for line in lines)
    assert len(lines) > 80


def test_every_command_line_of_the_docs_is_a_command_with_options_it_takes() -> None:
    wrong = [f"{named}  ({problem})" for named in command_lines() for problem in problems_of(named.text)]

    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("beflow issues ready", "beflow issues has no command 'ready'"),
        ("beflow watch --onse", "beflow watch has no option --onse"),
        ("beflow --auto 7 --jsn", "beflow --auto has no option --jsn"),
        ("beflow docs confg", "beflow docs has no topic 'confg'"),
        ("beflow --config ci.json dcotor", "beflow has no command 'dcotor'"),
    ],
)
def test_a_command_or_option_that_does_not_exist_is_found(line: str, problem: str) -> None:
    assert problems_of(line) == [problem]


def test_options_values_and_placeholders_are_not_taken_for_commands() -> None:
    for line in (
        "beflow --config ci.json doctor",
        "beflow issues comment 7 'also the empty case' --rework",
        "beflow issues list --status ready --label bug",
        "beflow mcp serve --issue KEY --run ID --channel PATH",
        "beflow --auto [KEY ...]",
        "beflow serve [HOST:]PORT",
    ):
        assert problems_of(line) == [], line


# -- config keys ------------------------------------------------------------------------------------------------------


#: What a dotted span is when it is a file's name and not a key (`mcp.md`, `run.json`).
_FILE = re.compile(r"\.(md|json|jsonl|py|j2|log|sqlite|txt|toml|yml|yaml|sh)$")


def dotted_keys() -> list[Named]:
    """Every ``key.sub`` span of the pages whose first part is a key of the config (``limits.cost_per_day``,
    ``tracker.token_env``); a file's name is not one."""
    top = _fields(Config)
    found = []
    for page in PAGES:
        for _, number, line in fenced(page):
            for span in spans(line):
                if re.fullmatch(r"[a-z_]+(\.[a-z_]+)+", span) and span.split(".")[0] in top and not _FILE.search(span):
                    found.append(Named(span, page.name, number))
    return found


def _fields(model: type[pydantic.BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


def _models(annotation: Any) -> tuple[list[type[pydantic.BaseModel]], bool]:
    """The models a field's value can be (through unions, optionals and lists), and whether it can be a mapping
    of any keys (``open``: an agent's name → its argv)."""
    models, mapping, pending = [], False, [annotation]
    while pending:
        current = pending.pop()
        if isinstance(current, type) and issubclass(current, pydantic.BaseModel):
            models.append(current)
        elif typing.get_origin(current) is dict:
            mapping = True
        else:
            pending.extend(a for a in typing.get_args(current) if not isinstance(a, str | int | float))
    return models, mapping


def key_exists(path: str) -> bool:
    """Whether ``path`` (``limits.cost_per_day``) is a key of the config: each part a field of one of the models
    the part before can be."""
    current: list[type[pydantic.BaseModel]] = [Config]
    for part in path.split("."):
        following: list[type[pydantic.BaseModel]] = []
        found = False
        for model in current:
            for name, field in model.model_fields.items():
                if part in (name, field.alias):
                    models, mapping = _models(field.annotation)
                    if mapping:
                        return True  # its keys are the user's
                    following += models
                    found = True
        if not found:
            return False
        current = following
    return True


def test_every_dotted_key_the_docs_name_is_a_key_of_the_config() -> None:
    named = dotted_keys()
    assert {"limits.cost_per_day", "tracker.token_env", "watch.interval", "mcp.self"} <= {n.text for n in named}

    missing = [str(n) for n in named if not key_exists(n.text)]

    assert not missing, "\n".join(missing)


def test_a_key_that_does_not_exist_is_found() -> None:
    assert key_exists("limits.cost_per_day") and key_exists("agent.command") and key_exists("open.claude")
    assert not key_exists("limits.cost_per_week") and not key_exists("tracker.tokn_env") and not key_exists("nope")


def json_examples() -> list[tuple[Named, Any]]:
    """Every JSON or JSON5 block of the pages that is a config (its keys are the config's), and every inline
    ``"key": {…}`` span that names a config key, as the value it reads as."""
    top = _fields(Config)
    found: list[tuple[Named, Any]] = []
    for page in PAGES:
        block: list[str] = []
        start = 0
        for language, number, line in fenced(page):
            if language in ("json", "json5"):
                start = start or number
                block.append(line)
                continue
            if block:
                found += _config_of(Named("\n".join(block), page.name, start), top)
                block, start = [], 0
            row = re.match(r"\| \[`(\w+)`\]", line)  # a row of config.md's table of keys: its default
            if language is None and row:
                for span in spans(line):
                    if span.startswith("{"):
                        found += _config_of(Named(f'{{"{row[1]}": {span}}}', page.name, number), top)
            if language is None:
                for span in spans(line):
                    # A section's settings (`"mcp": {"enabled": true}`); a span with a plain value is often a value
                    # shown as wrong (`"timeout": "60"` is an error), which the text around it says.
                    if re.match(r'"[a-z_]+": \{', span):
                        found += _config_of(Named("{" + span + "}", page.name, number), top)
    return found


def _config_of(named: Named, top: set[str]) -> list[tuple[Named, Any]]:
    try:
        value = json5.loads(named.text)
    except ValueError:
        return []  # a fragment (`"hosts": [...]`), or not JSON at all
    # Every key the config's (a run record, an `.mcp.json` or a client's own config have other keys beside).
    if isinstance(value, dict) and value and value.keys() <= top:
        return [(named, value)]
    return []


def test_every_config_example_of_the_docs_is_a_valid_config(tmp_path: Path) -> None:
    examples = json_examples()
    assert len(examples) > 30
    assert any(value == {"mcp": {"enabled": True}} for _, value in examples)  # an inline one, from the README
    assert any(value == {"mcp": {"enabled": False, "self": False}} for _, value in examples)  # a default, in a table

    wrong = []
    for index, (named, value) in enumerate(examples):
        path = tmp_path / f"example-{index}.json"
        path.write_text(json.dumps(value))
        try:
            load_config_file(path)
        except beflow.errors.ConfigError as error:
            wrong.append(f"{named.page}:{named.line}: {error.message.removeprefix(str(path))}")

    assert not wrong, "\n".join(wrong)


# -- the lists the pages give -----------------------------------------------------------------------------------------


def test_the_readme_links_every_topic() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]

    linked = set(re.findall(r"\(docs/([\w-]+)\.md\)", section))

    assert linked == TOPICS, f"missing: {sorted(TOPICS - linked)}; not a topic: {sorted(linked - TOPICS)}"


def variable_lists() -> list[tuple[Named, set[str]]]:
    """Every list of the prompt's variables the pages and the config template give: the sentence after
    "variables:" or "variables are", when it names ``issue`` and ``attempt``."""
    found = []
    texts = [(page.name, page.read_text(encoding="utf-8")) for page in PAGES]
    texts.append(("config.example.json", (PACKAGE / "templates" / "config.example.json").read_text()))
    for name, text in texts:
        for match in re.finditer(r"[Vv]ariables(?::| are) (.*?)\.(?:\s|$)", text, flags=re.DOTALL):
            listed = _names_in(re.sub(r"\n\s*(//)?", " ", match.group(1)))  # (the template's comment lines)
            if {"issue", "attempt"} <= listed:
                found.append((Named(match.group(0)[:60] + "…", name, text.count("\n", 0, match.start()) + 1), listed))
    return found


def _names_in(text: str) -> set[str]:
    """The names a list gives, backticked on a page, bare in the template's comment; what follows a name in
    parentheses (an object's fields, a mode's values) is not a variable, nor is a link's target."""
    text = re.sub(r"\([^()]*\)", "", re.sub(r"\]\([^)]*\)", "]", text))
    if "`" in text:
        return set(re.findall(r"`(\w+)`", text))
    return set(re.findall(r"[a-z_]+", text)) - {"and", "or"}


def test_every_list_of_the_prompts_variables_is_the_codes() -> None:
    lists = variable_lists()
    assert {named.page for named, _ in lists} >= {"config.md", "troubleshooting.md", "config.example.json"}

    wrong = [f"{named}: {sorted(VARIABLES - listed)} missing" for named, listed in lists if listed != VARIABLES]

    assert not wrong, "\n".join(wrong)


OUTCOMES = set(typing.get_args(Outcome))


def outcome_lists() -> list[tuple[Named, set[str]]]:
    """Every list of run outcomes the pages give: four or more backticked outcomes in a row, joined by commas,
    "or" or "and" (a shorter run is a few outcomes said for what they share, not the list)."""
    word = "`(?:" + "|".join(sorted(OUTCOMES)) + ")`"
    pattern = re.compile(rf"{word}(?:(?:,\s+|,?\s+or\s+|,?\s+and\s+){word}){{3,}}")
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((Named(match.group(0), page.name, line), set(re.findall(r"`(\w+)`", match.group(0)))))
    return found


def test_the_table_of_outcomes_is_the_codes() -> None:
    text = (PACKAGE / "docs" / "runs.md").read_text(encoding="utf-8")
    section = text.split("## Outcomes", 1)[1].split("\n## ", 1)[0]

    tabled = set(re.findall(r"^\| `(\w+)` \|", section, flags=re.MULTILINE))

    assert tabled == OUTCOMES - {"running"}  # (a record's state while its run goes on, not an ending)


def test_every_list_of_outcomes_is_the_codes() -> None:
    lists = outcome_lists()
    assert {named.page for named, _ in lists} >= {"modes.md"}

    # `running` is a record's state while its run goes on, not how a run ends: a list of endings leaves it out.
    endings = OUTCOMES - {"running"}
    wrong = [f"{named}: {sorted(endings - listed)} missing" for named, listed in lists if not endings <= listed]

    assert not wrong, "\n".join(wrong)
