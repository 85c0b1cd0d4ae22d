"""The claim store of a fleet: a running workflow holds its issue.

Temporal keeps one running workflow per id, and an issue's workflow id names its tracker and key
(:func:`beflow.fleet.shapes.workflow_id`): that is the exactly-once start, and so the one authority for who runs
an issue. A run inside the workflow (the worker's run activity) holds its issue through the workflow: the worker
says so (:meth:`FleetClaims.holding`) before it starts the run, and the runner's ``tracker.claim`` is answered
from that. A run outside the fleet (``beflow --auto`` on the same project) is refused while the issue's workflow
runs, and otherwise takes the tracker's own claim, which the fleet's questions count too. The runner and the
dispatcher see only :class:`~beflow.trackers.claims.Claim` objects: nothing in them knows of Temporal.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from beflow.config import Project, TemporalEngineSettings
from beflow.errors import BeflowError, LockedError
from beflow.fleet.remote import Bridge, Unreachable
from beflow.fleet.shapes import IssueState, workflow_id
from beflow.trackers import Tracker
from beflow.trackers.claims import Claim, ClaimInfo, ClaimLost, ClaimsOver, ClaimStore
from beflow.trackers.issue import normalize_key, utc_now

if TYPE_CHECKING:
    from temporalio import activity
    from temporalio.client import Client


class FleetClaims:
    """Claims as running workflows, over the tracker's own store (``inner``) for runs outside the fleet."""

    def __init__(self, settings: TemporalEngineSettings, tracker: str, inner: ClaimStore) -> None:
        self.settings = settings
        self.tracker = tracker
        self.inner = inner
        self._bridge = Bridge(settings)
        self._lock = threading.Lock()
        #: The issues this process runs inside their workflows (key → the workflow id, and the proof that the run
        #: is still the one the fleet gave this worker): the worker's run activities.
        self._mine: dict[str, tuple[str, Callable[[], None]]] = {}

    @contextlib.contextmanager
    def holding(self, key: str, workflow: str, proof: Callable[[], None] = lambda: None) -> Iterator[None]:
        """Within the block, this process runs ``key`` for its workflow ``workflow``: its claims are answered, and
        each write on the run's behalf (a push, a pull request, a label, a comment) first calls ``proof``, which
        raises :class:`ClaimLost` when the fleet gave the run to another worker meanwhile."""
        with self._lock:
            self._mine[key] = (workflow, proof)
        try:
            yield
        finally:
            with self._lock:
                self._mine.pop(key, None)

    def proof_of(self, key: str, info: activity.Info) -> Callable[[], None]:
        """The proof that run activity ``info`` (of issue ``key``) is still the one the fleet gave this worker: it
        is among its workflow's pending activities, at the same attempt. A worker the service stopped hearing from
        (frozen, cut off) finds that its run was taken up elsewhere, and writes nothing; a service that does not
        answer proves nothing either (fail closed)."""

        async def pending(client: Client) -> bool:
            handle = client.get_workflow_handle(info.workflow_id or "", run_id=info.workflow_run_id)
            found = (await handle.describe()).raw_description.pending_activities
            return any(p.activity_id == info.activity_id and p.attempt == info.attempt for p in found)

        def prove() -> None:
            try:
                ours = self._bridge.ask(pending)
            except Exception as error:
                why = f"Temporal did not say whether the run of issue {key} is still this worker's: {error}"
                raise ClaimLost(why) from None
            if not ours:
                raise ClaimLost(f"the fleet gave the run of issue {key} to another worker")

        return prove

    def _proof(self, key: str) -> Callable[[], None] | None:
        with self._lock:
            mine = self._mine.get(normalize_key(key))
        return mine[1] if mine is not None else None

    @contextlib.contextmanager
    def under_lease(self, key: str, *, prove: bool = True) -> Iterator[None]:
        """A write on ``key``: for a run of this worker, proven first (``prove``); else as the tracker's own store
        (GitHub's lease, when a run outside the fleet holds one)."""
        proof = self._proof(key)
        if proof is None:
            with self.inner.under_lease(key, prove=prove):
                yield
            return
        if prove:
            proof()
        yield

    def claim(self, key: str, owner: str) -> Claim:
        proof = self._proof(key)
        info = ClaimInfo(key=key, owner=owner, pid=os.getpid(), host=socket.gethostname(), since=utc_now())
        if proof is not None:  # the workflow holds it, until it ends; each write proves the run is still ours
            return Claim(info, lambda: None, held=lambda: self.under_lease(key))
        running = self.holder(key)
        if running is not None:
            raise LockedError(
                f"issue {key} is run by the fleet ({running.owner})",
                fix="Let the fleet run it, or cancel its workflow (`beflow docs fleet`).",
            )
        return self.inner.claim(key, owner)

    def holder(self, key: str) -> ClaimInfo | None:
        running = self._running([key])
        if key in running:
            return ClaimInfo(
                key=key,
                owner=f"workflow {workflow_id(self.tracker, key)}",
                pid=0,
                host="temporal",
                since=running[key] or utc_now(),
            )
        return self.inner.holder(key)

    def last_holder(self, key: str) -> ClaimInfo | None:
        return self.inner.last_holder(key)

    def held(self, keys: Iterable[str]) -> set[str]:
        keys = list(keys)
        if not keys:
            return set()
        return set(self._running(keys)) | self.inner.held(keys)

    def _running(self, keys: list[str]) -> dict[str, datetime.datetime]:
        """Which of ``keys`` have a running workflow (each asked of the service, strongly consistent), and since
        when."""
        from temporalio.client import WorkflowExecutionStatus
        from temporalio.service import RPCError, RPCStatusCode

        async def one(client: Client, key: str) -> tuple[str, datetime.datetime] | None:
            try:
                described = await client.get_workflow_handle(workflow_id(self.tracker, key)).describe()
            except RPCError as error:
                if error.status == RPCStatusCode.NOT_FOUND:
                    return None
                raise
            if described.status == WorkflowExecutionStatus.RUNNING:
                return key, described.start_time
            return None

        async def all_of(client: Client) -> dict[str, datetime.datetime]:
            found = await asyncio.gather(*(one(client, key) for key in keys))
            return dict(pair for pair in found if pair is not None)

        return self._bridge.ask(all_of)


