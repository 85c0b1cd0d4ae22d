"""The managed ``.acpxrc.json``: what is written, the journal, and exact restore on every way out."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from beflow.errors import BeflowError, LockedError, NotFoundError
from beflow.mcp.acp import AcpServer
from beflow.mcp.inject import Injection, managed_acpxrc
from beflow.mcp.journal import JournalEntry, Restored, damaged_dir, journal_dir
from beflow.mcp.orphans import recover_orphans
from beflow.paths import ACPXRC, beflow_home, path_key
from beflow.system import liveness
from beflow.system.journal import SAVED_DAYS

#: The servers as ``.acpxrc.json`` holds them, and as a run hands them over.
WIRE = [
    {"name": "codegraph", "command": "bunx", "args": ["serve"], "env": [{"name": "T", "value": "secret"}]},
    {"type": "http", "name": "docs", "url": "https://x", "headers": []},
]
SERVERS = TypeAdapter(list[AcpServer]).validate_python(WIRE)


def run(fn: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(fn)


def session(directory: Path, body: Callable[[Injection], Awaitable[None]] | None = None, **options: Any) -> Injection:
    """One managed session around ``body``; returns the handle (after the restore)."""
    seen: list[Injection] = []

    async def main() -> None:
        async with managed_acpxrc(directory, SERVERS, **options) as handle:
            assert handle is not None
            seen.append(handle)
            if body is not None:
                await body(handle)

    run(main)
    return seen[0]


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def journal_files() -> list[Path]:
    return sorted(journal_dir().glob("*.json")) if journal_dir().is_dir() else []


@pytest.fixture
def work(tmp_path: Path) -> Path:
    directory = tmp_path / "work"
    directory.mkdir()
    return directory


# --- nothing to inject ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("servers", [None, []])
def test_nothing_is_touched_without_servers(work: Path, servers: list | None) -> None:
    async def main() -> None:
        async with managed_acpxrc(work, servers) as handle:
            assert handle is None
            assert not (work / ACPXRC).exists()

    run(main)
    assert list(work.iterdir()) == []
    assert not beflow_home().exists()  # no lock, no journal


# --- what a session sees -------------------------------------------------------------------------------------


def test_a_new_file_holds_the_servers_with_mode_0600_and_is_removed_after(work: Path) -> None:
    async def body(handle: Injection) -> None:
        target = work / ACPXRC
        assert json.loads(target.read_text()) == {"mcpServers": WIRE}
        assert mode_of(target) == 0o600
        assert handle.names == ["codegraph", "docs"]
        assert (handle.existed, handle.prior_parsed) == (False, True)

    handle = session(work, body)
    assert not (work / ACPXRC).exists()
    assert list(work.iterdir()) == []
    assert handle.restored is not None and handle.restored.action == "removed"
    assert journal_files() == []


def test_other_keys_of_a_prior_object_are_kept_and_mcp_servers_replaced_in_place(work: Path) -> None:
    prior = b'{"defaultAgent": "codex", "mcpServers": [{"name": "mine", "command": "m"}], "ttl": 5}'
    (work / ACPXRC).write_bytes(prior)
    os.chmod(work / ACPXRC, 0o644)

    async def body(handle: Injection) -> None:
        document = json.loads((work / ACPXRC).read_text())
        assert list(document) == ["defaultAgent", "mcpServers", "ttl"]
        assert document == {"defaultAgent": "codex", "mcpServers": WIRE, "ttl": 5}
        assert mode_of(work / ACPXRC) == 0o600
        assert handle.kept_keys == ["defaultAgent", "ttl"]
        assert handle.replaced == ["mine"]

    handle = session(work, body)
    assert (work / ACPXRC).read_bytes() == prior
    assert mode_of(work / ACPXRC) == 0o644
    assert handle.restored is not None and handle.restored.action == "restored"


@pytest.mark.parametrize(
    "prior",
    [
        b"{not json",
        b'{"a": 1,}',  # JSON5, not JSON: acpx's JSON.parse refuses it
        b"\xff\xfe{}",
        b'{"a": "\xc3"}',
        b"[1, 2]",
        b'"text"',
        b"",
        b'{"a": NaN}',
        "\ufeff{}".encode(),
    ],
    ids=["invalid", "json5", "not-utf8", "broken-utf8", "array", "string", "empty", "nan", "bom"],
)
def test_a_prior_that_does_not_parse_gives_a_fresh_file_and_comes_back_verbatim(work: Path, prior: bytes) -> None:
    (work / ACPXRC).write_bytes(prior)

    async def body(handle: Injection) -> None:
        assert json.loads((work / ACPXRC).read_text()) == {"mcpServers": WIRE}
        assert (handle.existed, handle.prior_parsed, handle.kept_keys) == (True, False, [])

    session(work, body)
    assert (work / ACPXRC).read_bytes() == prior


@pytest.mark.parametrize(
    "prior", [b'{\r\n  "ttl": 1\r\n}\r\n', b'{"ttl": 1}', b'{"ttl":1}\n\n\n', b'  {"\\u00e9": "\xc3\xa9"}  ']
)
def test_line_endings_and_spacing_come_back_exactly(work: Path, prior: bytes) -> None:
    (work / ACPXRC).write_bytes(prior)
    session(work)
    assert (work / ACPXRC).read_bytes() == prior


def test_the_journal_is_written_before_the_session_and_removed_after(work: Path) -> None:
    prior = b'{"ttl": 1}'
    (work / ACPXRC).write_bytes(prior)
    os.chmod(work / ACPXRC, 0o640)

    async def body(handle: Injection) -> None:
        (path,) = journal_files()
        assert mode_of(path) == 0o600  # it holds the prior, which may hold secrets
        entry = JournalEntry.model_validate_json(path.read_bytes())
        assert entry.target == work.resolve() / ACPXRC
        assert (entry.pid, entry.existed, entry.mode) == (os.getpid(), True, 0o640)
        assert entry.pid_start == liveness.start_time(os.getpid())
        assert base64.b64decode(entry.prior or "") == prior
        assert entry.written_sha256 == hashlib.sha256((work / ACPXRC).read_bytes()).hexdigest()

    session(work, body)
    assert journal_files() == []


def test_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        session(tmp_path / "nowhere")


def test_a_directory_in_the_way_is_refused_and_nothing_changes(work: Path) -> None:
    (work / ACPXRC).mkdir()
    with pytest.raises(BeflowError, match="not a regular file"):
        session(work)
    assert (work / ACPXRC).is_dir()
    assert journal_files() == []


def test_a_symlink_is_put_back_and_what_it_points_to_is_never_written(work: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared.json"
    shared.write_bytes(b'{"ttl": 9}')
    (work / ACPXRC).symlink_to(shared)

    async def body(handle: Injection) -> None:
        assert not (work / ACPXRC).is_symlink()
        assert json.loads((work / ACPXRC).read_text()) == {"ttl": 9, "mcpServers": WIRE}

    session(work, body, trust_link=True)  # the user's own checkout: their link's keys are kept
    assert (work / ACPXRC).is_symlink() and os.readlink(work / ACPXRC) == str(shared)
    assert shared.read_bytes() == b'{"ttl": 9}'


def test_a_symlink_in_a_worktree_is_never_read_into_the_file_the_agent_gets(work: Path, tmp_path: Path) -> None:
    # A worktree holds what its branch holds: an agent of an earlier round may have committed a link to a JSON file
    # of the user's it could not read (~/.docker/config.json); its keys must not reach the injected file.
    outside = tmp_path / "config.json"
    outside.write_bytes(b'{"auths": {"registry": "user-secret-2718"}}')
    (work / ACPXRC).symlink_to(outside)

    async def body(handle: Injection) -> None:
        assert json.loads((work / ACPXRC).read_text()) == {"mcpServers": WIRE}

    handle = session(work, body)
    assert handle.existed and handle.kept_keys == []
    assert (work / ACPXRC).is_symlink() and os.readlink(work / ACPXRC) == str(outside)
    assert b"user-secret-2718" not in b"".join(p.read_bytes() for p in beflow_home().rglob("*") if p.is_file())


def test_a_symlink_put_in_place_of_the_file_is_never_followed_nor_saved_and_the_prior_comes_back(
    work: Path, tmp_path: Path
) -> None:
    (work / ACPXRC).write_bytes(PRIOR)
    outside = tmp_path / "id_rsa"
    outside.write_bytes(b"user-secret-1414")

    async def body(handle: Injection) -> None:
        (work / ACPXRC).unlink()
        (work / ACPXRC).symlink_to(outside)  # the agent, during the run

    handle = session(work, body)

    assert (work / ACPXRC).read_bytes() == PRIOR and not (work / ACPXRC).is_symlink()
    assert handle.saved is None and not (beflow_home() / "saved").exists()  # before: the outside file, copied
    assert (
        handle.restored is not None
        and handle.restored.replaced == f"a symlink to {outside}, which beflow did not follow"
    )
    assert "replaced by a symlink to" in handle.restored.describe()
    assert outside.read_bytes() == b"user-secret-1414"


# --- every way out restores ----------------------------------------------------------------------------------


PRIOR = b'{\r\n  "defaultAgent": "codex"\r\n}'


def run_and_fail(directory: Path, body: Callable[[], Awaitable[None]]) -> None:
    async def main() -> None:
        async with managed_acpxrc(directory, SERVERS):
            await body()

    run(main)


def test_an_exception_restores_and_propagates(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)

    async def body() -> None:
        raise RuntimeError("agent failed")

    with pytest.raises(RuntimeError, match="agent failed"):
        run_and_fail(work, body)
    assert (work / ACPXRC).read_bytes() == PRIOR
    assert journal_files() == []


def test_a_timeout_restores(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)

    async def body() -> None:
        with anyio.fail_after(0.05):
            await anyio.sleep(10)

    with pytest.raises(TimeoutError):
        run_and_fail(work, body)
    assert (work / ACPXRC).read_bytes() == PRIOR


def test_cancellation_restores(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)
    entered = []

    async def main() -> None:
        with anyio.move_on_after(0.1) as scope:
            async with managed_acpxrc(work, SERVERS):
                entered.append(True)
                await anyio.sleep(10)
        assert scope.cancelled_caught

    run(main)
    assert entered and (work / ACPXRC).read_bytes() == PRIOR


def test_keyboard_interrupt_restores(work: Path) -> None:
    async def body() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_and_fail(work, body)
    assert not (work / ACPXRC).exists()
    assert journal_files() == []


# --- a file changed during the session -----------------------------------------------------------------------


def test_a_version_changed_during_the_session_is_saved_aside_before_the_prior_comes_back(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)
    reported: list[Path] = []

    async def body(handle: Injection) -> None:
        (work / ACPXRC).write_bytes(b'{"edited": "by hand"}')

    handle = session(work, body, on_saved=reported.append)
    assert (work / ACPXRC).read_bytes() == PRIOR
    assert handle.saved is not None and reported == [handle.saved]
    assert handle.saved.read_bytes() == b'{"edited": "by hand"}'
    assert handle.saved.is_relative_to(beflow_home() / "saved")
    assert mode_of(handle.saved) == 0o600


def test_saved_versions_are_deleted_after_a_week_by_the_next_beflow_command(work: Path) -> None:
    # A saved version was written while the injected secrets were in place: it must not stay for good.
    saved = beflow_home() / "saved"
    saved.mkdir(parents=True)
    old, recent = saved / "old.acpxrc.json", saved / "recent.acpxrc.json"
    old.write_text("secret")
    recent.write_text("secret")
    week_ago = time.time() - SAVED_DAYS * 86400 - 60
    os.utime(old, (week_ago, week_ago))

    recover_orphans()  # what every beflow command does first

    assert sorted(p.name for p in saved.iterdir()) == ["recent.acpxrc.json"]
    restored = Restored(target=work / ACPXRC, action="restored", saved=recent)
    assert f"saved at {recent} (for {SAVED_DAYS} days)" in restored.describe()


def test_a_saved_directory_replaced_by_a_link_is_never_pruned_nor_written_through(work: Path, tmp_path: Path) -> None:
    # An agent without the sandbox can write BEFLOW_HOME: `saved` made a link to a directory of the user's.
    documents = tmp_path / "documents"
    documents.mkdir()
    old = documents / "thesis.tex"
    old.write_text("the user's")
    week_ago = time.time() - SAVED_DAYS * 86400 - 60
    os.utime(old, (week_ago, week_ago))
    beflow_home().mkdir(parents=True, exist_ok=True)
    (beflow_home() / "saved").symlink_to(documents)

    recover_orphans()  # before: every file a week old there was deleted

    assert old.read_text() == "the user's"

    async def body(handle: Injection) -> None:
        (work / ACPXRC).write_text("changed")

    with pytest.raises(BeflowError, match=r"saved is a symlink, not a directory, which beflow leaves as it is"):
        session(work, body)  # the changed version is not saved through the link; the prior stays journalled
    assert sorted(p.name for p in documents.iterdir()) == ["thesis.tex"]


def test_a_changed_file_that_beflow_created_is_saved_then_removed(work: Path) -> None:
    async def body(handle: Injection) -> None:
        (work / ACPXRC).write_text("changed")

    handle = session(work, body)
    assert not (work / ACPXRC).exists()
    assert handle.saved is not None and handle.saved.read_text() == "changed"


def test_a_file_deleted_during_the_session_gets_its_prior_back_and_nothing_is_saved(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)

    async def body(handle: Injection) -> None:
        (work / ACPXRC).unlink()

    handle = session(work, body)
    assert (work / ACPXRC).read_bytes() == PRIOR
    assert handle.saved is None
    assert not (beflow_home() / "saved").exists()


def test_an_unchanged_file_saves_nothing(work: Path) -> None:
    handle = session(work)
    assert handle.saved is None and not (beflow_home() / "saved").exists()


# --- the lock, in one process (two processes: test_faults.py) ------------------------------------------------


def test_a_second_manager_waits_says_so_once_and_refuses_after_its_timeout(work: Path) -> None:
    messages: list[str] = []

    async def main() -> None:
        async with managed_acpxrc(work, SERVERS):
            with pytest.raises(LockedError) as raised:
                async with managed_acpxrc(work, SERVERS, on_wait=messages.append, lock_timeout=0.3, poll_interval=0.02):
                    pass
            error = raised.value
            assert str(work.resolve() / ACPXRC) in error.message and f"pid {os.getpid()}" in error.message

    run(main)
    assert len(messages) == 1 and str(work.resolve() / ACPXRC) in messages[0]
    assert not (work / ACPXRC).exists()


def test_a_second_manager_goes_ahead_once_the_first_is_done(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)
    order: list[str] = []

    async def main() -> None:
        entered, waiting = anyio.Event(), anyio.Event()

        def on_wait(message: str) -> None:
            order.append("waiting")
            waiting.set()

        async def first() -> None:
            async with managed_acpxrc(work, SERVERS):
                order.append("first in")
                entered.set()
                await waiting.wait()  # the second is at the door: only now does the first leave
                order.append("first out")

        async def second() -> None:
            await entered.wait()
            async with managed_acpxrc(work, SERVERS, on_wait=on_wait, poll_interval=0.02) as h:
                assert h is not None and h.kept_keys == ["defaultAgent"]  # it saw the real prior, not the first's
                order.append("second in")

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(first)
            tasks.start_soon(second)

    run(main)
    assert order == ["first in", "waiting", "first out", "second in"]
    assert (work / ACPXRC).read_bytes() == PRIOR


# --- orphans -------------------------------------------------------------------------------------------------


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def orphan(directory: Path, **changes: Any) -> JournalEntry:
    """Leave ``directory``'s file managed, as a killed beflow would, with the journal entry changed as asked."""
    snapshot: dict[str, Any] = {}

    async def main() -> None:
        async with managed_acpxrc(directory, SERVERS):
            (path,) = journal_files()
            snapshot["path"] = path
            snapshot["entry"] = JournalEntry.model_validate_json(path.read_bytes())
            snapshot["managed"] = (directory / ACPXRC).read_bytes()

    run(main)
    entry = snapshot["entry"].model_copy(update=changes)
    snapshot["path"].write_text(entry.model_dump_json())
    (directory / ACPXRC).write_bytes(snapshot["managed"])
    return entry


