"""GKE's concurrent-operations quota: a cluster runs at most N operations at once (5 by
default), refuses one more with RESOURCE_EXHAUSTED "Too many operations", and the
client retries that refusal until a slot frees."""

from __future__ import annotations

import grpc
import pytest
from google.api_core import exceptions as core_exceptions
from google.cloud import container_v1
from pydantic import ValidationError

from dws_operator.gke import GkeError, NodePoolClient, RetryPolicy
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ClusterManagerEmulator,
    EmulatorConfig,
)
from tests.builders import gpu
from tests.gke.harness import UID, MakeEmulator, ManualClock, rendered, run, serve

Api = container_v1.ClusterManagerAsyncClient
Operation = container_v1.Operation
OPERATIONS = "projects/dws-sandbox/locations/us-east5/operations"
OTHER = "projects/dws-sandbox/locations/us-east5/clusters/other"
LATENCY = 10.0


def too_many(cluster: str, quota: int) -> str:
    # GKE's wording, as the issue quotes it.
    return (
        f'Too many operations: cluster "{cluster}" hits the concurrent operations quota '
        f"{quota}, please try again later."
    )


def pool(name: str) -> container_v1.NodePool:
    return rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot", name=name)


async def create(api: Api, name: str, cluster: str = DEFAULT_CLUSTER) -> Operation:
    return await api.create_node_pool(parent=cluster, node_pool=pool(name))


async def status_of(api: Api, operation: Operation) -> int:
    current = await api.get_operation(name=f"{OPERATIONS}/{operation.name}")
    return int(current.status)


def test_the_sixth_concurrent_operation_is_refused_until_one_is_done() -> None:
    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        # An idle pool to delete later: its create is DONE before the others start.
        await create(api, "dws-idle")
        clock.now += LATENCY
        first = await create(api, "dws-0")
        clock.now += 1
        for i in range(1, 5):
            await create(api, f"dws-{i}")
        assert emulator.operations_in_flight() == 5

        with pytest.raises(core_exceptions.ResourceExhausted) as refused:
            await create(api, "dws-5")
        assert refused.value.grpc_status_code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.message == too_many("sandbox", 5)
        # Deletes (and every other pool change) start operations too: also refused.
        with pytest.raises(core_exceptions.ResourceExhausted) as deleting:
            await api.delete_node_pool(name=f"{DEFAULT_CLUSTER}/nodePools/dws-idle")
        assert deleting.value.message == too_many("sandbox", 5)
        request = container_v1.SetNodePoolSizeRequest(
            name=f"{DEFAULT_CLUSTER}/nodePools/dws-idle", node_count=0
        )
        with pytest.raises(core_exceptions.ResourceExhausted):
            await api.set_node_pool_size(request=request)
        # A refused call changes nothing.
        assert emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/dws-5") is None
        idle = emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/dws-idle")
        assert idle is not None
        assert idle.status == container_v1.NodePool.Status.RUNNING

        # The first operation is DONE; the other four are still running.
        clock.now += LATENCY - 1
        assert await status_of(api, first) == Operation.Status.DONE
        assert emulator.operations_in_flight() == 4
        accepted = await create(api, "dws-5")
        assert accepted.status == Operation.Status.PENDING
        with pytest.raises(core_exceptions.ResourceExhausted):
            await create(api, "dws-6")

    serve(EmulatorConfig(operation_latency_seconds=LATENCY), scenario)


def test_refusals_are_in_the_call_log() -> None:
    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        for i in range(5):
            await create(api, f"dws-{i}")
        with pytest.raises(core_exceptions.ResourceExhausted):
            await create(api, "dws-5")
        calls = emulator.calls_for("CreateNodePool")
        assert [c.code for c in calls] == [grpc.StatusCode.OK] * 5 + [
            grpc.StatusCode.RESOURCE_EXHAUSTED
        ]
        assert calls[-1].message == too_many("sandbox", 5)
        assert calls[-1].response is None

    serve(EmulatorConfig(operation_latency_seconds=LATENCY), scenario)


