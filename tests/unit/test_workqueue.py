"""The work queue: each key once however often it is added, never two workers on one
key, a key added while handled is handled again, deadlines and backoffs on a clock."""

from __future__ import annotations

import asyncio

from dws_operator.kubekit.workqueue import MAX_BACKOFF_SECONDS, WorkQueue, run_workers
from tests.clocks import ManualClock


def test_a_key_added_many_times_is_handled_once() -> None:
    async def scenario() -> None:
        queue: WorkQueue[str] = WorkQueue()
        for _ in range(1000):
            queue.add("a")
        queue.add("b")
        assert len(queue) == 2
        assert await queue.get() == "a"
        assert await queue.get() == "b"
        queue.done("a")
        queue.done("b")
        assert len(queue) == 0

    asyncio.run(scenario())


def test_a_key_added_while_handled_comes_back_after_done_not_before() -> None:
    async def scenario() -> None:
        queue: WorkQueue[str] = WorkQueue()
        queue.add("a")
        key = await queue.get()
        queue.add("a")  # a change while the pass runs
        assert len(queue) == 0  # not handed to a second worker
        assert key is not None
        queue.done(key)
        assert len(queue) == 1
        assert await queue.get() == "a"

    asyncio.run(scenario())


def test_add_after_keeps_the_soonest_deadline() -> None:
    async def scenario() -> None:
        clock = ManualClock(0.0)
        queue: WorkQueue[str] = WorkQueue(clock)
        queue.add_after("a", 60)
        queue.add_after("a", 10)
        queue.add_after("a", 30)  # later than the one known: ignored
        assert queue.waiting == 1
        clock.now = 9.9
        assert queue._promote_due() is not None
        assert len(queue) == 0
        clock.now = 10.0
        assert queue._promote_due() is None
        assert len(queue) == 1
        assert await queue.get() == "a"

    asyncio.run(scenario())


def test_backoff_doubles_per_failure_and_resets_on_success() -> None:
    async def scenario() -> None:
        queue: WorkQueue[str] = WorkQueue(ManualClock(0.0))
        delays = [queue.backoff("a") for _ in range(8)]
        assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, MAX_BACKOFF_SECONDS, 60.0]
        queue.succeeded("a")
        assert queue.backoff("a") == 1.0

    asyncio.run(scenario())


def test_forget_drops_deadlines() -> None:
    async def scenario() -> None:
        clock = ManualClock(0.0)
        queue: WorkQueue[str] = WorkQueue(clock)
        queue.add_after("a", 5)
        queue.forget("a")
        clock.now = 100
        assert queue._promote_due() is None
        assert len(queue) == 0

    asyncio.run(scenario())


def test_workers_never_handle_one_key_twice_at_once_and_survive_errors() -> None:
    async def scenario() -> None:
        queue: WorkQueue[int] = WorkQueue()
        inside: set[int] = set()
        overlaps: list[int] = []
        handled: list[int] = []

        async def handle(key: int) -> None:
            if key in inside:
                overlaps.append(key)
            inside.add(key)
            await asyncio.sleep(0.001)
            inside.discard(key)
            handled.append(key)
            if key == 3 and handled.count(3) == 1:
                raise RuntimeError("a bug in a pass must not end its worker")

        workers = asyncio.create_task(run_workers(queue, handle, 4))
        for round_ in range(20):
            for key in range(10):
                queue.add(key)
            await asyncio.sleep(0.0005 * round_)
        while len(queue) or handled.count(3) < 2:
            await asyncio.sleep(0.01)
        queue.close()
        await asyncio.wait_for(workers, 5)
        assert overlaps == []
        assert set(handled) == set(range(10))
        assert handled.count(3) >= 2  # backed off after the error, then handled again

    asyncio.run(scenario())


def test_a_key_due_a_hair_after_the_clock_is_handed_out_without_the_clock_moving() -> None:
    """A due time is a sum of clock readings (0.1 + 0.2 lands past 0.3): a clock that
    moves only when every task waits must not be waited on for that hair."""

    async def scenario() -> None:
        clock = ManualClock(0.1)
        queue: WorkQueue[str] = WorkQueue(clock)
        queue.add_after("a", 0.2)
        clock.now = 0.3  # not 0.30000000000000004, the due time
        assert await asyncio.wait_for(queue.get(), 1.0) == "a"

    asyncio.run(scenario())
