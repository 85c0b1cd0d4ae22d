"""docs/spec.md and docs/architecture.md say what the code does: every member of every protocol, every status
transition, every event kind with its fields, every outcome, error and registry entry, every room of ``LAYERS``
in its row; the example tracker is a tracker; and every module, name and page the contributors' docs point at
exists."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import re
import sys
import types
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import pytest
from pydantic import Field

import beflow
from beflow import app, errors
from beflow.config import (
    CodeHostSettings,
    Config,
    GitHubTrackerSettings,
    LocalTrackerSettings,
    Model,
    NoCodeHostSettings,
    Project,
)
from beflow.events import RUN_EVENTS, RUN_PAYLOADS, WATCH_EVENTS, WATCH_PAYLOADS
from beflow.records.record import Outcome
from beflow.trackers import claims as claims_module
from beflow.trackers.base import Tracker
from beflow.trackers.claims import ClaimsOver
from beflow.trackers.issue import TRANSITIONS, Status
from tests.test_architecture import LAYERS, MODULES

PACKAGE = Path(beflow.__file__).parent
ROOT = PACKAGE.parent
DOCS = PACKAGE / "docs"
SPEC = (DOCS / "spec.md").read_text(encoding="utf-8")
ARCHITECTURE = (DOCS / "architecture.md").read_text(encoding="utf-8")
#: The pages contributors read, whose every pointer into the code is checked (the changelog is history: it names
#: modules as they were).
POINTING = [DOCS / "spec.md", DOCS / "architecture.md", ROOT / "README.md", ROOT / "CONTRIBUTING.md"]


# -- reading the pages ------------------------------------------------------------------------------------------------


def section(text: str, heading: str) -> str:
    """The text under the first heading reading ``heading`` (its ``#``s left out), up to the next heading of its
    level or above."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        match = re.match(r"(#+) (.*)", line)
        if match and match.group(2).strip() == heading:
            level = len(match.group(1))
            end = next(
                (i for i in range(start + 1, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[i])),
                len(lines),
            )
            return "\n".join(lines[start + 1 : end])
    raise AssertionError(f"no heading {heading!r}")


def tables(text: str) -> list[list[list[str]]]:
    """Every Markdown table in ``text``: its rows below the header, each a list of cells."""
    found: list[list[list[str]]] = []
    current: list[list[str]] | None = None
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if current is None:
                current = []
                found.append(current)
            elif not all(re.fullmatch(r"-+", cell) for cell in cells):
                current.append(cells)
        else:
            current = None
    return found


def table_with(text: str, header: str) -> list[list[str]]:
    """The rows of the table whose header line starts with ``header``."""
    lines = text.splitlines()
    for number, line in enumerate(lines):
        if line.startswith(header):
            return tables("\n".join(lines[number:]))[0]
    raise AssertionError(f"no table headed {header!r}")


def names(cell: str) -> list[str]:
    """The names a cell gives: each backticked span's leading identifier (`claim(key, owner) -> Claim` is claim)."""
    return [match.group(0) for span in re.findall(r"`([^`]+)`", cell) if (match := re.match(r"[A-Za-z_]\w*", span))]


def members(module: str, cls: str) -> set[str]:
    """The public members a class declares in its body: methods, annotated attributes, and (for a plain class)
    what its ``__init__`` sets on ``self``."""
    tree = ast.parse(MODULES[module].read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    found: set[str] = set()
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and not item.name.startswith("_"):
            found.add(item.name)
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            found.add(item.target.id)
        elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
            for target in ast.walk(item):
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and isinstance(target.ctx, ast.Store)
                    and not target.attr.startswith("_")
                ):
                    found.add(target.attr)
    return found


def protocols(module: str) -> list[str]:
    tree = ast.parse(MODULES[module].read_text())
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base) == "Protocol" for base in node.bases)
    ]


# -- the spec -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("module", "cls", "heading"),
    [
        ("beflow.trackers.base", "Tracker", "`Tracker`"),
        ("beflow.trackers.claims", "ClaimStore", "`ClaimStore`"),
        ("beflow.trackers.claims", "Claim", "`Claim`"),
        ("beflow.codehosts.base", "CodeHost", "`CodeHost`"),
    ],
)
def test_the_spec_names_every_member_of_a_protocol_and_no_other(module: str, cls: str, heading: str) -> None:
    rows = tables(section(SPEC, heading))[0]
    documented = {names(row[0])[0] for row in rows}

    assert documented == members(module, cls)


def test_the_spec_names_every_capability_with_its_members() -> None:
    capabilities = [name for name in protocols("beflow.trackers.base") if name != "Tracker"]
    rows = {names(row[0])[0]: set(names(row[1])) for row in table_with(SPEC, "| capability |")}

    assert len(capabilities) >= 8 and set(rows) == set(capabilities)
    for name in capabilities:
        assert rows[name] == members("beflow.trackers.base", name), name


def test_the_spec_names_what_a_source_of_feedback_does() -> None:
    rows = tables(section(SPEC, "`CodeHost`"))[1]

    assert {names(row[0])[0] for row in rows} == members("beflow.feedback", "FeedbackSource")


