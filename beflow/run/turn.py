"""The agent's turn of an unattended run: inject, ``before_run``, acpx (cold or resumed), ``after_run``, restore.

Around the agent (:class:`beflow.agent.session.AgentSession`): the run's sandbox, when it is sandboxed (the workspace's:
the hooks run in it too); its transcript and stderr streamed, masked and capped, into the run record; the budgets
and the stall watch of :mod:`beflow.run.limits`, fed by every line of the ACP stream (not the agent's stderr); the
progress it reports through beflow's own server; and that server's private channel. What the turn ends in is an
outcome and a reason, judged by :func:`beflow.run.policy.judge` — or by the limit that stopped it.
"""

from __future__ import annotations

from beflow import guardrails
from beflow.agent.acpx_command import ACPX_PERMISSION_DENIED
from beflow.agent.session import AgentSession
from beflow.mcp.inject import Injection
from beflow.mcp.own import follow_progress
from beflow.mcpserver.channel import RunChannel, own_channel
from beflow.ops import permission_asks
from beflow.ops.questions import answer_prompt
from beflow.records.logs import LOG_NOTE, STDERR_LIMIT, TRANSCRIPT_LIMIT
from beflow.records.record import Outcome, last_on_session
from beflow.run.lifecycle import Session
from beflow.run.limits import Limiter, UsageEvents
from beflow.run.policy import asked, judge
from beflow.run.workspace import Workspace
from beflow.system import threads


