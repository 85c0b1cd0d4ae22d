"""The engine's settings, its secret, and what a project on the default engine never loads (no server needed)."""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from beflow.agent.agent_env import for_agent, held_secrets
from beflow.config import Config, LocalEngineSettings, TemporalEngineSettings, load_config_file
from beflow.errors import ConfigError
from beflow.fleet.remote import Unreachable, connect
from beflow.fleet.shapes import workflow_id

TEMPORAL = {"kind": "temporal", "address": "temporal.internal:7233", "namespace": "team", "task_queue": "agents"}


def test_the_default_engine_is_this_machine_and_temporal_takes_its_settings() -> None:
    assert isinstance(Config().engine, LocalEngineSettings)
    engine = Config.model_validate({"engine": {**TEMPORAL, "tls": True, "api_key_env": "TEMPORAL_CLOUD"}}).engine
    assert isinstance(engine, TemporalEngineSettings)
    assert (engine.address, engine.namespace, engine.task_queue, engine.tls) == (
        "temporal.internal:7233",
        "team",
        "agents",
        True,
    )
    assert engine.heartbeat == 30.0 and engine.secret_env() == ["TEMPORAL_CLOUD"]


@pytest.mark.parametrize(
    ("engine", "said"),
    [
        ({"kind": "temporal", "task_queue": "two words"}, "engine.task_queue"),
        ({"kind": "temporal", "address": "no-port"}, "engine.address"),
        ({"kind": "temporal", "heartbeat": 0}, "engine.heartbeat"),
        ({"kind": "temporal", "api_key_env": "not a name"}, "engine.api_key_env"),
        ({"kind": "celery"}, "engine"),
    ],
)
def test_a_bad_engine_setting_is_an_error_naming_the_file_and_the_key(
    engine: dict[str, object], said: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"engine": engine}))
    with pytest.raises(ConfigError) as error:
        load_config_file(path)
    assert str(path) in error.value.message and said in error.value.message


def test_the_api_key_is_withheld_from_the_agent_and_masked_even_when_agent_env_passes_it() -> None:
    config = Config.model_validate(
        {"engine": {**TEMPORAL, "api_key_env": "TEMPORAL_CLOUD"}, "agent_env": {"pass": ["TEMPORAL_CLOUD"]}}
    )
    environ = {"TEMPORAL_CLOUD": "tcld-secret-41c2", "PATH": "/usr/bin"}
    environment = for_agent(config, environ)
    assert "TEMPORAL_CLOUD" not in environment.env and "TEMPORAL_CLOUD" in environment.withheld
    assert held_secrets(config, environ) == ["tcld-secret-41c2"]


def test_the_encryption_key_is_withheld_from_the_agent_and_masked() -> None:
    config = Config.model_validate({"engine": {**TEMPORAL, "encryption_key_env": "FLEET_KEY"}})
    key = base64.b64encode(b"k" * 32).decode()
    environment = for_agent(config, {"FLEET_KEY": key, "PATH": "/usr/bin"})
    assert "FLEET_KEY" not in environment.env and "FLEET_KEY" in environment.withheld
    assert held_secrets(config, {"FLEET_KEY": key}) == [key]


@pytest.mark.parametrize(
    ("value", "said"),
    [(None, "is not set"), ("not base64!", "does not hold a key"), (base64.b64encode(b"short").decode(), "does not")],
)
def test_an_encryption_key_that_is_unset_or_no_key_is_a_configuration_error(
    value: str | None, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from beflow.fleet.codec import key_of

    if value is None:
        monkeypatch.delenv("FLEET_KEY", raising=False)
    else:
        monkeypatch.setenv("FLEET_KEY", value)
    settings = TemporalEngineSettings(kind="temporal", encryption_key_env="FLEET_KEY")
    with pytest.raises(ConfigError, match=rf"engine.encryption_key_env: \$FLEET_KEY {said}") as error:
        key_of(settings)
    assert "base64" in (error.value.fix or "") and (value is None or value not in error.value.message)


def test_payloads_are_sealed_opened_with_the_same_key_and_refused_with_another() -> None:
    from temporalio.api.common.v1 import Payload

    from beflow.fleet.codec import SealingFailed, data_converter

    plain = Payload(metadata={"encoding": b"json/plain"}, data=b'{"worker": "w1", "run_id": "r-7"}')
    mine, theirs = data_converter(b"a" * 32).payload_codec, data_converter(b"b" * 32).payload_codec
    assert mine is not None and theirs is not None
    (sealed,) = asyncio.run(mine.encode([plain]))
    assert b"r-7" not in sealed.SerializeToString() and sealed.metadata["encoding"] == b"binary/encrypted"
    assert asyncio.run(mine.decode([sealed])) == [plain]
    assert asyncio.run(mine.decode([plain])) == [plain]  # stored before the fleet had a key
    with pytest.raises(SealingFailed, match="another key"):
        asyncio.run(theirs.decode([sealed]))
    altered = Payload(metadata=sealed.metadata, data=sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))
    with pytest.raises(SealingFailed, match="altered"):
        asyncio.run(mine.decode([altered]))