def claims_over(project: Project) -> ClaimsOver:
    """The fleet's claims over a tracker's own store (the Temporal engine's, in beflow.app): one authority for who
    runs an issue (no GitHub lease is taken for a fleet's run), so that a run outside the fleet (``beflow --auto`` by
    hand) and the fleet's workers never run an issue twice."""
    from beflow.fleet.shapes import engine_of

    settings = engine_of(project)
    return lambda identity, own: FleetClaims(settings, identity, own)


def fleet_claims(tracker: Tracker) -> FleetClaims | None:
    """The fleet's claim store of a tracker opened on the Temporal engine, if it has one."""
    return tracker.claims if isinstance(tracker.claims, FleetClaims) else None


#: Seconds the workflow's ``state`` query may wait for a worker: a worker that polls answers in milliseconds.
QUERY_TIMEOUT = 5.0


class NoWorker(BeflowError):
    """No worker serves the fleet's task queue: nothing answers for a workflow, nor runs its issue."""

    def __init__(self, message: str) -> None:
        super().__init__(message, fix="Start one in the project's checkout: `beflow worker` (`beflow docs fleet`).")


def workflow_state(project: Project, tracker: str, key: str) -> IssueState | None:
    """What issue ``key``'s workflow answers to its ``state`` query (``beflow issues show``); None when no
    workflow of it runs. A query waits for a worker to answer it: when none polls the workflow's task queue, or none
    answers within :data:`QUERY_TIMEOUT`, :class:`NoWorker` says so at once. Raises
    :class:`~beflow.fleet.remote.Unreachable` when the service does not answer."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
    from temporalio.service import RPCError, RPCStatusCode

    from beflow.fleet.shapes import STATE, engine_of

    settings = engine_of(project)

    async def polled(client: Client, queue: str) -> bool:
        asked = DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
        return bool((await client.workflow_service.describe_task_queue(asked)).pollers)

    async def asked(client: Client) -> IssueState | None:
        handle = client.get_workflow_handle(workflow_id(tracker, key))
        queue = settings.task_queue
        try:
            queue = (await handle.describe()).task_queue
            if not await polled(client, queue):
                raise NoWorker(f"no worker serves its task queue {queue!r} (Temporal at {settings.address} answers)")
            state: IssueState = await handle.query(
                STATE, result_type=IssueState, rpc_timeout=datetime.timedelta(seconds=QUERY_TIMEOUT)
            )
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return None
            if error.status in (RPCStatusCode.DEADLINE_EXCEEDED, RPCStatusCode.CANCELLED):  # (the query's timeout)
                raise NoWorker(
                    f"no worker of its task queue {queue!r} answered for it within {QUERY_TIMEOUT:g} s (Temporal at "
                    f"{settings.address} answers): are they stopped, or cut off?"
                ) from None
            raise Unreachable(f"the workflow of issue {key} did not answer: {error.message}") from None
        return state

    return Bridge(settings).ask(asked)