def test_the_quota_is_per_cluster_and_configurable() -> None:
    config = EmulatorConfig(
        operation_latency_seconds=LATENCY,
        clusters=[
            ClusterConfig(name=DEFAULT_CLUSTER, concurrent_operations_quota=2),
            ClusterConfig(name=OTHER),
        ],
    )

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        await create(api, "dws-a")
        await create(api, "dws-b")
        with pytest.raises(core_exceptions.ResourceExhausted) as refused:
            await create(api, "dws-c")
        assert refused.value.message == too_many("sandbox", 2)
        # The other cluster's operations are its own: the default quota of 5.
        for i in range(5):
            await create(api, f"dws-{i}", cluster=OTHER)
        with pytest.raises(core_exceptions.ResourceExhausted) as other:
            await create(api, "dws-5", cluster=OTHER)
        assert other.value.message == too_many("other", 5)
        assert emulator.max_operations_in_flight() == 2
        assert emulator.max_operations_in_flight(OTHER) == 5

        # Everything finishes; the maximum is what was reached, not what is in flight.
        clock.now += LATENCY
        assert emulator.operations_in_flight() == 0
        assert emulator.operations_in_flight(OTHER) == 0
        assert emulator.max_operations_in_flight() == 2
        assert emulator.max_operations_in_flight(OTHER) == 5

    serve(config, scenario)


def test_the_quota_is_read_from_the_config_file_and_must_be_positive() -> None:
    loaded = EmulatorConfig.model_validate(
        {"clusters": [{"name": DEFAULT_CLUSTER, "concurrent_operations_quota": 20}]}
    )
    assert loaded.clusters[0].concurrent_operations_quota == 20
    assert ClusterConfig(name=DEFAULT_CLUSTER).concurrent_operations_quota == 5
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        ClusterConfig(name=DEFAULT_CLUSTER, concurrent_operations_quota=0)


def test_a_create_that_meets_the_quota_is_retried_until_a_slot_frees(
    make_emulator: MakeEmulator,
) -> None:
    """Quota 1: the second create is refused while the first runs, and the client's
    bounded retries carry it through once the first is done."""
    # The first create ends when the test says: after the second was refused twice.
    clock = ManualClock()
    emulator = make_emulator(
        EmulatorConfig(
            operation_latency_seconds=0.3,
            clusters=[ClusterConfig(name=DEFAULT_CLUSTER, concurrent_operations_quota=1)],
        ),
        clock,
    )
    retry = RetryPolicy(attempts=12, initial_delay=0.05, multiplier=2.0, max_delay=0.1, jitter=0)
    first, second = pool("dws-first"), pool("dws-second")
    refusals: list[str] = []

    def observe(method: str, code: str, seconds: float) -> None:
        if (method, code) == ("CreateNodePool", "RESOURCE_EXHAUSTED"):
            refusals.append(method)
            if len(refusals) == 2:
                clock.now += 1

    async def scenario(client: NodePoolClient) -> None:
        started = await client.create(first, UID)
        assert started.operation is not None
        client.observer = observe
        created = await client.create(second, UID)
        assert created.operation is not None
        assert not created.adopted
        clock.now += 1
        await client.wait(created.operation)

    run(emulator, scenario, retry=retry)
    calls = [
        c.code
        for c in emulator.calls_for("CreateNodePool")
        if c.request.node_pool.name == second.name
    ]
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    assert calls == [exhausted, exhausted, grpc.StatusCode.OK]
    assert emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/{second.name}") is not None
    assert emulator.max_operations_in_flight() == 1


def test_retries_that_run_out_report_too_many_operations(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(
        EmulatorConfig(
            operation_latency_seconds=LATENCY,
            clusters=[ClusterConfig(name=DEFAULT_CLUSTER, concurrent_operations_quota=1)],
        )
    )
    retry = RetryPolicy(attempts=3, initial_delay=0.01, max_delay=0.01, jitter=0)

    async def scenario(client: NodePoolClient) -> None:
        await client.create(pool("dws-first"), UID)
        await client.create(pool("dws-second"), UID)

    with pytest.raises(GkeError) as caught:
        run(emulator, scenario, retry=retry)
    assert (caught.value.reason, caught.value.retryable) == ("TooManyOperations", True)
    assert caught.value.message == too_many("sandbox", 1)
    assert len(emulator.calls_for("CreateNodePool")) == 1 + retry.attempts
