"""A request's daemon sleeps between passes, and a change of its Job wakes it early."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from dws_operator.controller.handlers import MIN_PASS_SECONDS, Wakeups, pause, run_passes


class Stopped:
    """kopf's `stopped` as a daemon sees it: falsy until stopping, awaitable with a timeout."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __bool__(self) -> bool:
        return self.event.is_set()

    async def wait(self, timeout: float | None = None) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.event.wait(), timeout)


@dataclass
class Decision:
    requeue_after: float | None


@dataclass
class Passes:
    """Stands in for the Reconciler: counts passes, answers the decisions it is given."""

    decisions: list[Decision | None]
    at: list[float] = field(default_factory=list)

    async def reconcile(self, namespace: str, name: str) -> Decision | None:
        self.at.append(time.monotonic())
        return self.decisions.pop(0)


def test_pause_ends_when_woken_or_stopped_and_otherwise_sleeps_its_delay() -> None:
    async def scenario() -> tuple[float, float, float]:
        stopped, wake = Stopped(), asyncio.Event()
        began = time.monotonic()
        await pause(stopped, wake, 0.3)
        slept = time.monotonic() - began
        asyncio.get_running_loop().call_later(0.05, wake.set)
        began = time.monotonic()
        await pause(stopped, wake, 60)
        woken = time.monotonic() - began
        wake.clear()
        asyncio.get_running_loop().call_later(0.05, stopped.event.set)
        began = time.monotonic()
        await pause(stopped, wake, 60)
        return slept, woken, time.monotonic() - began

    slept, woken, stopping = asyncio.run(scenario())
    assert slept >= 0.3
    assert woken < 10
    assert stopping < 10


def test_a_job_event_brings_the_next_pass_forward() -> None:
    async def scenario() -> Passes:
        wakeups = Wakeups()
        passes = Passes([Decision(requeue_after=60.0), None])
        stopped = Stopped()
        wake = wakeups.register("ns", "train")
        daemon = asyncio.create_task(
            run_passes(passes, "ns", "train", stopped, wake, logging.getLogger("t"))  # type: ignore[arg-type]
        )
        await asyncio.sleep(0.1)
        wakeups.wake("ns", "train")
        await asyncio.wait_for(daemon, timeout=10)  # the second decision (None) ends it
        return passes

    passes = asyncio.run(scenario())
    first, second = passes.at
    # Not before the minimum gap between passes, and long before the 60 s requeue.
    assert second - first >= MIN_PASS_SECONDS
    assert second - first < 10


def test_wakeups_belong_to_the_daemon_that_registered_them() -> None:
    async def scenario() -> tuple[bool, bool, bool]:
        wakeups = Wakeups()
        old = wakeups.register("ns", "train")
        new = wakeups.register("ns", "train")  # deleted and created again
        wakeups.forget("ns", "train", old)  # the old daemon's exit keeps the new flag
        wakeups.wake("ns", "train")
        wakeups.wake("ns", "other")  # nobody follows it: nothing happens
        woken = new.is_set()
        new.clear()
        wakeups.forget("ns", "train", new)
        wakeups.wake("ns", "train")  # after its daemon ended: no flag to raise
        return woken, old.is_set(), new.is_set()

    new_woken, old_woken, after_forget = asyncio.run(scenario())
    assert new_woken
    assert not old_woken
    assert not after_forget