def test_an_orphan_of_a_dead_process_is_restored(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)
    orphan(work, pid=dead_pid())
    (restored,) = recover_orphans()
    assert restored.action == "restored" and restored.saved is None
    assert (work / ACPXRC).read_bytes() == PRIOR
    assert journal_files() == []


def test_an_orphan_whose_pid_was_reused_is_restored(work: Path) -> None:
    started = liveness.start_time(os.getpid())
    assert started is not None
    entry = orphan(work, pid_start=started - 60)  # this very process, but "started" a minute earlier
    assert entry.pid == os.getpid()
    (restored,) = recover_orphans()
    assert restored.action == "removed"
    assert not (work / ACPXRC).exists()


def test_an_orphan_from_another_boot_is_restored(work: Path) -> None:
    orphan(work, pid_start=psutil.boot_time() - 3600)  # this pid, held by a process of an earlier boot
    assert [r.action for r in recover_orphans()] == ["removed"]


def test_an_entry_of_a_live_process_is_left_alone(work: Path) -> None:
    orphan(work)  # this process, alive
    assert recover_orphans() == []
    assert (work / ACPXRC).exists() and len(journal_files()) == 1


def test_an_orphan_whose_directory_is_gone_is_dropped(work: Path) -> None:
    orphan(work, pid=dead_pid())
    (work / ACPXRC).unlink()
    work.rmdir()
    assert [r.action for r in recover_orphans()] == ["gone"]
    assert not work.exists()  # never recreated
    assert journal_files() == []