def test_the_spec_has_the_table_of_transitions() -> None:
    rows = table_with(SPEC, "| from | to |")
    documented = {Status(names(row[0])[0]): {Status(name) for name in names(row[1])} for row in rows}

    assert documented == {status: set(targets) for status, targets in TRANSITIONS.items()}


@pytest.mark.parametrize(
    ("index", "kinds", "payloads"), [(0, RUN_EVENTS, RUN_PAYLOADS), (1, WATCH_EVENTS, WATCH_PAYLOADS)]
)
def test_the_spec_names_every_event_kind_with_its_payload_and_fields_in_order(
    index: int, kinds: frozenset[str], payloads: dict[str, Any]
) -> None:
    rows = [table for table in tables(section(SPEC, "Events")) if table][index]
    documented = {names(row[0])[0]: (names(row[1])[0], names(row[2])) for row in rows}

    assert set(documented) == set(kinds)
    for kind, (payload, fields) in documented.items():
        assert payload == payloads[kind].__name__, kind
        assert fields == list(payloads[kind].model_fields), kind


def test_the_spec_names_every_outcome() -> None:
    documented = {names(row[0])[0] for row in table_with(SPEC, "| outcome |")}

    assert documented == set(get_args(Outcome))


def test_the_spec_names_every_registry_with_its_kinds_and_its_entrys_fields() -> None:
    rows = {names(row[0])[0]: row for row in table_with(SPEC, "| registry |")}

    for registry in ("TRACKERS", "CODE_HOSTS", "ENGINES"):
        _, kinds, entry, fields = rows[registry]
        kind = getattr(app, names(entry)[0])
        assert set(names(kinds)) == set(getattr(app, registry)), registry
        assert {field.name for field in dataclasses.fields(kind)} <= set(names(fields)), registry


def test_the_spec_says_each_errors_code_exit_code_and_permanence() -> None:
    rows = table_with(SPEC, "| class |")

    assert len(rows) >= 10
    for cells in rows:
        name, code, exit_code, permanent = names(cells[0])[0], names(cells[1])[0], cells[2], cells[3]
        error = getattr(errors, name, None) or getattr(claims_module, name)
        assert (error.code, str(error.exit_code), "yes" if error.permanent else "no") == (code, exit_code, permanent)


# -- architecture.md ----------------------------------------------------------------------------------------------


def _room_name(cell_name: str) -> str:
    return cell_name.removesuffix("/").removesuffix(".py")


def test_the_architecture_page_has_every_layer_in_order_and_a_paragraph_a_room() -> None:
    rows = table_with(ARCHITECTURE, "| layer | rooms |")
    rooms = section(ARCHITECTURE, "The rooms")

    assert [tuple(_room_name(name) for name in re.findall(r"`([^`]+)`", row[1])) for row in rows] == LAYERS
    for row in rows:
        for name in re.findall(r"`([^`]+)`", row[1]):
            assert f"**`{name}`**" in rooms, f"no paragraph on {name} in the rooms of docs/architecture.md"


def _example_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", section(ARCHITECTURE, "Adding a tracker: three files"), re.DOTALL)


def _example_tracker(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    module = types.ModuleType("beflow.trackers.memory")
    module.__dict__["__name__"] = module.__name__
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(_example_blocks()[0], "docs/architecture.md", "exec", dont_inherit=True), module.__dict__)
    return module


def test_the_example_tracker_is_a_tracker_that_keeps_the_contract(tmp_path: Path, monkeypatch) -> None:
    from beflow.errors import LockedError, NotFoundError, TransitionError

    tracker = _example_tracker(monkeypatch).MemoryTracker(tmp_path / "claims")
    later = tracker.create("Later", priority=3)
    first = tracker.create("First", labels=["bug"], priority=1)
    tracker.create("Not yet", status=Status.OPEN)

    assert isinstance(tracker, Tracker)
    assert [issue.key for issue in tracker.ready()] == [first.key, later.key]
    assert [issue.key for issue in tracker.listing(label="bug").issues] == [first.key]
    with tracker.claim(f"#{first.key}", "test") as claim:
        assert claim.key == first.key and tracker.holder(first.key) is not None
        assert tracker.last_holder(first.key).owner == "test"
        assert [issue.key for issue in tracker.ready()] == [later.key]
        tracker.set_status(first.key, Status.IN_PROGRESS, note="working on it", author="me")
        assert tracker.orphaned() == []
        with pytest.raises(LockedError):
            tracker.claim(first.key, "another")
    assert [issue.key for issue in tracker.orphaned()] == [first.key]
    assert tracker.get(first.key).comments[0].text == "working on it"
    with pytest.raises(TransitionError):
        tracker.set_status(first.key, Status.OPEN)
    with pytest.raises(NotFoundError):
        tracker.get("99")