def test_an_unreachable_service_is_a_clear_error_naming_it() -> None:
    settings = TemporalEngineSettings(kind="temporal", address="127.0.0.1:1")
    with pytest.raises(Unreachable) as error:
        asyncio.run(connect(settings))
    assert "cannot reach Temporal at 127.0.0.1:1" in error.value.message and "beflow temporal dev" in (
        error.value.fix or ""
    )


def test_an_unset_api_key_variable_is_a_configuration_error() -> None:
    settings = TemporalEngineSettings(kind="temporal", api_key_env="BEFLOW_TEST_NO_SUCH_KEY")
    with pytest.raises(ConfigError, match=r"engine.api_key_env: \$BEFLOW_TEST_NO_SUCH_KEY is not set"):
        asyncio.run(connect(settings))


def test_an_issues_workflow_id_names_its_tracker_and_key() -> None:
    assert workflow_id("github:octo/hello", "17") == "beflow/github:octo/hello/17"


def test_a_runs_longest_time_on_a_fleet_holds_a_best_of_n_whose_candidates_and_reviewer_run_in_turn() -> None:
    from beflow.config import Project
    from beflow.fleet.shapes import run_timeout

    def longest(**config: Any) -> float:
        settings = Config.model_validate({"engine": TEMPORAL, "timeout": 100, **config})
        return run_timeout(Project(config=settings, config_path=None, directory=Path()))

    assert longest(attempts={"max": 1}) == 100 + 600  # (no best of N possible: one run)
    assert longest(attempts={"max": 3}) == 3 * (100 + 600)  # (a label may ask for three, on a worker of one lane)
    assert longest(attempts={"max": 3, "judge": {"reviewer": "claude"}}) == 4 * (100 + 600)


