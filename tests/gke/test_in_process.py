"""InProcessGke (tests/fakes/gke.py, the virtual tier's GKE) held to the served emulator
behind the real google-cloud-container client. Every test runs on both sides, [served]
over a real gRPC channel to 127.0.0.1 and [in-process] without gRPC, through
NodePoolClient and the raw client, with the same assertions; the last compares the two
call logs record by record. Operations move by a ManualClock that the tests and the
client's pauses move, on both sides: nothing waits on the machine's clock."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
import pytest
from google.api_core import exceptions as core_exceptions
from google.cloud import container_v1

from dws_operator.gke import GkeError, NodePoolClient, PollPolicy, RetryPolicy, connect
from dws_operator.gke import pool_labels as labels
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    CallRecord,
    ClusterManagerEmulator,
    EmulatorConfig,
    MethodFaults,
)
from tests.builders import gpu, tpu
from tests.clocks import ManualClock
from tests.fakes.gke import InProcessGke
from tests.gke.harness import UID, rendered

T = TypeVar("T")
Operation, NodePool = container_v1.Operation, container_v1.NodePool
OK, NOT_FOUND, EXISTS, LOST = "OK", "NOT_FOUND", "ALREADY_EXISTS", "DEADLINE_EXCEEDED"

#: Virtual seconds: an operation is PENDING 2 s, then RUNNING until 10 s after it began.
CONFIG = EmulatorConfig(operation_latency_seconds=10.0)
#: Polls after 1, 2, 4, 4... s; retries after 1 and 2 s; all on the ManualClock.
POLL = PollPolicy(initial_delay=1.0, max_delay=4.0, multiplier=2.0, timeout=600.0)
RETRY = RetryPolicy(attempts=3, initial_delay=1.0, multiplier=2.0, max_delay=4.0)
SIDES = ("served", "in-process")


@dataclass
class Gke:
    """One side: the emulator, a client of it, the clock both go by, and the operator's
    NodePoolClient over that client, pausing on that clock."""

    emulator: ClusterManagerEmulator
    api: Any
    clock: ManualClock
    client: NodePoolClient

    def codes(self, method: str) -> list[str]:
        return [call.code.name for call in self.emulator.calls_for(method)]

    async def status(self, name: str) -> str | None:
        """The pool's status as NodePoolClient reads it; None when there is none."""
        pool = await self.client.get(name)
        return pool.status.name if pool is not None else None


def on(side: str, scenario: Callable[[Gke], Awaitable[T]], config: EmulatorConfig = CONFIG) -> T:
    """Run `scenario` against `side`: the emulator served, or answered in process."""

    async def main() -> T:
        clock = ManualClock()

        async def sleep(seconds: float) -> None:
            clock.tick(seconds)
            await asyncio.sleep(0)

        def gke(emulator: ClusterManagerEmulator, api: Any) -> Gke:
            # Unjittered pauses (rng 0): the same on both sides.
            options: dict[str, Any] = {"clock": clock, "sleep": sleep, "rng": lambda: 0.0}
            client = NodePoolClient(api, DEFAULT_CLUSTER, poll=POLL, retry=RETRY, **options)
            return Gke(emulator, api, clock, client)

        if side == "in-process":
            emulator = ClusterManagerEmulator(config, clock=clock)
            return await scenario(gke(emulator, InProcessGke(emulator)))
        async with (
            ClusterManagerEmulator(config, clock=clock) as emulator,
            connect(emulator.endpoint) as api,
        ):
            return await scenario(gke(emulator, api))

    return asyncio.run(main())


