"""What beflow knows about agents beyond starting them through acpx: how to log in to or install each one, why an
agent failed in words a person can act on, and a probe that starts the agent for real (``beflow doctor``).

acpx reports most failures in its ``--format json`` stream: an error answer to one of its own requests (an
agent that is not logged in answers ``session/new`` with ACP's ``-32000 Authentication required``), or an error
of its own (``"id": null``, with ``data.detailCode`` such as ``AGENT_SPAWN_ENOENT``, ``AGENT_STARTUP_FAILED``
or ``AUTH_REQUIRED``). An agent that dies mid-turn leaves only its own stderr, which acpx passes on with
``--verbose``.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import anyio

from beflow.agent import agent_env
from beflow.agent.acpx import Transcript
from beflow.agent.acpx_command import AGENT_MISSING, agent_args
from beflow.agent.session import forget_session
from beflow.config import CONFIG_PATH, AgentCommand, Config
from beflow.errors import BeflowError
from beflow.mcp.redact import Redactor
from beflow.paths import acpx_home
from beflow.system import node, proc

#: ACP's error code for "authenticate first" (JSON-RPC -32000, "Authentication required").
ACP_AUTH_REQUIRED = -32000

#: acpx's ``detailCode`` for an agent that needs a login.
ACPX_AUTH_REQUIRED = "AUTH_REQUIRED"

#: How each agent of acpx's registry is logged in to, keyed by its acpx name: what a person runs once.
LOGIN: dict[str, str] = {
    "codex": "codex login",
    "claude": "claude /login",
    "gemini": "gemini (then choose a login method)",
    "opencode": "opencode auth login",
    "cursor": "cursor-agent login",
    "copilot": "copilot (then /login)",
    "qwen": "qwen (then /auth)",
    "kimi": "kimi (then /login)",
    "droid": "droid (then /login)",
}

#: How to install the program behind an agent of acpx's registry that acpx does not fetch by itself.
INSTALL: dict[str, str] = {
    "codex": "npm install -g @openai/codex",
    "claude": "npm install -g @anthropic-ai/claude-code",
    "gemini": "npm install -g @google/gemini-cli",
    "opencode": "npm install -g opencode-ai",
    "cursor": "curl https://cursor.com/install -fsS | bash",
    "copilot": "npm install -g @github/copilot",
    "qwen": "npm install -g @qwen-code/qwen-code",
}

#: Seconds ``beflow doctor`` gives the agent to start and open a session (a first use may download its adapter).
PROBE_TIMEOUT = 120.0

#: Longest cause a one-line reason carries from an agent's or acpx's own words.
MAX_CAUSE = 300

#: acpx's message for an agent that exited during ``initialize``.
_STARTUP_FAILED = re.compile(
    r"ACP agent exited before initialize completed \(exit=(?P<exit>\w+), signal=(?P<signal>\w+)\):?(?P<rest>.*)", re.S
)

_AUTH_WORDS = re.compile(r"auth(entication|orization)? required|not (logged|signed) in|log ?in required", re.I)


@dataclass(frozen=True)
class AgentFailure:
    """Why the agent did not do its turn, in one line, and what a person does about it."""

    cause: str
    fix: str
    permanent: bool  # no retry can help: a login or an install is missing

    def reason(self) -> str:
        return f"{self.cause}. Fix: {self.fix}"


def one_line(text: str, limit: int = MAX_CAUSE) -> str:
    """``text`` on one line (whitespace collapsed), cut at ``limit`` characters."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def login_fix(config: Config) -> str:
    """How to log in to the configured agent."""
    name = config.agent_label()
    if isinstance(config.agent, AgentCommand):
        return f"log in with the agent's own command line (the agent is `{name}`), then run the issue again"
    command = LOGIN.get(name)
    if command is None:
        return f"log in to {name} with its own command line, then run the issue again"
    if shutil.which(command.split()[0]) is None and name in INSTALL:
        # acpx fetches the agent's ACP adapter by itself, not the command line one logs in with.
        return (
            f"install {name}'s command line and log in: `{INSTALL[name]}`, then `{command}`; then run the issue again"
        )
    return f"log in with `{command}` (as the user beflow runs as), then run the issue again"


def install_fix(config: Config) -> str:
    """How to install the configured agent."""
    if isinstance(config.agent, AgentCommand):
        return f"install the agent, or give its full path in `agent.command` in {CONFIG_PATH}"
    name = config.agent_label()
    install = INSTALL.get(name)
    how = f"`{install}`" if install else f"install {name}"
    return f"{how}, or set `agent` in {CONFIG_PATH} to an agent you have"


