"""``beflow doctor``: is everything beflow needs here and sound? One check a line, each with a fix."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from beflow import ACPX_VERSION, NODE_VERSION
from beflow.agent import agent_env, agents
from beflow.config import CONFIG_PATH, Config, Project, earlier_root_config, load_project
from beflow.errors import BeflowError, ConfigError, Interrupted
from beflow.mcp.acp import shadowed_global_servers
from beflow.mcp.cascade import check_cascade
from beflow.records.store import RunStore
from beflow.run import preflight
from beflow.system import node, proc
from beflow.trackers import Status
from beflow.trackers.base import ChecksAccess, SetsUpLabels
from beflow.trackers.issue import FileProblem

#: acpx probes may download the pinned release through npx on first use.
ACPX_PROBE_TIMEOUT = 300.0

#: Starting the agent may download its ACP adapter through npx on first use.
AGENT_PROBE_TIMEOUT = agents.PROBE_TIMEOUT


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    fix: str | None = None
    warning: bool = False  # ok, but worth a look


def _version(argv: list[str], timeout: float = 30.0) -> tuple[str | None, str]:
    """The first version-looking token a ``--version`` probe prints, and the raw output."""
    try:
        result = proc.run_sync([*argv, "--version"], timeout=timeout)
    except Interrupted:
        raise  # Ctrl-C stops doctor, not just this probe
    except BeflowError as error:
        return None, error.message
    text = (result.stdout + result.stderr).decode("utf-8", "replace").strip()
    if not result.ok:
        return None, f"{' '.join(argv)} --version: {result.describe()}: {text[-300:]}"
    match = re.search(r"\d+\.\d+(\.\d+)?", text)
    return (match.group(0) if match else text), text


def check_git() -> Check:
    version, raw = _version(["git"])
    if version is None:
        return Check("git", False, raw, "Install git 2.20 or newer (worktrees need it).")
    return Check("git", True, version)


def check_node(config: Config | None = None, where: str = str(CONFIG_PATH)) -> Check:
    """Node.js 22.13 or later, which acpx needs; an older one is fine only where acpx runs on the pinned Node.js
    that npx fetches beside it (no acpx configured or on PATH)."""
    version, raw = _version(["node"])
    if version is None:
        return Check("node", False, raw, f"Install Node.js 22 ({node.MINIMUM_TEXT} or later): acpx runs on it.")
    found = tuple(int(part) for part in version.split("."))
    if found[:2] >= node.MINIMUM:
        return Check("node", True, version)
    older = f"{version} is older than {node.MINIMUM_TEXT}, which acpx {ACPX_VERSION} and agents such as claude need"
    if (config or Config()).acpx_argv() == node.npx_acpx():
        fetched = f"{older}: acpx runs on Node.js {NODE_VERSION}, which npx fetches beside it"
        fix = f"Nothing to do for beflow's runs; for everything else, {node.how_to_get()}."
        return Check("node", True, fetched, fix, warning=True)
    fix = node.how_to_get(where)
    return Check("node", False, older, fix[0].upper() + fix[1:] + ".")


def check_acpx(config: Config, where: str = str(CONFIG_PATH)) -> Check:
    try:
        preflight.check_acpx(config, where)
    except ConfigError as error:
        return Check("acpx", False, error.message.removeprefix("acpx: "), error.fix)
    argv = config.acpx_argv()
    version, raw = _version(argv, timeout=ACPX_PROBE_TIMEOUT)
    shown = " ".join(argv)
    if version is None:
        pinned = f"npm install -g acpx@{ACPX_VERSION}"
        if config.acpx:
            fix = (
                f"Check that `{shown} --version` works; set `acpx` in {where} to the argv that starts acpx "
                f'(e.g. ["npx", "-y", "acpx@{ACPX_VERSION}"]), or remove it and `{pinned}`.'
            )
        else:
            fix = f"Check that `{shown} --version` works; `{pinned}`, or set `acpx` in {where}."
        return Check("acpx", False, raw, fix)
    if version != ACPX_VERSION:
        return Check(
            "acpx",
            True,
            f"{version} via `{shown}` (beflow is tested with {ACPX_VERSION})",
            f'Set "acpx": ["npx", "-y", "acpx@{ACPX_VERSION}"] in {where} to use the tested release.',
            warning=True,
        )
    return Check("acpx", True, f"{version} via `{shown}`")


def check_config(explicit: Path | None) -> tuple[Check, Project | None]:
    try:
        project = load_project(explicit)
    except BeflowError as error:
        # Never `beflow init` here: it refuses to overwrite the file, or with --force destroys it.
        if "no such config file (named by BEFLOW_CONFIG)" in error.message:
            fix = "Fix the path in BEFLOW_CONFIG, or unset BEFLOW_CONFIG."
        elif "no such config file" in error.message:
            fix = "Fix the path given to --config."
        else:
            fix = error.fix or "Fix the file at the line shown (`beflow docs config` explains every message)."
        return Check("config", False, error.message, fix), None
    if project.config_path is None:
        return (
            Check(
                "config",
                True,
                f"no {CONFIG_PATH}: defaults for {project.directory}",
                "Run `beflow init`.",
                True,
            ),
            project,
        )
    return Check("config", True, str(project.config_path)), project


def check_earlier_root_config(project: Project) -> Check | None:
    """A root ``config.json`` of an earlier beflow is no longer read: say so, and how to move it."""
    path = earlier_root_config(project)
    if path is None:
        return None
    if project.config_path is None:
        fix = f"Move it: cd {project.directory} && mkdir -p .beflow && mv config.json {CONFIG_PATH}"
    else:
        fix = f"Merge what you still need into {project.config_name}, then remove {path}."
    return Check("config", True, f"{path} looks like beflow's but is not read: the config is {CONFIG_PATH}", fix, True)


#: Checks that need a loaded project (the tracker, the MCP cascade); later features add theirs here. A check
#: that has nothing to say (its subject is already reported broken) returns None; one may return several lines.
PROJECT_CHECKS: list[Callable[[Project], Check | list[Check] | None]] = []


def check_mcp(project: Project) -> Check:
    """The MCP cascade loads and expands; a problem only warns while injection is off."""
    checked = check_cascade(project, os.environ)
    enabled = project.config.mcp.enabled
    state = "on" if enabled else "off"
    if checked.problems:
        count = len(checked.problems)
        if count == 1:
            detail = f"1 problem: {checked.problems[0].render()}"
        else:
            detail = f"{count} problems:\n" + "\n".join(f"  {p.render()}" for p in checked.problems)
        return Check("mcp", not enabled, detail, "Run `beflow mcp check` to list every problem.", warning=not enabled)
    names = [name for name, _ in checked.servers]
    detail = f"injection {state}, {len(names)} server{'s' if len(names) != 1 else ''}"
    detail += f": {', '.join(names)}" if names else ""
    shadowed = shadowed_global_servers() if enabled and names else None
    if shadowed is not None:
        return Check(
            "mcp",
            True,
            f"{detail}; hides {', '.join(shadowed.names)} of {shadowed.path} during runs",
            "acpx uses a project mcpServers list instead of its global one: add them to .mcp.json to keep them.",
            warning=True,
        )
    return Check("mcp", True, detail)


PROJECT_CHECKS.append(check_mcp)


def run_checks(explicit: Path | None = None) -> list[Check]:
    """Every check, in a fixed order; a broken config still lets the tool checks run."""
    config_check, project = check_config(explicit)
    acpx_check = check_acpx(project.config, project.config_name) if project else check_acpx(Config())
    node_check = check_node(project.config, project.config_name) if project else check_node()
    checks = [check_git(), node_check, acpx_check, config_check]
    earlier = check_earlier_root_config(project) if project else None
    if earlier is not None:
        checks.append(earlier)
    if project is not None:
        for check in PROJECT_CHECKS:
            found = check(project)
            checks.extend(found if isinstance(found, list) else [] if found is None else [found])
        # Last, and told how the agent check went: an agent that does not start is not the sandbox's fault.
        checks.append(check_sandbox(project, any(c.name == "agent" and c.ok for c in checks)))
    return checks


def check_tracker(project: Project) -> Check:
    """The tracker opens; for local issues: the directory, how many by status, and every file that does not parse."""
    from beflow.app import engine, open_tracker

    try:
        engine(project)
    except BeflowError:  # the engine's check says why, with the fix: said once
        return Check("tracker", False, "not opened: the engine cannot open (see engine, below)")
    try:
        tracker = open_tracker(project)
        listing = tracker.listing()
    except BeflowError as error:
        return Check("tracker", False, error.message, error.fix)
    counts = {s.value: sum(1 for i in listing.issues if i.status == s) for s in Status}
    counts = {status: n for status, n in counts.items() if n}
    total = len(listing.issues)
    detail = f"{tracker.description}: {total} issue{'s' if total != 1 else ''}"
    if counts:
        detail += " (" + ", ".join(f"{n} {status}" for status, n in counts.items()) + ")"
    if listing.problems:
        lines = "\n".join(f"  {p.render()}" for p in listing.problems)
        return Check(
            "tracker",
            False,
            f"{detail}; {_problems_in_files(listing.problems)}:\n{lines}",
            "Fix each file at that line (`beflow docs trackers` describes the format).",
        )
    if isinstance(tracker, SetsUpLabels):
        try:
            absent = tracker.missing_labels()
        except BeflowError as error:
            return Check("tracker", False, error.message, error.fix)
        if absent:
            return Check(
                "tracker",
                True,
                f"{detail}; labels not created yet: {', '.join(absent)}",
                "`beflow init --labels` creates them (or beflow does on its first write).",
                warning=True,
            )
    return Check("tracker", True, detail)


PROJECT_CHECKS.append(check_tracker)


def check_access(project: Project) -> list[Check]:
    """What the tracker's and the code host's services say beflow may do there (the token's scopes, the project,
    the right to push), from those that can say it (:class:`~beflow.trackers.base.ChecksAccess`); a finding both
    make is shown once. Nothing when the tracker does not open: its own line says why."""
    from beflow.app import engine, open_code_host, open_tracker

    try:
        engine(project)
        tracker = open_tracker(project)
    except BeflowError:
        return []
    findings = tracker.access_checks() if isinstance(tracker, ChecksAccess) else []
    checks = []
    try:
        host = open_code_host(project, tracker)
    except BeflowError as error:
        host = None
        checks.append(Check("code_host", False, error.message, error.fix))
    if isinstance(host, ChecksAccess):
        findings += [finding for finding in host.access_checks() if finding not in findings]
    return [Check(f.name, f.ok, f.detail, f.fix, f.warning) for f in findings] + checks


PROJECT_CHECKS.append(check_access)


def _problems_in_files(problems: list[FileProblem]) -> str:
    """``1 problem in 1 file``, ``3 problems in 2 files``."""
    files = len({p.path for p in problems})
    return f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in {files} file{'s' if files != 1 else ''}"


def check_runs(project: Project) -> Check:
    """What every run would hit: the git repository, worktrees.base and dir, acpx, the agent, the prompt, MCP."""
    found = preflight.problems(project)
    if found:
        fixes = list(dict.fromkeys(e.fix or f"Fix {project.config_name} as the message says." for e in found))
        if len(found) == 1:
            return Check("runs", False, found[0].message, fixes[0])
        lines = "\n".join(f"  {line}" for error in found for line in error.message.splitlines())
        return Check("runs", False, f"{len(found)} problems:\n{lines}", " ".join(fixes))
    agent = project.config.agent_label()
    return Check("runs", True, f"agent {agent!r} through acpx, in worktrees under {project.worktrees_dir}")


PROJECT_CHECKS.append(check_runs)

#: The project's latest runs ``check_costs`` reads, and how many of the agent's must have reported no cost.
COST_RUNS = 20
COST_SILENT = 3


def check_costs(project: Project) -> Check | None:
    """A cost budget against an agent whose recent runs all reported no cost (nothing is estimated) holds nothing:
    worth a warning, from the latest run records alone (none read beyond :data:`COST_RUNS`)."""
    limits = project.config.limits
    budgets = [name for name in ("cost_per_run", "cost_per_day") if getattr(limits, name) is not None]
    if not budgets:
        return None
    agent = project.config.agent_label()
    runs = [r for r in RunStore(project.directory).records(limit=COST_RUNS) if r.agent == agent and r.finished]
    if len(runs) < COST_SILENT or any(r.usage is not None and r.usage.cost is not None for r in runs):
        return None
    named = " and ".join(f"limits.{name}" for name in budgets)
    return Check(
        "limits",
        True,
        f"the last {len(runs)} runs of {agent!r} reported no cost: {named} held nothing against them",
        "Use an agent that reports its cost over ACP (usage_update), or hold its runs with limits.tokens_per_run.",
        warning=True,
    )


PROJECT_CHECKS.append(check_costs)


def check_agent_env(project: Project) -> Check:
    """What an agent would get of this environment: names only, never a value (docs/safety.md)."""
    environment = agent_env.for_agent(project.config)
    passed = sorted(environment.env)
    keys = [name for name in agent_env.agent_keys(project.config) if name in environment.env]
    withheld = ", ".join(f"{name} ({why})" for name, why in environment.withheld.items()) or "nothing"
    detail = (
        f"an agent gets {len(passed)} variables: {', '.join(passed)}\n"
        f"  its login variables among them: {', '.join(keys) or 'none set'}\n"
        f"  withheld: {withheld}"
    )
    return Check("agent env", True, detail)


PROJECT_CHECKS.append(check_agent_env)

#: Characters a webhook secret should have at least: it is all that lets a delivery in.
WEBHOOK_SECRET_MIN = 16


def check_webhooks(project: Project) -> Check | None:
    """The webhooks' secrets (docs/webhooks.md): each variable ``webhooks.secret_env`` names is set (else that
    forge's deliveries are all refused), long enough, and of a forge the project uses (else they do nothing)."""
    named = project.config.webhooks.secret_env.named()
    if not named:
        return None
    used = project.config.webhook_forges()
    unset = [
        f"webhooks.secret_env.{forge} names ${name}, which is not set"
        for forge, name in named.items()
        if not os.environ.get(name, "").strip()
    ]
    if unset:
        return Check(
            "webhooks",
            False,
            "; ".join(unset),
            "Export the secret the forge signs its deliveries with in that variable.",
        )
    short = [forge for forge, name in named.items() if len(os.environ[name].strip()) < WEBHOOK_SECRET_MIN]
    unused = [forge for forge in named if forge not in used]
    detail = f"POST /hooks/{{{','.join(named)}}} of `beflow watch --http` wakes the watch"
    if short or unused:
        said = [f"{', '.join(short)}: the secret is shorter than {WEBHOOK_SECRET_MIN} characters"] if short else []
        said += [f"{', '.join(unused)}: neither the tracker's nor the code host's forge: ignored"] if unused else []
        fix = "Use a long random secret (openssl rand -hex 32); name only the forges of the tracker and code host."
        return Check("webhooks", True, f"{detail}; " + "; ".join(said), fix, warning=True)
    return Check("webhooks", True, detail)