@pytest.fixture(params=SIDES)
def side(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def path(name: str) -> str:
    return f"{DEFAULT_CLUSTER}/nodePools/{name}"


def slice_pool(name: str = "dws-pool", *, spot: bool = False, topology: str = "") -> NodePool:
    """A v6e 4x4 flex-start slice (4 hosts, 16 chips, one zone); Spot or another
    topology for what GKE refuses."""
    pool = rendered(tpu("v6e", "4x4"), name=name)
    pool.config.spot = spot
    if topology:
        pool.placement_policy.tpu_topology = topology
    return pool


def gpu_pool(name: str = "dws-gpus") -> NodePool:
    """Two L4 Spot nodes in one zone, autoscaled: its ceiling can be capped."""
    zone = {"zones": ["us-east5-a"]}
    return rendered(gpu("nvidia-l4", nodes=2, count=1), "Spot", name=name, provisioning=zone)


async def refused(call: Awaitable[Any]) -> GkeError:
    with pytest.raises(GkeError) as caught:
        await call
    return caught.value


def verdict(error: GkeError) -> tuple[str, str, bool]:
    return (error.code.name if error.code else "", error.reason, error.retryable)


def test_create_follows_its_operation_to_done(side: str) -> None:
    pool = slice_pool()

    async def scenario(gke: Gke) -> None:
        created = await gke.client.create(pool, UID)
        operation = created.operation
        assert operation is not None
        assert operation.status == Operation.Status.PENDING
        assert operation.operation_type == Operation.Type.CREATE_NODE_POOL
        assert operation.target_link.endswith(path(pool.name))
        assert await gke.status(pool.name) == "PROVISIONING"
        gke.clock.tick(5)
        raw = await gke.api.get_operation(name=gke.client.cluster.operation(operation.name))
        assert raw.status == Operation.Status.RUNNING
        done = await gke.client.wait(operation)
        assert (done.status, done.error.code) == (Operation.Status.DONE, 0)
        assert gke.clock.now == 100 + 5 + 1 + 2 + 4  # three polls, the last past 10 s
        assert await gke.status(pool.name) == "RUNNING"
        [listed] = await gke.client.list_pools()
        assert (listed.config, listed.autoscaling) == (pool.config, pool.autoscaling)
        raw_list = await gke.api.list_node_pools(request={"parent": DEFAULT_CLUSTER})
        assert list(raw_list.node_pools) == [listed]
        assert gke.codes("GetOperation") == [OK] * 4
        assert gke.emulator.calls_for("CreateNodePool")[0].request.node_pool == pool

    on(side, scenario)


def test_a_second_create_adopts_our_pool_and_refuses_anothers(side: str) -> None:
    theirs = slice_pool()
    theirs.config.resource_labels = labels("other", "job", "someone-else")

    async def scenario(gke: Gke) -> None:
        await gke.client.create(slice_pool(), UID)
        with pytest.raises(core_exceptions.AlreadyExists) as raw:
            await gke.api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=slice_pool())
        assert raw.value.message == f"Already exists: {path('dws-pool')}."
        adopted = await gke.client.create(slice_pool(), UID)
        assert (adopted.adopted, adopted.pool.status.name) == (True, "PROVISIONING")
        error = await refused(gke.client.create(theirs, "someone-else"))
        assert verdict(error) == (EXISTS, "NodePoolNameTaken", False)
        assert gke.codes("CreateNodePool") == [OK, EXISTS, EXISTS, EXISTS]
        assert gke.codes("GetNodePool") == [OK, OK]

    on(side, scenario)


def test_a_missing_pool_is_not_found(side: str) -> None:
    async def scenario(gke: Gke) -> None:
        assert await gke.client.get("dws-none") is None
        assert await gke.client.delete("dws-none") is None
        assert await gke.client.scale_to_zero("dws-none") is None
        with pytest.raises(core_exceptions.NotFound) as raw:
            await gke.api.get_node_pool(name=path("dws-none"), timeout=10)
        error = raw.value
        assert str(error) == f"404 Not found: {path('dws-none')}."
        # The gRPC error under it, as the real client's channel gives it.
        assert isinstance(error.response, grpc.aio.AioRpcError)
        assert (error.__cause__, error.errors) == (error.response, [error.response])
        assert error.response.code() == grpc.StatusCode.NOT_FOUND
        assert error.response.details() == error.message
        missing = await refused(gke.client.operation("operation-1-0"))
        assert verdict(missing) == (NOT_FOUND, "OperationNotFound", False)
        assert gke.codes("GetNodePool") == [NOT_FOUND] * 3
        assert gke.codes("DeleteNodePool") == [NOT_FOUND]

    on(side, scenario)


