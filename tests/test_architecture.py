"""The shape of ``beflow/`` stays as docs/architecture.md says: no import cycle, no class doing too many jobs, and
what only some trackers or code hosts can do asked for with ``isinstance`` on a capability protocol, never found
by ``getattr``. Read from the source (ast), so a lazy import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import beflow

PACKAGE = Path(beflow.__file__).parent
#: Lines a class may span, its docstring and comments included: beyond, it does more than one job.
MAX_CLASS_LINES = 300
#: What a tracker or a code host is called where it is used (``self.tracker``, ``data.tracker``, ``code_host``).
HOLDER = re.compile(r"tracker|code_?host", re.IGNORECASE)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), filename=str(path)) for name, path in MODULES.items()}


def _known(name: str) -> str | None:
    """The beflow module ``name`` is, or is in (``beflow.trackers.issue.Issue`` -> ``beflow.trackers.base``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The beflow modules ``module`` imports, anywhere in it. ``from a import b`` imports ``a`` (Python runs it,
    and reads ``b`` from it), and ``a.b`` too when that is a module."""
    is_package = MODULES[module].name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(TREES[module]):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [source] + [f"{source}.{alias.name}" for alias in node.names]
        for name in names:
            known = _known(name)
            if known is not None and known != module:
                found.add(known)
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            step = next(edges, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_import_graph_of_beflow_has_no_cycle() -> None:
    graph = {module: imports_of(module) for module in MODULES}
    assert graph["beflow.watch.dispatcher"] >= {
        "beflow.run.attempts",
        "beflow.trackers",
    }  # (an import inside a function counts)
    assert cycles(graph) == []


def _room(module: str) -> str:
    """The room a module stands in: a sub-package of beflow as one (``beflow.server``), else the module itself."""
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or MODULES[module].name == "__init__.py" else module


def test_the_packages_of_beflow_import_each_other_without_a_cycle_either() -> None:
    # A layer imports only the layers below it: a sub-package counts as one room, so that a package importing a
    # module that imports (another of) the package's modules is a cycle too (server -> dispatcher -> runner ->
    # server.channel was one).
    rooms: dict[str, set[str]] = {}
    for module in MODULES:
        rooms.setdefault(_room(module), set()).update(_room(m) for m in imports_of(module))
    for room, imported in rooms.items():
        imported.discard(room)
    assert {"beflow.run", "beflow.trackers", "beflow.mcp"} <= set(rooms)
    assert cycles(rooms) == []


def test_no_class_spans_more_than_300_lines() -> None:
    spans = {
        f"{module}.{node.name}": (node.end_lineno or node.lineno) - node.lineno + 1
        for module, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
    }
    assert spans["beflow.trackers.local.LocalTracker"] > 100  # (the spans are measured)
    assert {name: lines for name, lines in spans.items() if lines > MAX_CLASS_LINES} == {}


def test_no_capability_of_a_tracker_or_code_host_is_found_by_getattr() -> None:
    """``getattr(tracker, "progress", None)`` hides what a tracker can do: a capability is a protocol
    (``trackers.base``, ``codehosts.base``) asked for with ``isinstance``."""
    found = [
        f"{MODULES[module].relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node)}"
        for module, tree in TREES.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("getattr", "hasattr")
        and node.args
        and HOLDER.search(ast.unparse(node.args[0]))
    ]
    assert found == []


def test_the_readmes_map_names_every_room() -> None:
    """The README's "How the code is laid out" names every package and every module at the root, so that a
    newcomer finds where a change goes from the tree and one line a room."""
    readme = (PACKAGE.parent / "README.md").read_text()
    layout = readme[readme.index("## How the code is laid out") :]
    rooms = {_room(module) for module in MODULES} - {"beflow", "beflow.__main__"}
    named = {room for room in rooms if re.search(rf"^  {re.escape(_file_of(room))}", layout, re.M)}
    named |= {room for room in rooms if re.search(rf"\s{re.escape(_file_of(room))}\s", layout)}
    assert rooms - named == set()


def _file_of(room: str) -> str:
    """``beflow.run`` -> ``run/``, ``beflow.config`` -> ``config.py``."""
    leaf = room.rpartition(".")[2]
    return f"{leaf}/" if MODULES[room].name == "__init__.py" else f"{leaf}.py"


#: The rooms of beflow, top to bottom: a room imports only rooms below it (or beside it, in one tuple). A new
#: package takes its place here, and docs/architecture.md says why it stands there.
LAYERS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    ("doctor", "demo", "web"),
    ("app",),
    ("fleet",),
    ("watch",),
    ("run",),
    ("mcpserver",),
    ("ops",),
    ("sandbox",),
    ("codehosts",),
    ("trackers",),
    ("agent",),
    ("repository",),
    ("mcp",),
    ("records",),
    ("guardrails", "feedback"),
    ("config", "validation"),
    ("events", "paths", "docs"),
    ("system",),
    ("errors",),
]


def test_every_room_stands_in_one_layer_and_imports_only_the_layers_below() -> None:
    level = {f"beflow.{name}": depth for depth, names in enumerate(LAYERS) for name in names}
    level["beflow"] = len(LAYERS)  # (the package itself: its version)
    rooms = {_room(module) for module in MODULES}
    assert rooms - set(level) == set(), "a room with no layer: add it to LAYERS"
    upward = sorted(
        f"{module} -> {imported}"
        for module in MODULES
        for imported in imports_of(module)
        if level[_room(imported)] < level[_room(module)]
    )
    assert upward == []


def test_the_root_of_the_package_holds_at_most_a_dozen_modules() -> None:
    root = [path.name for path in PACKAGE.glob("*.py")]
    assert "config.py" in root and len(root) <= 12, sorted(root)


def test_every_kind_the_config_accepts_has_one_line_in_the_composition_root() -> None:
    """Adding a tracker is its module, its settings model and one line in ``app.TRACKERS``; a code host and an
    engine the same (docs/architecture.md)."""
    import typing

    from beflow import app, config

    def kinds(union: object) -> set[str]:
        members = typing.get_args(typing.get_args(union)[0])
        return {typing.get_args(member.model_fields["kind"].annotation)[0] for member in members}

    assert kinds(config.Tracker) == set(app.TRACKERS) == {"local", "github", "gitlab", "linear", "jira"}
    assert kinds(config.CodeHostSettings) - {"none"} == set(app.CODE_HOSTS)
    assert kinds(config.Engine) == set(app.ENGINES)


#: Where a kind may be named: its own package, its settings, the composition root (and the demo, which makes a
#: local project on purpose). Everywhere else a tracker, code host or engine is asked through its protocol.
KIND_NAMES = re.compile(
    r"\b(LocalTracker|GitHubTracker|GitLabTracker|GitHubCodeHost|(Local|GitHub|GitLab)TrackerSettings"
    r"|GitHubCodeHostSettings)\b"
    r"|\.kind\s*[!=]=\s*[\"'](local|github|gitlab|temporal)[\"']"
)
KINDS_AT_HOME = ("beflow.trackers", "beflow.codehosts", "beflow.app", "beflow.config", "beflow.demo")


def test_no_kind_is_chosen_outside_the_composition_root() -> None:
    found = [
        f"{module}:{number}: {line.strip()}"
        for module, path in MODULES.items()
        if not module.startswith(KINDS_AT_HOME)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if KIND_NAMES.search(line)
    ]
    assert found == []


#: The modules that start processes themselves: the one subprocess helper and what it is made of.
SPAWNERS = {"beflow.system.proc", "beflow.system.groups", "beflow.system.pipes"}


def _gitpython_runs(tree: ast.AST) -> list[ast.AST]:
    """Where ``tree`` asks GitPython to run git: ``<repo>.git.<verb>(...)``, ``Git.execute(...)``,
    ``<repo>.git.execute(...)``."""
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        holder = node.func.value
        through_repo = isinstance(holder, ast.Attribute) and holder.attr == "git"
        if through_repo or (node.func.attr == "execute" and "Git" in ast.unparse(holder)):
            found.append(node)
    return found


def _runtime_imports(tree: ast.Module) -> list[str]:
    """The modules ``tree`` imports outside ``if TYPE_CHECKING:`` blocks (anywhere else: in functions too)."""
    names: list[str] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.append(node.module or "")
        elif isinstance(node, ast.Call) and ast.unparse(node.func).endswith("startup.module") and node.args:
            names.append(str(ast.literal_eval(node.args[0])))
        pending.extend(ast.iter_child_nodes(node))
    return names


def test_the_git_checks_find_what_they_look_for() -> None:
    sample = ast.parse("repo.git.status('--porcelain')\nGit.execute(runner, ['git'])\nrepo.git.execute(['git'])\n")
    assert len(_gitpython_runs(sample)) == 3
    assert _gitpython_runs(ast.parse("git.run(repo, 'status')\nrefs.head(repo)\n")) == []
    imported = ast.parse(
        "if TYPE_CHECKING:\n    import git\nelse:\n    git = startup.module('git')\nimport subprocess\n"
    )
    assert sorted(_runtime_imports(imported)) == ["git", "subprocess"]  # (not the `import git` for the types)


def test_every_git_command_goes_through_the_one_runner() -> None:
    """GitPython is kept for its repository object alone: no git command is run through it (whose own timeout lost
    races under load); each goes through ``repository.git.run`` and so through ``system.proc``'s supervision. Only
    the subprocess helper starts processes, and only ``repository.git`` loads GitPython."""
    runs = [
        f"{MODULES[module].relative_to(PACKAGE.parent)}:{getattr(node, 'lineno', 0)}: {ast.unparse(node)}"
        for module, tree in TREES.items()
        for node in _gitpython_runs(tree)
    ]
    assert runs == []
    imports = {module: _runtime_imports(tree) for module, tree in TREES.items() if isinstance(tree, ast.Module)}
    assert "subprocess" in imports["beflow.system.proc"] and "git" in imports["beflow.repository.git"]
    assert sorted(module for module, names in imports.items() if "subprocess" in names) == sorted(SPAWNERS)
    assert [module for module, names in imports.items() if "git" in names] == ["beflow.repository.git"]