def test_an_orphan_changed_after_the_crash_is_saved_aside(work: Path) -> None:
    orphan(work, pid=dead_pid())
    (work / ACPXRC).write_text('{"edited": true}')
    (restored,) = recover_orphans()
    assert restored.saved is not None and restored.saved.read_text() == '{"edited": true}'
    assert not (work / ACPXRC).exists()


def test_a_new_session_first_restores_an_orphan_for_the_same_path(work: Path) -> None:
    (work / ACPXRC).write_bytes(PRIOR)
    orphan(work)  # even of a live process: holding the lock proves its session is over

    async def body(handle: Injection) -> None:
        assert [r.action for r in handle.recovered] == ["restored"]
        assert handle.kept_keys == ["defaultAgent"]

    session(work, body)
    assert (work / ACPXRC).read_bytes() == PRIOR


SECRET_PRIOR = b'{"mcpServers": [{"name": "mine", "env": [{"name": "K", "value": "prior-secret-77"}]}]}'


def _entry_text(work: Path, **changes: object) -> str:
    entry = {
        "version": 1,
        "target": str(work / ACPXRC),
        "pid": 999999,
        "pid_start": None,
        "boot_id": None,
        "existed": True,
        "mode": 0o644,
        "prior": base64.b64encode(SECRET_PRIOR).decode(),
        "written_sha256": hashlib.sha256((work / ACPXRC).read_bytes()).hexdigest(),
        "created": "2024-01-01T00:00:00Z",
        **changes,
    }
    return json.dumps(entry)