@pytest.mark.parametrize(
    ("pool", "words"),
    [
        (slice_pool(spot=True), "node_pool.config.spot: flex-start node pools cannot use Spot"),
        (slice_pool(topology="4x4x1"), "'4x4x1' is not a 2-D topology of TPU v6e"),
    ],
    ids=["flex-start-spot", "tpu-topology-shape"],
)
def test_a_refused_create_is_classified_alike(side: str, pool: NodePool, words: str) -> None:
    async def scenario(gke: Gke) -> None:
        error = await refused(gke.client.create(pool, UID))
        assert verdict(error) == ("INVALID_ARGUMENT", "InvalidArgument", False)
        assert words in error.message
        [call] = gke.emulator.calls_for("CreateNodePool")
        assert (call.code, call.message) == (error.code, error.message)
        assert await gke.client.list_pools() == []

    on(side, scenario)


def test_accelerator_quota_is_resource_exhausted(side: str) -> None:
    async def scenario(gke: Gke) -> None:
        gke.emulator.set_quota("tpu-v6e-slice", 8)
        error = await refused(gke.client.create(slice_pool(), UID))
        assert verdict(error) == ("RESOURCE_EXHAUSTED", "QuotaExceeded", False)
        assert error.message == (
            'Insufficient quota to satisfy request: resource "tpu-v6e-slice": request '
            "requires '16' and is short '8'. Project has a quota of '8' with '8' available."
        )
        gke.emulator.set_quota("tpu-v6e-slice", None)
        assert (await gke.client.create(slice_pool(), UID)).operation is not None
        assert gke.codes("CreateNodePool") == ["RESOURCE_EXHAUSTED", OK]

    on(side, scenario)


@pytest.mark.parametrize(
    ("code", "reason", "attempts"),
    [("UNAVAILABLE", "Unavailable", 3), ("PERMISSION_DENIED", "PermissionDenied", 1)],
)
def test_injected_errors_are_classified_and_retried_alike(
    side: str, code: str, reason: str, attempts: int
) -> None:
    async def scenario(gke: Gke) -> None:
        faults = MethodFaults(error_rate=1.0, error_code=code, error_message=f"{code} now")
        gke.emulator.set_faults("CreateNodePool", faults)
        error = await refused(gke.client.create(slice_pool(), UID))
        assert verdict(error) == (code, reason, attempts > 1)
        assert error.message == f"{code} now"
        assert gke.codes("CreateNodePool") == [code] * attempts
        assert gke.clock.now == 100 + sum(RETRY.delays()[: attempts - 1])
        assert await gke.status("dws-pool") is None

    on(side, scenario)


def test_a_lost_answer_is_deadline_exceeded_and_the_change_made(side: str) -> None:
    async def scenario(gke: Gke) -> None:
        gke.emulator.set_faults("CreateNodePool", MethodFaults(lost_answers=1))
        with pytest.raises(core_exceptions.DeadlineExceeded) as raw:
            await gke.api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=slice_pool("dws-a"))
        assert raw.value.message == "Deadline Exceeded"
        assert await gke.status("dws-a") == "PROVISIONING"
        # NodePoolClient tries again, meets its own pool and adopts it.
        gke.emulator.set_faults("CreateNodePool", MethodFaults(lost_answers=1))
        assert (await gke.client.create(slice_pool("dws-b"), UID)).adopted
        assert gke.codes("CreateNodePool") == [LOST, LOST, EXISTS]
        # The client's own deadline passes first (0.05 s): nothing done, nothing logged.
        gke.emulator.set_faults("GetCluster", MethodFaults(latency_seconds=5.0))
        gke.client.call_timeout, gke.client.retry = 0.05, RetryPolicy(attempts=1)
        late = await refused(gke.client.master_version())
        assert verdict(late) == (LOST, "DeadlineExceeded", True)
        assert late.message == "Deadline Exceeded"
        assert gke.codes("GetCluster") == []

    on(side, scenario)


