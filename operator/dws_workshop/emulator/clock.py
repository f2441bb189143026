"""Simulated time: the emulator's operations, the autoscaler and the scenarios all count
simulated seconds, run `factor` times faster than real ones, so GKE's minutes pass in
seconds and every duration stays in GKE's own units."""

from __future__ import annotations

import threading
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
    """Simulated seconds since `start`, running `factor` times faster than `real`.

    A test may move it on at once (`jump`: days of a calendar block skipped) or change
    its pace (`set_factor`: slower around a deadline the test looks at closely); the
    time it shows never goes back."""

    def __init__(
        self,
        factor: float,
        real: Callable[[], float] = time.monotonic,
        epoch: datetime | None = None,
    ) -> None:
        self.factor = factor
        self._real = real
        self._lock = threading.Lock()
        #: Simulated seconds at the real moment `_since`, from which `factor` runs.
        self._base = 0.0
        self._since = real()
        #: Where the simulated calendar starts: the real one's now unless given.
        self.epoch = epoch or rfc3339.now()

    def now(self) -> float:
        with self._lock:
            return self._base + (self._real() - self._since) * self.factor

    def jump(self, seconds: float) -> None:
        """Move simulated time on by `seconds` at once."""
        if seconds < 0:
            raise ValueError("simulated time does not go back")
        with self._lock:
            self._base += seconds

    def set_factor(self, factor: float) -> None:
        """Run `factor` times faster than real time from now on."""
        if factor <= 0:
            raise ValueError("a clock factor is positive")
        with self._lock:
            now = self._real()
            self._base += (now - self._since) * self.factor
            self._since = now
            self.factor = factor

    def utc(self) -> datetime:
        """Simulated UTC now: calendar times (a booking's window) are read against it."""
        return self.epoch + timedelta(seconds=self.now())

    def real_seconds(self, simulated: float) -> float:
        return simulated / self.factor
