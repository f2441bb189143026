"""The capacity history's shell (`controller.history`) with a fake API server that answers
slowly, as a real one does: concurrent passes adding waits lose none, a lost write answer
counts nothing twice, a failed re-read after a conflict fails nothing, and waits added
within FLUSH_SECONDS of a write reach the ConfigMap on the next flush."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from dws_operator.controller.history import FLUSH_SECONDS, READ_RETRY_SECONDS, CapacityHistory
from dws_operator.controller.kube import ApiError, Conflict, NotFound
from dws_operator.estimate import History, Wait

T0 = datetime(2026, 11, 1, tzinfo=UTC)
KEY = "tpu-v6e.4x4.x1.FlexStart.us-east5-a"


class SlowServer:
    """One ConfigMap; every call takes a moment (other passes run meanwhile)."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0
        self.lose_next_answer = False
        self.fail_reads = False

    async def call(self, method: str, path: str, *, body: Any = None, **_: Any) -> Any:
        await asyncio.sleep(0.01)
        if method == "GET":
            if self.fail_reads:
                raise ApiError(500, "unavailable")
            if self.stored is None:
                raise NotFound(404, "not found")
            return json.loads(json.dumps(self.stored))
        given = (body.get("metadata") or {}).get("resourceVersion")
        if method == "PUT" and given != str(self.version):
            raise Conflict(409, "the object has been modified")
        if method == "POST" and self.stored is not None:
            raise Conflict(409, "already exists")
        self.version += 1
        self.stored = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": str(self.version)},
        }
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise ApiError(504, "the answer was lost")
        return self.stored

    def waits(self) -> list[float]:
        assert self.stored is not None
        return [row[0] for row in json.loads(self.stored["data"][KEY])]


def history(server: SlowServer, clock: list[float]) -> CapacityHistory:
    return CapacityHistory(server, "ops", "waits", lambda: clock[0])  # type: ignore[arg-type]


def wait(seconds: float) -> tuple[str, Wait]:
    return KEY, Wait(seconds, False, T0 + timedelta(seconds=seconds))


def test_concurrent_passes_lose_no_wait() -> None:
    server, clock = SlowServer(), [0.0]
    waits = history(server, clock)

    async def main() -> None:
        await asyncio.gather(*(waits.add([wait(float(s))]) for s in range(1, 6)))
        clock[0] += FLUSH_SECONDS
        await waits.flush(force=False)

    asyncio.run(main())
    assert sorted(server.waits()) == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_lost_answer_then_a_conflict_counts_nothing_twice() -> None:
    server, clock = SlowServer(), [0.0]
    waits = history(server, clock)

    async def main() -> None:
        server.lose_next_answer = True
        await waits.add([wait(1.0)])  # written, but the answer lost: kept as unwritten
        clock[0] += FLUSH_SECONDS
        await waits.flush()  # conflicts (the version moved), merges: 1.0 is there already

    asyncio.run(main())
    assert server.waits() == [1.0]


def test_a_failed_read_after_a_conflict_keeps_the_waits_for_later() -> None:
    server, clock = SlowServer(), [0.0]
    other = history(server, clock)
    waits = history(server, clock)

    async def main() -> None:
        await waits.estimate(KEY)  # read: no ConfigMap yet
        await other.add([wait(1.0)])  # another writer makes it
        server.fail_reads = True
        await waits.add([wait(2.0)])  # POST conflicts, the re-read fails: logged, kept
        server.fail_reads = False
        clock[0] += FLUSH_SECONDS
        await waits.flush()

    asyncio.run(main())
    assert sorted(server.waits()) == [1.0, 2.0]


def test_waits_added_soon_after_a_write_go_with_the_next_flush() -> None:
    server, clock = SlowServer(), [0.0]
    waits = history(server, clock)

    async def main() -> None:
        await waits.add([wait(1.0)])
        clock[0] += 1
        await waits.add([wait(2.0)])
        assert server.waits() == [1.0]
        await waits.flush(force=False)  # the operator's timer, too soon: nothing
        assert server.waits() == [1.0]
        clock[0] += FLUSH_SECONDS
        await waits.flush(force=False)

    asyncio.run(main())
    assert server.waits() == [1.0, 2.0]
    assert History.from_data(server.stored["data"] if server.stored else {}).estimate(KEY).p50


def test_an_unreadable_history_is_read_again_later_and_never_overwritten() -> None:
    server, clock = SlowServer(), [0.0]
    stored = history(server, clock)

    async def main() -> tuple[bool, bool, float | None]:
        await stored.add([wait(1.0)])  # the stored history: one wait
        server.fail_reads = True
        waits = history(server, clock)
        await waits.add([wait(2.0)])  # not read: kept, not written over the stored one
        unread = waits.read
        clock[0] += READ_RETRY_SECONDS - 1
        await waits.estimate(KEY)  # too soon to read again
        still = waits.read
        server.fail_reads = False
        clock[0] += 1
        found = await waits.estimate(KEY)  # read now: both waits
        clock[0] += FLUSH_SECONDS
        await waits.flush()
        return unread or still, waits.read, found.p50

    early, read, p50 = asyncio.run(main())
    assert (early, read) == (False, True)
    assert p50 == 1.0
    assert sorted(server.waits()) == [1.0, 2.0]