def test_beflow_on_the_default_engine_never_loads_the_temporal_sdk() -> None:
    code = (
        "import sys, beflow.cli, beflow.cli.watch, beflow.run.runner, beflow.watch.dispatcher, beflow.trackers;"
        "import beflow.config;"
        "print(sorted(m for m in sys.modules if m.startswith('temporalio')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_watch_on_a_fleet_refuses_http_saying_where_the_runs_are(beflow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"engine": {"kind": "temporal", "address": "127.0.0.1:1"}}))
    result = beflow("--config", str(path), "watch", "--http", "0")
    assert result.exit_code == 2
    assert "--http" in result.stderr and "Temporal's web UI" in result.stderr


def test_doctor_says_when_the_fleets_service_does_not_answer(tmp_path: Path) -> None:
    from beflow.config import Project
    from beflow.doctor import check_engine

    config = Config.model_validate({"engine": {"kind": "temporal", "address": "127.0.0.1:1"}})
    check = check_engine(Project(config=config, config_path=None, directory=tmp_path))
    assert check is not None and not check.ok
    assert "cannot reach Temporal at 127.0.0.1:1" in check.detail and "beflow temporal dev" in (check.fix or "")
    assert check_engine(Project(config=Config(), config_path=None, directory=tmp_path)) is None


def test_a_worker_on_the_embedded_engine_says_it_needs_the_temporal_one(beflow, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "config.json"
    path.write_text("{}")
    result = beflow("--config", str(path), "worker")
    assert result.exit_code == 2
    assert "this needs the Temporal engine" in result.stderr and '"engine": {"kind": "temporal"' in result.stderr


@pytest.fixture
def without_the_sdk(repo: Path, tmp_path: Path) -> dict[str, str]:
    """``repo`` as a fleet with one ready issue, and an environment where the Temporal SDK does not import (a
    default install: a package of that name on PYTHONPATH that fails as a missing one does)."""
    from beflow.app import open_tracker
    from beflow.config import load_project

    config = repo / ".beflow" / "config.json"
    config.parent.mkdir()
    config.write_text(json.dumps({"acpx": [str(tmp_path / "no-acpx")], "sandbox": {"enabled": False}}))
    assert open_tracker(load_project(config)).create(title="first", body="").key == "1"
    config.write_text(
        json.dumps({"engine": {"kind": "temporal", "address": "127.0.0.1:1"}, "acpx": [str(tmp_path / "no-acpx")]})
    )
    package = tmp_path / "no-sdk" / "temporalio"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'temporalio'\", name='temporalio')\n"
    )
    return {"PYTHONPATH": str(package.parent)}


#: Every command that opens the engine, each refused the same way without the SDK.
ENGINE_COMMANDS = [["watch"], ["watch", "--once"], ["issues", "show", "1"], ["--auto", "1"], ["worker"]]


@pytest.mark.parametrize("command", ENGINE_COMMANDS, ids=" ".join)
def test_a_fleet_without_the_temporal_sdk_is_refused_by_every_command_saying_how_to_install_it(
    beflow_process: Any, repo: Path, without_the_sdk: dict[str, str], isolated_home: Path, command: list[str]
) -> None:
    process = beflow_process(*command, cwd=repo, env=without_the_sdk)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 2, out + err
    config = repo / ".beflow" / "config.json"
    first, fix = err.splitlines()[-2:]
    assert first == (
        f'error: {config}: engine.kind is "temporal", and the Temporal engine needs the Temporal SDK (beflow\'s '
        "`temporal` extra), which is not installed here (No module named 'temporalio')"
    )
    assert fix.startswith("fix: Install it with beflow's `temporal` extra: `pip install '.[temporal]'` in your clone")
    assert "Traceback" not in err and "failed unexpectedly" not in err
    assert not (isolated_home / "logs").exists()  # no crash log


def test_doctor_on_a_fleet_without_the_temporal_sdk_fails_the_engine_check_with_the_fix(
    beflow_process: Any, repo: Path, without_the_sdk: dict[str, str]
) -> None:
    process = beflow_process("doctor", cwd=repo, env=without_the_sdk)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 1, out + err
    lines = (out + err).splitlines()
    engine = next(n for n, line in enumerate(lines) if line.startswith("✗ engine:"))
    assert 'engine.kind is "temporal"' in lines[engine] and "not installed here" in lines[engine]
    assert "pip install '.[temporal]'" in lines[engine + 1] and "fix:" in lines[engine + 1]
    assert "✗ tracker: not opened: the engine cannot open (see engine, below)" in lines
    assert "Traceback" not in err and "Temporal at 127.0.0.1:1" not in out


def test_a_run_whose_activity_the_fleet_no_longer_has_pending_proves_nothing_and_writes_nothing(
    temporal_server: str, tmp_path: Path
) -> None:
    """The proof every write of a fleet's run makes first: its activity is among its workflow's pending ones. A
    workflow that has none (here: no worker ever took its first task) and a service that does not answer both
    refuse, saying why."""
    import uuid
    from types import SimpleNamespace

    from temporalio.client import Client

    from beflow.fleet.claims import FleetClaims
    from beflow.fleet.shapes import WORKFLOW, IssueStart
    from beflow.trackers.claims import ClaimLost, FileClaims

    workflow = f"beflow/test:proof/{uuid.uuid4().hex[:8]}"

    async def started() -> str:
        client = await Client.connect(temporal_server)
        handle = await client.start_workflow(
            WORKFLOW, IssueStart(key="1", heartbeat=2, run_timeout=60), id=workflow, task_queue="nobody-polls"
        )
        return handle.result_run_id or ""

    run_id = asyncio.run(started())
    info = SimpleNamespace(workflow_id=workflow, workflow_run_id=run_id, activity_id="2", attempt=1)
    claims = FleetClaims(
        TemporalEngineSettings(kind="temporal", address=temporal_server), "test:proof", FileClaims(tmp_path)
    )
    with pytest.raises(ClaimLost, match="the fleet gave the run of issue 1 to another worker"):
        claims.proof_of("1", info)()  # type: ignore[arg-type]
    gone = FleetClaims(
        TemporalEngineSettings(kind="temporal", address="127.0.0.1:1"), "test:proof", FileClaims(tmp_path)
    )
    with pytest.raises(ClaimLost, match="Temporal did not say whether the run of issue 1 is still this worker's"):
        gone.proof_of("1", info)()  # type: ignore[arg-type]

    async def ended() -> None:
        await (await Client.connect(temporal_server)).get_workflow_handle(workflow).terminate("counted")

    asyncio.run(ended())


def test_no_doc_nor_hint_says_beflow_temporal_which_installs_nothing_from_a_clone() -> None:
    """beflow is installed from its clone: ``pip install 'beflow[temporal]'`` would look for it on PyPI. Every page,
    the README and every message of the code say the commands that work there (``pyproject.toml``'s own test extra
    names itself that way, which pip does resolve)."""
    from beflow.fleet.remote import INSTALL_EXTRA
    from tests.conftest import REPO_ROOT

    read = [REPO_ROOT / name for name in ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "config.example.json")]
    read += [path for path in (REPO_ROOT / "beflow").rglob("*") if path.suffix in {".py", ".md", ".json", ".j2"}]
    saying = [path for path in read if "beflow[temporal]" in path.read_text()]
    assert saying == []
    assert "pip install '.[temporal]'" in (REPO_ROOT / "docs" / "fleet.md").read_text()
    for command in ("pip install '.[temporal]'", "pipx install --force '.[temporal]'", "uv tool install --reinstall"):
        assert command in INSTALL_EXTRA