def agent_lines(stderr: str) -> list[str]:
    """The agent's own stderr lines from acpx's (``--verbose``) stderr: acpx's lines start with ``[acpx]``."""
    return [line for line in stderr.splitlines() if line.strip() and not line.startswith("[acpx]")]


#: The most of a program's own start-up error a reason carries: its last lines, at most this many characters.
STDERR_TAIL_LINES = 6
STDERR_TAIL_CHARS = 400

#: npm's news of its own releases, which npx prints whatever happened: never the cause.
_NPM_NOTICE = re.compile(r"^npm notice\b")

#: What npm (through npx) says when a package needs a newer Node.js than the one running it.
_ENGINE = re.compile(r"EBADENGINE|requires? node(\.js)? *(>=|version)|Unsupported engine", re.I)


def stderr_tail(stderr: str) -> str:
    """The last lines the agent (or npx fetching it) wrote to stderr, on one line and capped at the end's side:
    the program's own account of why it did not start. ``stderr`` is masked already (a run's log is; the doctor's
    probe masks it)."""
    lines = [" ".join(line.split()) for line in agent_lines(stderr) if not _NPM_NOTICE.match(line)]
    said = " / ".join(lines[-STDERR_TAIL_LINES:])
    return said if len(said) <= STDERR_TAIL_CHARS else "…" + said[-(STDERR_TAIL_CHARS - 1) :].lstrip()


def _with_tail(cause: str, tail: str) -> str:
    return f"{cause}; it said on stderr: {tail}" if tail and tail not in cause else cause


def _node_fix(tail: str, fix: str) -> str:
    """``fix``, led by how to get Node.js 22 when the program said that its Node.js is too old."""
    if _ENGINE.search(tail):
        found = node.version()
        mine = f" (this machine's is {node.shown(found)})" if found is not None else ""
        return f"the agent needs Node.js {node.MINIMUM_TEXT} or later{mine}: {node.how_to_get(str(CONFIG_PATH))}; {fix}"
    return fix


def is_auth_failure(transcript: Transcript) -> bool:
    """Whether the agent (or acpx for it) said that it needs a login."""
    if transcript.acpx_detail == ACPX_AUTH_REQUIRED:
        return True
    if ACP_AUTH_REQUIRED in (transcript.request_error_code, transcript.error_code):
        return True
    words = [transcript.request_error, transcript.error, transcript.acpx_error]
    return any(w is not None and _AUTH_WORDS.search(w) for w in words)


def diagnose(
    transcript: Transcript, config: Config, *, returncode: int | None, stderr: str, run_id: str | None = None
) -> AgentFailure | None:
    """Why an acpx run of the agent failed, from what it streamed and the agent's stderr; ``None`` when it did
    not fail in a way beflow knows better than "failed"."""
    label = config.agent_label()
    last_words = agent_lines(stderr)[-1:] or [""]
    if is_auth_failure(transcript):
        said = transcript.request_error or transcript.error or transcript.acpx_error or "Authentication required"
        where = f" (its answer to {transcript.request_error_method})" if transcript.request_error_method else ""
        return AgentFailure(
            f"the agent {label} is not logged in: {one_line(said)}{where}", login_fix(config), permanent=True
        )
    if transcript.acpx_detail in AGENT_MISSING:
        first = (transcript.acpx_error or "").split(". ")[0]
        return AgentFailure(
            f"the agent {label} could not be started: {one_line(first)}", install_fix(config), permanent=True
        )
    logs = f"`beflow runs logs {run_id}` shows the transcript" if run_id else "the run's transcript shows more"
    # A program that did not start says why on its stderr (acpx's message is often no more than "Internal error").
    tail = stderr_tail(stderr) if not transcript.prompted else ""
    startup = _STARTUP_FAILED.match(transcript.acpx_error or "")
    if transcript.acpx_detail == "AGENT_STARTUP_FAILED" and startup:
        how = f"exit {startup['exit']}" if startup["exit"] != "null" else f"signal {startup['signal']}"
        said = f": {one_line(startup['rest'])}" if startup["rest"].strip() else ""
        cause = _with_tail(f"the agent {label} exited before it started ({how}){said}", tail)
        return AgentFailure(cause, _node_fix(tail, _by_hand(config)), False)
    if transcript.acpx_error:
        cause = _with_tail(f"acpx: {one_line(transcript.acpx_error)}", tail)
        return AgentFailure(cause, _node_fix(tail, _check_fix(config, logs)), permanent=False)
    if transcript.request_error:
        said = f"{transcript.request_error_method}: {transcript.request_error}"
        cause = _with_tail(f"the agent {label} failed to start: {one_line(said)}", tail)
        return AgentFailure(cause, _node_fix(tail, _check_fix(config, logs)), False)
    if returncode not in (0, None) and transcript.stop_reason is None and transcript.error is None:
        words = f": {one_line(last_words[0])}" if last_words[0] else " (it said nothing on stderr)"
        when = "in the middle of its turn" if transcript.prompted else "before its turn began"
        return AgentFailure(
            f"the agent {label} exited {when} (acpx exit {returncode}){words}",
            f"{logs}; run the issue again to retry",
            permanent=False,
        )
    return None


