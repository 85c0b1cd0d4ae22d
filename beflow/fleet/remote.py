"""The connection to the Temporal service, and a synchronous bridge to it.

The claim store answers synchronous questions (``held``, ``holder``) from worker threads and, now and then, from
the event loop itself; the SDK's client is asynchronous and bound to the loop it was made on. So the store's
questions go to a client of their own, on an event loop in a thread of its own (:class:`Bridge`): a question never
waits on the loop that asked it.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from beflow.config import Project, TemporalEngineSettings
from beflow.errors import BeflowError, ConfigError, UsageError

if TYPE_CHECKING:
    from temporalio.client import Client

T = TypeVar("T")

#: Seconds to reach the service before saying it cannot be reached.
CONNECT_TIMEOUT = 10.0
#: Seconds one question of the claim store may take.
ASK_TIMEOUT = 30.0


class Unreachable(BeflowError):
    """The Temporal service did not answer."""


def api_key(settings: TemporalEngineSettings) -> str | None:
    """The API key from ``engine.api_key_env`` (a named variable that is unset is a configuration error)."""
    if settings.api_key_env is None:
        return None
    value = os.environ.get(settings.api_key_env, "").strip()
    if not value:
        raise ConfigError(
            f"engine.api_key_env: ${settings.api_key_env} is not set",
            fix=f"Export {settings.api_key_env} with the Temporal API key, or leave engine.api_key_env out.",
        )
    return value


#: How to install beflow's ``temporal`` extra (beflow is installed from a clone, not from PyPI): the one hint of
#: every message that needs it. pipx and uv replace an install only when told to.
INSTALL_EXTRA = (
    "`pip install '.[temporal]'` in your clone of beflow (or, as beflow was installed, "
    "`pipx install --force '.[temporal]'` or `uv tool install --reinstall '.[temporal]'`)"
)


def require_sdk(project: Project) -> None:
    """The Temporal SDK of ``project``'s engine is installed (the ``temporal`` extra), or a :class:`UsageError`
    that names the config file and field that chose it and says how to install it."""
    try:
        import temporalio  # noqa: F401
    except ImportError as error:
        raise UsageError(
            f'{project.config_name}: engine.kind is "temporal", and the Temporal engine needs the Temporal SDK '
            f"(beflow's `temporal` extra), which is not installed here ({error})",
            fix=f'Install it with beflow\'s `temporal` extra: {INSTALL_EXTRA}; or set "engine": {{"kind": "local"}}.',
        ) from None


async def connect(settings: TemporalEngineSettings) -> Client:
    """A client of ``settings``'s service and namespace; :class:`Unreachable` saying where, when it cannot."""
    from temporalio.client import Client
    from temporalio.converter import default

    from beflow.fleet.codec import data_converter, key_of

    key, sealing = api_key(settings), key_of(settings)
    try:
        async with asyncio.timeout(CONNECT_TIMEOUT):
            return await Client.connect(
                settings.address,
                namespace=settings.namespace,
                tls=settings.tls or key is not None,
                api_key=key,
                data_converter=data_converter(sealing) if sealing is not None else default(),
            )
    except (TimeoutError, RuntimeError, OSError) as error:
        raise Unreachable(
            f"cannot reach Temporal at {settings.address} (namespace {settings.namespace}): {error}",
            fix="Start one with `beflow temporal dev`, or set engine.address to the service (`beflow docs fleet`).",
        ) from None


class Bridge:
    """A client on an event loop in a daemon thread of its own, asked synchronously from anywhere."""

    def __init__(self, settings: TemporalEngineSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: Client | None = None

    def ask(self, question: Callable[[Client], Awaitable[T]]) -> T:
        """``await question(client)`` on the bridge's loop, waited for here."""
        loop = self._started()

        async def asked() -> T:
            if self._client is None:
                self._client = await connect(self.settings)
            return await question(self._client)

        future = asyncio.run_coroutine_threadsafe(asked(), loop)
        try:
            return future.result(ASK_TIMEOUT)
        except TimeoutError:
            future.cancel()
            raise Unreachable(
                f"Temporal at {self.settings.address} did not answer within {ASK_TIMEOUT:g} s",
                fix="Check that the service is up (`beflow docs fleet`).",
            ) from None

    def _started(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="beflow-temporal", daemon=True).start()
                self._loop = loop
            return self._loop


def probe(settings: TemporalEngineSettings) -> tuple[bool, str, str | None]:
    """Whether the service answers (``beflow doctor``): ok, what was found, and the fix when it does not."""

    async def asked() -> str:
        from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

        client = await connect(settings)
        info = await client.service_client.workflow_service.get_system_info(GetSystemInfoRequest())
        return f"server {info.server_version}" if info.server_version else "a server"

    try:
        version = asyncio.run(asked())
    except BeflowError as error:
        return False, error.message, error.fix
    except Exception as error:  # an answer of the service's that is no answer: say what it was
        return False, f"Temporal at {settings.address}: {type(error).__name__}: {error}", None
    return True, f"Temporal at {settings.address} answers (namespace {settings.namespace}, {version})", None
