"""Events go out in the background, at a bounded rate, and never pile up without end."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from dws_operator.controller.events import EventPoster
from dws_operator.controller.kube import KubeApi


class _Recorder(KubeApi):
    """Only the Event call, recorded with the loop's time: what the poster sends."""

    def __init__(self) -> None:
        self.sent: list[tuple[float, str, Mapping[str, Any]]] = []

    async def post_event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        self.sent.append((asyncio.get_running_loop().time(), reason, involved))


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


def test_a_burst_goes_out_at_once_and_the_rest_at_the_rate() -> None:
    async def main() -> list[float]:
        kube = _Recorder()
        poster = EventPoster(kube, rate=50.0, burst=5, backlog=100)
        for i in range(15):
            poster.post(BODY, "Normal", f"R{i}", "m")
        task = asyncio.create_task(poster.run())
        began = asyncio.get_running_loop().time()
        while len(kube.sent) < 15:
            await asyncio.sleep(0.01)
        task.cancel()
        assert [reason for _, reason, _ in kube.sent] == [f"R{i}" for i in range(15)]
        # Only what names the object travels with the Event, not the whole body.
        assert kube.sent[0][2] == {
            "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": "7"}
        }
        return [at - began for at, _, _ in kube.sent]

    times = asyncio.run(main())
    assert times[4] < 0.05  # the burst
    # Ten more at 50/s: at least 0.2 s after the burst.
    assert times[14] - times[4] >= 0.18


def test_events_beyond_the_backlog_are_dropped_and_counted() -> None:
    async def main() -> EventPoster:
        poster = EventPoster(_Recorder(), backlog=3)
        for _ in range(5):
            poster.post(BODY, "Normal", "R", "m")
        return poster

    poster = asyncio.run(main())
    assert (poster.waiting, poster.dropped) == (3, 2)
