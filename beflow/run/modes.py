"""The supervised modes: ``beflow --attend KEY`` and ``beflow --open KEY``.

Both run in the repository's own checkout, with a person at the terminal. There is no worktree and no commit (the
checkout and its uncommitted work are the user's); the run record lists the files the session changed, told apart
from files that were already uncommitted before it. The prompt, the record and the tracker update are the ones
``--auto`` uses (a :class:`~beflow.run.lifecycle.Session`); the checkout (:mod:`beflow.run.checkout`), the native
clients
(:mod:`beflow.agent.native`) and the terminal (:mod:`beflow.system.terminal`) have modules of their own.

- ``--attend``: acpx, attended: ``--<attend.permissions>`` (``approve-reads`` by default, never ``approve-all``
  unless configured) and the user's terminal as its stdin, stdout and stderr, so its permission prompts reach the
  person. MCP servers are injected into the checkout's ``.acpxrc.json`` and restored exactly afterwards (Ctrl-C
  and a closed terminal included). One attended run per checkout at a time.
- ``--open``: the agent's native client (``claude``, ``codex``, ...) with the prompt as its first message. The
  child owns the terminal; beflow waits and hands back its exit code. Nothing is injected: the client reads its
  own MCP configuration.

Core functions: no printing, they return the :class:`~beflow.records.record.RunRecord` and raise
:class:`~beflow.errors.BeflowError` subclasses; notices go to the caller's event sink.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from beflow.agent import acpx_command, agent_env, agents
from beflow.agent.native import client_argv, native_client, require
from beflow.config import Project
from beflow.events import EventSink
from beflow.mcp.acp import resolve_servers
from beflow.mcp.own import follow_progress
from beflow.mcpserver.channel import own_channel, with_own_server
from beflow.paths import beflow_home, path_key
from beflow.records.record import Outcome, RunRecord, new_run_id
from beflow.records.store import RunStore
from beflow.repository import excludes, git, refs, repoguard
from beflow.run.checkout import Changes, acpxrc_notice, checkout_lock, checkout_of, refuse_read_only
from beflow.run.issue_status import refuse_closed
from beflow.run.lifecycle import Session
from beflow.run.policy import Verdict, judge_attended, status_after_supervised
from beflow.run.request import RunRequest, render_prompt
from beflow.system import interrupts, proc, terminal, threads
from beflow.trackers import Issue, Status, Tracker

#: Seconds to start the agent again after an attended run failed, to say why in the record.
ATTEND_PROBE_TIMEOUT = 30.0


def _workable(tracker: Tracker, key: str) -> Issue:
    issue = tracker.get(key)
    refuse_closed(issue)
    return issue


def _finish(session: Session, changes: Changes, outcome: Outcome, reason: str, before: Status) -> RunRecord:
    """The session ended: what it changed in the checkout, then the record and the tracker (the issue goes back
    to ``before`` unless the session finished)."""
    record = session.record
    with git.distrusting():  # the agent has run in the checkout: its git runs no hook or configured command now
        record.changed_files, record.dirty_before = changes.compare()
    if outcome == "succeeded" and not record.changed_files:
        outcome, reason = "no_changes", f"{reason}; no file in the checkout changed"
    mode = session.request.mode
    return session.finish(
        outcome,
        reason,
        lambda ended: status_after_supervised(ended, before, mode=mode),
        changed=record.changed_files,
        dirty_before=record.dirty_before,
        exit_code=record.exit_code,
    )


# --- --attend -------------------------------------------------------------------------------------------------


async def attend(
    project: Project, tracker: Tracker, key: str, *, events: EventSink | None = None, request: RunRequest | None = None
) -> RunRecord:
    """``beflow --attend KEY``: acpx on the issue in the checkout, with the user's terminal; returns the record.

    Bad configuration (prompt, MCP servers), a missing acpx, a closed issue, another attended run in the checkout
    or a claimed issue raise before anything is changed. Cancellation (Ctrl-C, SIGTERM, SIGHUP) stops acpx, puts
    ``.acpxrc.json`` back, records the run as cancelled and propagates.
    """
    config = project.config
    request = request or RunRequest(key=key, mode="attend")
    events = threads.looped(events) if events is not None else None  # steps in worker threads emit too
    checkout = checkout_of(project)
    issue = await threads.blocking(_workable, tracker, key)
    run_id = new_run_id(issue.key)
    servers, channel = with_own_server(project, resolve_servers(project), issue=issue.key, run_id=run_id)
    if channel is not None:
        channel.takes_questions = False  # a person is there: the agent asks them in its own words
    branch = await threads.blocking(refs.current_branch, checkout)
    text = render_prompt(project, issue, request, branch=branch, run_id=run_id)
    permissions = config.attend.permissions
    argv = acpx_command.attend_argv(
        config,
        cwd=checkout,
        prompt=text,
        permissions=permissions,
        prompt_file=RunStore(project.directory).directory(run_id) / "prompt.md",
    )
    install = f"npm install -g acpx (or set `acpx` in {project.config_name}; `beflow doctor` checks it)"
    require(argv[0], "acpx", install)
    refuse_read_only(project, checkout, "--attend", injects=bool(servers))
    with checkout_lock(checkout, issue.key, run_id), await threads.shielded(tracker.claim, issue.key, request.owner):
        current = await threads.blocking(tracker.get, issue.key)
        before = Status.READY if current.status == Status.IN_PROGRESS else current.status
        # Before the tracker is touched (the local tracker's files live in the checkout, and are excluded anyway).
        # Distrusted while another run's agent is at work on the repository (its config may be the agent's now).
        distrust = await threads.blocking(repoguard.agent_at_work, checkout)
        with git.distrusting() if distrust else contextlib.nullcontext():
            changes = await threads.blocking(Changes, project, checkout)
        session = Session(project, tracker, current, request, events, branch=None, checkout=checkout, run_id=run_id)
        session.use_servers(servers)
        await threads.shielded(session.start, text)
        session.emit(
            "started",
            mode="attend",
            checkout=str(checkout),
            permissions=permissions,
            servers=session.record.mcp_servers,
        )
        if not (terminal.is_terminal(0) and terminal.is_terminal(2)):
            session.emit(
                "notice",
                message=f"stdin or stderr is not a terminal: acpx cannot ask you, so whatever {permissions} does "
                "not allow is denied",
            )
        notice = await threads.blocking(acpxrc_notice, checkout) if servers else None
        if notice:
            session.emit("notice", message=notice)
        # Every way out (a bug in beflow too) is recorded, and the issue goes back where it was.
        async with session.guarded(lambda o, r: threads.shielded(_finish, session, changes, o, r, before)) as ending:
            async with (
                follow_progress(session.store, run_id, lambda note: session.emit("progress", text=note.text)),
                own_channel(channel, tracker, lambda: None, lambda message: session.emit("notice", message=message)),
            ):
                verdict = await _attended_acpx(session, argv, checkout)
            ending.set(verdict.outcome, verdict.reason)
        return ending.finished


async def _attended_acpx(session: Session, argv: list[str], checkout: Path) -> Verdict:
    """Inject, run acpx on the user's terminal, restore; how it ended."""
    # The checkout's git directory is the user's: what the agent changes there is put back, and the run fails.
    with session.repository_guarded(checkout) as guard:
        async with session.injected(checkout, checkout=True) as handle:
            # The agent's git ignores the injected file (untracked) through its environment, so that nothing of the
            # user's repository changes; a tracked one is the user's to keep out of a commit (a notice says so).
            env: dict[str, str] = {}
            if handle is not None:
                ignored = beflow_home() / "git" / f"exclude-{path_key(checkout)}"
                env = await threads.blocking(excludes.excludes_env, checkout, ignored)
            # acpx gets its own process group (and session): it reads and writes the terminal all the same
            # (tests/cli/test_attend.py answers its prompt through a pseudo-terminal), while Ctrl-C and a hang-up
            # come to beflow, which stops acpx and its agent as a group and then restores the file.
            with terminal.settings_kept():
                result = await proc.run(
                    argv,
                    cwd=checkout,
                    terminal=True,
                    grace=interrupts.grace(proc.DEFAULT_GRACE),
                    env=env,
                    unset=agent_env.for_agent(session.project.config).unset,
                )
    if guard.changed:
        session.record.exit_code = result.returncode
        return Verdict("failed", repoguard.describe(guard))
    session.record.exit_code = result.returncode
    verdict = judge_attended(result.returncode, result.describe(), session.project.config)
    if verdict.outcome == "failed":
        # acpx said why on the terminal only (attended runs keep no transcript): start the agent again, as doctor
        # does, so that the record and the issue say it too when a login or an install is missing.
        checked = await agents.probe_async(session.project.config, timeout=ATTEND_PROBE_TIMEOUT)
        if not checked.ok:
            return Verdict("failed", f"acpx {result.describe()}: {checked.detail}. Fix: {checked.fix}")
    return verdict


