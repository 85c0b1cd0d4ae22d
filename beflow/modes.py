"""The supervised modes (DESIGN §1): ``beflow --attend KEY`` and ``beflow --open KEY``.

Both run in the repository's own checkout, with a person at the terminal. There is no worktree and no commit (the
checkout and its uncommitted work are the user's); the run record lists the files the session changed, told apart
from files that were already uncommitted before it. The prompt, the record and the tracker update are the ones
``--auto`` uses (:mod:`beflow.lifecycle`).

- ``--attend``: acpx, attended: ``--<attend.permissions>`` (``approve-reads`` by default, never ``approve-all``
  unless configured) and the user's terminal as its stdin, stdout and stderr, so its permission prompts reach the
  person. MCP servers are injected into the checkout's ``.acpxrc.json`` and restored exactly afterwards (Ctrl-C
  and a closed terminal included). One attended run per checkout at a time.
- ``--open``: the agent's native client (``claude``, ``codex``, ...) with the prompt as its first message. The
  child owns the terminal; beflow waits and hands back its exit code. Nothing is injected: the client reads its
  own MCP configuration.

Core functions: no printing, they return the :class:`~beflow.records.RunRecord` and raise
:class:`~beflow.errors.BeflowError` subclasses; notices go to the caller's event sink.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import shutil
import socket
import stat
import sys
import termios
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import filelock
from pydantic import BaseModel, ValidationError

from beflow import acpx, agents, git, interrupts, proc
from beflow.config import CONFIG_PATH, AgentCommand, LocalTracker, Project
from beflow.errors import BeflowError, ConfigError, LockedError, ToolMissingError, UsageError
from beflow.files import atomic_write, remove
from beflow.lifecycle import (
    EventSink,
    RunEvent,
    RunRequest,
    cancel_reason,
    close_record,
    leave_issue,
    move_to_in_progress,
    new_record,
    refuse_closed,
    render_prompt,
    safe_sink,
    status_after,
    summary,
)
from beflow.mcp.acp import resolve_servers, server_names, shadowed_global_servers
from beflow.mcp.inject import managed_acpxrc
from beflow.paths import ACPXRC, beflow_home, path_key
from beflow.records import DONE_OUTCOMES, Outcome, RunRecord, RunStore, new_run_id
from beflow.trackers import Issue, Status, Tracker

#: Seconds to start the agent again after an attended run failed, to say why in the record.
ATTEND_PROBE_TIMEOUT = 30.0

#: Where ``{prompt}`` goes in a native client's argv.
PROMPT_MARK = "{prompt}"


# --- the native clients ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NativeClient:
    """How to start an agent's own interactive client with a first message, and how to install it."""

    argv: tuple[str, ...]
    install: str


#: Keyed by the acpx agent name (``agent`` in the config). Each starts the interactive client with the prompt
#: as its first message (docs/modes.md has the same table).
NATIVE_CLIENTS: dict[str, NativeClient] = {
    "claude": NativeClient(("claude", PROMPT_MARK), "npm install -g @anthropic-ai/claude-code"),
    "codex": NativeClient(("codex", PROMPT_MARK), "npm install -g @openai/codex"),
    "gemini": NativeClient(("gemini", "-i", PROMPT_MARK), "npm install -g @google/gemini-cli"),
    "opencode": NativeClient(("opencode", "--prompt", PROMPT_MARK), "npm install -g opencode-ai"),
    "cursor": NativeClient(("cursor-agent", PROMPT_MARK), "curl https://cursor.com/install -fsS | bash"),
}
NATIVE_CLIENTS["cursor-agent"] = NATIVE_CLIENTS["cursor"]


@dataclass(frozen=True)
class ClientChoice:
    """The native client ``--open`` starts: its argv template, where it came from, and how to install it."""

    argv: list[str]
    source: str  # "built-in table" or "open.<name> in <config>"
    install: str | None


