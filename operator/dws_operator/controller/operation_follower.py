"""How the operation scheduler (`controller.operations`) follows the GKE operations it
started: each is looked at by name when it is due to be done, from how long GKE took
for its kind lately, and more often the later it runs; one seen done is handed back to
the scheduler for its next call or its end."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import datetime

from dws_operator import rfc3339
from dws_operator.controller.pool_operation import PoolOperation, SchedulerStats
from dws_operator.gke import GkeError, NodePoolClient
from dws_operator.gke.client import Operation
from dws_operator.kubekit.fence import LeaseLost

log = logging.getLogger(__name__)

#: How often an operation of a kind GKE's durations are not known for yet is looked at
#: (until one has been seen done); the cap on how long a late operation goes unlooked at.
POLL_SECONDS = 2.0
#: The shortest pause between two looks at a late operation.
MIN_LOOK_SECONDS = 0.05
#: A late operation is looked at again after this share of its usual duration.
LATE_SHARE = 0.1
#: A look due this soon is due now: a due time is a sum of clock readings, and lands a
#: hair past the clock's reading at that moment (a clock that moves only when every task
#: waits, as the tests' virtual one, would otherwise be waited on for ever).
CLOCK_SLACK = 1e-6
#: Weight of the newest duration in the moving average.
LEARNING = 0.3


class OperationFollower:
    """Looks at the scheduler's running operations; hands each one seen DONE to `done`."""

    def __init__(
        self,
        gke: NodePoolClient,
        active: Callable[[], Iterable[PoolOperation]],
        done: Callable[[PoolOperation, Operation], Awaitable[None]],
        spawn: Callable[[Awaitable[None]], asyncio.Future[None]],
        stats: SchedulerStats,
        poll: float = POLL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gke = gke
        #: The scheduler's operations that hold one of GKE's slots or are about to.
        self._active = active
        self._done = done
        #: The scheduler's tasks: a look still running when the scheduler stops is
        #: cancelled with them.
        self._spawn = spawn
        self.stats = stats
        self.poll = poll
        self._clock = clock
        #: Pools whose operation GetOperation is being asked about right now.
        self._looking: set[str] = set()
        self._running_changed = asyncio.Event()
        #: Seconds GKE took lately, by operation type.
        self._durations: dict[int, float] = {}

    def started(self) -> None:
        """An operation was started in GKE: when to look next has changed."""
        self._running_changed.set()

    async def run(self) -> None:
        """GetOperation for each operation when it is due to be done: at its start plus
        how long GKE took for that kind lately (from GKE's own start and end times), then
        more often the later it runs. By name, not ListOperations: GKE lists every
        operation of the location it still remembers, thousands after a busy day, and a
        look must not cost more as history grows."""
        while True:
            wait = self._next_look()
            self._running_changed.clear()
            if wait is None or wait > CLOCK_SLACK:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow a
                # cancellation that comes as the event is set, and the loop would go on.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._running_changed.wait()
                continue
            now = self._clock()
            for operation in self._followed():
                if self._due(operation, now) <= now + CLOCK_SLACK:
                    # Each look on its own: one slow answer holds up no other look.
                    self._looking.add(operation.pool)
                    self._spawn(self._look(operation))

    def _followed(self) -> list[PoolOperation]:
        """Operations running in GKE and not being looked at right now."""
        return [
            operation
            for operation in self._active()
            if operation.running is not None and operation.pool not in self._looking
        ]

    async def _look(self, operation: PoolOperation) -> None:
        try:
            await self._look_once(operation)
        finally:
            self._looking.discard(operation.pool)
            self._running_changed.set()  # when to look next has changed

    async def _look_once(self, operation: PoolOperation) -> None:
        name = operation.running
        if name is None:
            return
        self.stats.looks += 1
        try:
            current = await self.gke.operation(name)
        except GkeError as error:
            log.warning("reading operation %s: %s", name, error)
            operation.looked_at = self._clock()  # late looks, not a hot loop
            return
        except LeaseLost:
            raise
        except Exception:  # a bug: looked at again later, not in a hot loop
            log.exception("reading operation %s", name)
            operation.looked_at = self._clock()
            return
        if operation.running != name:
            return  # finished or replaced meanwhile
        if current.status == Operation.Status.DONE:
            self._learn(current)
            operation.running = None  # seen done once, not again next look
            self._spawn(self._done(operation, current))
        else:
            operation.looked_at = self._clock()

    def _next_look(self) -> float | None:
        """Seconds until the next look (<= CLOCK_SLACK: now); None: nothing runs."""
        running = self._followed()
        if not running:
            return None
        now = self._clock()
        due = min(self._due(operation, now) for operation in running)
        return due - now

    def _due(self, operation: PoolOperation, now: float) -> float:
        expected = self._durations.get(operation.running_type)
        if expected is None:
            # A kind not seen done yet: looked at every `poll` until it is (a tenth of
            # a guess was five looks a second, for minutes, at a TPU slice's create).
            return operation.looked_at + self.poll  # set with started_at, then only later
        done_at = operation.started_at + expected
        # A look within CLOCK_SLACK of the usual end was the look at it: due again at
        # done_at, it would be due at once, and a clock that moves only when every task
        # waits (the virtual tier's) would see it looked at again and again, for ever.
        if operation.looked_at + CLOCK_SLACK < done_at:
            return done_at
        # Later than usual: look again after a tenth of its usual time (within bounds).
        late = min(max(expected * LATE_SHARE, MIN_LOOK_SECONDS), self.poll)
        return operation.looked_at + late

    def _learn(self, done: Operation) -> None:
        """How long GKE took, by operation type (a moving average of its own times)."""
        try:
            start, end = rfc3339.parse(done.start_time), rfc3339.parse(done.end_time)
        except ValueError:
            return
        took = max((end - start).total_seconds(), 0.0)
        kind = int(done.operation_type)
        known = self._durations.get(kind)
        self._durations[kind] = took if known is None else known + LEARNING * (took - known)


def began(operation: Operation, sent: float, answered: float, now: datetime) -> float:
    """When GKE started `operation`, on the scheduler's clock: its own `start_time`, as far
    back from the answer as the wall clock says, within the call's round trip (a skewed
    clock moves it no further). The answer's way back is not counted into the wait. `now`:
    the time of `answered`."""
    try:
        start = rfc3339.parse(operation.start_time)
    except ValueError:
        return answered
    ago = now - start
    return min(max(answered - ago.total_seconds(), sent), answered)
