"""Simulated time: the emulator's operations, the autoscaler and the scenarios all count
simulated seconds, run `factor` times faster than real ones, so GKE's minutes pass in
seconds and every duration stays in GKE's own units."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta

from dws_operator import rfc3339

#: Share of an operation's latency spent PENDING before it turns RUNNING.
PENDING_SHARE = 0.2


def now_rfc3339() -> str:
    """Now, as GKE writes its operation times (milliseconds)."""
    return rfc3339.milliseconds(rfc3339.now())


class SimClock:
    """Simulated seconds since `start`, running `factor` times faster than `real`."""

    def __init__(self, factor: float, real: Callable[[], float] = time.monotonic) -> None:
        self.factor = factor
        self._real = real
        self._start = real()
        #: The simulated calendar starts at the real one's now.
        self.epoch = rfc3339.now()

    def now(self) -> float:
        return (self._real() - self._start) * self.factor

    def utc(self) -> datetime:
        """Simulated UTC now: calendar times (a booking's window) are read against it."""
        return self.epoch + timedelta(seconds=self.now())

    def real_seconds(self, simulated: float) -> float:
        return simulated / self.factor
