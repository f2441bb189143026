"""The operator's GKE operation scheduler against the emulator, through the real client:
never more operations in flight than the slots, what stops the bill first, creates in
request order, "Too many operations" backed off, terminal errors handed to the request."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable

import grpc

from dws_operator.controller.operations import OperationScheduler
from dws_operator.controller.pool_operation import CalledOff, PoolOperation, Priority
from dws_operator.controller.pools import PoolSnapshot
from dws_operator.gke import NodePoolClient, RetryPolicy, connect
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterManagerEmulator,
    EmulatorConfig,
    MethodFaults,
)
from tests.builders import gpu
from tests.gke.harness import UID, HeldClock, MakeEmulator, rendered

ONCE = RetryPolicy(attempts=1)
Woken = list[tuple[str, str]]
Scenario = Callable[[OperationScheduler, NodePoolClient, Woken], Awaitable[None]]
LATENCY = 0.3


def creation(
    gke: NodePoolClient, name: str, since: str, owner: str = "r", namespace: str = "ns"
) -> PoolOperation:
    pool = rendered(gpu("nvidia-l4", nodes=1, count=1), mode="Spot", name=name)

    async def create() -> object:
        return (await gke.create(pool, UID)).operation

    return PoolOperation(name, "Create", (namespace, owner), Priority.CREATE, since, (create,))  # type: ignore[arg-type]


def scheduled(
    emulator: ClusterManagerEmulator,
    scenario: Callable[
        [OperationScheduler, NodePoolClient, list[tuple[str, str]]], Awaitable[None]
    ],
    slots: int = 5,
) -> list[tuple[str, str]]:
    """Run `scenario` with a running scheduler; the requests it woke, in order."""
    woken: list[tuple[str, str]] = []

    async def main() -> None:
        async with connect(emulator.endpoint) as api:
            gke = NodePoolClient(api, DEFAULT_CLUSTER, retry=ONCE)
            snapshot = PoolSnapshot(gke, lambda _: None)
            scheduler = OperationScheduler(gke, snapshot, woken.append, slots=slots, poll=0.05)
            task = asyncio.create_task(scheduler.run())
            try:
                await scenario(scheduler, gke, woken)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return woken


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.02)


def test_never_more_in_flight_than_the_slots_and_creates_in_request_order(
    make_emulator: MakeEmulator,
) -> None:
    # The first five stay running until all five are in GKE, however slow the machine.
    clock = HeldClock()
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY), clock)
    names = [f"pool-{i:02d}" for i in range(12)]

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        # Submitted out of order; served by the requests' creation times.
        for i in reversed(range(12)):
            scheduler.submit(creation(gke, names[i], f"2026-11-23T10:00:{i:02d}Z", names[i]))
        queued = scheduler.view(names[11])
        assert queued is not None
        assert (queued.running, queued.position, queued.queued) == (False, 12, 12)
        await until(lambda: scheduler.running == 5)
        queued = scheduler.view(names[11])
        assert queued is not None
        assert (queued.position, queued.queued, queued.slots) == (7, 7, 5)  # five started
        await until(lambda: len(emulator.calls_for("CreateNodePool")) == 5)
        clock.release()
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)

    scheduled(emulator, scenario)
    creates = emulator.calls_for("CreateNodePool")
    made = [c.request.node_pool.name for c in creates]
    # Those started together reach GKE in any order; the batches follow request order.
    assert sorted(made[:5]) == names[:5]
    assert sorted(made[5:10]) == names[5:10]
    assert sorted(made[10:]) == names[10:]
    assert all(c.ok for c in creates)
    assert emulator.max_operations_in_flight() == 5


def test_namespaces_take_turns_a_crowd_in_one_does_not_hold_every_slot(
    make_emulator: MakeEmulator,
) -> None:
    """One namespace applies 200 requests, another 5 just after: the 5 are served among
    the first ten creates (the slots are shared in turn), not after the 200."""
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=0.05))
    crowd = [f"a-{i:03d}" for i in range(200)]
    few = [f"b-{i}" for i in range(5)]

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        for i, name in enumerate(crowd):
            stamp = f"2026-11-23T10:{i // 60:02d}:{i % 60:02d}Z"
            scheduler.submit(creation(gke, name, stamp, name, namespace="team-a"))
        for i, name in enumerate(few):
            stamp = f"2026-11-23T11:00:{i:02d}Z"
            scheduler.submit(creation(gke, name, stamp, name, namespace="team-b"))
        # The places told follow the turns: team-b's last is tenth, team-a's last is last.
        last_few, last_crowd = scheduler.view(few[-1]), scheduler.view(crowd[-1])
        assert last_few is not None
        assert last_crowd is not None
        assert (last_few.position, last_crowd.position, last_crowd.queued) == (10, 205, 205)
        assert scheduler.position_for(Priority.CREATE, "2026-11-23T12:00:00Z", "team-c") == 3
        made = lambda: {c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")}  # noqa: E731
        await until(lambda: set(few) <= made())

    scheduled(emulator, scenario)
    order = [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")]
    served = [order.index(name) for name in few]
    assert max(served) < 10, order[:12]
    # team-a was not starved either: it had its turns in between.
    assert len([name for name in order[:10] if name.startswith("a-")]) == 5


def test_scale_downs_overtake_waiting_creates(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        scheduler.submit(creation(gke, "old", "2026-11-23T09:00:00Z"))
        # Forgotten only once the snapshot shows the pool: a scale-down submitted while
        # the create is still known on the pool would be dropped (its owner re-submits).
        await until(lambda: scheduler.view("old") is None)
        for i in range(4):
            scheduler.submit(creation(gke, f"new-{i}", f"2026-11-23T10:00:0{i}Z"))
        scheduler.submit(
            PoolOperation(
                "old",
                "ScaleDown",
                ("ns", "old"),
                Priority.RELEASE,
                "2026-11-23T09:00:00Z",
                (lambda: gke.cap_autoscaling("old"), lambda: gke.resize_to_zero("old")),
            )
        )
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)

    scheduled(emulator, scenario, slots=1)
    order = [
        (c.method, getattr(c.request, "name", "") or c.request.node_pool.name)
        for c in emulator.calls
        if c.method in ("CreateNodePool", "SetNodePoolAutoscaling", "SetNodePoolSize")
    ]
    pool = f"{DEFAULT_CLUSTER}/nodePools/old"
    # All five were queued in one go (the dispatcher runs only when the submitter yields):
    # the scale-down's two calls first, in one slot, then the creates by request time.
    assert order == [
        ("CreateNodePool", "old"),
        ("SetNodePoolAutoscaling", pool),
        ("SetNodePoolSize", pool),
        *(("CreateNodePool", f"new-{i}") for i in range(4)),
    ]


def test_too_many_operations_from_someone_else_is_backed_off_not_hot_looped(
    make_emulator: MakeEmulator,
) -> None:
    """The operator thinks it has 6 slots; GKE allows 5 (another client holds one):
    the refusals are few, paused on, and every pool is still made."""
    # The first five stay running until the sixth has met the quota.
    clock = HeldClock()
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY), clock)

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        for i in range(12):
            scheduler.submit(creation(gke, f"pool-{i:02d}", f"2026-11-23T10:00:{i:02d}Z"))
        await until(lambda: len(emulator.calls_for("CreateNodePool")) == 6)
        clock.release()
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)

    scheduled(emulator, scenario, slots=6)
    creates = emulator.calls_for("CreateNodePool")
    refused = [c for c in creates if c.code == grpc.StatusCode.RESOURCE_EXHAUSTED]
    assert sorted(c.request.node_pool.name for c in creates if c.ok) == [
        f"pool-{i:02d}" for i in range(12)
    ]
    assert 1 <= len(refused) <= 3  # each refusal pauses the queue (2 s, doubling)
    assert emulator.max_operations_in_flight() == 5


def test_a_terminal_error_is_handed_to_its_request_and_frees_the_slot(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(
        EmulatorConfig(operation_latency_seconds=LATENCY, quotas={"nvidia-l4": 1})
    )

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, woken: list[tuple[str, str]]
    ) -> None:
        scheduler.submit(creation(gke, "fits", "2026-11-23T10:00:00Z", "fits"))
        scheduler.submit(creation(gke, "over", "2026-11-23T10:00:01Z", "over"))
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)
        assert scheduler.take_error("over", ("ns", "someone-else")) is None  # not theirs
        scheduler.submit(creation(gke, "over", "2026-11-23T10:00:01Z", "over"))
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)
        error = scheduler.take_error("over", ("ns", "over"))
        assert error is not None
        assert (error.reason, error.retryable) == ("QuotaExceeded", False)
        assert scheduler.take_error("over", ("ns", "over")) is None  # handed over once
        assert scheduler.take_error("fits", ("ns", "fits")) is None
        assert scheduler.view("over") is None

    woken = scheduled(emulator, scenario, slots=1)
    assert ("ns", "over") in woken
    assert ("ns", "fits") in woken


def test_a_create_not_started_can_be_called_off_by_its_request_only(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        scheduler.submit(creation(gke, "first", "2026-11-23T10:00:00Z", "first"))
        scheduler.submit(creation(gke, "second", "2026-11-23T10:00:01Z", "second"))
        await until(lambda: scheduler.running == 1)
        scheduler.cancel("second", ("ns", "someone-else"))
        assert scheduler.view("second") is not None
        scheduler.cancel("second", ("ns", "second"))
        assert scheduler.view("second") is None
        scheduler.cancel("first", ("ns", "first"))  # started in GKE: it runs to its end
        assert scheduler.view("first") is not None
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)

    scheduled(emulator, scenario, slots=1)
    assert [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")] == ["first"]


def test_an_operation_its_first_step_calls_off_ends_without_a_call_and_frees_the_slot(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))

    async def gone() -> None:
        raise CalledOff("the request is gone")

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        called_off = creation(gke, "gone", "2026-11-23T10:00:00Z", "gone")
        called_off.steps = (gone, *called_off.steps)
        scheduler.submit(called_off)
        scheduler.submit(creation(gke, "next", "2026-11-23T10:00:01Z", "next"))
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)
        assert scheduler.view("gone") is None
        assert scheduler.take_error("gone", ("ns", "gone")) is None

    woken = scheduled(emulator, scenario, slots=1)
    assert [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")] == ["next"]
    assert ("ns", "gone") in woken


def test_operations_are_followed_by_name_and_free_their_slot_when_done(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))
    # The pool read after each operation is slow: the next operation must not wait for it.
    emulator.set_faults("GetNodePool", MethodFaults(latency_seconds=1.0))
    names = [f"pool-{i:02d}" for i in range(4)]

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        for i, name in enumerate(names):
            scheduler.submit(creation(gke, name, f"2026-11-23T10:00:{i:02d}Z", name))
        # Forgotten once the snapshot shows each result.
        await until(lambda: all(scheduler.owner(name) is None for name in names))

    scheduled(emulator, scenario, slots=1)
    # One slot, creates one after another, each followed by name, never by listing the
    # location's operations (a list that grows with GKE's history).
    assert emulator.calls_for("ListOperations") == []
    gets = emulator.calls_for("GetOperation")
    assert len(names) <= len(gets) <= 4 * len(names), len(gets)
    creates = emulator.calls_for("CreateNodePool")
    assert [c.request.node_pool.name for c in creates] == names
    # Each next create reached GKE while the read of the pool before it was still under
    # way: the slot was given again when GKE showed the operation done.
    reads = emulator.calls_for("GetNodePool")
    for before, after in itertools.pairwise(creates):
        pool = f"/{before.request.node_pool.name}"
        # Its create's own look for the pool first (idempotence), then the read after.
        read = [r for r in reads if r.request.name.endswith(pool) and r.started > before.started]
        assert read, f"no read of {pool} after its create"
        assert after.started < read[0].started + read[0].duration, (before, after)


def test_the_next_in_line_are_prepared_while_the_slots_are_busy_and_no_further(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))
    names = [f"pool-{i}" for i in range(4)]
    #: Per pool, when it was prepared: its place in line (0: in a slot), and how many of
    #: GKE's slots the scheduler held.
    prepared: dict[str, tuple[int, int]] = {}

    def preparing(scheduler: OperationScheduler, name: str) -> Callable[[], Awaitable[None]]:
        async def prepare() -> None:
            assert name not in prepared, f"{name} prepared twice"
            view = scheduler.view(name)
            assert view is not None
            prepared[name] = (0 if view.running else view.position, scheduler.running)

        return prepare

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        for i, name in enumerate(names):
            operation = creation(gke, name, f"2026-11-23T10:00:0{i}Z", name)
            operation.prepare = preparing(scheduler, name)
            scheduler.submit(operation)
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)

    scheduled(emulator, scenario, slots=1)
    creates = emulator.calls_for("CreateNodePool")
    assert [c.request.node_pool.name for c in creates] == names
    # One slot: pool-0 prepared in it; each of the others while the one ahead held the
    # slot (so the slot went straight from one create to the next), and only once next
    # in line (no write for a request still further back).
    assert prepared == {"pool-0": (0, 1), "pool-1": (1, 1), "pool-2": (1, 1), "pool-3": (1, 1)}


def test_a_preparation_that_calls_off_ends_the_operation_and_one_that_fails_is_retried(
    make_emulator: MakeEmulator,
) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))
    tries: list[str] = []

    async def gone() -> None:
        tries.append("gone")
        raise CalledOff("the request is gone")

    async def flaky() -> None:
        tries.append("flaky")
        if tries.count("flaky") == 1:
            raise ConnectionResetError("the API server went away")

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        called_off = creation(gke, "gone", "2026-11-23T10:00:00Z", "gone")
        called_off.prepare = gone
        retried = creation(gke, "flaky", "2026-11-23T10:00:01Z", "flaky")
        retried.prepare = flaky
        scheduler.submit(called_off)
        scheduler.submit(retried)
        await until(lambda: len(emulator.calls_for("CreateNodePool")) == 1)
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)
        assert scheduler.view("gone") is None

    woken = scheduled(emulator, scenario, slots=1)
    assert [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")] == ["flaky"]
    # Prepared while "gone" held the slot, failed, then prepared again when its turn came.
    assert (tries.count("gone"), tries.count("flaky")) == (1, 2)
    assert ("ns", "gone") in woken


def test_only_creates_are_woken_as_the_line_moves_releases_only_when_done(
    make_emulator: MakeEmulator,
) -> None:
    """A create's status says its place in line, so it is told when that changes; a
    request whose pool waits to be scaled down has nothing to say until it is done."""
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=LATENCY))

    def release(gke: NodePoolClient, owner: str) -> PoolOperation:
        # The pool is gone already: nothing to do, done at once.
        steps = (lambda: gke.resize_to_zero(f"gone-{owner}"),)
        return PoolOperation(
            f"gone-{owner}", "ScaleDown", ("ns", owner), Priority.RELEASE, "", steps
        )  # type: ignore[arg-type]

    async def scenario(
        scheduler: OperationScheduler, gke: NodePoolClient, _: list[tuple[str, str]]
    ) -> None:
        scheduler.submit(creation(gke, "first", "2026-11-23T10:00:00Z", "first"))
        await until(lambda: scheduler.running == 1)
        for owner in ("rel-0", "rel-1", "rel-2"):
            scheduler.submit(release(gke, owner))
        for i in (1, 2):
            scheduler.submit(creation(gke, f"c-{i}", f"2026-11-23T10:00:0{i}Z", f"c-{i}"))
        await until(lambda: scheduler.running == 0 and scheduler.queued == 0)

    woken = scheduled(emulator, scenario, slots=1)
    for owner in ("rel-0", "rel-1", "rel-2"):
        assert woken.count(("ns", owner)) == 1, (owner, woken)  # when done, only
    # c-2 moved up the line (4th, then 1st) and then ran: told each time.
    assert woken.count(("ns", "c-2")) >= 3, woken
