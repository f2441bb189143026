"""Kubernetes Events, posted in the background at a bounded rate.

Events are for people reading `kubectl describe`; status is what the operator and
GitOps tools read. So a pass never waits for an Event, and in a burst (a thousand
requests created in a minute, each with its first Event) Events queue up and go out at
a steady rate instead of competing with status writes for the API server, as
client-go's event broadcaster queues them behind its client's rate limit. A backlog
beyond `backlog` is dropped (counted and logged), as client-go drops Events when its
queue is full: an operator must never run out of memory over Events.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dws_operator.kubekit.api import EventWriter

log = logging.getLogger(__name__)

#: Events posted per second at most, after a first burst of this many.
RATE = 20.0
BURST = 50
#: Events waiting at most; more are dropped.
BACKLOG = 5000


@dataclass(frozen=True)
class _Event:
    involved: Mapping[str, Any]
    type: str
    reason: str
    message: str
    #: When it happened (the poster's `wall`): a backlog may send it much later.
    at: datetime


class EventPoster:
    def __init__(
        self,
        kube: EventWriter,
        rate: float = RATE,
        burst: int = BURST,
        backlog: int = BACKLOG,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.kube = kube
        self._clock = clock
        self._wall = wall
        self._sleep = sleep
        self.rate = rate
        self.burst = burst
        self.posted = 0
        self.dropped = 0
        self._queue: asyncio.Queue[_Event] = asyncio.Queue(maxsize=backlog)
        self._tokens = float(burst)
        self._filled_at = clock()

    def post(self, involved: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        """Queue an Event about `involved` (an object's body); never blocks."""
        metadata = involved.get("metadata") or {}
        # Only what the Event names of its object: the body itself may be large.
        about = {
            "metadata": {
                k: metadata.get(k) for k in ("name", "namespace", "uid", "resourceVersion")
            }
        }
        try:
            self._queue.put_nowait(_Event(about, type_, reason, message, self._wall()))
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("%d Events dropped: more than %d waiting", self.dropped, self.backlog)

    @property
    def backlog(self) -> int:
        return self._queue.maxsize

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            await self._sleep(self._wait_for_token())
            # post_event logs its own failures: an Event is never retried.
            await self.kube.post_event(
                event.involved, event.type, event.reason, event.message, event.at
            )
            self.posted += 1

    def _wait_for_token(self) -> float:
        """Seconds until the next Event may go (a token bucket), taking its token."""
        now = self._clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._filled_at) * self.rate)
        self._filled_at = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate
