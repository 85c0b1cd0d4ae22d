"""The sandbox's pieces on their own: what is mounted where (pure), the bwrap command line, the proxy's allowlist,
the presets table and the config's errors."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from beflow.config import Config, SandboxPreset
from beflow.errors import ConfigError
from beflow.sandbox import bwrap, policy
from beflow.sandbox.box import describe_blocked, preset_name
from beflow.sandbox.presets import PRESETS, preset
from beflow.sandbox.proxy import allowed
from beflow.validation import validate

HOME = Path("/home/me")
SCRATCH = Path("/tmp/beflow-sandbox-x")
#: What the preset paths are in that home: ~/.codex and ~/.npm directories, ~/.claude.json a file.
FOUND = {HOME / ".codex": "dir", HOME / ".npm": "dir", HOME / ".claude": "dir", HOME / ".claude.json": "file"}
LAYOUT = policy.Layout(
    home=HOME,
    worktree=HOME / ".beflow/worktrees/app/7",
    worktree_git=HOME / "app/.git/worktrees/7",
    common_git=HOME / "app/.git",
    checkout=HOME / "app",
    acpx_home=Path("/tmp/beflow-sandbox-x/acpx"),
    run_objects=HOME / "app/.git/worktrees/7/beflow-objects",
    preset=preset("codex"),
    presets_own=policy.per_run(preset("codex"), HOME, HOME / "app", SCRATCH, FOUND.get),
    read=["~/datasets"],
    write=["/srv/cache"],
)


def where(mounts: list[policy.Mount], target: Path) -> list[str]:
    """The kinds mounted at ``target``, in order: the last one is what the agent sees."""
    return [m.kind + ("?" if m.optional else "") for m in mounts if m.target == target]


@pytest.mark.parametrize(
    ("target", "kinds"),
    [
        (Path("/"), ["ro"]),
        (HOME, ["tmpfs"]),  # nothing of the home but what comes below
        (Path("/tmp"), ["tmpfs"]),
        (Path("/run"), ["tmpfs"]),  # the system's sockets
        (HOME / "app", ["ro"]),  # the user's checkout
        (HOME / "app/.git", ["ro"]),  # config, hooks, refs
        (HOME / "app/.git/objects", ["rw"]),  # what a commit writes: the run's own objects (below)
        (HOME / "app/.git/objects/info", ["ro"]),  # their alternates: beflow's
        (policy.USER_OBJECTS, ["ro"]),  # the user's objects, read-only
        (HOME / "app/.git/worktrees/7/beflow-objects", ["ro?"]),  # the run's objects, where they lie: not moved
        (HOME / "app/.git/worktrees/7", ["rw"]),  # the worktree's own HEAD, index, logs
        (HOME / "app/.git/worktrees/7/commondir", ["ro?"]),  # but not what ties it to the repository
        (HOME / "app/.git/worktrees/7/gitdir", ["ro?"]),
        (HOME / ".beflow/worktrees/app/7/.git", ["ro?"]),
        (HOME / ".beflow/worktrees/app/7", ["rw"]),
        (HOME / ".codex", ["overlay"]),  # the preset's auth and config: the run's own overlay
        (HOME / ".npm", ["tmp-overlay"]),  # npx's cache (acpx's adapters): writes gone with the sandbox
        (HOME / "datasets", ["ro?"]),  # sandbox.read
        (Path("/srv/cache"), ["rw?"]),  # sandbox.write
        (HOME / ".acpx", ["rw"]),  # the run's private acpx state
        (HOME / ".acpx/config.json", ["ro?"]),  # the user's acpx config, read-only
        (HOME / ".ssh", []),
    ],
)
def test_what_the_sandbox_mounts(target: Path, kinds: list[str]) -> None:
    assert where(policy.mounts(LAYOUT), target) == kinds


def test_later_mounts_cover_earlier_ones_in_the_right_order() -> None:
    targets = [m.target for m in policy.mounts(LAYOUT)]
    assert targets.index(HOME) < targets.index(HOME / "app") < targets.index(HOME / "app/.git/objects")
    assert targets.index(HOME / "app/.git/objects") < targets.index(HOME / "app/.git/objects/info")
    assert targets.index(HOME / ".acpx") < targets.index(HOME / ".acpx/config.json")


def test_the_agent_writes_its_objects_into_the_runs_own_directory_and_reads_the_users_read_only() -> None:
    mounts = {m.target: m for m in policy.mounts(LAYOUT)}
    assert mounts[HOME / "app/.git/objects"].source == LAYOUT.run_objects
    assert mounts[HOME / "app/.git/objects/info"].source == HOME / "app/.git/worktrees/7/beflow-objects/info"
    assert mounts[policy.USER_OBJECTS].source == HOME / "app/.git/objects"
    without = policy.mounts(dataclasses.replace(LAYOUT, run_objects=None))
    assert where(without, HOME / "app/.git/objects") == [] and where(without, HOME / "app/.git") == ["ro"]


def test_the_private_acpx_state_comes_from_the_run_and_the_config_from_the_user() -> None:
    mounts = {m.target: m for m in policy.mounts(LAYOUT)}
    assert mounts[HOME / ".acpx"].source == Path("/tmp/beflow-sandbox-x/acpx")
    assert mounts[HOME / ".acpx/config.json"].source == HOME / ".acpx/config.json"


def test_the_bwrap_command_line() -> None:
    argv = bwrap.argv(Path("/bin/bwrap"), policy.mounts(LAYOUT), ["acpx", "exec"], cwd=LAYOUT.worktree, env={"A": "1"})
    assert argv[:5] == ["sh", "-c", 'trap "" TERM; exec "$@"', "sh", "/bin/bwrap"]
    for flag in ("--unshare-user", "--unshare-net", "--unshare-pid", "--die-with-parent"):
        assert flag in argv
    at = argv.index("--cap-drop")
    assert argv[at : at + 2] == ["--cap-drop", "ALL"]  # as root too: no capability inside
    assert "--new-session" not in argv  # (it would take acpx out of the group a run's SIGTERM is sent to)
    assert argv[-3:] == ["--", "acpx", "exec"]
    at = argv.index("--setenv")
    assert argv[at : at + 3] == ["--setenv", "A", "1"]
    codex, upper = str(HOME / ".codex"), str(SCRATCH / "presets/0/upper")
    at = argv.index("--overlay")
    assert argv[at - 2 : at + 4] == ["--overlay-src", codex, "--overlay", upper, str(SCRATCH / "presets/0/work"), codex]
    at = argv.index("--tmp-overlay")
    assert argv[at - 2 : at + 2] == ["--overlay-src", str(HOME / ".npm"), "--tmp-overlay", str(HOME / ".npm")]


def test_a_presets_writable_paths_are_the_runs_own_and_only_its_login_files_come_back() -> None:
    """A directory holding a login file is an overlay whose writes beflow reads after the run; any other (a
    cache, settings) an overlay whose writes nobody sees; a file a copy; what does not exist, nothing."""
    claude = policy.per_run(preset("claude"), HOME, HOME / "app", SCRATCH, FOUND.get)
    assert claude == [
        policy.PerRun(HOME / ".claude", "overlay", SCRATCH / "presets/0/upper", (".credentials.json",)),
        policy.PerRun(HOME / ".claude.json", "copy", SCRATCH / "presets/1/.claude.json"),
        policy.PerRun(HOME / ".npm", "tmp-overlay"),
    ]
    assert [m.kind for m in map(policy.PerRun.mount, claude)] == ["overlay", "rw", "tmp-overlay"]
    assert claude[1].mount().source == SCRATCH / "presets/1/.claude.json"  # never the user's own file
    assert policy.per_run(preset("gemini"), HOME, HOME / "app", SCRATCH, FOUND.get) == [
        policy.PerRun(HOME / ".npm", "tmp-overlay", None)  # no ~/.gemini: the agent writes in the emptied home
    ]
    for name in PRESETS:  # every login file sits directly in one of the preset's writable directories
        chosen = preset(name)
        assert all(str(Path(login).parent) in chosen.write for login in chosen.logins), name


@pytest.mark.parametrize(
    ("host", "port", "rules", "expected"),
    [
        ("api.openai.com", 443, ["api.openai.com"], True),
        ("API.OpenAI.com.", 443, ["api.openai.com"], True),
        ("api.openai.com", 80, ["api.openai.com:443"], False),
        ("127.0.0.1", 8080, ["127.0.0.1:8080"], True),
        ("127.0.0.1", 8081, ["127.0.0.1:8080"], False),
        ("a.b.example.org", 443, ["*.example.org"], True),
        ("example.org", 443, ["*.example.org"], False),
        ("evilexample.org", 443, ["*.example.org"], False),
        ("example.org", 443, [], False),
    ],
)
def test_the_proxys_allowlist(host: str, port: int, rules: list[str], expected: bool) -> None:
    assert allowed(host, port, rules) is expected


def test_blocked_connections_are_said_by_host() -> None:
    assert describe_blocked({}) is None
    said = describe_blocked({"example.org": 3, "x.test": 1})
    assert said == "blocked: 3 connections to example.org, 1 connection to x.test"


def test_every_preset_has_a_config_name_and_back() -> None:
    names = set(SandboxPreset.__args__) - {"agent"}  # type: ignore[attr-defined]
    assert names == set(PRESETS)
    for name in PRESETS:
        assert preset(name).hosts and (preset(name).write or preset(name).read)


def test_the_preset_follows_the_agent_unless_named() -> None:
    assert preset_name(Config.model_validate({"agent": "claude"})) == "claude"
    assert preset_name(Config.model_validate({"agent": {"command": "my-agent"}})) is None
    assert preset_name(Config.model_validate({"agent": "claude", "sandbox": {"preset": "gemini"}})) == "gemini"
    assert preset_name(Config.model_validate({"agent": "claude", "sandbox": {"preset": None}})) is None


@pytest.mark.parametrize(
    ("sandbox", "field"),
    [
        ({"enabled": "yes"}, "sandbox.enabled"),
        ({"hosts": ["https://example.org"]}, "sandbox.hosts.0"),
        ({"preset": "vim"}, "sandbox.preset"),
        ({"read": [""]}, "sandbox.read.0"),
        ({"network": True}, "sandbox.network"),
    ],
)
def test_bad_sandbox_config_names_the_file_and_field(sandbox: dict[str, object], field: str, tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    with pytest.raises(ConfigError) as raised:
        validate(Config, {"sandbox": sandbox}, path=path, text=json.dumps({"sandbox": sandbox}))
    assert str(path) in raised.value.message and field in raised.value.message


def test_injected_http_servers_are_allowed_hosts() -> None:
    from beflow.mcp.acp import AcpRemote, AcpStdio
    from beflow.sandbox.box import server_hosts

    servers = [
        AcpRemote(name="docs", type="http", url="https://mcp.example.com/mcp", headers=[]),
        AcpRemote(name="local", type="sse", url="http://127.0.0.1:8123/sse", headers=[]),
        AcpStdio(name="tools", command="tools-mcp", args=[], env=[]),
    ]
    assert server_hosts(servers) == ["mcp.example.com:443", "127.0.0.1:8123"]


def test_beflows_excludes_file_is_among_the_pinned() -> None:
    from beflow.repository.excludes import EXCLUDES_NAME

    assert EXCLUDES_NAME in policy.PINNED


def test_acpx_run_through_npx_brings_npms_cache_and_registry_even_for_a_raw_agent() -> None:
    assert preset(None) == preset(None, npx=False) and not preset(None).hosts
    through_npx = preset(None, npx=True)
    assert through_npx.hosts == ("registry.npmjs.org",) and through_npx.write == ("~/.npm",)
    assert preset("codex", npx=True) == preset("codex")  # (a preset has npx's needs already)


def test_the_run_records_are_hidden_and_beflows_own_paths_read_only_whatever_is_writable() -> None:
    """Even with the checkout and BEFLOW_HOME made writable (``sandbox.write``), the project's run records are an
    empty read-only directory but for the run's prompt file, and the channel's directory is read-only."""
    records, prompt, channel = HOME / "app/.beflow/runs", HOME / "app/.beflow/runs/r1/prompt.md", HOME / ".beflow/c/x"
    layout = dataclasses.replace(
        LAYOUT, records=records, own=[prompt, channel], write=["~/app", "~/.beflow"], preset=preset(None)
    )
    mounts = policy.mounts(layout)
    assert where(mounts, records) == ["tmpfs", "remount-ro"]
    assert where(mounts, prompt) == ["ro"] and where(mounts, channel) == ["ro"]
    targets = [m.target for m in mounts]
    assert targets.index(HOME / ".beflow") < targets.index(records) < targets.index(prompt) < len(targets) - 1
    assert targets.index(HOME / ".beflow") < targets.index(channel)
    assert not any(m.kind == "rw" and m.target in (records, *records.parents) for m in mounts[targets.index(records) :])
    argv = bwrap.argv(Path("/bin/bwrap"), mounts, ["acpx"], cwd=LAYOUT.worktree)
    at = argv.index("--remount-ro")
    assert argv[at + 1] == str(records) and argv.index(str(prompt)) < at


def test_a_program_that_did_not_start_is_told_which_hidden_path_it_needed(tmp_path: Path) -> None:
    """Node's words for acpx's dependency beside it in a hidden ``node_modules``, a script in the home: the
    sandbox names the directory it hides; a path it shows, or one that does not exist, it does not."""
    import os

    import anyio

    from beflow.sandbox.box import Sandbox

    home = Path(os.environ["HOME"])
    tree = home / "tools" / "acpx" / "node_modules"
    (tree / "commander").mkdir(parents=True)
    (tree / "acpx" / "dist").mkdir(parents=True)
    (tree / "acpx" / "dist" / "cli.js").write_text("")
    (home / "agents").mkdir()
    (home / "agents" / "agent.py").write_text("")
    worktree = tmp_path / "worktree"
    worktree.mkdir()
    box = Sandbox(Config.model_validate({"sandbox": {"enabled": True}}), worktree=worktree, checkout=worktree)
    node = f"Error [ERR_MODULE_NOT_FOUND]: Cannot find package 'commander' imported from {tree}/acpx/dist/cli.js"

    async def explained(*said: str) -> list[str | None]:
        async with box.opened():
            return [box.explain(text) for text in said]

    assert anyio.run(
        explained, node, f"python3: can't open file '{home}/agents/agent.py': [Errno 2]", "/usr/bin/x", f"{home}/none"
    ) == [
        "the sandbox hides ~/tools/acpx/node_modules: add it to sandbox.read if the agent needs it",
        "the sandbox hides ~/agents: add it to sandbox.read if the agent needs it",
        None,
        None,
    ]