@pytest.mark.parametrize("start", [None, 1.0, 12345])  # unknown, long gone, clock ticks (an older version's)
def test_an_orphan_an_earlier_beflow_journalled_is_restored(work: Path, start: float | None) -> None:
    # The entry as beflow wrote it before the journal was shared (its fields in that order, indented, with a
    # field no longer written): a user may have one on disk from a beflow killed before the upgrade.
    (work / ACPXRC).write_bytes(b'{"mcpServers": "what beflow wrote"}')
    journal_dir().mkdir(parents=True)
    entry = json.loads(_entry_text(work, pid=dead_pid(), pid_start=start))
    (journal_dir() / f"acpxrc-{path_key(work.resolve())}.json").write_text(json.dumps(entry, indent=2))

    (restored,) = recover_orphans()

    assert restored.action == "restored" and restored.pid == entry["pid"]
    assert (work / ACPXRC).read_bytes() == SECRET_PRIOR and mode_of(work / ACPXRC) == 0o644
    assert journal_files() == []


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        ("truncated", "not valid JSON"),
        ("empty", "it is empty"),
        ("garbage", "not valid JSON"),
        ("bad base64", "invalid field(s): prior"),
        ("fifo", "it is a FIFO"),
    ],
)
def test_a_damaged_journal_entry_is_quarantined_with_a_message_that_never_holds_its_bytes(
    work: Path, damage: str, why: str
) -> None:
    (work / ACPXRC).write_bytes(b'{"mcpServers": "what beflow wrote"}')
    journal_dir().mkdir(parents=True)
    path = journal_dir() / "acpxrc-x.json"
    if damage == "truncated":
        path.write_text(_entry_text(work)[:-40])
    elif damage == "empty":
        path.write_text("")
    elif damage == "garbage":
        path.write_bytes(b"\x00\xffprior-secret-77")
    elif damage == "bad base64":
        path.write_text(_entry_text(work, prior="prior-secret-77!!"))
    else:
        os.mkfifo(path)

    (result,) = recover_orphans()  # returns at once: a FIFO is never opened for reading

    assert result.action == "quarantined"
    assert why in (result.detail or "") and "moved to" in (result.detail or "")
    assert "prior-secret-77" not in result.describe() and "prior-secret" not in result.model_dump_json()
    assert list(journal_dir().glob("*.json")) == [] and len(list(damaged_dir().iterdir())) == 1
    assert recover_orphans() == []  # reported once, then out of the way


