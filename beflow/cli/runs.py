"""``beflow runs list|show|logs``: parse, call the run operations, render."""

from __future__ import annotations

import click

from beflow import guardrails
from beflow.cli.common import App, HelpGroup, call_operation, emit_json, escape, out, pass_app, print_table
from beflow.cli.progress import OUTCOME_STYLE
from beflow.ops import runs
from beflow.records.record import Consumed

json_option = click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")

LOG_STYLE = {"agent": "bold", "tool": "cyan", "permission": "yellow", "error": "red", "session": "dim", "end": "dim"}


@click.group("runs", cls=HelpGroup, epilog="Example:  beflow runs show latest")
def group() -> None:
    """What beflow's runs did: records in .beflow/runs/."""


@group.command("list", epilog="Example:  beflow runs list --issue 7")
@click.option("--issue", help="Only runs of this issue.")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Show at most N runs.")
@json_option
@pass_app
def list_command(app: App, issue: str | None, limit: int, as_json: bool) -> None:
    """List runs, newest first."""
    records = call_operation(app, runs.list_runs, runs.ListRuns, issue=issue, limit=limit).runs
    if as_json:
        emit_json([r.model_dump(mode="json") for r in records])
        return
    if not records:
        out.print("No runs yet. `beflow --auto` runs the ready issues.")
        return
    from rich.table import Table

    rows = [
        (
            r.id,
            r.issue,
            str(r.round) if r.round else "-",
            r.mode,
            r.outcome,
            f"{r.duration:.0f}s" if r.duration is not None else "-",
            guardrails.short(r.usage),
            r.branch or "-",
            (r.commit or "-")[:12],
        )
        for r in records
    ]
    headers = ("run", "issue", "round", "mode", "outcome", "duration", "usage", "branch", "commit")
    widths = [max(len(header), *(len(row[index]) for row in rows)) for index, header in enumerate(headers)]
    table = Table(box=None, pad_edge=False)
    # What identifies a run and says how it went is never cut short (ids are what `runs show` and `runs logs`
    # take); the branch, derived from the issue's key, gives way first on a narrow screen.
    for header, widest in zip(headers, widths, strict=True):
        if header == "branch":
            table.add_column(header, overflow="ellipsis", no_wrap=True)
        else:
            table.add_column(header, no_wrap=True, min_width=widest)
    for r, row in zip(records, rows, strict=True):
        style = OUTCOME_STYLE.get(r.outcome, "white")
        table.add_row(*row[:4], f"[{style}]{escape(row[4])}[/]", *row[5:])
    print_table(table)
    if issue is not None:  # what the issue's runs used, all rounds and attempts (of those listed)
        out.print(f"issue {escape(records[0].issue)}: {guardrails.total(r.usage for r in records).describe()}")


