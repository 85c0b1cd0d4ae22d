"""The comment a finished run leaves on its issue: how it ended, what it used and changed, and the start of the
agent's last message — quoted, so that the agent's words neither ping nor close anything."""

from __future__ import annotations

from collections.abc import Callable

from beflow import guardrails
from beflow.codehosts.base import CodeHost
from beflow.guardrails import Totals
from beflow.records.record import RunRecord
from beflow.run.judging import table
from beflow.trackers import Tracker, quoting
from beflow.trackers.base import ReadsPullRequests
from beflow.trackers.quoting import code, fenced, unmarked


def summary(
    record: RunRecord,
    issue_usage: Totals | None = None,
    *,
    inert: Callable[[str], str] = quoting.inert,
    quoted: Callable[[str], str] = lambda text: text,
) -> str:
    """The comment a finished run leaves on its issue; ``issue_usage``: what all of the issue's runs used;
    ``inert``: how the words the agent chose are made to act on nothing where the text goes (the tracker's
    :meth:`~beflow.trackers.base.Tracker.inert` for a comment; GitHub's quoting, the default, for a pull request);
    ``quoted``: how its last message, quoted as code, is (as it is: GitHub reads nothing in a code block)."""
    lines = [f"beflow run `{record.id}`: **{record.outcome}** — {inert(record.stop_reason or '')}"]
    lines.append(f"- agent: {record.agent}, attempt {record.attempt}, {record.duration or 0:.1f} s")
    used = guardrails.describe(record.usage)
    if used is not None or (issue_usage is not None and issue_usage.runs > 1):
        lines.append(f"- usage: {inert(used or 'none reported by the agent')}")
    if issue_usage is not None and issue_usage.runs > 1:
        lines.append(f"- all runs of this issue: {issue_usage.describe()}")
    if record.unheld:
        lines.append(f"- budgets: {record.unheld}")
    if record.branch:
        lines.append(f"- branch: `{record.branch}`" + (f", commit `{record.commit[:12]}`" if record.commit else ""))
    if record.pull_request:
        lines.append(f"- pull request: {record.pull_request}")
    if record.checkout:
        lines.append(f"- {record.mode} session in the checkout `{record.checkout}`; nothing was committed")
    if record.changed_files:
        lines.append(f"- files changed ({len(record.changed_files)}): {_file_list(record.changed_files)}")
    if record.dirty_before:
        lines.append(
            f"- uncommitted before the run and left as they were ({len(record.dirty_before)}): "
            + _file_list(record.dirty_before)
        )
    if record.mcp_servers:
        lines.append(f"- MCP servers: {', '.join(record.mcp_servers)}")
    if record.sandboxed:  # host names are the agent's choice: shown inert
        lines.append(f"- sandbox: {inert(_blocked(record.blocked) or 'no connection blocked')}")
    if record.worktree_kept:
        lines.append(f"- worktree kept at `{record.worktree}`")
    if record.candidates:  # best of N: the candidates side by side (beflow's figures, the agents' labels as code)
        lines += ["", table(record.candidates)]
        if record.decided_by:  # attempts.confirm: a person's name, as the tracker gave it
            lines += ["", f"Chosen by {inert(record.decided_by)} (attempts.confirm)."]
    if record.review is not None:  # the reviewer's words, quoted as the agent's last message is
        lines += ["", f"The reviewer chose candidate {record.review.candidate}:"]
        lines.append(fenced(unmarked(quoted(record.review.reason))[:FINAL_MESSAGE_SHOWN]))
    if record.final_message:  # the agent's words, quoted: GitHub neither closes issues nor pings for them
        said = unmarked(quoted("\n".join(record.final_message.strip().splitlines()[:20])))
        lines.append("")
        lines.append(fenced(said[:FINAL_MESSAGE_SHOWN]))
        if len(said) > FINAL_MESSAGE_SHOWN:
            lines.append(f"(the agent's message goes on: `beflow runs show {record.id}` has it whole)")
    return "\n".join(lines)


def pull_request_summary(record: RunRecord, tracker: Tracker) -> str:
    """:func:`summary` for a pull request's body: the agent's words inert for the code host (GitHub's quoting) and,
    when the tracker's own integration reads pull requests too (Linear's ``Fixes ENG-1``), for it as well, its
    quoted last message included."""
    if not isinstance(tracker, ReadsPullRequests):
        return summary(record)
    words = tracker.pull_request_inert
    return summary(record, inert=lambda text: quoting.inert(words(text)), quoted=words)


def commit_words(tracker: Tracker, code_host: CodeHost | None) -> Callable[[str], str]:
    """What the agent's own commit messages go through before they are pushed: a forge closes an issue named after
    ``Fixes`` in a commit that reaches its default branch, and a tracker's integration acts on them too (Jira's smart
    commits, Linear's magic words). GitHub's references are broken in any case: a branch kept local may be pushed by
    a person later."""
    tracker_words = tracker.pull_request_inert if isinstance(tracker, ReadsPullRequests) else None

    def words(text: str) -> str:
        if tracker_words is not None:
            text = tracker_words(text)
        return code_host.commit_inert(text) if code_host is not None else quoting.inert(text)

    return words


#: Characters of the agent's final message a comment or pull request body quotes: GitHub refuses a body of more
#: than 65,536, and an agent's message can be any length.
FINAL_MESSAGE_SHOWN = 4000


def _blocked(blocked: dict[str, int]) -> str | None:
    from beflow.sandbox.box import describe_blocked  # (the sandbox is loaded by runs that use it)

    return describe_blocked(blocked)


def _file_list(lines: list[str], limit: int = 10) -> str:
    shown = ", ".join(code(line.split(chr(9))[-1]) for line in lines[:limit])
    return shown + (f" and {len(lines) - limit} more" if len(lines) > limit else "")
