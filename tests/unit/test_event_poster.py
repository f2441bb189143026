"""Events go out in the background, at a bounded rate, and never pile up without end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dws_operator.controller.kube import KubeApi
from dws_operator.kubekit.events import EventPoster


class _Recorder(KubeApi):
    """Only the Event call, recorded with the time `clock` says: what the poster sends."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.sent: list[tuple[float, str, Mapping[str, Any]]] = []
        #: The time each Event says it happened.
        self.at: list[datetime] = []
        self._clock = clock

    async def post_event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        at: datetime,
    ) -> None:
        self.sent.append((self._clock(), reason, involved))
        self.at.append(at)


class _Time:
    """The poster's clock, moved only by its own pauses: a machine too busy to run the
    test on time changes nothing."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds
        await _real_sleep(0)


_real_sleep = asyncio.sleep


BODY = {
    "metadata": {
        "name": "r",
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "7",
        "managedFields": [{"manager": "x"}],
    },
    "spec": {"big": "x" * 1000},
}


#: The operator's date when the poster's monotonic clock reads 0.
START = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_a_burst_goes_out_at_once_and_the_rest_at_the_rate() -> None:
    clock = _Time()

    async def main() -> list[float]:
        kube = _Recorder(clock.monotonic)
        poster = EventPoster(
            kube,
            rate=50.0,
            burst=5,
            backlog=100,
            clock=clock.monotonic,
            sleep=clock.sleep,
            wall=lambda: START + timedelta(seconds=clock.now),
        )
        for i in range(15):
            poster.post(BODY, "Normal", f"R{i}", "m")
        task = asyncio.create_task(poster.run())
        while len(kube.sent) < 15:
            await _real_sleep(0.01)
        task.cancel()
        assert [reason for _, reason, _ in kube.sent] == [f"R{i}" for i in range(15)]
        # Only what names the object travels with the Event, not the whole body.
        assert kube.sent[0][2] == {
            "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
        }
        # Each says when it happened (all at once), not when its turn to be sent came.
        assert kube.at == [START] * 15
        return [at for at, _, _ in kube.sent]

    times = asyncio.run(main())
    # The burst at once, then ten more at 50/s: one every 20 ms.
    assert clock.pauses == [0.0] * 5 + [pytest.approx(0.02)] * 10
    assert times == [0.0] * 5 + [pytest.approx(0.02 * i) for i in range(1, 11)]


def test_events_beyond_the_backlog_are_dropped_and_counted() -> None:
    async def main() -> EventPoster:
        poster = EventPoster(_Recorder(), backlog=3)
        for _ in range(5):
            poster.post(BODY, "Normal", "R", "m")
        return poster

    poster = asyncio.run(main())
    assert (poster.waiting, poster.dropped) == (3, 2)
