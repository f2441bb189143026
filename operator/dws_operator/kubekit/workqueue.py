"""A work queue of request keys, as controller-runtime's: each key is waited for once,
handled by one worker at a time, and handled again if it changed meanwhile.

Watch events, changes seen elsewhere and deadlines all end in `add` or `add_after`; a
thousand events about one request while it waits make one pass, not a thousand. A key
being handled that is added again is handled once more when its worker is done, so
no change is lost and no two workers ever decide about the same request at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

#: After a failed pass: 1 s, doubling per consecutive failure of that key, at most this.
MAX_BACKOFF_SECONDS = 60.0
#: A key due this soon is due now: its due time is a sum of clock readings, and lands a
#: hair past the clock's reading at that moment (a clock that moves only when every task
#: waits, as the tests' virtual one, would otherwise be waited on for ever).
CLOCK_SLACK = 1e-6


class WorkQueue(Generic[K]):
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._ready: deque[K] = deque()
        self._queued: set[K] = set()
        self._processing: set[K] = set()
        #: Added while being processed: queued again when its worker is done.
        self._dirty: set[K] = set()
        #: (due, seq, key); stale entries (a sooner one exists) are skipped when due.
        self._delayed: list[tuple[float, int, K]] = []
        self._due: dict[K, float] = {}
        self._seq = itertools.count()
        self._failures: dict[K, int] = {}
        self._changed = asyncio.Event()
        self._closed = False

    def __len__(self) -> int:
        return len(self._ready)

    @property
    def waiting(self) -> int:
        """Keys with a pass scheduled later (deadlines, backoffs)."""
        return len(self._due)

    def add(self, key: K) -> None:
        if key in self._processing:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._ready.append(key)
            self._changed.set()

    def add_after(self, key: K, delay: float) -> None:
        """Handle `key` in `delay` seconds (or sooner, if added sooner)."""
        if delay <= 0:
            self.add(key)
            return
        due = self._clock() + delay
        if self._due.get(key, float("inf")) <= due:
            return
        self._due[key] = due
        heapq.heappush(self._delayed, (due, next(self._seq), key))
        self._changed.set()

    def backoff(self, key: K) -> float:
        """Handle `key` again after a pause that doubles with each failure in a row."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        delay = min(2.0**failures, MAX_BACKOFF_SECONDS)
        self.add_after(key, delay)
        return delay

    def succeeded(self, key: K) -> None:
        self._failures.pop(key, None)

    def forget(self, key: K) -> None:
        """The object is gone: drop its deadlines and failure count."""
        self._failures.pop(key, None)
        self._due.pop(key, None)

    def close(self) -> None:
        self._closed = True
        self._changed.set()

    def _promote_due(self) -> float | None:
        """Move due keys to the ready queue; seconds until the next one, if any."""
        now = self._clock()
        while self._delayed:
            due, _, key = self._delayed[0]
            if self._due.get(key) != due:
                heapq.heappop(self._delayed)  # superseded or forgotten
                continue
            if due > now + CLOCK_SLACK:
                return due - now
            heapq.heappop(self._delayed)
            del self._due[key]
            self.add(key)
        return None

    async def get(self) -> K | None:
        """The next key to handle (call `done` after); None once closed."""
        while not self._closed:
            wait = self._promote_due()
            if self._ready:
                key = self._ready.popleft()
                self._queued.discard(key)
                self._processing.add(key)
                return key
            self._changed.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow a
            # cancellation that comes as the event is set, and the loop would go on.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._changed.wait()
        return None

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)


async def run_workers(
    queue: WorkQueue[K],
    handle: Callable[[K], Awaitable[None]],
    workers: int,
) -> None:
    """`workers` tasks taking keys from `queue` until it is closed (or cancelled).

    `handle` schedules its own follow-ups (`add_after`, `backoff`); an exception it
    lets through is logged and backed off, never allowed to end a worker.
    """

    async def work() -> None:
        while (key := await queue.get()) is not None:
            try:
                await handle(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                delay = queue.backoff(key)
                log.exception("handling %s failed; again in %.0fs", key, delay)
            finally:
                queue.done(key)

    await asyncio.gather(*(work() for _ in range(workers)))
