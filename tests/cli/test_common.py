"""``cli.common``: what every command shares."""

from __future__ import annotations

import uuid
from pathlib import Path

from mypy import api

#: mypy's cache of the package, which `./scripts/test` has just filled: only the snippet is checked afresh.
CACHE = Path(__file__).resolve().parents[2] / ".mypy_cache"


def test_mypy_checks_each_cli_call_of_an_operation(tmp_path: Path) -> None:
    """A command calls an operation object with its input model: a misspelled or mistyped argument, an input model
    of another operation and a misread result are type errors, not surprises at run time."""
    # A module name of its own: mypy's cache keeps a module's messages, and would repeat another run's.
    calls = tmp_path / f"calls_{uuid.uuid4().hex}.py"
    calls.write_text(
        "from beflow import issues, runs\n"
        "from beflow.cli.common import App, call_operation\n"
        "app = App()\n"
        "call_operation(app, issues.list_issues, issues.ListIssues, lable='bug')\n"
        "call_operation(app, issues.new_issue, issues.NewIssue, title='t', priority=None)\n"
        "call_operation(app, issues.show_issue, runs.RunId, id='1')\n"
        "count: int = call_operation(app, runs.show_run, runs.RunId, id='1')\n"
        "reveal_type(call_operation(app, runs.run_logs, runs.RunId, id='1'))\n"
    )
    stdout, _, _ = api.run(["--strict", "--cache-dir", str(CACHE), str(calls)])
    found = [line.split(": ", 1)[1] for line in stdout.splitlines() if line.startswith(str(calls))]
    found = [line for line in found if line.startswith("error:") or "Revealed type" in line]
    assert len(found) == 5, stdout
    assert found[0].startswith('error: Unexpected keyword argument "lable"')
    assert found[1].startswith('error: Argument "priority" to "call_operation" has incompatible type "None"')
    assert found[2].startswith('error: Cannot infer value of type parameter "I"')
    assert found[3].startswith('error: Incompatible types in assignment (expression has type "RunRecord"')
    assert found[4] == 'note: Revealed type is "beflow.runs.RunLogs"'
