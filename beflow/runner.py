"""One unattended run (DESIGN §4): every ``--auto`` run and every ``watch`` dispatch is exactly this.

claim → worktree on ``beflow/<key>`` → include files → ``after_create`` hook → prompt → MCP servers → inject →
``before_run`` → acpx (supervised) → ``after_run`` → restore → commit → record → tracker update → remove the
worktree (kept, and said so, when that could lose the agent's work) → release the claim.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio

from beflow import acpx, agents, git, interrupts, preflight, proc
from beflow.config import Project
from beflow.errors import BeflowError, ConfigError, LockedError
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
    settle_orphans,
    status_after,
    summary,
)
from beflow.mcp.acp import resolve_servers, server_names, shadowed_global_servers
from beflow.mcp.inject import Injection, managed_acpxrc
from beflow.paths import ACPXRC, acpx_home
from beflow.records import Mode, Outcome, RunRecord, RunStore, new_run_id
from beflow.trackers import Issue, Status, Tracker

T = TypeVar("T")

#: Seconds beyond ``timeout`` that beflow gives acpx to stop by itself before stopping it.
TIMEOUT_MARGIN = 15.0


class NoLongerReady(LockedError):
    """A picked issue was run (or moved) by someone else between the pick and the claim: skip it, quietly."""

    code = "skipped"


class PermanentFailure(BeflowError):
    """A failure no retry can fix (bad config, a prompt that does not render, an unknown agent)."""


class Run:
    """One run of one issue. Build it, then ``await execute()``; the record says how it ended."""

    def __init__(self, project: Project, tracker: Tracker, request: RunRequest, events: EventSink | None = None):
        self.project = project
        self.config = project.config
        self.tracker = tracker
        self.request = request
        self.store = RunStore(project.directory)
        self._events = safe_sink(events)
        self.record: RunRecord | None = None
        self.transcript = acpx.Transcript()
        self.permanent = False
        #: Masks the injected servers' secret values in everything written to the record.
        self.redact = acpx.Redactor()
        self._injection: Injection | None = None
        self._repo: Any = None  # the project's git.Repo, closed when the run ends (it holds git processes)
        #: Why the run is being cancelled, when whoever cancels it knows (the dispatcher's reconciliation).
        self.cancel_reason: str | None = None

    # -- events ------------------------------------------------------------------------------------------------

    def emit(self, kind: str, **data: Any) -> None:
        if self.record is not None:
            self._events(RunEvent(kind, self.record.id, self.record.issue, data))

    # -- the lifecycle -----------------------------------------------------------------------------------------

    async def execute(self) -> RunRecord:
        """Run the issue to an outcome; never raises for a failed run (the record says), only for bad usage."""
        issue = self.tracker.get(self.request.key)
        refuse_closed(issue)
        claim = self.tracker.claim(issue.key, self.request.owner)
        try:
            # What the issue is now that it is ours: another beflow may have run it between our look and our claim.
            issue = self.tracker.get(issue.key)
            if self.request.only_if_ready and issue.status != Status.READY:
                raise NoLongerReady(f"issue {issue.key} is no longer ready (it is {issue.status.value})")
            refuse_closed(issue)
            return await self._claimed(issue)
        finally:
            if self._repo is not None:
                self._repo.close()
            claim.release()

    async def _claimed(self, issue: Issue) -> RunRecord:
        key = issue.key
        run_id = new_run_id(key)
        branch = git.branch_for(key)
        self.record = new_record(self.project, issue, self.request, run_id=run_id, branch=branch)
        record = self.record
        try:
            text = render_prompt(self.project, issue, self.request, branch=branch, run_id=run_id)
        except BeflowError as error:
            text = ""
            self.store.create(record, text)
            self.permanent = True
            self._move_to_in_progress(issue)  # so that the tracker is told, and a watch does not pick it up again
            return self._finish(issue, "failed", f"the prompt did not render: {error.message}")
        self.store.create(record, text)
        self._move_to_in_progress(issue)
        self.emit("started", attempt=self.request.attempt, branch=branch)
        outcome: Outcome = "failed"
        reason = "the run did not finish"
        worktree: git.Worktree | None = None
        repo = self._repo = git.open_repo(self.project.directory)
        try:
            servers = self._resolve_servers()
            path = git.worktree_path(self.project.worktrees_dir, key)
            worktree = await _in_thread(git.create_worktree, repo, path, branch, self.config.worktrees.base)
            record.worktree = str(worktree.path)
            record.base_commit = worktree.base_commit
            self.store.save(record)
            await _in_thread(git.copy_included, self.project.directory, worktree.path, self.config.worktrees.include)
            await self._hook("after_create", worktree.path, fatal=True)
            outcome, reason = await self._agent_session(worktree.path, text, servers)
        except PermanentFailure as error:
            self.permanent = True
            outcome, reason = "failed", error.message
        except ConfigError as error:
            self.permanent = True
            outcome, reason = "failed", error.message
        except BeflowError as error:
            outcome, reason = "failed", error.message
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                reason = cancel_reason(self.cancel_reason)
                await self._wrap_up(worktree, repo, "cancelled", reason)
                self._finish(issue, "cancelled", reason)
            raise
        except Exception as error:  # a bug in beflow: still record it, restore the tracker and keep the work
            with anyio.CancelScope(shield=True):
                reason = f"beflow failed unexpectedly: {type(error).__name__}: {error}"
                await self._wrap_up(worktree, repo, "failed", reason)
                self._finish(issue, "failed", reason)
            raise
        with anyio.CancelScope(shield=True):
            outcome, reason = await self._wrap_up(worktree, repo, outcome, reason)
        return self._finish(issue, outcome, reason)

    def _move_to_in_progress(self, issue: Issue) -> None:
        move_to_in_progress(self.tracker, issue)

    def _resolve_servers(self) -> list[dict[str, Any]] | None:
        """The run's MCP servers, resolved before anything runs: from here on their secret values are masked in
        everything the record keeps (hook output included)."""
        assert self.record is not None
        try:
            servers = resolve_servers(self.project)
        except ConfigError as error:
            raise PermanentFailure(f"MCP servers: {error.message}") from None
        self.record.mcp_servers = server_names(servers)
        self.redact = acpx.Redactor(servers)
        return servers

    async def _agent_session(self, cwd: Path, text: str, servers: list[dict[str, Any]] | None) -> tuple[Outcome, str]:
        """Inject, run acpx, restore. Returns the outcome and a reason."""
        assert self.record is not None
        record = self.record
        shadowed = shadowed_global_servers() if servers else None
        if shadowed:
            record.mcp_shadowed = shadowed.names
            self.emit("notice", message=f"injected MCP servers shadow {', '.join(shadowed.names)} from {shadowed.path}")
        self.store.save(record)
        directory = self.store.directory(record.id)
        transcript_path = directory / "transcript.jsonl"
        stderr_path = directory / "stderr.log"
        with transcript_path.open("ab") as transcript_file, stderr_path.open("ab") as stderr_file:

            def on_stdout(line: bytes) -> None:
                line = self.redact(line)
                transcript_file.write(line + b"\n")
                transcript_file.flush()
                before = self.transcript.latest
                self.transcript.feed(line)
                if self.transcript.latest and self.transcript.latest != before:
                    self.emit("activity", latest=self.transcript.latest)

            def on_stderr(line: bytes) -> None:
                stderr_file.write(self.redact(line) + b"\n")
                stderr_file.flush()

            def on_saved(path: Path) -> None:
                self.emit("notice", message=f".acpxrc.json was changed during the run; that version is saved at {path}")

            async with managed_acpxrc(
                cwd, servers, on_wait=lambda m: self.emit("notice", message=m), on_saved=on_saved
            ) as handle:
                self._injection = handle
                await self._hook("before_run", cwd, fatal=False)
                result = await self._run_agent(cwd, text, on_stdout, on_stderr)
                await self._hook("after_run", cwd, fatal=False)
        record.exit_code = result.returncode
        record.final_message = self.transcript.final_message
        record.session = self.transcript.session_id
        return self._judge(result, stderr_path)

    async def _run_agent(
        self, cwd: Path, text: str, on_stdout: proc.LineHandler, on_stderr: proc.LineHandler
    ) -> proc.Completed:
        """acpx for this run: a cold ``exec``, or, on a retry, ``prompt -s`` on the agent's earlier ACP session.

        Resuming needs the earlier run's session id and an agent that supports ``session/resume`` or
        ``session/load``; when acpx cannot resume, the run goes on cold and the record says why.
        """
        record = self.record
        assert record is not None
        timeout = self.config.timeout
        common: dict[str, Any] = {
            "cwd": cwd,
            "prompt": text,
            "prompt_file": self.store.directory(record.id) / "prompt.md",
            "permissions": self.config.permissions,
            "timeout": timeout,
        }
        supervise: dict[str, Any] = {
            "cwd": cwd,
            "timeout": None if timeout is None else timeout + TIMEOUT_MARGIN,
            "on_stdout": on_stdout,
            "on_stderr": on_stderr,
            "grace": interrupts.grace(proc.DEFAULT_GRACE),
        }
        earlier = self._resumable_session() if self.request.attempt > 1 else None
        if earlier is not None:
            name = acpx.session_name(record.issue)
            created = await proc.run(
                acpx.resume_argv(self.config, cwd=cwd, name=name, session_id=earlier), cwd=cwd, timeout=60
            )
            if not created.ok:
                record.resume_note = f"could not name the earlier session: {_tail(created)}; started cold"
            else:
                finished = False
                try:
                    result = await proc.run(acpx.prompt_argv(self.config, name=name, **common), **supervise)
                    finished = self.transcript.stop_reason is not None
                finally:
                    await self._end_session(cwd, name, earlier, cancel=not finished)
                if self.transcript.prompted:
                    record.resumed_session = earlier
                    self.transcript.session_id = self.transcript.session_id or earlier  # the next retry resumes it too
                    return result
                why = self.transcript.acpx_error or _tail(result)
                record.resume_note = f"acpx could not resume session {earlier}: {why}; started cold"
                self.transcript = acpx.Transcript()
            self.emit("notice", message=record.resume_note)
        return await proc.run(acpx.exec_argv(self.config, **common), **supervise)

    def _resumable_session(self) -> str | None:
        """The ACP session of this issue's latest earlier run with the same agent, if it recorded one."""
        assert self.record is not None
        for earlier in self.store.list():
            if (
                earlier.issue == self.record.issue
                and earlier.id != self.record.id
                and earlier.agent == self.record.agent
            ):
                return earlier.session
        return None

    async def _end_session(self, cwd: Path, name: str, session_id: str, *, cancel: bool) -> None:
        """Leave no queue owner behind: cancel an unfinished turn, close the session, stop a lingering owner."""
        with anyio.CancelScope(shield=True):
            if cancel:
                await proc.run(acpx.cancel_argv(self.config, cwd=cwd, name=name), cwd=cwd, timeout=10)
            await proc.run(acpx.close_argv(self.config, cwd=cwd, name=name), cwd=cwd, timeout=15)
            for pid in acpx.queue_owner_pids(session_id, acpx_home()):
                await proc.stop_group(pid, grace=2.0)
            acpx.forget_session(session_id, acpx_home())

    def _judge(self, result: proc.Completed, stderr_path: Path) -> tuple[Outcome, str]:
        """The outcome of the agent session, from acpx's exit code (0 ok, 1 error, 3 timeout, 5 permission
        denied) and what the transcript says (the prompt's stop reason, the agent's or acpx's error)."""
        seen = self.transcript
        run_id = self.record.id if self.record is not None else None
        if result.timed_out or result.returncode == acpx.ACPX_TIMEOUT or seen.acpx_code == "TIMEOUT":
            limit = f"within {self.config.timeout:g} s" if self.config.timeout is not None else "in time (acpx said so)"
            return "timeout", f"the agent did not finish {limit}"
        if seen.stop_reason == "cancelled":
            return "cancelled", "the agent's turn was cancelled"
        if result.returncode == 0 and seen.stop_reason is not None and seen.error is None:
            if seen.stop_reason == "refusal":
                return "failed", "the agent refused the task"
            return "succeeded", f"the agent finished ({seen.stop_reason})"
        stderr = stderr_path.read_text(encoding="utf-8", errors="replace")
        failure = agents.diagnose(seen, self.config, returncode=result.returncode, stderr=stderr, run_id=run_id)
        if failure is not None and failure.permanent:
            # No retry can log in or install an agent: a watch gives up on the issue at once.
            self.permanent = True
            again = f"run it again (`beflow --auto {self.request.key}`)"
            return "failed", failure.reason().replace("run the issue again", again)
        if seen.error:
            return "failed", f"the agent reported an error: {agents.one_line(seen.error)}"
        if result.returncode == acpx.ACPX_PERMISSION_DENIED:
            return "failed", f"the agent was denied a permission it asked for (permissions: {self.config.permissions})"
        if failure is not None:
            return "failed", failure.reason()
        lines = agents.agent_lines(stderr)[-3:]
        detail = agents.one_line(" / ".join(lines)) if lines else "no error output"
        return "failed", f"the agent stopped before finishing its turn (acpx {result.describe()}; {detail})"

    async def _hook(self, name: str, cwd: Path, *, fatal: bool) -> None:
        hook = self.config.hooks.get(name)
        if hook is None or self.record is None:
            return
        self.emit("activity", latest=f"hook {name}: {hook.command}")
        result = await proc.run(["sh", "-c", hook.command], cwd=cwd, timeout=hook.timeout)
        output = f"$ {hook.command}\n{result.stdout.decode(errors='replace')}{result.stderr.decode(errors='replace')}"
        output += f"[{result.describe()} after {result.duration:.1f} s]\n"
        self.store.write(self.record.id, f"hooks/{name}.log", self.redact.text(output))
        if not result.ok:
            message = f"hook {name} failed ({result.describe()}); its output is in the run record"
            if fatal:
                raise BeflowError(message)
            self.emit("notice", message=message)

    async def _wrap_up(
        self, worktree: git.Worktree | None, repo: Any, outcome: Outcome, reason: str
    ) -> tuple[Outcome, str]:
        """Commit what the agent changed (whatever the outcome: it is the agent's work) and remove the worktree.

        Whatever goes wrong here (git refusing a tree the agent broke, say), the worktree is kept and named: the
        agent's work is never lost, and the run is still recorded and reported.
        """
        try:
            return await self._commit_and_clean(worktree, repo, outcome, reason)
        except Exception as error:
            assert self.record is not None and worktree is not None
            self.record.worktree_kept = True
            self.store.save(self.record)
            why = error.message if isinstance(error, BeflowError) else f"{type(error).__name__}: {error}"
            return "failed", f"{reason}; committing the work failed ({why}); the work is kept in {worktree.path}"

    async def _commit_and_clean(
        self, worktree: git.Worktree | None, repo: Any, outcome: Outcome, reason: str
    ) -> tuple[Outcome, str]:
        record = self.record
        assert record is not None
        if worktree is None:
            return outcome, reason
        commit = None
        if self.config.after_run.commit:
            message = f"{record.title or record.issue}\n\nbeflow run {record.id} ({outcome}) on issue {record.issue}."
            try:
                commit = await _in_thread(git.commit_all, worktree.path, message)
            except BeflowError as error:
                record.worktree_kept = True
                self.store.save(record)
                return "failed", f"{reason}; {error.message}; the work is kept in {worktree.path}"
        record.commit = commit
        head = commit or worktree.base_commit
        record.changed_files = await _in_thread(git.changed_files, worktree.path, worktree.base_commit, head)
        if not self.config.after_run.commit:
            # Nothing is committed: what changed is what the worktree's status says, left there for a person.
            status = await _in_thread(git.checkout_status, worktree.path)
            record.changed_files = [f"{code.strip()}\t{path}" for path, code in status.items() if path != ACPXRC]
        if outcome == "succeeded" and not record.changed_files:
            outcome, reason = "no_changes", "the agent finished without changing any file"
        if await _in_thread(git.is_dirty, worktree.path):
            record.worktree_kept = True
            why = "after_run.commit is false" if not self.config.after_run.commit else "uncommitted changes"
            reason += f"; the worktree is kept ({why}): {worktree.path}"
        else:
            await self._remove(repo, worktree)
            # A new branch that holds nothing but its base would only be clutter: `git branch` stays clean.
            fresh = commit is None and not worktree.continued and not record.worktree_kept
            if fresh and await _in_thread(git.delete_branch_at, repo, worktree.branch, worktree.base_commit):
                record.branch = None
        return outcome, reason

    async def _remove(self, repo: Any, worktree: git.Worktree) -> None:
        await self._hook("before_remove", worktree.path, fatal=False)
        try:
            prune = self.config.worktrees.dir is None  # beflow's own folder under $BEFLOW_HOME, not the user's
            await _in_thread(functools.partial(git.remove_worktree, repo, worktree.path, prune_parent=prune))
        except BeflowError as error:
            assert self.record is not None
            self.record.worktree_kept = True
            self.emit("notice", message=error.message)

    def _finish(self, issue: Issue, outcome: Outcome, reason: str) -> RunRecord:
        record = self.record
        assert record is not None
        self._note_restore(record)
        close_record(self.store, record, outcome, reason)
        self._update_tracker(issue, record)
        self.emit("finished", outcome=outcome, reason=reason, commit=record.commit, changed=len(record.changed_files))
        return record

    def _note_restore(self, record: RunRecord) -> None:
        """What became of the injected ``.acpxrc.json`` (on every path out of the session, Ctrl-C included)."""
        restored = self._injection.restored if self._injection is not None else None
        if restored is None:
            return
        if restored.pid == os.getpid():  # "left by beflow pid N" is for orphans of another process, not ours
            restored = restored.model_copy(update={"pid": None})
        if restored.describe() not in record.restored:
            record.restored.append(restored.describe())

    def _update_tracker(self, issue: Issue, record: RunRecord) -> None:
        status = status_after(record.outcome, retry=not (self.request.final or self.permanent))
        note = summary(record) if self.config.after_run.comment else None
        if status == Status.FAILED and self.request.mode == "watch":
            why = "it cannot succeed as configured" if self.permanent else f"{record.attempt} attempt(s)"
            note = f"{note}\n\nbeflow gives up on this issue: {why}." if note else None
        if not leave_issue(self.tracker, issue.key, status, note):
            try:
                self.tracker.get(issue.key)  # moved by hand (closed, say): theirs is the last word, nothing to say
            except BeflowError as error:
                self.emit(
                    "notice",
                    message=f"the issue could not be updated ({error.message}); the run record keeps the outcome, "
                    "and the next beflow run or watch tick brings the issue up to date",
                )


