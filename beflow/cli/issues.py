"""``beflow issues list|show|new|comment|review|close|reopen|set-status``: parse, call the issue operations,
render."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any, Literal

import click

from beflow.cli.common import (
    App,
    HelpGroup,
    call_operation,
    call_streamed,
    emit_json,
    emit_json_chunks,
    err,
    escape,
    out,
    pass_app,
    print_table,
    say,
    visible,
)
from beflow.errors import UsageError
from beflow.ops import issues, questions, reviews
from beflow.trackers.issue import DEFAULT_PRIORITY, IssueRow, ListingStream, Status, format_time
from beflow.trackers.local_feedback import is_rework, shown

STATUS_STYLE = {
    Status.OPEN: "white",
    Status.READY: "green",
    Status.IN_PROGRESS: "cyan",
    Status.BLOCKED: "yellow",
    Status.REVIEW: "magenta",
    Status.DONE: "blue",
    Status.FAILED: "red",
    Status.CLOSED: "dim",
}

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")


def shown_path(path: Path | None) -> str:
    """A path relative to the current directory when it is below it (what a person would type)."""
    if path is None:
        return ""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def short_time(value: Any) -> str:
    return format_time(value).replace("T", " ")[:16]


def styled(status: Status) -> str:
    return f"[{STATUS_STYLE[status]}]{status.value}[/]"


@click.group(
    "issues",
    cls=HelpGroup,
    epilog='\b\nExample:  beflow issues new "Fix the login crash" --label bug && beflow issues list',
)
def group() -> None:
    """Read and write the project's issues (local issues live in .beflow/issues, one Markdown file each)."""


@group.command("list", epilog="Example:  beflow issues list --status ready --label bug")
@click.option("--status", type=click.Choice([s.value for s in Status]), help="Only issues with this status.")
@click.option("--label", help="Only issues with this label.")
@json_option
@pass_app
def list_command(app: App, status: str | None, label: str | None, as_json: bool) -> None:
    """List issues by key; files that cannot be read are reported, the others still listed."""
    listing = call_streamed(
        app,
        issues.list_issues,
        issues.stream_issues,
        issues.ListIssues,
        status=Status(status) if status else None,
        label=label,
    )
    if as_json:
        emit_json_chunks(listing.json_chunks())
        return
    rows = listing.rows()
    first = next(rows, None)
    if first is not None and not out.is_terminal:
        _plain_table(listing)
    elif first is not None:
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for name, justify in (("KEY", "right"), ("STATUS", "left"), ("PRI", "right"), ("TITLE", "left")):
            table.add_column(name, justify=justify)  # type: ignore[arg-type]
        table.add_column("LABELS")
        table.add_column("UPDATED (UTC)", no_wrap=True)
        for issue in itertools.chain([first], rows):
            table.add_row(
                issue.key,
                styled(issue.status) + (f" [yellow]· {escape(issue.held)}[/]" if issue.held else ""),
                str(issue.priority),
                escape(issue.title),
                escape(", ".join(issue.labels)),
                short_time(issue.updated),
            )
        print_table(table)
    elif status or label:
        filters = [f"status {status}" if status else "", f"label {label!r}" if label else ""]
        wanted = " and ".join(f for f in filters if f)
        out.print(f"No issues with {escape(wanted)}.")
    elif not listing.problems:
        out.print('No issues yet. File one with: beflow issues new "Fix the login crash"')
    if listing.problems:
        count = len(listing.problems)
        err.print(f"[yellow]warning:[/] {count} problem{'s' if count > 1 else ''} in issue files (not listed):")
        for problem in listing.problems:
            err.print(f"  {escape(problem.render())}")
        err.print("fix: Fix each file at that line (`beflow docs trackers` describes the format).")


TABLE_HEADERS = ("KEY", "STATUS", "PRI", "TITLE", "LABELS", "UPDATED (UTC)")
RIGHT_ALIGNED = {"KEY", "PRI"}