def test_the_example_settings_have_what_every_trackers_settings_have() -> None:
    namespace: dict[str, Any] = {
        "Annotated": Annotated,
        "Field": Field,
        "Literal": Literal,
        "Model": Model,
        "CodeHostSettings": CodeHostSettings,
        "NoCodeHostSettings": NoCodeHostSettings,
        "LocalTrackerSettings": LocalTrackerSettings,
        "GitHubTrackerSettings": GitHubTrackerSettings,
    }
    exec(compile(_example_blocks()[1], "docs/architecture.md", "exec", dont_inherit=True), namespace)

    def methods(cls: type) -> set[str]:  # its own and its mixins', not pydantic's
        return {
            name
            for name in dir(cls)
            if not name.startswith("_") and not hasattr(Model, name) and callable(getattr(cls, name))
        }

    settings = namespace["MemoryTrackerSettings"](kind="memory")
    assert methods(type(settings)) == methods(LocalTrackerSettings) == methods(GitHubTrackerSettings) - {"_http_url"}
    assert get_args(get_args(namespace["Tracker"])[0])[-1] is type(settings)


def test_the_example_registry_line_opens_the_example_tracker(tmp_path: Path, monkeypatch) -> None:
    _example_tracker(monkeypatch)
    namespace: dict[str, Any] = {
        "TRACKERS": dict(app.TRACKERS),
        "TrackerKind": app.TrackerKind,
        "Project": Project,
        "ClaimsOver": ClaimsOver,
        "Tracker": Tracker,
    }
    exec(compile(_example_blocks()[2], "docs/architecture.md", "exec", dont_inherit=True), namespace)
    project = Project(config=Config(), config_path=None, directory=tmp_path)

    tracker = namespace["TRACKERS"]["memory"].open(project, None)

    assert isinstance(tracker, Tracker) and type(tracker).__module__ == "beflow.trackers.memory"


# -- what the contributors' pages point at ------------------------------------------------------------------------

#: A dotted name in backticks, called or not: ``git.build``, ``run.runner.Run``, ``git.distrusting()``.
DOTTED = re.compile(r"([a-z_]+(?:\.[A-Za-z_]\w*)+)(\(.*\))?")
PATH = re.compile(r"(?<![\w/.*<>$~-])((?:[\w.-]+/)*[\w-]+\.py)\b")
#: What a dotted name in backticks may be besides code: a config key (``watch.interval``) or an operation
#: (``issue.comment``). A name whose first part is one of these is checked only when more of it names a module.
NOT_CODE = {field.alias or name for name, field in Config.model_fields.items()} | {"issue", "run", "docs"}
#: A file's name is no dotted name (``events.py``, ``config.example.json``).
FILE_TYPES = {"py", "md", "json", "jsonl", "log", "lock", "toml", "mjs", "j2", "txt"}


def _exists(path: str) -> bool:
    if any((base / path).exists() for base in (ROOT, PACKAGE, ROOT / "tests")):
        return True
    return "/" not in path and any(ROOT.glob(f"{folder}/**/{path}") for folder in ("beflow", "tests", "bench"))


def _resolves(dotted: str) -> bool | None:
    """Whether ``dotted`` (``git.build``, ``run.runner.Run``, ``beflow.app.TRACKERS``) names something in beflow;
    None when it names no module at all (a config key, say)."""
    whole = dotted.startswith("beflow.")  # a whole module path; else the end of one (`git` is repository.git)
    parts = dotted.removeprefix("beflow.").split(".")
    if parts[-1] in FILE_TYPES:
        return None
    for length in range(len(parts), 0, -1):
        prefix = ".".join(parts[:length])
        modules = [
            name for name in MODULES if name == f"beflow.{prefix}" or (not whole and name.endswith(f".{prefix}"))
        ]
        if not modules:
            continue
        if length == 1 and parts[0] in NOT_CODE and not whole:
            return None
        for name in modules:
            value: object = importlib.import_module(name)
            try:
                for attribute in parts[length:]:
                    value = getattr(value, attribute)
            except AttributeError:
                continue
            return True
        return False
    return None


@pytest.mark.parametrize("page", POINTING, ids=lambda page: page.name)
def test_every_file_a_contributors_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")

    missing = sorted({path for path in PATH.findall(text) if not _exists(path)})

    assert missing == []


@pytest.mark.parametrize("page", POINTING, ids=lambda page: page.name)
def test_every_module_and_name_a_contributors_page_points_at_exists(page: Path) -> None:
    spans = re.findall(r"`([^`\n]+)`", page.read_text(encoding="utf-8"))
    dotted = {match.group(1) for span in spans if (match := DOTTED.fullmatch(span))}
    dotted |= {name for span in spans for name in re.findall(r"\bbeflow(?:\.\w+)+", span)}

    assert sorted(name for name in dotted if _resolves(name) is False) == []


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", POINTING, ids=lambda page: page.name)
def test_every_link_of_a_contributors_page_reaches_its_page_and_heading(page: Path) -> None:
    broken = []
    for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]+))?\)", page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        linked = (page.parent / target) if target else page
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", linked.read_text(encoding="utf-8"), re.M)
            if anchor not in {_anchor(heading) for heading in headings}:
                broken.append(f"{target}#{anchor}")

    assert broken == []
