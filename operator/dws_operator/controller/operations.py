"""GKE node pool operations of one cluster, started within GKE's limits.

GKE runs a cluster's node pool operations a few at a time (5 by default: one more is
answered RESOURCE_EXHAUSTED "Too many operations") and one at a time per pool
(FAILED_PRECONDITION). Each takes seconds to tens of seconds. So operations wait here
for a slot, in an order that stops the bill first: scale-downs and deletes before
creates, and within each, the cluster's namespaces in turn (`controller.line`), each
namespace's requests first come, first served (by creation time).

An operation is started (one call), then followed by name when it is due
(`controller.operation_follower`); when one is done its slot is free for the next at
once (GKE counts it no more), while the operation stays known until the pool snapshot
shows its result and the request is woken, so no pass ever sees neither the operation
nor its result. No pass waits on GKE: reconcile passes only submit, and read `view`.

Everything here is memory: an operator restarted mid-operation finds the operation's
effect (or the pool still PROVISIONING/STOPPING) in GKE, which is what it decides on.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime

from dws_operator import rfc3339
from dws_operator.controller.cache import Key
from dws_operator.controller.line import Entry, FairLine
from dws_operator.controller.operation_follower import POLL_SECONDS, OperationFollower, began
from dws_operator.controller.pool_operation import (
    CalledOff,
    Outcomes,
    PoolOperation,
    Preparation,
    Priority,
    SchedulerStats,
    log_failure,
    log_fields,
)
from dws_operator.controller.pools import PoolSnapshot
from dws_operator.gke import GkeError, NodePoolClient, classify_status
from dws_operator.gke.client import Operation
from dws_operator.gke.errors import status_code
from dws_operator.kubekit.fence import FENCE, LeaseLost
from dws_operator.reconcile import OperationView

log = logging.getLogger(__name__)

#: GKE's default cap on a cluster's node pool operations in flight.
DEFAULT_SLOTS = 5
#: After "Too many operations" (someone else holds slots too): first pause, and the cap.
QUOTA_BACKOFF_SECONDS = (2.0, 30.0)
#: After another retryable error of one operation: first pause, and the cap.
RETRY_BACKOFF_SECONDS = (1.0, 60.0)


class OperationScheduler:
    def __init__(
        self,
        gke: NodePoolClient,
        snapshot: PoolSnapshot,
        wake: Callable[[Key], None],
        slots: int = DEFAULT_SLOTS,
        poll: float = POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = rfc3339.now,
    ) -> None:
        """`clock`: the monotonic time of slots, pauses and looks; `now`: the time GKE's
        operation start times are read against."""
        self.gke = gke
        self.snapshot = snapshot
        self.wake = wake
        self.slots = slots
        self._clock = clock
        self._now = now
        self._ops: dict[str, PoolOperation] = {}
        #: Queued operations, by namespace.
        self._line = FairLine()
        self._active: set[str] = set()
        #: Of `_active`: done in GKE (its slot free), the snapshot not yet refreshed.
        self._finishing: set[str] = set()
        #: Terminal errors, and the pools that saw an operation end well lately.
        self._outcomes = Outcomes(clock)
        self._seq = itertools.count()
        self._quota_pause = 0.0
        self._paused_until = 0.0
        self._kick = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = SchedulerStats()
        self._follower = OperationFollower(
            gke, self._active_operations, self._next_step, self._spawn, self.stats, poll, clock
        )

    # -- what reconcile passes use ----------------------------------------------------

    def submit(self, operation: PoolOperation) -> None:
        """Queue `operation` unless one is queued or running on its pool already. A queued
        one of another kind is replaced (a delete overtakes a create not yet started)."""
        known = self._ops.get(operation.pool)
        if known is not None:
            if known.kind == operation.kind or operation.pool in self._active:
                return
            self._dequeue(known)
        self._outcomes.forget_error(operation.pool)
        operation.order = (operation.priority, operation.since, next(self._seq))
        self._ops[operation.pool] = operation
        self._line.add(operation.owner[0], Entry(operation.order, operation.pool))
        self._kick.set()

    def view(self, pool: str) -> OperationView | None:
        operation = self._ops.get(pool)
        if operation is None:
            return None
        retrying = operation.last_error
        message = f"GKE {retrying.reason}: {retrying.message}" if retrying else ""
        if pool in self._active:
            return OperationView(kind=operation.kind, running=True, retrying=message)
        return OperationView(
            kind=operation.kind,
            running=False,
            position=self._line.position(operation.owner[0], operation.order),
            queued=len(self._line),
            slots=self.slots,
            retrying=message,
        )

    def cancel(self, pool: str, owner: Key) -> None:
        """Drop `owner`'s operation on `pool` if it has not started in GKE yet; the owner is
        woken, to go on without it (a deleted request lets go then)."""
        operation = self._ops.get(pool)
        if operation is not None and operation.owner == owner and pool not in self._active:
            self._dequeue(operation)
            self.wake(owner)

    def owner(self, pool: str) -> Key | None:
        """The request whose operation on `pool` is queued or running."""
        operation = self._ops.get(pool)
        return operation.owner if operation is not None else None

    def position_for(self, priority: Priority, since: str, namespace: str) -> int:
        """Where a new operation of a request in `namespace` would queue (1 = next), 0 if
        a slot is free for it now."""
        place = self._line.position(namespace, (priority, since, next(self._seq)))
        if place == 1 and self._taken() < self.slots:
            return 0
        return place

    def done_lately(self, pool: str, kind: str, within: float) -> bool:
        """Whether an operation of `kind` on `pool` ended well less than `within` s ago."""
        return self._outcomes.done_lately(pool, kind, within)

    def take_error(self, pool: str, owner: Key) -> GkeError | None:
        """The terminal error `owner`'s operation on `pool` ended with, once (`Outcomes`)."""
        return self._outcomes.take_error(pool, owner)

    @property
    def running(self) -> int:
        return self._taken()

    def _taken(self) -> int:
        """GKE's slots this scheduler holds: operations started and not seen done."""
        return len(self._active) - len(self._finishing)

    @property
    def queued(self) -> int:
        return len(self._line)

    @property
    def poll(self) -> float:
        return self._follower.poll

    # -- the loops ----------------------------------------------------------------------

    async def run(self) -> None:
        try:
            await asyncio.gather(self._dispatch(), self._follower.run())
        finally:
            for task in self._tasks:
                task.cancel()

    async def _dispatch(self) -> None:
        while True:
            wait = self._start_what_fits()
            self._kick.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow a
            # cancellation that comes as the event is set, and the loop would go on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._kick.wait()

    def _start_what_fits(self) -> float | None:
        """Start queued operations while slots are free; seconds until one may start."""
        now = self._clock()
        if now < self._paused_until:
            return self._paused_until - now
        soonest: float | None = None
        while self._taken() < self.slots:
            entry = self._line.take(lambda e: self._ops[e.pool].not_before <= now)
            if entry is None:
                waits = [
                    o.not_before - now
                    for o in self._ops.values()
                    if o.not_before > now and o.pool not in self._active
                ]
                soonest = min(waits, default=None)
                break
            operation = self._ops[entry.pool]
            pool = operation.pool
            self._woken_by_position()
            if operation.priority == Priority.CREATE:
                self.wake(operation.owner)  # its status: no longer waiting for a slot
            self._active.add(pool)
            self._spawn(self._start(operation))
        self._prepare_next(now)
        return soonest

    def _prepare_next(self, now: float) -> None:
        """Start the preparation of the operations next in line (as many as there are
        slots): a slot that frees up then goes straight to GKE. Those further back cost
        nothing while they wait (a request deleted meanwhile simply goes)."""
        for entry in self._line.first(self.slots):
            operation = self._ops[entry.pool]
            prepare, waiting = operation.prepare, operation.not_before > now
            if prepare is not None and operation.preparing is None and not waiting:
                operation.preparing = self._prepared(prepare)

    def _prepared(self, prepare: Preparation) -> asyncio.Future[None]:
        task = self._spawn(prepare())
        # Its outcome is read when the operation starts; one dropped before is not lost.
        task.add_done_callback(_retrieved)
        return task

    def _woken_by_position(self) -> None:
        # Those behind moved up. Only a create or takeover says its place in the
        # request's status: a request whose pool waits to be scaled down or deleted has
        # nothing to write, so no pass.
        for entry in self._line.every_doubling():
            operation = self._ops[entry.pool]
            if operation.priority == Priority.CREATE:
                self.wake(operation.owner)

    def _spawn(self, coroutine: Awaitable[None]) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _start(self, operation: PoolOperation) -> None:
        """Make the operation's next call; on to following it, or back in the queue."""
        try:
            if operation.prepare is not None:
                if operation.preparing is None:
                    operation.preparing = self._prepared(operation.prepare)
                try:
                    await operation.preparing
                finally:
                    operation.preparing = None  # failed: prepared again on the next try
                operation.prepare = None
            while operation.step < len(operation.steps):
                FENCE.check()  # a replica that lost its Lease starts nothing in GKE
                sent = self._clock()
                started = await operation.steps[operation.step]()
                if started is not None:
                    operation.running = started.name
                    operation.started_at = operation.looked_at = began(
                        started, sent, self._clock(), self._now()
                    )
                    operation.running_type = int(started.operation_type)
                    self._count_start(operation)
                    self._follower.started()
                    return
                operation.step += 1  # nothing to do for this step
        except CalledOff as why:
            log.info(
                "%s of node pool %s called off: %s",
                operation.kind,
                operation.pool,
                why,
                extra=log_fields(operation),
            )
            self._active.discard(operation.pool)
            if self._ops.get(operation.pool) is operation:
                del self._ops[operation.pool]
            self.wake(operation.owner)
            self._kick.set()
            return
        except GkeError as error:
            self._failed(operation, error)
            return
        except LeaseLost:
            raise  # not a bug: this replica must stop acting, at once
        except Exception as error:  # a bug must not leave the slot held
            log.exception("starting %s of node pool %s", operation.kind, operation.pool)
            self._failed(
                operation, GkeError(retryable=True, reason="InternalError", message=str(error))
            )
            return
        await self._finished(operation, None)

    def _count_start(self, operation: PoolOperation) -> None:
        self.stats.started += 1
        self.stats.by_kind[operation.kind] = self.stats.by_kind.get(operation.kind, 0) + 1
        self.stats.max_running = max(self.stats.max_running, self._running_count())

    def _running_count(self) -> int:
        return sum(1 for pool in self._active if self._ops[pool].running is not None)

    def _failed(self, operation: PoolOperation, error: GkeError) -> None:
        """A call GKE refused: back in the queue (after a pause) if it may pass later."""
        pool = operation.pool
        self._active.discard(pool)
        operation.running = None
        if not error.retryable:
            log_failure(operation, error)
            self._outcomes.failed(operation, error)
            del self._ops[pool]
        else:
            now = self._clock()
            if error.reason == "TooManyOperations":
                # Someone else (GKE's upgrades, a person) holds slots: everyone waits.
                self.stats.too_many_operations += 1
                first, cap = QUOTA_BACKOFF_SECONDS
                self._quota_pause = min(max(self._quota_pause * 2, first), cap)
                self._paused_until = now + self._quota_pause
            else:
                first, cap = RETRY_BACKOFF_SECONDS
                operation.not_before = now + min(first * 2**operation.attempts, cap)
                operation.attempts += 1
                operation.last_error = error
            log.info(
                "%s of node pool %s: %s (retrying)",
                operation.kind,
                pool,
                error,
                extra=log_fields(operation),
            )
            self._line.add(operation.owner[0], Entry(operation.order, pool))
        self.wake(operation.owner)
        self._kick.set()

    async def _finished(self, operation: PoolOperation, error: GkeError | None) -> None:
        """Done (or failed in GKE): its slot goes to the next at once; the operation is
        forgotten (and its request woken) once the snapshot shows the result."""
        pool = operation.pool
        self._finishing.add(pool)
        self._kick.set()
        try:
            await self.snapshot.refresh_pool(operation.pool)
        except GkeError as refresh_error:
            log.warning("listing node pools after an operation: %s", refresh_error)
        except LeaseLost:
            raise
        except Exception:  # a bug must not leave the slot held either
            log.exception("listing node pools after an operation on %s", pool)
        finally:
            self._finishing.discard(pool)
        self._active.discard(pool)
        self._quota_pause = 0.0
        if error is None:
            self._outcomes.done(operation)
        if self._ops.get(pool) is operation:
            del self._ops[pool]
        if error is not None:
            log_failure(operation, error)
            if not error.retryable:
                self._outcomes.failed(operation, error)
        self.wake(operation.owner)
        self._kick.set()

    async def _next_step(self, operation: PoolOperation, done: Operation) -> None:
        if done.error.code:
            error = classify_status(status_code(done.error.code), done.error.message)
            await self._finished(operation, error)
            return
        operation.step += 1
        if operation.step < len(operation.steps):
            await self._start(operation)  # the same slot: the next call of this operation
            return
        await self._finished(operation, None)

    def _active_operations(self) -> Iterator[PoolOperation]:
        """The operations holding a slot (or about to), for the follower."""
        return (self._ops[pool] for pool in self._active)

    def _dequeue(self, operation: PoolOperation) -> None:
        self._line.remove(operation.owner[0], Entry(operation.order, operation.pool))
        del self._ops[operation.pool]


def _retrieved(task: asyncio.Future[None]) -> None:
    if not task.cancelled():
        task.exception()