def test_a_damaged_entry_whose_intact_fields_prove_the_file_is_beflows_gets_it_back(work: Path) -> None:
    (work / ACPXRC).write_bytes(b'{"mcpServers": "what beflow wrote"}')
    journal_dir().mkdir(parents=True)
    (journal_dir() / "acpxrc-x.json").write_text(_entry_text(work, pid="not a pid"))

    (result,) = recover_orphans()

    assert result.action == "quarantined" and "restored to its content before the run" in (result.detail or "")
    assert (work / ACPXRC).read_bytes() == SECRET_PRIOR


# --- the property: any prior comes back exactly --------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    prior=st.one_of(
        st.binary(max_size=300),
        st.dictionaries(st.text(max_size=8), st.integers() | st.text(max_size=8), max_size=4).map(
            lambda d: json.dumps(d).encode()
        ),
        st.none(),
    ),
    mode=st.sampled_from([0o600, 0o644, 0o640, 0o400, 0o666, 0o755, 0o604, 0o4755]),
    changed=st.one_of(st.none(), st.binary(max_size=50)),
)
def test_restore_gives_back_any_prior_bytes_and_mode(prior: bytes | None, mode: int, changed: bytes | None) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        target = directory / ACPXRC
        if prior is not None:
            target.write_bytes(prior)
            os.chmod(target, mode)

        async def body(handle: Injection) -> None:
            if changed is not None:
                target.write_bytes(changed)

        session(directory, body)
        if prior is None:
            assert not target.exists()
        else:
            assert target.read_bytes() == prior
            assert mode_of(target) == mode
        assert sorted(p.name for p in directory.iterdir()) == ([ACPXRC] if prior is not None else [])
        assert journal_files() == []


def test_a_file_still_injected_whose_damaged_entry_lost_the_prior_is_never_taken_for_the_prior(work: Path) -> None:
    injected = b'{"mcpServers": "what beflow wrote"}'
    (work / ACPXRC).write_bytes(injected)
    journal_dir().mkdir(parents=True)
    key = "acpxrc-" + path_key(work.resolve())
    (journal_dir() / f"{key}.json").write_text(_entry_text(work, prior="lost!!"))

    with pytest.raises(BeflowError, match="still holds beflow's MCP servers"):
        session(work)
    assert (work / ACPXRC).read_bytes() == injected  # not journaled as if it were the user's
    assert journal_files() == []