def _cells(row: IssueRow) -> tuple[str, ...]:
    labels = visible(", ".join(row.labels))
    status = row.status.value + (f" · {visible(row.held)}" if row.held else "")
    return (row.key, status, str(row.priority), visible(row.title), labels, short_time(row.updated))


def _plain_table(listing: ListingStream) -> None:
    """The table a terminal shows, for a pipe or a file: nothing cut or wrapped, written a batch of rows at a time
    (one pass for the column widths, one to write), so 100k issues are never held at once."""
    from rich.cells import cell_len

    widths = [cell_len(header) for header in TABLE_HEADERS]
    for row in listing.rows():
        widths = [max(width, cell_len(cell)) for width, cell in zip(widths, _cells(row), strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        padded = []
        for header, width, cell in zip(TABLE_HEADERS, widths, cells, strict=True):
            space = " " * max(0, width - cell_len(cell))
            padded.append(space + cell if header in RIGHT_ALIGNED else cell + space)
        return "   ".join(padded) + "\n"

    pending = [line(TABLE_HEADERS), "─" * (sum(widths) + 3 * (len(widths) - 1)) + "\n"]
    for row in listing.rows():
        pending.append(line(_cells(row)))
        if len(pending) >= 512:
            click.echo("".join(pending), nl=False)
            pending = []
    click.echo("".join(pending), nl=False)


@group.command("show", epilog="Example:  beflow issues show 7")
@click.argument("key")
@json_option
@pass_app
def show_command(app: App, key: str, as_json: bool) -> None:
    """Show one issue with its body and comments."""
    issue = call_operation(app, issues.show_issue, issues.IssueKey, key=key)
    if as_json:
        emit_json(issue)
        return
    out.print(f"[bold]{escape(issue.key)} · {escape(issue.title)}[/]")
    facts = [f"status: {styled(issue.status)}", f"priority: {issue.priority}"]
    if issue.labels:
        facts.append(f"labels: {escape(', '.join(issue.labels))}")
    out.print("   ".join(facts))
    out.print(f"created {short_time(issue.created)} UTC · updated {short_time(issue.updated)} UTC", style="dim")
    if issue.path:
        out.print(f"file: {escape(shown_path(issue.path))}", style="dim")
    if issue.claim:
        claim = issue.claim
        out.print(
            f"claimed by {escape(claim.owner)} (pid {claim.pid} on {escape(claim.host)} "
            f"since {short_time(claim.since)} UTC)",
            style="cyan",
        )
    elif issue.status == Status.IN_PROGRESS and not _runs_elsewhere(app):
        out.print("in progress, but no run holds it: the run that took it stopped (runs will pick it up again)")
    _show_workflow(app, issue.key)
    out.print()
    out.print(escape(issue.body) if issue.body else "[dim](no description)[/]")
    if issue.comments:
        out.print()
        out.print(f"[bold]Comments ({len(issue.comments)})[/]")
        for comment in issue.comments:
            out.print()
            rework = " · [yellow]rework[/]" if is_rework(comment) else ""
            out.print(f"[bold]{escape(comment.author)}[/] · {short_time(comment.created)} UTC{rework}")
            out.print(escape(shown(comment.text)))
    _show_rounds(app, issue.key)


def _runs_elsewhere(app: App) -> bool:
    from beflow.app import engine

    return engine(app.project()).runs_elsewhere


def _show_workflow(app: App, key: str) -> None:
    """Where the issue's run is, as its engine tells it (a fleet: its workflow's ``state`` query, docs/fleet.md)."""
    from beflow.app import engine
    from beflow.errors import BeflowError

    project = app.project()
    asked = engine(project).state
    if asked is None:
        return
    try:
        state = asked(project, app.tracker(), key)
    except BeflowError as error:
        out.print(f"its workflow's state is not known: {escape(error.message)}", style="dim")
        if error.fix:
            out.print(f"fix: {escape(error.fix)}", style="dim")
        return
    if state is None:
        return
    facts = [state.phase, f"attempt {state.attempt}"] + ([f"round {state.round}"] if state.round else [])
    facts += [f"worker {state.worker}"] if state.worker else []
    facts += [f"latest run {state.run_id} ({state.outcome})"] if state.run_id else []
    out.print(f"workflow: {escape(', '.join(facts))}", style="cyan")


def _show_rounds(app: App, key: str) -> None:
    """The issue's review rounds (its runs' records), each with the feedback it answered."""
    from beflow.cli.runs import feedback_line
    from beflow.ops import runs

    records = call_operation(app, runs.list_runs, runs.ListRuns, issue=key, limit=1000).runs
    held = [r for r in reversed(records) if r.round > 0]
    if not held:
        return
    out.print()
    out.print(f"[bold]Review rounds ({len({r.round for r in held})})[/]")
    for r in held:
        commit = f", commit {r.commit[:12]}" if r.commit else ""
        out.print(f"round {r.round} · run {escape(r.id)} · {escape(r.outcome)}{commit}")
        for piece in r.feedback:
            out.print(f"  {escape(feedback_line(piece))}")
        for left in r.feedback_ignored:
            out.print(f"  left out: {escape(left.id)} by {escape(left.author)}: {escape(left.why)}")


@group.command(
    "new",
    epilog='\b\nExample:  beflow issues new "Fix the login crash" --body-file crash.md --label bug --priority 1',
)
@click.argument("title")
@click.option("--body", help="The description, in Markdown.")
@click.option(
    "--body-file",
    type=click.Path(exists=True, dir_okay=False, allow_dash=True, path_type=Path),
    help="Read the description from this file ('-' for standard input).",
)
@click.option("--label", "-l", "labels", multiple=True, help="A label (repeat for more).")
@click.option(
    "--priority",
    type=click.IntRange(min=0),
    default=DEFAULT_PRIORITY,
    help=f"Lower runs first: 0 is the most urgent (default {DEFAULT_PRIORITY}).",
)
@click.option(
    "--status",
    type=click.Choice(["open", "ready"]),
    help="ready (the default): runs may pick it up at once; open: not yet.",
)
@json_option
@pass_app
def new_command(
    app: App,
    title: str,
    body: str | None,
    body_file: Path | None,
    labels: tuple[str, ...],
    priority: int,
    status: Literal["open", "ready"] | None,
    as_json: bool,
) -> None:
    """File a new issue; it is ready for runs unless --status open."""
    if body is not None and body_file is not None:
        raise UsageError("give --body or --body-file, not both")
    if body_file is not None:
        body = sys.stdin.read() if str(body_file) == "-" else _read(body_file)
    issue = call_operation(
        app,
        issues.new_issue,
        issues.NewIssue,
        title=title,
        body=body or "",
        labels=list(labels),
        priority=priority,
        status=status,
    )
    if as_json:
        emit_json(issue)
        return
    where = shown_path(issue.path) if issue.path else (issue.url or "")
    say(
        f"Created issue {issue.key} ({issue.status.value}): {where}",
        lambda: f"Created issue [bold]{escape(issue.key)}[/] ({styled(issue.status)}): {escape(where)}",
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the body: {exc}") from None


@group.command("comment", epilog='Example:  beflow issues comment 7 "The crash only happens on Safari."')
@click.argument("key")
@click.argument("text")
@click.option("--author", help="Who is commenting (default: git's user.name).")
@click.option(
    "--rework",
    is_flag=True,
    help="Record it as rework feedback: an issue in review goes back into the queue for a review round.",
)
@json_option
@pass_app
def comment_command(app: App, key: str, text: str, author: str | None, rework: bool, as_json: bool) -> None:
    """Add a comment to an issue (TEXT '-' reads it from standard input)."""
    if text == "-":
        text = sys.stdin.read()
    if rework:
        reworked = call_operation(app.acting_as(author), issues.rework_issue, issues.NewComment, key=key, text=text)
        if as_json:
            emit_json(reworked)
            return
        if reworked.queued:
            queued = " It is back in the queue for a review round."
        elif reworked.why:
            queued = f" It stays in {reworked.status.value}: {reworked.why}."
        else:  # not in review yet: nothing to go back to
            queued = f" It is {reworked.status.value}, not in review: its first review round will answer it."
        out.print(
            f"Asked for rework on issue [bold]{escape(reworked.key)}[/] as {escape(reworked.comment.author)}.{queued}"
        )
        return
    result = call_operation(app.acting_as(author), issues.comment_issue, issues.NewComment, key=key, text=text)
    if as_json:
        emit_json(result)
        return
    out.print(f"Commented on issue [bold]{escape(result.key)}[/] as {escape(result.comment.author)}.")


@group.command("answer", epilog='Example:  beflow issues answer 7 "Keep the old API; deprecate it."')
@click.argument("key")
@click.argument("text")
@click.option("--author", help="Who is answering (default: git's user.name).")
@json_option
@pass_app
def answer_command(app: App, key: str, text: str, author: str | None, as_json: bool) -> None:
    """Answer the question a blocked issue's agent asked (TEXT '-' reads it from standard input): `beflow watch`
    resumes the agent's session with it."""
    if text == "-":
        text = sys.stdin.read()
    result = call_operation(app.acting_as(author), questions.answer_question, questions.GiveAnswer, key=key, text=text)
    if as_json:
        emit_json(result)
        return
    out.print(
        f"Answered the question on issue [bold]{escape(result.key)}[/] as {escape(result.comment.author)}: "
        f"{escape(result.next)}."
    )


@group.command("confirm", epilog="Examples:  beflow issues confirm 7      beflow issues confirm 7 2 --anyway")
@click.argument("key")
@click.argument("candidate", type=int, required=False)
@click.option("--anyway", is_flag=True, help="Choose a candidate that did not pass the judge all the same.")
@click.option("--note", help="Why, said with the choice.")
@click.option("--author", help="Who is choosing (default: git's user.name).")
@json_option
@pass_app
def confirm_command(
    app: App, key: str, candidate: int | None, anyway: bool, note: str | None, author: str | None, as_json: bool
) -> None:
    """Confirm best of N's choice for an issue held by attempts.confirm, or choose CANDIDATE instead: `beflow
    watch` then proposes it."""
    result = call_operation(
        app.acting_as(author),
        questions.confirm_candidate,
        questions.ConfirmCandidate,
        key=key,
        candidate=candidate,
        anyway=anyway,
        note=note,
    )
    if as_json:
        emit_json(result)
        return
    out.print(
        f"Chose candidate {result.candidate} for issue [bold]{escape(result.key)}[/] as "
        f"{escape(result.comment.author)}: {escape(result.next)}."
    )


@group.command(
    "review",
    epilog="\b\nExamples:  beflow issues review 7\n"
    '           beflow issues review 7 "Handle the empty list here." --path src/app.py --line 12',
)
@click.argument("key")
@click.argument("text", required=False)
@click.option("--path", help="With TEXT: the file the comment is on (one the branch changed).")
@click.option("--line", type=click.IntRange(min=1), help="With TEXT and --path: its line in the branch's version.")
@click.option("--author", help="Who is commenting (default: git's user.name).")
@json_option
@pass_app
def review_command(
    app: App, key: str, text: str | None, path: str | None, line: int | None, author: str | None, as_json: bool
) -> None:
    """Review an issue's branch as beflow's page does: without TEXT, its change against the base, file by file, and
    the page's comments with their answers (review.show); with TEXT ('-' reads standard input), a comment on the
    whole change, or on a line with --path and --line (review.comment), which the next review round answers."""
    if text is None:
        if path is not None or line is not None:
            raise UsageError("--path and --line go with a comment's TEXT", fix="Give the comment's text after KEY.")
        view = call_operation(app, reviews.show, reviews.ReviewKey, key=key)
        if as_json:
            emit_json(view)
            return
        _show_review(view)
        return
    if text == "-":
        text = sys.stdin.read()
    done = call_operation(
        app.acting_as(author), reviews.comment, reviews.ReviewComment, key=key, body=text, path=path, line=line
    )
    if as_json:
        emit_json(done)
        return
    out.print(f"{escape(done.message)}.")


def _show_review(view: reviews.ReviewView) -> None:
    out.print(f"[bold]{escape(view.key)} · {escape(view.title)}[/]   status: {escape(view.status)}")
    diff = view.diff
    if diff is None:
        out.print(f"No branch {escape(view.branch)} yet: there is no change to review.")
    else:
        more = f" (and {diff.more} more not shown)" if diff.more else ""
        out.print(f"{escape(view.branch)} at {diff.tip[:12]}, against {diff.base[:12]}: {len(diff.files)} files{more}")
        for change in diff.files:
            note = f"  {escape(change.note)}" if change.note else ""
            out.print(f"  {escape(change.path)}  {change.status}  +{change.added} -{change.removed}{note}")
    for comment in view.comments:
        out.print()
        where = f"{comment.path}:{comment.line}" if comment.line else comment.path or "the whole change"
        out.print(f"[bold]{escape(comment.author)}[/] · {short_time(comment.created)} UTC · on {escape(where)}")
        out.print(escape(comment.body))
        if comment.answer is None:
            out.print("waiting for a review round", style="yellow")
        else:
            out.print(escape(comment.answer), style="green")


def _show_change(change: issues.StatusChange, as_json: bool) -> None:
    if as_json:
        emit_json(change)
    elif change.changed:
        out.print(
            f"Issue [bold]{escape(change.key)}[/] ({escape(change.title)}): "
            f"{styled(change.previous)} → {styled(change.status)}"
        )
    else:
        out.print(f"Issue [bold]{escape(change.key)}[/] is already {styled(change.status)}; nothing changed.")


note_option = click.option("--note", help="Why, added as a comment.")


@group.command("close", epilog='Example:  beflow issues close 7 --note "Duplicate of 5."')
@click.argument("key")
@note_option
@json_option
@pass_app
def close_command(app: App, key: str, note: str | None, as_json: bool) -> None:
    """Close an issue: no run will pick it up (`reopen` undoes it)."""
    _show_change(call_operation(app, issues.close_issue, issues.ChangeStatus, key=key, note=note), as_json)


@group.command("reopen", epilog="Example:  beflow issues reopen 7")
@click.argument("key")
@note_option
@json_option
@pass_app
def reopen_command(app: App, key: str, note: str | None, as_json: bool) -> None:
    """Make an issue ready again, so that runs pick it up."""
    _show_change(call_operation(app, issues.reopen_issue, issues.ChangeStatus, key=key, note=note), as_json)


@group.command(
    "set-status", epilog='\b\nExample:  beflow issues set-status 7 review --note "Looks done; please check."'
)
@click.argument("key")
@click.argument("status", type=click.Choice([s.value for s in Status]), metavar="STATUS")
@note_option
@json_option
@pass_app
def set_status_command(app: App, key: str, status: str, note: str | None, as_json: bool) -> None:
    """Move an issue to STATUS: open, ready, in_progress, review, done, failed or closed (only allowed
    transitions: `beflow docs trackers` shows them)."""
    change = call_operation(app, issues.set_status, issues.SetStatus, key=key, status=Status(status), note=note)
    _show_change(change, as_json)


@group.command("set-priority", epilog="Example:  beflow issues set-priority 7 0")
@click.argument("key")
@click.argument("priority", type=click.IntRange(0, 1000))
@json_option
@pass_app
def set_priority_command(app: App, key: str, priority: int, as_json: bool) -> None:
    """Move an issue in the queue: PRIORITY 0 is the most urgent, 2 the default; lower runs first (the local
    tracker's; on GitHub, GitLab and Linear change it in the tracker)."""
    change = call_operation(app, issues.set_priority, issues.SetPriority, key=key, priority=priority)
    if as_json:
        emit_json(change)
    elif change.previous == change.priority:
        out.print(f"Issue [bold]{escape(change.key)}[/] has priority {change.priority} already; nothing changed.")
    else:
        out.print(
            f"Issue [bold]{escape(change.key)}[/] ({escape(change.title)}): priority {change.previous} → "
            f"{change.priority}"
        )