async def _in_thread(fn: Callable[..., T], *args: Any) -> T:
    """A git operation (GitPython, synchronous, seconds on a big repository) off the event loop, so that other
    runs' output and beflow's signal handling go on meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


def _tail(result: proc.Completed) -> str:
    """What a failed acpx call said, for notes: its JSON error's message, else its last line."""
    lines = (result.stderr or result.stdout).decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return result.describe()
    last = lines[-1]
    with contextlib.suppress(ValueError, KeyError, TypeError):
        last = str(json.loads(last)["error"]["message"])
    return f"{result.describe()}: {last[:300]}"


#: What beflow reads from the checkout itself (not from a run's worktree): uncommitted, it still counts.
_READ_FROM_THE_CHECKOUT = (".beflow/", ".mcp.json", ".acpxrc.json")


def invisible_changes(project: Project) -> str | None:
    """A note for uncommitted changes in the checkout, which no unattended run sees: each starts from
    ``worktrees.base`` in a worktree of its own. None when there are none (or no repository to look at)."""
    try:
        status = git.checkout_status(project.directory)
    except Exception:  # no repository, or git failing: the checks before the run say what is wrong
        return None
    top = git.toplevel(project.directory) or project.directory
    prefix = project.directory.resolve().relative_to(top.resolve()).as_posix() if project.directory != top else ""
    changed = [
        path
        for path in status
        if not path.removeprefix(f"{prefix}/" if prefix else "").startswith(_READ_FROM_THE_CHECKOUT)
    ]
    if not changed:
        return None
    shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
    return (
        f"{len(changed)} uncommitted change{'s' if len(changed) != 1 else ''} in {top} ({shown}) will not be seen "
        f"by the agent: each run starts from worktrees.base ({project.config.worktrees.base}) in a worktree of its "
        "own. Commit them first to include them."
    )