PROJECT_CHECKS.append(check_webhooks)


def check_engine(project: Project) -> Check | None:
    """The engine's service answers (a fleet's Temporal service: docs/fleet.md); the default engine needs nothing."""
    from beflow.app import engine

    try:
        answer = engine(project).probe(project)
    except BeflowError as error:  # (what the engine needs is not installed: how to install it)
        return Check("engine", False, error.message, error.fix)
    if answer is None:
        return None
    ok, detail, fix = answer
    return Check("engine", ok, detail, fix)


PROJECT_CHECKS.append(check_engine)


def check_agent_starts(project: Project) -> Check | None:
    """Start the configured agent through acpx (initialize and a new session, no prompt): is it installed, and
    logged in? Skipped when acpx or the agent cannot be found at all (the runs check says so)."""
    try:
        preflight.check_acpx(project.config)
        preflight.check_agent(project)
    except BeflowError:
        return None
    probe = agents.probe(project.config, timeout=AGENT_PROBE_TIMEOUT)
    return Check("agent", probe.ok, probe.detail, probe.fix)


PROJECT_CHECKS.append(check_agent_starts)


def check_sandbox(project: Project, agent_starts: bool = True) -> Check:
    """Whether runs are sandboxed here, and why (``sandbox.enabled``; ``"auto"``: whether bwrap starts on this
    machine). When they are: the sandbox starts, the agent starts in it and reaches its model's host through the
    proxy (beflow/sandbox/check.py). ``agent_starts`` false: the agent check failed (not logged in, say) or found no
    agent to start; the agent is not started in the sandbox to fail there again, in words that blame the sandbox."""
    from beflow.sandbox import check, choice  # (loaded by doctor alone: bwrap is started only here)

    chosen = choice.choose(project.config)
    if not chosen.sandboxed and chosen.notice is None:  # false: the user's choice, said as it is
        return Check("sandbox", True, f"off ({chosen.why}): an agent runs as you, unconfined (beflow docs safety)")
    if not chosen.sandboxed:
        how = f"Make bwrap start here (beflow docs safety, #the-sandbox), or choose: {choice.HOW_TO_CHOOSE}."
        return Check("sandbox", True, f"off ({chosen.why}): runs are not sandboxed", how, warning=True)
    ok, detail, fix = check.check(project, AGENT_PROBE_TIMEOUT, agent=agent_starts)
    if ok and not agent_starts:
        how = "Make the agent start (see above); then doctor starts it inside the sandbox too."
        return Check("sandbox", True, f"on ({chosen.why}): {detail}", how, warning=True)
    return Check("sandbox", ok, f"on ({chosen.why}): {detail}", fix)