# --- --open ---------------------------------------------------------------------------------------------------


def exit_status(record: RunRecord) -> int:
    """beflow's own exit code after ``--open``: the client's, with a signal as the shell shows it (128 + n); 1 when
    the client's session changed the repository's git directory (the run failed, whatever the client said)."""
    code = record.exit_code
    if code is None or (code == 0 and record.git_restored):
        return 1
    return 128 - code if code < 0 else code


async def open_native(
    project: Project, tracker: Tracker, key: str, *, events: EventSink | None = None, request: RunRequest | None = None
) -> RunRecord:
    """``beflow --open KEY``: the agent's native client on the issue in the checkout; returns the record, whose
    ``exit_code`` is the client's. ``.acpxrc.json`` is never touched.

    The issue is ``in_progress`` while the client runs; afterwards it goes to ``review`` when the client exited 0
    and the checkout changed, and otherwise back to the status it had before.
    """
    request = request or RunRequest(key=key, mode="open")
    events = threads.looped(events) if events is not None else None  # steps in worker threads emit too
    checkout = checkout_of(project)
    issue = await threads.blocking(_workable, tracker, key)
    choice = native_client(project)
    require(choice.argv[0], f"the native client of agent {project.config.agent_label()!r}", choice.install)
    run_id = new_run_id(issue.key)
    branch = await threads.blocking(refs.current_branch, checkout)
    text = render_prompt(project, issue, request, branch=branch, run_id=run_id)
    argv = client_argv(choice.argv, text.rstrip("\n"))
    client = Path(choice.argv[0]).name
    refuse_read_only(project, checkout, "--open", injects=False)
    with await threads.shielded(tracker.claim, issue.key, request.owner):
        current = await threads.blocking(tracker.get, issue.key)
        before = Status.READY if current.status == Status.IN_PROGRESS else current.status
        distrust = await threads.blocking(repoguard.agent_at_work, checkout)  # as in --attend
        with git.distrusting() if distrust else contextlib.nullcontext():
            changes = await threads.blocking(Changes, project, checkout)
        session = Session(project, tracker, current, request, events, branch=None, checkout=checkout, run_id=run_id)
        session.record.client = client
        note = f"beflow --open: a supervised `{client}` session started in the checkout (run `{run_id}`)."
        await threads.shielded(session.start, text, note if project.config.after_run.comment else None)
        session.emit("started", mode="open", checkout=str(checkout), client=client, source=choice.source)
        # Every way out (a bug in beflow too) is recorded, and the issue goes back where it was.
        async with session.guarded(lambda o, r: threads.shielded(_finish, session, changes, o, r, before)) as ending:
            # The client owns the terminal and shares beflow's process group: Ctrl-C is the client's (the terminal
            # sends it SIGINT itself); beflow waits. SIGTERM and SIGHUP still stop both.
            # The checkout's git directory is the user's, as in --attend: what the client changes is put back.
            with (
                session.repository_guarded(checkout) as guard,
                interrupts.leaving_sigint_to_child(),
                terminal.settings_kept(),
            ):
                result = await proc.run(
                    argv,
                    cwd=checkout,
                    terminal=True,
                    own_group=False,
                    grace=interrupts.grace(proc.DEFAULT_GRACE),
                    unset=agent_env.for_agent(project.config).unset,
                )
            session.record.exit_code = result.returncode
            if guard.changed:
                ending.set("failed", repoguard.describe(guard))
            else:
                outcome: Outcome = "succeeded" if result.returncode == 0 else "failed"
                ending.set(outcome, f"the {client} session ended ({result.describe()})")
        return ending.finished