async def run_many(
    project: Project,
    tracker: Tracker,
    keys: list[str],
    *,
    limit: int | None = None,
    concurrency: int = 1,
    events: EventSink | None = None,
    mode: Mode = "auto",
) -> list[RunRecord]:
    """Run the named issues, or every ready issue once, ``concurrency`` at a time."""
    preflight.check(project)
    picked = not keys
    store = RunStore(project.directory)
    store.close_orphans()
    settle_orphans(tracker, store)
    if picked:
        tracker.requeue_orphans()
        keys = [issue.key for issue in tracker.ready()]
    else:
        # Unknown keys fail before anything runs; a key named twice runs once.
        keys = list(dict.fromkeys(tracker.get(key).key for key in keys))
    if limit is not None:
        keys = keys[:limit]
    records: list[RunRecord] = []
    refused: list[BeflowError] = []
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(key: str) -> None:
        async with limiter:
            request = RunRequest(key=key, mode=mode, only_if_ready=picked)
            try:
                records.append(await Run(project, tracker, request, events).execute())
            except NoLongerReady:
                pass  # another beflow ran it meanwhile: nothing to do here
            except LockedError as error:
                if not picked:
                    refused.append(error)  # named by the user: say that someone else has it
                # picked from the ready list: another beflow is running it, which is what the user wants
            except BeflowError as error:  # closed, claimed by another run: the other issues still run
                refused.append(error)

    async with anyio.create_task_group() as tasks:
        for key in keys:
            tasks.start_soon(one, key)
    if len(refused) == 1:
        raise refused[0]
    if refused:
        raise BeflowError("; ".join(e.message for e in refused), fix=refused[0].fix)
    return records