def native_client(project: Project) -> ClientChoice:
    """The client for the configured agent: ``open.<agent>`` in the config, else ``open.default``, else the
    built-in table. A raw ``{"command": ...}`` agent has no name; it needs ``open.default`` (or an entry keyed by
    its command)."""
    config = project.config
    raw = isinstance(config.agent, AgentCommand)
    name = config.agent_label()
    where = project.config_name
    for key in (name, "default"):
        if key in config.open:
            argv = list(config.open[key])
            _check_template(argv, f"{where}: open.{key}")
            return ClientChoice(argv, f"open.{key} in {where}", None)
    if not raw and name in NATIVE_CLIENTS:
        client = NATIVE_CLIENTS[name]
        return ClientChoice(list(client.argv), "built-in table", client.install)
    example = '"open": {"%s": ["my-client", "{prompt}"]}' % ("default" if raw else name)
    if raw:
        message = f"agent is a raw ACP command ({name}); beflow does not know which native client goes with it"
    else:
        known = ", ".join(sorted(NATIVE_CLIENTS))
        message = f"no native client is known for agent {name!r} (built in: {known})"
    raise ConfigError(f"{where}: {message}", fix=f"Name the client in {where}, e.g. {example}.")


def _check_template(argv: list[str], where: str) -> None:
    if not argv or not argv[0].strip():
        raise ConfigError(f'{where}: expected the client\'s argv, e.g. ["my-client", "{PROMPT_MARK}"]; got {argv}')
    if not any(PROMPT_MARK in arg for arg in argv):
        raise ConfigError(
            f"{where}: no {PROMPT_MARK} in {argv}: the client would start without the issue",
            fix=f'Mark where the prompt goes, e.g. ["{argv[0]}", "{PROMPT_MARK}"].',
        )


def client_argv(template: list[str], prompt: str) -> list[str]:
    """The template with the prompt in place of every ``{prompt}`` (which may sit inside a larger argument)."""
    return [arg.replace(PROMPT_MARK, prompt) for arg in template]


def _require(executable: str, what: str, install: str | None) -> None:
    """A clear error, with how to install it, when ``executable`` cannot be started."""
    found = os.access(executable, os.X_OK) if os.sep in executable else shutil.which(executable) is not None
    if not found:
        fix = f"Install it: {install}" if install else f"Install it, or fix the argv in {CONFIG_PATH}."
        raise ToolMissingError(f"{executable}: {what} is not installed (not found on PATH)", fix=fix)


# --- the checkout ---------------------------------------------------------------------------------------------


def checkout_of(project: Project) -> Path:
    """The git checkout the project lives in: where supervised sessions run."""
    top = git.toplevel(project.directory)
    if top is None:
        raise UsageError(f"{project.directory} is not inside a git repository", fix="Run beflow in a git checkout.")
    return top.resolve()


#: path -> (two-letter git status, fingerprint of the content)
Snapshot = dict[str, tuple[str, str]]


def _fingerprint(path: Path) -> str:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return "missing"
    if stat.S_ISLNK(info.st_mode):
        return f"link:{os.readlink(path)}"
    if not stat.S_ISREG(info.st_mode):
        return f"other:{stat.S_IFMT(info.st_mode)}"
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return f"{stat.S_IMODE(info.st_mode):o}:{digest.hexdigest()}"


def snapshot(checkout: Path, exclude: list[Path]) -> Snapshot:
    """What is uncommitted in the checkout and the content of each such file; paths under ``exclude`` (the
    local tracker's issue files, which beflow itself updates) are left out."""
    result: Snapshot = {}
    for relative, code in git.checkout_status(checkout).items():
        full = checkout / relative
        if any(full == e or e in full.parents for e in exclude):
            continue
        result[relative] = (code, _fingerprint(full))
    return result


def _letter(code: str, path: Path, untracked: str = "A") -> str:
    """``git diff --name-status``-like letter for a porcelain status; an untracked file is ``untracked`` (``A``
    for one the session made, ``?`` for one that was there before it: nobody added it)."""
    if not path.exists() and not path.is_symlink():
        return "D"
    if "R" in code:
        return "R"
    if code == "??":
        return untracked
    if "A" in code:
        return "A"
    return "M"


def compare(checkout: Path, before: Snapshot, after: Snapshot) -> tuple[list[str], list[str]]:
    """``(changed, untouched)``: files the session changed (new, modified, deleted, or put back to their committed
    content), and files that were uncommitted before it and are exactly as they were. ``STATUS\\tpath`` lines."""
    changed: list[str] = []
    untouched: list[str] = []
    for relative in sorted(set(before) | set(after)):
        was, now = before.get(relative), after.get(relative)
        if was == now and was is not None:
            untouched.append(f"{_letter(was[0], checkout / relative, untracked='?')}\t{relative}")
        else:
            code = now[0] if now is not None else ""
            changed.append(f"{_letter(code, checkout / relative)}\t{relative}")
    return changed, untouched


