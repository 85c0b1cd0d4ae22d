"""``beflow demo``: the whole product on a sample repository, in under a minute."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import click
from rich.syntax import Syntax

from beflow import demo
from beflow.cli.common import escape, out
from beflow.cli.progress import OUTCOME_STYLE, Progress
from beflow.paths import beflow_home
from beflow.records.record import DONE_OUTCOMES, RunRecord
from beflow.repository import status
from beflow.system import interrupts


@click.command(
    "demo",
    short_help="See beflow work: a demo agent on a sample repository, end to end.",
    epilog="Examples:\n\n  beflow demo --dir /tmp/beflow-demo\n\n"
    "  beflow demo --agent   # the demo agent's setting, for your own repository",
)
@click.option(
    "--dir",
    "directory",
    type=click.Path(path_type=Path, file_okay=False),
    help="Where to create the sample repository (a new or empty directory; default: a new temporary one).",
)
@click.option(
    "--agent",
    "print_agent",
    is_flag=True,
    help="Print the demo agent's `agent` setting, to try beflow on your own repository with no account "
    "(beflow docs demo), and exit.",
)
def command(directory: Path | None, print_agent: bool) -> None:
    """Create a sample repository with one issue and run a demo agent on it through acpx, with MCP servers
    injected: you see the branch, the diff and the run record it leaves."""
    if print_agent:
        out.print(escape(json.dumps({"agent": {"command": demo.agent_command()}})), soft_wrap=True)
        return
    directory = (directory or Path(tempfile.mkdtemp(prefix="beflow-demo-"))).resolve()
    sample = demo.create(directory)
    out.print(f"[bold]Sample repository:[/] {escape(str(directory))} (a new git repository with one issue)")
    out.print(
        f"[bold]beflow's own files:[/] worktrees, locks and crash logs go under {escape(str(beflow_home()))} "
        "($BEFLOW_HOME; the run's worktree is removed when it ends)"
    )
    acpx = sample.project.config.acpx_argv()
    note = _node_note(acpx)
    if note:
        out.print(f"[bold]Node.js:[/] {escape(note)}")
    if acpx[0] == "npx":
        out.print(f"[bold]acpx:[/] `{escape(' '.join(acpx))}` (npx fetches it on first use)…")
        took = demo.fetch_acpx(sample.project)
        if took is not None:
            out.print(f"[bold]acpx:[/] ready in {took:.1f} s")
    out.print(f"Issue {sample.issue_key} is ready; running it with `beflow --auto {sample.issue_key}`…\n")
    with Progress(as_json=False) as progress:
        record = interrupts.run(lambda: demo.run(sample, progress))
    style = OUTCOME_STYLE.get(record.outcome, "white")
    out.print(f"\n[bold]Outcome:[/] [{style}]{record.outcome}[/] — {escape(record.stop_reason or '')}")
    servers = ", ".join(record.mcp_servers) or "none"
    out.print(
        f"[bold]MCP servers handed to the agent:[/] {escape(servers)} — placeholders from the sample's .mcp.json: "
        "the demo agent lists their names and never starts them"
    )
    out.print(f"[bold]Sandbox:[/] {escape(_sandbox(sample, record))}")
    for note in record.restored:
        out.print(f"[bold]After the run:[/] {escape(note)}")
    if record.commit and record.base_commit:
        out.print(f"\n[bold]Branch:[/] {record.branch} at {record.commit[:12]}")
        out.print(Syntax(status.diff(directory, record.base_commit, record.commit), "diff", theme="ansi_dark"))
    if record.final_message:
        out.print(f"[bold]The agent said:[/]\n{escape(record.final_message)}")
    out.print(f"\n[bold]Run record:[/] {escape(str(directory / '.beflow' / 'runs' / record.id))}")
    beflow = _invoked_as()
    out.print("Look around:")
    out.print(f"  cd {escape(str(directory))}")
    out.print(f"  {beflow} runs show latest   # the summary")
    out.print(f"  {beflow} runs logs latest   # the transcript: messages, tool calls, permissions")
    out.print(f"  {beflow} issues show {sample.issue_key}      # the issue, with the run's comment")
    out.print(f"  {beflow} mcp show           # the servers that were injected (values masked)")
    if record.outcome not in DONE_OUTCOMES:
        raise SystemExit(1)


def _node_note(acpx: list[str]) -> str | None:
    """What the demo says of a Node.js older than acpx needs: that npx fetches the pinned one beside acpx, or (acpx
    on PATH, on the old one) how to get Node.js 22."""
    from beflow import NODE_VERSION
    from beflow.system import node

    found = node.version()
    if found is None or not node.too_old(found):
        return None
    older = f"this machine's {node.shown(found)} is older than {node.MINIMUM_TEXT}, which acpx and real agents need"
    if acpx == node.npx_acpx():
        return (
            f"{older}: this demo's acpx runs on Node.js {NODE_VERSION}, which npx fetches beside it on first use "
            f"(about 80 MB, once). To have Node.js 22 yourself: {node.how_to_get()}."
        )
    return f"{older}; the demo runs anyway (its agent is Python). Before a real agent, {node.how_to_get()}."


def _sandbox(sample: demo.Demo, record: RunRecord) -> str:
    """Whether the demo's run was sandboxed ("auto": where bwrap starts), and what that meant."""
    from beflow.sandbox import box, choice

    why = choice.choose(sample.project.config).why  # (asked already for the run: once per process)
    if record.sandboxed:
        blocked = box.describe_blocked(record.blocked) or "no connection blocked"
        return f"on ({why}): the agent saw its worktree, not your home; {blocked} (beflow docs safety)"
    return f"off ({why}): the agent ran as you, unconfined (beflow docs safety)"


def _invoked_as() -> str:
    """``beflow`` when that is what PATH finds, else the full path of this one (e.g. inside a venv)."""
    this = Path(sys.argv[0]).resolve()
    if this.name == "__main__.py":
        return f"{sys.executable} -m beflow"
    found = shutil.which("beflow")
    return "beflow" if found and Path(found).resolve() == this else escape(str(this))
