"""Each CLI call of an operation is typed end to end: checked by the mypy step of ``./scripts/test``, never run.

A command calls an operation object with its input model: a misspelled or mistyped argument, the input model of
another operation and a misread result are type errors, not surprises at run time. Each line that must be an error
names it in its ``type: ignore[code]``, and mypy (strict: ``warn_unused_ignores``) fails the step if that error
ever goes away; ``assert_type`` pins what a call gives."""

from typing import assert_type

from beflow.cli.common import App, call_operation
from beflow.ops import issues, runs


def wrong_arguments(app: App) -> None:
    call_operation(app, issues.list_issues, issues.ListIssues, lable="bug")  # type: ignore[call-arg]
    call_operation(app, issues.new_issue, issues.NewIssue, title="t", priority=None)  # type: ignore[arg-type]
    call_operation(app, issues.show_issue, runs.RunId, id="1")  # type: ignore[misc]


def a_misread_result(app: App) -> int:
    shown: int = call_operation(app, runs.show_run, runs.RunId, id="1")  # type: ignore[assignment]
    return shown


def the_result_of_a_call(app: App) -> None:
    assert_type(call_operation(app, runs.run_logs, runs.RunId, id="1"), runs.RunLogs)