def _excluded(project: Project) -> list[Path]:
    tracker = project.config.tracker
    return [project.tracker_dir] if isinstance(tracker, LocalTracker) else []


# --- one attended run per checkout ----------------------------------------------------------------------------


class _Holder(BaseModel):
    pid: int
    host: str
    issue: str
    run: str
    since: dt.datetime


@contextlib.contextmanager
def checkout_lock(checkout: Path, issue: str, run_id: str) -> Iterator[None]:
    """Hold the checkout for one attended run; a second one is refused at once, naming the holder."""
    key = f"attend-{path_key(checkout)}"
    directory = beflow_home() / "locks"
    directory.mkdir(parents=True, exist_ok=True)
    note = directory / f"{key}.json"
    lock = filelock.FileLock(str(directory / f"{key}.lock"), thread_local=False)
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        raise LockedError(
            f"an attended run is already going on in {checkout}: {_describe_holder(note)}",
            fix="Wait for it to finish, or stop it (Ctrl-C in its terminal): one attended run per checkout at a time.",
        ) from None
    try:
        holder = _Holder(
            pid=os.getpid(), host=socket.gethostname(), issue=issue, run=run_id, since=dt.datetime.now(dt.UTC)
        )
        atomic_write(note, holder.model_dump_json() + "\n")
        yield
    finally:
        remove(note)  # while the lock is still ours: never the next holder's note
        lock.release()


def _describe_holder(note: Path) -> str:
    try:
        holder = _Holder.model_validate_json(note.read_bytes())
    except (OSError, ValueError, ValidationError):
        return "held by another beflow process"
    since = holder.since.astimezone().strftime("%H:%M:%S")
    return f"issue {holder.issue} (run {holder.run}), beflow pid {holder.pid} on {holder.host} since {since}"


# --- what both modes share ------------------------------------------------------------------------------------


def _workable(tracker: Tracker, key: str) -> Issue:
    issue = tracker.get(key)
    refuse_closed(issue)
    return issue


class _Session:
    """The record, the tracker and the checkout's changes around one supervised session."""

    def __init__(
        self,
        project: Project,
        tracker: Tracker,
        issue: Issue,
        request: RunRequest,
        run_id: str,
        checkout: Path,
        events: EventSink | None,
    ) -> None:
        self.project = project
        self.tracker = tracker
        self.issue = issue
        self.checkout = checkout
        self.store = RunStore(project.directory)
        self._events = safe_sink(events)  # the terminal may be gone (SIGHUP): progress never blocks the cleanup
        self._exclude = _excluded(project)
        # Before the tracker is touched (the local tracker's files live in the checkout, and are excluded anyway).
        self.before = snapshot(checkout, self._exclude)
        self.record = new_record(project, issue, request, run_id=run_id, branch=None)
        self.record.checkout = str(checkout)

    def emit(self, kind: str, **data: Any) -> None:
        self._events(RunEvent(kind, self.record.id, self.record.issue, data))

    def start(self, prompt_text: str, note: str | None = None) -> None:
        self.store.create(self.record, prompt_text)
        move_to_in_progress(self.tracker, self.issue, note)

    def finish(self, outcome: Outcome, reason: str, status_for: Callable[[Outcome], Status]) -> RunRecord:
        record = self.record
        record.changed_files, record.dirty_before = compare(
            self.checkout, self.before, snapshot(self.checkout, self._exclude)
        )
        if outcome == "succeeded" and not record.changed_files:
            outcome, reason = "no_changes", f"{reason}; no file in the checkout changed"
        close_record(self.store, record, outcome, reason)
        note = summary(record) if self.project.config.after_run.comment else None
        status = status_for(outcome)
        if status == Status.OPEN:  # in_progress cannot go back to open directly
            if leave_issue(self.tracker, record.issue, Status.READY, note):
                self.tracker.set_status(record.issue, Status.OPEN, author="beflow")
        else:
            leave_issue(self.tracker, record.issue, status, note)
        self.emit(
            "finished",
            outcome=record.outcome,
            reason=record.stop_reason,
            changed=record.changed_files,
            dirty_before=record.dirty_before,
            exit_code=record.exit_code,
        )
        return record