@group.command("show", epilog="Example:  beflow runs show latest")
@click.argument("run_id", metavar="ID")
@json_option
@pass_app
def show_command(app: App, run_id: str, as_json: bool) -> None:
    """A run's summary: outcome and why, branch, commit, changed files, the agent's final message."""
    r = call_operation(app, runs.show_run, runs.RunId, id=run_id)
    if as_json:
        emit_json(r.model_dump(mode="json"))
        return
    style = OUTCOME_STYLE.get(r.outcome, "white")
    out.print(f"[bold]run {escape(r.id)}[/] — issue {escape(r.issue)}: {escape(r.title)}")
    out.print(f"outcome   [{style}]{r.outcome}[/] — {escape(r.stop_reason or '')}")
    out.print(f"mode      {r.mode}, agent {escape(r.agent)}, attempt {r.attempt}")
    if r.round:
        out.print(f"round     review round {r.round}: {len(r.feedback)} piece(s) of feedback answered")
        for piece in r.feedback:
            out.print(f"          {escape(feedback_line(piece))}")
        for left in r.feedback_ignored:
            out.print(f"          left out: {escape(left.id)} by {escape(left.author)}: {escape(left.why)}")
    out.print(f"started   {r.started_at:%Y-%m-%d %H:%M:%S} UTC, {r.duration or 0:.1f} s")
    if r.branch:
        out.print(f"branch    {escape(r.branch)}" + (f" at {r.commit}" if r.commit else " (no commit)"))
    if r.checkout:
        out.print(f"checkout  {escape(r.checkout)} (no worktree, nothing committed)")
    if r.client:
        out.print(f"client    {escape(r.client)}")
    if r.exit_code is not None:
        out.print(f"exit      {r.exit_code}")
    if r.silent_for is not None:
        out.print(f"stalled   silent for {r.silent_for:.0f} s; last activity: {escape(r.last_activity or 'none')}")
    out.print(f"usage     {escape(guardrails.describe(r.usage) or 'none reported by the agent')}")
    if r.unheld:
        out.print(f"budgets   {escape(r.unheld)}")
    earlier = call_operation(app, runs.list_runs, runs.ListRuns, issue=r.issue, limit=1000).runs
    if len(earlier) > 1:
        out.print(
            f"          all runs of issue {escape(r.issue)}: {guardrails.total(e.usage for e in earlier).describe()}"
        )
    if r.resumed_session:
        out.print(f"resumed   ACP session {escape(r.resumed_session)}")
    elif r.resume_note:
        out.print(f"resume    {escape(r.resume_note)}")
    if r.worktree_kept:
        out.print(f"[yellow]worktree kept at {escape(r.worktree or '')}[/]")
    out.print(f"MCP       {escape(', '.join(r.mcp_servers)) or 'none injected'}")
    if r.mcp_shadowed:
        out.print(f"          (shadowed acpx global servers: {escape(', '.join(r.mcp_shadowed))})")
    for note in r.restored:
        out.print(f"restore   {escape(note)}")
    if r.sandboxed:
        from beflow.sandbox.box import describe_blocked

        out.print(f"sandbox   {escape(describe_blocked(r.blocked) or 'no connection blocked')}")
    if r.git_restored:
        out.print(f"[yellow]git put back: {escape(', '.join(r.git_restored))} (the agent changed them)[/]")
    if r.refs_moved:
        out.print(f"[yellow]refs moved during the run, not by beflow: {escape(', '.join(r.refs_moved))}[/]")
    if r.changed_files:
        out.print(f"changed   {len(r.changed_files)} file(s)")
        for line in r.changed_files:
            out.print(f"          {escape(line.replace(chr(9), ' '))}")
    if r.dirty_before:
        out.print(f"already uncommitted before the run: {len(r.dirty_before)} file(s)")
        for line in r.dirty_before:
            out.print(f"          {escape(line.replace(chr(9), ' '))}")
    if r.progress:
        latest = r.progress[-1]
        out.print(f"progress  {escape(latest.text)} ({latest.time:%H:%M:%S} UTC, {len(r.progress)} line(s))")
    if r.final_message:
        out.print("[bold]final message[/]")
        out.print(escape(r.final_message))


def feedback_line(piece: Consumed) -> str:
    """One piece of feedback a round answered, on one line: who, where, and the start of what they said."""
    where = f" on {piece.path}" + (f":{piece.line}" if piece.line else "") if piece.path else ""
    said = " ".join(piece.excerpt.split())
    return f"{piece.kind} by {piece.author}{where}: {said[:100]}{'…' if len(said) > 100 else ''} ({piece.id})"


@group.command("logs", epilog="Example:  beflow runs logs latest")
@click.argument("run_id", metavar="ID")
@json_option
@pass_app
def logs_command(app: App, run_id: str, as_json: bool) -> None:
    """The run's transcript, readably: messages, tool calls, permission requests, MCP servers by name."""
    logs = call_operation(app, runs.run_logs, runs.RunId, id=run_id)
    if as_json:
        emit_json(logs.model_dump(mode="json"))
        return
    out.print(f"[bold]run {escape(logs.record.id)}[/] — issue {escape(logs.record.issue)} — {logs.record.outcome}")
    width = max(len(kind) for kind in (*LOG_STYLE, *(line.kind for line in logs.lines)))
    for line in logs.lines:
        style = LOG_STYLE.get(line.kind, "white")
        # Every line of a message under the first one, so that the labels stay a column of their own.
        text = escape(line.text).replace("\n", "\n" + " " * (width + 1))
        out.print(f"[{style}]{line.kind:<{width}}[/] {text}")
    if logs.stderr.strip():
        out.print("[bold]stderr[/]")
        out.print(escape(logs.stderr.rstrip()))