class AgentTurn:
    """One turn of the agent in a run's workspace. ``injection`` is the injected file's handle once injected (the
    delivery reads whether it was put back); ``channel`` is where beflow's own server forwards the agent's calls."""

    def __init__(self, session: Session, workspace: Workspace, channel: RunChannel | None) -> None:
        self.session = session
        self.workspace = workspace
        self.channel = channel
        self.injection: Injection | None = None
        self.record = session.record
        self.store = session.store
        self.config = session.project.config
        self.emit = session.emit

    async def run(self, text: str) -> tuple[Outcome, str]:
        """Inject, run acpx on the prompt ``text``, restore. Returns the outcome and a reason."""
        record, session, workspace = self.record, self.session, self.workspace
        cwd, redact = workspace.path, session.redact
        box = workspace.sandbox  # the run's, open since the worktree was made
        request = session.request
        # A person allowed the permission request the agent's last turn stopped at: that one, for this turn.
        grant = permission_asks.allows(request.answer, request.question) if request.answer is not None else None
        agent = AgentSession(
            self.config, cwd, env=workspace.git_env, unset=workspace.withheld, sandbox=box, grant=grant
        )
        directory = self.store.directory(record.id)
        with (
            self.store.log(record.id, "transcript.jsonl", TRANSCRIPT_LIMIT) as transcript_file,
            self.store.log(record.id, "stderr.log", STDERR_LIMIT, redact) as stderr_file,
        ):
            # Every line of the ACP stream is life (the agent's messages, tool calls, a running tool's output; not
            # its stderr); what the agent reports it used is held to the budgets as it comes (beflow.run.limits).
            limiter = Limiter(self.config.limits, lambda: agent.transcript.latest, self._notice)
            usage = UsageEvents(self.emit)
            budget = session.budget  # best of N: the set's budget stops every candidate at once
            if budget is not None:
                budget.join(record.id, limiter)

            def on_stdout(lines: bytes) -> None:  # the lines of one read: hundreds while acpx relays fast
                limiter.alive()
                lines = redact(lines)
                transcript_file.lines(lines)
                transcript = agent.transcript
                before, updates = transcript.latest, transcript.usage.updates
                transcript.follow(lines)
                if transcript.latest and transcript.latest != before:
                    self.emit("activity", latest=transcript.latest)
                if transcript.usage.updates != updates:  # (the turn's own counts come with its end)
                    limiter.check(transcript.usage)
                    if budget is not None:
                        budget.spent(record.id, transcript.usage)
                    usage.seen(transcript.usage)

            async with session.injected(cwd) as handle:
                self.injection = handle
                await workspace.hook("before_run", fatal=False)
                async with (
                    follow_progress(self.store, record.id, lambda note: self.emit("progress", text=note.text)),
                    own_channel(self.channel, session.tracker, lambda: agent.transcript, self._notice, session.secrets),
                ):
                    # a retry, a review round, or the answer to the agent's question
                    resume = request.attempt > 1 or request.round > 0 or request.answer is not None
                    earlier = self.store.resumable_session(record) if resume else None
                    if earlier is not None:  # kept before the turn: a killed beflow's next command ends its owner
                        record.session = earlier
                        await threads.blocking(self.store.save, record)
                    resumed = None
                    if earlier is not None and request.answer is not None:  # the session asked: it is told the answer
                        told = answer_prompt(request.answer, request.question)
                        resumed = (told, await threads.blocking(self.store.write, record.id, "answer.md", told))
                    try:
                        result = await limiter.supervise(
                            lambda: agent.run(
                                text,
                                key=record.issue,
                                prompt_file=directory / "prompt.md",
                                earlier=earlier,
                                earlier_usage=self._session_spent(earlier),
                                on_stdout=on_stdout,
                                on_stderr=stderr_file.lines,
                                on_cold_start=self._started_cold,
                                resumed=resumed,
                            )
                        )
                    finally:
                        if box is not None:  # what the sandbox's proxy refused, however the run ended
                            record.blocked = dict(box.blocked)
                        # What the agent reported, however the turn ended: a cancelled run's cost counts too.
                        record.usage = None if agent.transcript.usage.empty else agent.transcript.usage
                        if budget is not None:
                            budget.leave(record.id)
                    record.resumed_session = agent.resumed_session
                await workspace.hook("after_run", fatal=False)
        transcript = agent.transcript
        record.unheld = limiter.ended(transcript.usage)  # the turn's own token counts come with its end
        record.final_message = transcript.final_message
        record.session = transcript.session_id
        record.usage = None if transcript.usage.empty else transcript.usage
        if result is None or limiter.breach is not None:  # a limit stopped the agent: the limit says why
            breach = limiter.breach
            assert breach is not None
            record.permanent = breach.permanent
            if limiter.stall is not None:
                record.silent_for, record.last_activity = limiter.stall.silent_for, limiter.stall.last_activity
            self.emit("notice", message=breach.reason)
            return breach.outcome, breach.reason
        record.exit_code = result.returncode
        stderr = self._stderr()
        verdict = judge(result, transcript, self.config, stderr, key=session.request.key, run_id=record.id)
        record.permanent = verdict.permanent
        reason = verdict.reason
        if box is not None and verdict.outcome == "failed" and not transcript.prompted:
            # A program that did not start in the sandbox: which path it hid, and how to show it.
            hint = box.explain("\n".join([reason, *stderr[-20:]]))
            reason = f"{reason}; {hint}" if hint else reason
        if self.channel is not None and self.channel.failure is not None:
            return verdict.outcome, f"{reason}; {self.channel.failure}"
        undecided = transcript.undecided
        if undecided is not None and result.returncode == ACPX_PERMISSION_DENIED and self.config.permission_policy.asks:
            # acpx left a permission request to a person and failed the turn: the issue waits for their answer.
            record.question = permission_asks.question_of(permission_asks.ask_of(undecided, redact.text))
            waits = asked(record.question)
            return waits.outcome, waits.reason
        question = self.channel.question if self.channel is not None else None
        if question is not None and verdict.outcome == "succeeded":
            # The agent asked and ended its turn: the issue waits for a person's answer (beflow.ops.questions).
            record.question = question
            waits = asked(question)
            return waits.outcome, waits.reason
        return verdict.outcome, reason

    def _stderr(self) -> list[str]:
        """acpx's stderr as the run's record kept it, for the reason of a failure. The agent may have replaced the
        file (without the sandbox it can write the record): what is not the file beflow wrote is not read."""
        try:
            data = self.store.read(self.record.id, "stderr.log", limit=STDERR_LIMIT + LOG_NOTE)
        except OSError as exc:
            self._notice(f"acpx's stderr was not read back: {exc}")
            return []
        return data.decode("utf-8", errors="replace").strip().splitlines()

    def _notice(self, message: str) -> None:
        self.emit("notice", message=message)

    def _started_cold(self, why: str) -> None:
        self.record.resume_note = why
        self.emit("notice", message=why)

    def _session_spent(self, session: str | None) -> guardrails.Usage | None:
        """What the latest run on the ACP session ``session`` reported, that a resumed run's cost counts from."""
        if session is None:
            return None
        return last_on_session(self.store.records([self.record.issue]), session)