@contextlib.contextmanager
def _terminal_settings_kept() -> Iterator[None]:
    """Put the terminal's settings back after the child: acpx switches it to raw mode for a permission prompt,
    and a child stopped in the middle of one would leave it so."""
    try:
        saved = termios.tcgetattr(sys.stdin.fileno())
    except (termios.error, OSError, ValueError):
        saved = None
    try:
        yield
    finally:
        # Only from the foreground: a background process setting the terminal would be stopped (SIGTTOU).
        with contextlib.suppress(termios.error, OSError, ValueError):
            fd = sys.stdin.fileno()
            if saved is not None and os.tcgetpgrp(fd) == os.getpgrp():
                termios.tcsetattr(fd, termios.TCSANOW, saved)


# --- --attend -------------------------------------------------------------------------------------------------


def _is_terminal(fd: int) -> bool:
    try:
        return os.isatty(fd)
    except OSError:
        return False


def acpxrc_notice(checkout: Path) -> str | None:
    """The warning for an ``.acpxrc.json`` that git would show (and could commit) while a run is live."""
    path = checkout / ACPXRC
    with git.open_repo(checkout) as repo:
        tracked = git.is_tracked(repo, ACPXRC)
    if tracked:
        return (
            f"{path} is tracked by git: while the run is live it holds the injected MCP servers and shows as "
            "modified; beflow puts it back afterwards. Do not commit it meanwhile."
        )
    if not git.is_ignored(checkout, ACPXRC):
        return (
            f"{path} is not git-ignored: while the run is live it shows in `git status` (beflow puts it back "
            f"afterwards). To ignore it, add this line to {checkout / '.gitignore'}:\n    {ACPXRC}"
        )
    return None


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
    checkout = checkout_of(project)
    issue = _workable(tracker, key)
    servers = resolve_servers(project)
    run_id = new_run_id(issue.key)
    text = render_prompt(project, issue, request, branch=git.current_branch(checkout), run_id=run_id)
    permissions = config.attend.permissions
    argv = acpx.attend_argv(
        config,
        cwd=checkout,
        prompt=text,
        permissions=permissions,
        prompt_file=RunStore(project.directory).directory(run_id) / "prompt.md",
    )
    install = f"npm install -g acpx (or set `acpx` in {project.config_name}; `beflow doctor` checks it)"
    _require(argv[0], "acpx", install)
    with checkout_lock(checkout, issue.key, run_id), tracker.claim(issue.key, request.owner):
        current = tracker.get(issue.key)
        before = Status.READY if current.status == Status.IN_PROGRESS else current.status

        def status_for(outcome: Outcome) -> Status:
            # A person was there: a session that did not finish leaves the issue where it was (an `open` issue
            # does not join the queue of unattended runs because someone tried it by hand).
            return status_after(outcome) if outcome in DONE_OUTCOMES else before

        session = _Session(project, tracker, current, request, run_id, checkout, events)
        record = session.record
        record.mcp_servers = server_names(servers)
        session.start(text)
        session.emit(
            "started", mode="attend", checkout=str(checkout), permissions=permissions, servers=record.mcp_servers
        )
        if not (_is_terminal(0) and _is_terminal(2)):
            session.emit(
                "notice",
                message=f"stdin or stderr is not a terminal: acpx cannot ask you, so whatever {permissions} does "
                "not allow is denied",
            )
        if servers:
            notice = acpxrc_notice(checkout)
            if notice:
                session.emit("notice", message=notice)
            shadowed = shadowed_global_servers()
            if shadowed:
                record.mcp_shadowed = shadowed.names
                session.emit(
                    "notice", message=f"injected MCP servers shadow {', '.join(shadowed.names)} from {shadowed.path}"
                )
        session.store.save(record)
        try:
            outcome, reason = await _attended_acpx(session, argv, servers)
        except BeflowError as error:
            outcome, reason = "failed", error.message
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                session.finish("cancelled", cancel_reason(), status_for)
            raise
        with anyio.CancelScope(shield=True):
            finished = session.finish(outcome, reason, status_for)
        return finished


