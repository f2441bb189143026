"""The operation follower's pacing: a look just made is never due again at the same
reading of the clock (a clock that moves only when every task waits, as the virtual
tier's, would otherwise never move: the loop looks again and again, for ever)."""

from __future__ import annotations

import asyncio
from typing import Any

from dws_operator.controller.operation_follower import CLOCK_SLACK, OperationFollower
from dws_operator.controller.pool_operation import PoolOperation, Priority, SchedulerStats
from dws_operator.gke.client import Operation
from tests.clocks import ManualClock

#: GKE's type of a create, and how long the follower has learned one takes.
CREATE = int(Operation.Type.CREATE_NODE_POOL)
USUAL = 20.0


class StillRunning:
    """GetOperation: the operation is still running; the looks are counted."""

    def __init__(self) -> None:
        self.looks = 0

    async def operation(self, name: str) -> Operation:
        self.looks += 1
        return Operation(name=name, status=Operation.Status.RUNNING)


def following(clock: ManualClock, gke: Any, started_at: float) -> tuple[OperationFollower, Any]:
    operation = PoolOperation("pool-a", "Create", ("ns", "a"), Priority.CREATE, "", ())
    operation.running = "op-1"
    operation.running_type = CREATE
    operation.started_at = operation.looked_at = started_at
    tasks: set[asyncio.Future[None]] = set()

    def spawn(coroutine: Any) -> asyncio.Future[None]:
        task = asyncio.ensure_future(coroutine)
        tasks.add(task)
        return task

    follower = OperationFollower(
        gke, lambda: [operation], _never_done, spawn, SchedulerStats(), clock=clock
    )
    follower._durations[CREATE] = USUAL
    return follower, operation


async def _never_done(operation: PoolOperation, done: Operation) -> None:
    raise AssertionError("the operation is still running")


def test_a_look_made_a_hair_before_the_usual_end_is_not_due_again_at_once() -> None:
    # Its usual end lands within CLOCK_SLACK after the look: a sum of clock readings.
    clock = ManualClock(100.0)
    follower, operation = following(clock, StillRunning(), 100.0 - USUAL + CLOCK_SLACK / 2)
    operation.looked_at = clock.now  # looked at just now: still running
    assert follower._due(operation, clock.now) > clock.now + CLOCK_SLACK


def test_the_follower_looks_once_per_reading_of_a_clock_that_does_not_move() -> None:
    async def scenario() -> None:
        clock = ManualClock(100.0)
        gke = StillRunning()
        follower, _ = following(clock, gke, 100.0 - USUAL + CLOCK_SLACK / 2)
        running = asyncio.ensure_future(follower.run())
        for _ in range(200):
            await asyncio.sleep(0)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        assert gke.looks == 1

    asyncio.run(scenario())