def _check_fix(config: Config, logs: str) -> str:
    return f"`beflow doctor` starts {config.agent_label()} and says what is wrong; {logs}"


def _by_hand(config: Config) -> str:
    """How to see an agent's own account of why it does not start."""
    if isinstance(config.agent, AgentCommand):
        return f"run the agent's command by hand to see why: {config.agent.command}"
    return f"check that {config.agent} is installed and starts on its own"


# -- the doctor's probe ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """What starting the agent for real said: it started and opened a session, or why not and what to do."""

    ok: bool
    detail: str
    fix: str | None = None


def probe_argv(config: Config, cwd: Path, name: str) -> list[str]:
    """``acpx … <agent> sessions new``: the agent is started, initialized and asked for a new session, and no
    prompt is sent (nothing is spent, nothing is changed)."""
    return [
        *config.acpx_argv(),
        "--cwd",
        str(cwd),
        "--format",
        "json",
        "--verbose",
        *agent_args(config),
        "sessions",
        "new",
        "--name",
        name,
    ]


def probe(config: Config, *, timeout: float = PROBE_TIMEOUT) -> Probe:
    """:func:`probe_async` from synchronous code (``beflow doctor``)."""
    return anyio.run(lambda: probe_async(config, timeout=timeout))


async def probe_async(config: Config, *, timeout: float = PROBE_TIMEOUT) -> Probe:
    """Start the configured agent through acpx (initialize, then a new session), bounded by ``timeout``, in an
    empty temporary directory; acpx's record of the session is removed afterwards."""
    label = config.agent_label()
    with tempfile.TemporaryDirectory(prefix="beflow-doctor-") as directory:
        cwd = Path(directory)
        try:
            # The environment a run gives the agent: a login that needs a withheld variable shows here.
            unset = agent_env.for_agent(config).unset
            result = await proc.run(probe_argv(config, cwd, "beflow-doctor"), cwd=cwd, timeout=timeout, unset=unset)
        except BeflowError as error:
            return Probe(False, error.message, error.fix)
        transcript = Transcript()
        created: str | None = None
        for line in result.stdout.splitlines():
            message = transcript.feed(line)
            if message is not None and message.action == "session_ensured":
                created = message.acpx_record_id or ""
        if created:
            forget_session(created, acpx_home())
    if result.timed_out:
        return Probe(
            False,
            f"{label} did not open a session within {timeout:g} s",
            "A first use may download the agent's ACP adapter: run `beflow doctor` again; otherwise "
            + _by_hand(config)
            + ".",
        )
    if result.ok and created is not None:
        return Probe(True, f"{label} started and opened a session in {result.duration:.1f} s")
    # Masked as a run's stderr.log is: the agent's start-up error goes into what doctor prints.
    stderr = Redactor(secrets=agent_env.held_secrets(config)).text(result.stderr.decode("utf-8", "replace"))
    failure = diagnose(transcript, config, returncode=result.returncode, stderr=stderr)
    if failure is None:
        said = agent_lines(stderr)[-1:] or [_last_json_error(result.stdout) or result.describe()]
        return Probe(False, f"{label} did not open a session: {one_line(said[0])}", _check_by_hand(config))
    cause = failure.cause.replace("the agent ", "", 1)
    fix = failure.fix.replace("run the issue again", "run `beflow doctor` again")
    if "`beflow doctor` starts" in fix:  # (this is doctor: what comes before that part stays)
        fix = fix.split("`beflow doctor` starts", 1)[0] + _by_hand(config)
    return Probe(False, cause, fix[0].upper() + fix[1:] + ("" if fix.endswith(".") else "."))


def _check_by_hand(config: Config) -> str:
    fix = _by_hand(config)
    return fix[0].upper() + fix[1:] + "."


def _last_json_error(stdout: bytes) -> str | None:
    for line in reversed(stdout.splitlines()):
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and isinstance(message.get("error"), dict):
            return str(message["error"].get("message"))
    return None