async def _attended_acpx(
    session: _Session, argv: list[str], servers: list[dict[str, Any]] | None
) -> tuple[Outcome, str]:
    """Inject, run acpx on the user's terminal, restore; the outcome and why."""
    record = session.record
    checkout = session.checkout

    def on_saved(path: Path) -> None:
        session.emit("notice", message=f"{ACPXRC} was changed during the run; that version is saved at {path}")

    handle = None
    try:
        async with managed_acpxrc(
            checkout, servers, on_wait=lambda m: session.emit("notice", message=m), on_saved=on_saved
        ) as handle:
            # acpx gets its own process group (and session): it reads and writes the terminal all the same
            # (tests/cli/test_attend.py answers its prompt through a pseudo-terminal), while Ctrl-C and a hang-up
            # come to beflow, which stops acpx and its agent as a group and then restores the file.
            with _terminal_settings_kept():
                result = await proc.run(argv, cwd=checkout, terminal=True, grace=interrupts.grace(proc.DEFAULT_GRACE))
    finally:
        if handle is not None and handle.restored is not None:
            # "left by beflow pid N" is for orphans of another process, not this one's own restore
            record.restored.append(handle.restored.model_copy(update={"pid": None}).describe())
    record.exit_code = result.returncode
    code = result.returncode
    if code == 0:
        return "succeeded", "the agent finished (acpx exit 0)"
    if code == acpx.ACPX_TIMEOUT:
        return "timeout", "acpx reported a timeout"
    if code == acpx.ACPX_PERMISSION_DENIED:
        # The person said no at the prompt (or attend.permissions did): their decision, not a failure of the run.
        permissions = session.project.config.attend.permissions
        return (
            "succeeded",
            f"the agent finished; a permission it asked for was denied (attend.permissions: {permissions})",
        )
    # acpx said why on the terminal only (attended runs keep no transcript): start the agent again, as doctor
    # does, so that the record and the issue say it too when it is a login or an install that is missing.
    checked = await agents.probe_async(session.project.config, timeout=ATTEND_PROBE_TIMEOUT)
    if not checked.ok:
        return "failed", f"acpx {result.describe()}: {checked.detail}. Fix: {checked.fix}"
    return "failed", f"acpx {result.describe()} (its output went to the terminal: attended runs keep no transcript)"


# --- --open ---------------------------------------------------------------------------------------------------


def exit_status(record: RunRecord) -> int:
    """beflow's own exit code after ``--open``: the client's, with a signal as the shell shows it (128 + n)."""
    code = record.exit_code
    if code is None:
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
    checkout = checkout_of(project)
    issue = _workable(tracker, key)
    choice = native_client(project)
    _require(choice.argv[0], f"the native client of agent {project.config.agent_label()!r}", choice.install)
    run_id = new_run_id(issue.key)
    text = render_prompt(project, issue, request, branch=git.current_branch(checkout), run_id=run_id)
    argv = client_argv(choice.argv, text.rstrip("\n"))
    client = Path(choice.argv[0]).name
    with tracker.claim(issue.key, request.owner):
        current = tracker.get(issue.key)
        before = Status.READY if current.status == Status.IN_PROGRESS else current.status

        def status_for(outcome: Outcome) -> Status:
            return Status.REVIEW if outcome == "succeeded" else before

        session = _Session(project, tracker, current, request, run_id, checkout, events)
        session.record.client = client
        note = f"beflow --open: a supervised `{client}` session started in the checkout (run `{run_id}`)."
        session.start(text, note if project.config.after_run.comment else None)
        session.emit("started", mode="open", checkout=str(checkout), client=client, source=choice.source)
        try:
            # The client owns the terminal and shares beflow's process group: Ctrl-C is the client's (the terminal
            # sends it SIGINT itself); beflow waits. SIGTERM and SIGHUP still stop both.
            with interrupts.leaving_sigint_to_child(), _terminal_settings_kept():
                result = await proc.run(
                    argv, cwd=checkout, terminal=True, own_group=False, grace=interrupts.grace(proc.DEFAULT_GRACE)
                )
        except BeflowError as error:
            with anyio.CancelScope(shield=True):
                failed = session.finish("failed", error.message, status_for)
            return failed
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                session.finish("cancelled", cancel_reason(), status_for)
            raise
        session.record.exit_code = result.returncode
        outcome: Outcome = "succeeded" if result.returncode == 0 else "failed"
        with anyio.CancelScope(shield=True):
            finished = session.finish(outcome, f"the {client} session ended ({result.describe()})", status_for)
        return finished
