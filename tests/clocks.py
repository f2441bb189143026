"""A clock the test moves: what the code under test reads as time goes on only when the
test says so, however slow the machine."""

from __future__ import annotations


class ManualClock:
    """A monotonic clock (seconds) standing at `start` until moved."""

    def __init__(self, start: float = 100.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def tick(self, seconds: float) -> None:
        self.now += seconds