def test_resize_autoscaling_and_delete_operations(side: str) -> None:
    pool = gpu_pool()

    async def scenario(gke: Gke) -> None:
        created = await gke.client.create(pool, UID)
        assert created.operation is not None
        # One operation per pool: three tries over 3 s, the create still running.
        busy = await refused(gke.client.delete(pool.name))
        assert verdict(busy) == ("FAILED_PRECONDITION", "OperationInProgress", True)
        assert created.operation.name in busy.message
        await gke.client.wait(created.operation)
        request = {"name": path(pool.name), "node_count": 3}
        resized = await gke.client.wait(await gke.api.set_node_pool_size(request=request))
        assert resized.operation_type == Operation.Type.SET_NODE_POOL_SIZE
        assert gke.emulator.node_count(path(pool.name)) == 3
        assert await gke.client.scale_to_zero(pool.name) is not None
        assert gke.emulator.node_count(path(pool.name)) == 0
        [capped] = await gke.client.list_pools()
        assert (capped.autoscaling.enabled, capped.autoscaling.max_node_count) == (True, 0)
        deleting = await gke.client.delete(pool.name)
        assert deleting is not None
        assert await gke.status(pool.name) == "STOPPING"
        await gke.client.wait(deleting)
        assert await gke.status(pool.name) is None
        assert await gke.client.delete(pool.name) is None
        assert gke.codes("DeleteNodePool") == ["FAILED_PRECONDITION"] * 3 + [OK, NOT_FOUND]
        assert gke.codes("SetNodePoolSize") == [OK, OK]
        assert gke.codes("SetNodePoolAutoscaling") == [OK]

    on(side, scenario)


def test_an_answer_is_the_callers_own(side: str) -> None:
    async def scenario(gke: Gke) -> None:
        await gke.client.create(slice_pool(), UID)
        got = await gke.api.get_node_pool(name=path("dws-pool"))
        got.config.resource_labels["changed"] = "by-the-caller"
        [call] = gke.emulator.calls_for("GetNodePool")
        assert "changed" not in call.response.config.resource_labels
        with pytest.raises(ValueError, match="individual field arguments"):
            await gke.api.get_node_pool(request={"name": path("dws-pool")}, name="x")

    on(side, scenario)


async def tour(gke: Gke) -> None:
    """A bit of everything above, each step's GkeError kept quiet."""
    gke.emulator.set_quota("nvidia-l4", 3)
    gke.emulator.set_faults("GetOperation", MethodFaults(error_rate=0.3))
    gke.emulator.set_faults("CreateNodePool", MethodFaults(lost_answers=1))

    async def step(call: Awaitable[Any], wait: bool = True) -> None:
        try:
            answer = await call
            operation = getattr(answer, "operation", answer)
            if wait and isinstance(operation, Operation):
                await gke.client.wait(operation)
        except GkeError:
            pass

    for pool in (slice_pool(), gpu_pool(), slice_pool(spot=True), gpu_pool("dws-more")):
        await step(gke.client.create(pool, UID))
    await step(gke.client.scale_to_zero("dws-gpus"))
    await step(gke.client.relabel("dws-pool", {"team": "b"}), wait=False)
    await step(gke.client.delete("dws-pool"))  # refused: the relabelling runs 10 s
    gke.clock.tick(10)
    await step(gke.client.delete("dws-pool"))
    await step(gke.client.delete("dws-pool"))
    await step(gke.client.master_version())


def transcript(emulator: ClusterManagerEmulator) -> list[tuple[Any, ...]]:
    """The call log without what differs by design: the peer, and the wall clock in
    operation names and times."""

    def plain(message: Any) -> str:
        text = message if isinstance(message, str) else type(message).to_json(message)
        text = re.sub(r"operation-\d+-", "operation-", text)
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "TIME", text)

    def row(c: CallRecord) -> tuple[Any, ...]:
        answer = "" if c.response is None else c.response
        texts = (plain(c.request), plain(c.message), plain(answer))
        return (c.method, c.code.name, *texts, c.started, c.duration)

    return [row(call) for call in emulator.calls]


def test_the_call_logs_agree_record_by_record() -> None:
    async def logged(gke: Gke) -> list[tuple[Any, ...]]:
        await tour(gke)
        return transcript(gke.emulator)

    served, in_process = (on(s, logged, CONFIG.model_copy(update={"seed": 3})) for s in SIDES)
    codes = {call[1] for call in served}
    assert codes >= {OK, EXISTS, NOT_FOUND, LOST, "UNAVAILABLE"}
    assert codes >= {"INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION"}
    assert in_process == served
