"""NodePoolClient against the emulator: the real client library over a real gRPC channel."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from google.cloud import container_v1

from dws_operator.gke import GkeError, NodePoolClient, PollPolicy, pool_labels
from dws_operator.planning import plan_slice
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator, EmulatorConfig
from tests.builders import SITE, gpu, make_spec, tpu
from tests.gke.harness import (
    FAST,
    FAST_POLL,
    FAST_RETRY,
    LABELS,
    UID,
    MakeEmulator,
    ManualClock,
    rendered,
    run,
    serve,
)

Operation = container_v1.Operation
PoolStatus = container_v1.NodePool.Status
ZONE: dict[str, Any] = {"provisioning": {"zones": ["us-east5-a"]}}


def pool_path(name: str) -> str:
    return f"{DEFAULT_CLUSTER}/nodePools/{name}"


MODES = [
    pytest.param(tpu("v6e", "4x4"), "FlexStart", {}, id="tpu-flex-start"),
    pytest.param(tpu("v6e", "1x1"), "FlexStart", {}, id="tpu-flex-start-single-host"),
    pytest.param(tpu("v5e", "2x4"), "Spot", {}, id="tpu-spot"),
    pytest.param(tpu("v5p", "2x2x2"), "OnDemand", ZONE, id="tpu-on-demand"),
    pytest.param(
        tpu("tpu7x", "2x2x1"),
        "Reservation",
        {"provisioning": {"reservation": "res-7x", "zones": ["us-east5-c"]}},
        id="tpu-reservation",
    ),
    pytest.param(gpu("nvidia-h100-80gb", nodes=2), "FlexStart", {}, id="gpu-flex-start"),
    pytest.param(gpu("nvidia-a100-80gb", nodes=4), "QueuedProvisioning", {}, id="gpu-queued"),
    pytest.param(gpu("nvidia-l4", nodes=3, count=1), "Spot", {}, id="gpu-spot"),
    pytest.param(gpu("nvidia-h200-141gb"), "OnDemand", ZONE, id="gpu-on-demand"),
    pytest.param(
        gpu("nvidia-b200", nodes=2),
        "Reservation",
        {"provisioning": {"reservation": "blocks-b200"}},
        id="gpu-reservation",
    ),
    pytest.param(
        gpu("nvidia-h200-141gb", nodes=2),
        "Reservation",
        {"provisioning": {"reservation": "projects/my-proj/reservations/r1/reservationBlocks/b1"}},
        id="gpu-reservation-block",
    ),
    pytest.param(
        tpu("tpu7x", "2x2x1"),
        "Reservation",
        {"provisioning": {"reservation": "r1/reservationBlocks/b1/reservationSubBlocks/s1"}},
        id="tpu-reservation-sub-block",
    ),
]


@pytest.mark.parametrize(("accelerator", "mode", "extra"), MODES)
def test_create_wait_get(
    emulator: ClusterManagerEmulator, accelerator: dict[str, Any], mode: str, extra: dict[str, Any]
) -> None:
    pool = rendered(accelerator, mode, **extra)

    async def scenario(client: NodePoolClient) -> tuple[Any, Any, Any]:
        created = await client.create(pool, UID)
        assert created.operation is not None
        done = await client.wait(created.operation)
        return created, done, await client.get(pool.name)

    created, done, got = run(emulator, scenario)
    assert not created.adopted
    assert created.operation.status == Operation.Status.PENDING
    assert created.operation.operation_type == Operation.Type.CREATE_NODE_POOL
    assert created.operation.target_link.endswith(f"/clusters/sandbox/nodePools/{pool.name}")
    assert done.status == Operation.Status.DONE
    assert not done.error.code

    [call] = emulator.calls_for("CreateNodePool")
    assert call.ok
    assert call.request.parent == DEFAULT_CLUSTER
    received = call.request.node_pool
    # Byte for byte what the renderer produced, and the fields the mode is about.
    assert received == pool
    assert received.config.flex_start == (mode in ("FlexStart", "QueuedProvisioning"))
    assert received.queued_provisioning.enabled == (mode == "QueuedProvisioning")
    assert received.config.spot == (mode == "Spot")
    affinity = received.config.reservation_affinity
    if mode == "Reservation":
        assert affinity.consume_reservation_type == affinity.Type.SPECIFIC_RESERVATION
        assert list(affinity.values) == [extra["provisioning"]["reservation"]]
    elif mode in ("FlexStart", "QueuedProvisioning"):
        assert affinity.consume_reservation_type == affinity.Type.NO_RESERVATION
    plan = plan_slice(make_spec(accelerator, mode, **extra), site=SITE)
    nodes = plan.nodes
    # One zone (given, or a TPU slice's own): per-zone limits; otherwise the pool's total.
    one_zone = len(plan.node_pool.zones) == 1
    assert one_zone or plan.node_pool.placement_policy is None
    limits = received.autoscaling
    assert (limits.max_node_count, limits.total_max_node_count) == (
        (nodes, 0) if one_zone else (0, nodes)
    )
    if "tpu" in accelerator and nodes > 1:
        assert received.placement_policy.tpu_topology == accelerator["tpu"]["topology"]
    else:
        assert "placement_policy" not in received
    assert (len(received.config.accelerators) == 1) == ("gpu" in accelerator)

    assert got is not None
    assert got.status == PoolStatus.RUNNING
    assert got.config == pool.config
    assert got.autoscaling == pool.autoscaling
    assert got.placement_policy == pool.placement_policy
    assert got.self_link.endswith(pool_path(pool.name))


def test_create_adopts_our_own_pool() -> None:
    pool = rendered(tpu("v6e", "4x4"))

    # On a hand-moved clock: the second create meets the first still PROVISIONING however
    # slowly a loaded machine gets to it.
    async def scenario(emulator: ClusterManagerEmulator, api: Any, clock: ManualClock) -> Any:
        client = NodePoolClient(api, DEFAULT_CLUSTER, poll=FAST_POLL, retry=FAST_RETRY)
        first = await client.create(pool, UID)
        during = await client.create(pool, UID)
        assert first.operation is not None
        clock.now += 1.0  # past the operation's 0.05 s
        await client.wait(first.operation)
        after = await client.create(pool, UID)
        return emulator.calls_for("CreateNodePool"), during, after

    calls, during, after = serve(FAST, scenario)
    assert during.adopted
    assert during.operation is None
    assert during.pool.status == PoolStatus.PROVISIONING
    assert after.adopted
    assert after.pool.status == PoolStatus.RUNNING
    assert after.pool.config == pool.config
    assert [c.code for c in calls] == [
        grpc.StatusCode.OK,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.ALREADY_EXISTS,
    ]


def test_create_refuses_a_foreign_pool_with_the_same_name(emulator: ClusterManagerEmulator) -> None:
    theirs = rendered(tpu("v6e", "4x4"))
    theirs.config.resource_labels = pool_labels("other", "job", "someone-else")
    ours = rendered(tpu("v6e", "4x4"))

    async def scenario(client: NodePoolClient) -> None:
        await client.api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=theirs)
        await client.create(ours, UID)

    with pytest.raises(GkeError) as caught:
        run(emulator, scenario)
    assert not caught.value.retryable
    assert caught.value.reason == "NodePoolNameTaken"
    assert "someone-else" in caught.value.message
    stored = emulator.node_pool(pool_path(ours.name))
    assert stored is not None
    assert stored.config.resource_labels == theirs.config.resource_labels


def test_create_requires_the_owner_label() -> None:
    unlabelled = rendered(tpu("v6e", "4x4"))
    unlabelled.config.resource_labels = {}

    # Fails before any I/O: the client has no connection at all.
    client = NodePoolClient(None, DEFAULT_CLUSTER)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dws-operator-dev_uid"):
        asyncio.run(client.create(unlabelled, UID))


def test_scale_to_zero_caps_the_autoscaler_then_resizes(emulator: ClusterManagerEmulator) -> None:
    pool = rendered(gpu("nvidia-h100-80gb", nodes=4), **ZONE)

    async def scenario(client: NodePoolClient) -> Any:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        # Nodes arrive as the autoscaler would add them.
        await client.wait(
            await client.api.set_node_pool_size(
                request={"name": pool_path(pool.name), "node_count": 3}
            )
        )
        assert emulator.node_count(pool_path(pool.name)) == 3
        emulator.clear_calls()
        return await client.scale_to_zero(pool.name)

    operation = run(emulator, scenario)
    assert operation.status == Operation.Status.DONE
    assert operation.operation_type == Operation.Type.SET_NODE_POOL_SIZE
    assert emulator.node_count(pool_path(pool.name)) == 0
    stored = emulator.node_pool(pool_path(pool.name))
    assert stored is not None
    assert stored.status == PoolStatus.RUNNING
    assert stored.autoscaling == container_v1.NodePoolAutoscaling(
        enabled=True, location_policy=container_v1.NodePoolAutoscaling.LocationPolicy.ANY
    )
    [capped] = emulator.calls_for("SetNodePoolAutoscaling")
    [resized] = emulator.calls_for("SetNodePoolSize")
    assert capped.started < resized.started
    assert capped.request.autoscaling.max_node_count == 0
    assert capped.request.autoscaling.enabled
    assert resized.request.node_count == 0


def test_a_tpu_slice_pool_is_resized_never_capped(emulator: ClusterManagerEmulator) -> None:
    """GKE checks a slice's per-zone maximum against its size: the ceiling stays."""
    pool = rendered(tpu("v6e", "4x4"))

    async def scenario(client: NodePoolClient) -> container_v1.NodePool | None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        await client.scale_to_zero(pool.name)
        assert await client.cap_autoscaling(pool.name) is None
        return await client.get(pool.name)

    served = run(emulator, scenario)
    assert served is not None
    assert list(served.locations) == ["us-east5-a"]
    assert (served.autoscaling.max_node_count, served.autoscaling.total_max_node_count) == (4, 0)
    counts = emulator.call_counts()
    assert counts.get("SetNodePoolAutoscaling", 0) == 0
    assert counts["SetNodePoolSize"] == 1


def test_scale_to_zero_twice_only_resizes(emulator: ClusterManagerEmulator) -> None:
    pool = rendered(gpu("nvidia-l4", 2), **ZONE)

    async def scenario(client: NodePoolClient) -> None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        await client.scale_to_zero(pool.name)
        await client.scale_to_zero(pool.name)

    run(emulator, scenario)
    counts = emulator.call_counts()
    assert counts["SetNodePoolAutoscaling"] == 1
    assert counts["SetNodePoolSize"] == 2


def test_scale_to_zero_of_a_missing_pool_is_nothing_to_do(emulator: ClusterManagerEmulator) -> None:
    async def scenario(client: NodePoolClient) -> Any:
        return await client.scale_to_zero("dws-never-created")

    assert run(emulator, scenario) is None
    assert emulator.call_counts() == {"GetNodePool": 1}


def test_delete(make_emulator: MakeEmulator) -> None:
    # Operations move only with this clock: the pool is read while surely deleting.
    clock = ManualClock()
    emulator = make_emulator(FAST, clock)
    pool = rendered(gpu("nvidia-l4", nodes=2), "Spot")

    async def scenario(client: NodePoolClient) -> Any:
        created = await client.create(pool, UID)
        assert created.operation is not None
        clock.now += 1
        await client.wait(created.operation)
        deleting = await client.delete(pool.name)
        assert deleting is not None
        during = await client.get(pool.name)
        clock.now += 1
        done = await client.wait(deleting)
        return during, done, await client.get(pool.name), await client.delete(pool.name)

    during, done, after, again = run(emulator, scenario)
    assert during.status == PoolStatus.STOPPING
    assert done.operation_type == Operation.Type.DELETE_NODE_POOL
    assert done.status == Operation.Status.DONE
    assert after is None
    assert again is None
    codes = [c.code for c in emulator.calls_for("DeleteNodePool")]
    assert codes == [grpc.StatusCode.OK, grpc.StatusCode.NOT_FOUND]


def test_operation_in_progress_is_retryable(make_emulator: MakeEmulator) -> None:
    # Operations take a minute here, so the second call surely meets the first.
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=60))
    pool = rendered(tpu("v6e", "4x4"))

    async def scenario(client: NodePoolClient) -> Any:
        created = await client.create(pool, UID)
        assert created.operation is not None
        with pytest.raises(GkeError) as deleting:
            await client.delete(pool.name)
        with pytest.raises(GkeError) as scaling:
            await client.scale_to_zero(pool.name)
        return created.operation, deleting.value, scaling.value

    operation, *errors = run(emulator, scenario)
    for error in errors:
        assert error.retryable
        assert error.reason == "OperationInProgress"
        assert error.code == grpc.StatusCode.FAILED_PRECONDITION
        assert operation.name in error.message
        assert "is currently creating a node pool for cluster sandbox" in error.message


def test_wait_gives_up_at_its_deadline(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=60))
    pool = rendered(tpu("v6e", "4x4"))
    # A deadline of a second: sleeps capped at 50 ms bound it to about 22 polls when
    # nothing is slow, fewer when a loaded machine (three test workers on two cores)
    # makes a gRPC round trip take a good part of the second.
    poll = PollPolicy(initial_delay=0.01, max_delay=0.05, timeout=1.0)
    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        await asyncio.sleep(seconds)

    async def scenario(client: NodePoolClient) -> None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)

    began = time.monotonic()
    with pytest.raises(GkeError) as caught:
        run(emulator, scenario, poll=poll, sleep=sleep)
    assert time.monotonic() - began >= poll.timeout  # not before its deadline
    assert caught.value.retryable
    assert caught.value.reason == "OperationTimeout"
    polls = emulator.calls_for("GetOperation")
    assert 1 <= len(polls) <= 25
    assert all(p.response.status != Operation.Status.DONE for p in polls)
    assert len(pauses) == len(polls)
    assert max(pauses) <= poll.max_delay


def test_wait_backs_off_exponentially(make_emulator: MakeEmulator) -> None:
    # The operation ends when the client has paused five times (the clock is the
    # test's): the looks are counted in pauses asked for, whatever the machine's pace.
    clock = ManualClock()
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=0.5), clock)
    pool = rendered(tpu("v6e", "4x4"))
    poll = PollPolicy(initial_delay=0.01, max_delay=10.0, multiplier=2.0, timeout=5.0)

    pauses: list[float] = []

    async def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 5:
            clock.now += 1
        await asyncio.sleep(seconds)

    async def scenario(client: NodePoolClient) -> Operation:
        created = await client.create(pool, UID)
        assert created.operation is not None
        return await client.wait(created.operation)

    done = run(emulator, scenario, poll=poll, sleep=sleep)
    assert done.status == Operation.Status.DONE
    # One pause before each look, each twice the last (a fixed 10 ms interval would
    # look 50 times in half a second).
    assert pauses == [0.01, 0.02, 0.04, 0.08, 0.16]
    assert len(emulator.calls_for("GetOperation")) == 5


def test_unknown_cluster_is_terminal(emulator: ClusterManagerEmulator) -> None:
    missing = "projects/dws-sandbox/locations/us-east5/clusters/missing"
    pool = rendered(tpu("v6e", "4x4"))
    errors: list[GkeError] = []

    async def scenario(client: NodePoolClient) -> None:
        for call in (
            client.create(pool, UID),
            client.get(pool.name),
            client.delete(pool.name),
            client.scale_to_zero(pool.name),
            client.list_pools(),
        ):
            with pytest.raises(GkeError) as caught:
                await call
            errors.append(caught.value)

    run(emulator, scenario, cluster=missing)
    assert len(errors) == 5
    for error in errors:
        assert not error.retryable
        assert error.reason == "ClusterNotFound"
        assert error.message == f"Not found: {missing}."


def test_list_pools(emulator: ClusterManagerEmulator) -> None:
    first = rendered(tpu("v6e", "4x4"), name="dws-first")
    second = rendered(gpu("nvidia-h100-80gb"), name="dws-second")

    async def scenario(client: NodePoolClient) -> Any:
        assert await client.list_pools() == []
        await client.create(first, UID)
        await client.create(second, UID)
        return await client.list_pools()

    pools = run(emulator, scenario)
    assert [p.name for p in pools] == ["dws-first", "dws-second"]


def test_call_log_counts_every_call(emulator: ClusterManagerEmulator) -> None:
    pool = rendered(tpu("v6e", "2x2"))

    async def scenario(client: NodePoolClient) -> None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        await client.get(pool.name)
        await client.get("dws-missing")
        await client.list_pools()
        deleting = await client.delete(pool.name)
        assert deleting is not None
        await client.wait(deleting)

    run(emulator, scenario)
    counts = emulator.call_counts()
    assert counts["CreateNodePool"] == 1
    assert counts["GetNodePool"] == 2
    assert counts["ListNodePools"] == 1
    assert counts["DeleteNodePool"] == 1
    assert counts["GetOperation"] >= 2
    assert sum(counts.values()) == len(emulator.calls)
    missing = emulator.calls_for("GetNodePool")[1]
    assert missing.code == grpc.StatusCode.NOT_FOUND
    assert missing.message == f"Not found: {pool_path('dws-missing')}."
    assert missing.response is None
    assert all(c.duration >= 0 for c in emulator.calls)


def test_cluster_path_is_checked() -> None:
    with pytest.raises(ValueError, match="projects/P/locations/L/clusters/C"):
        NodePoolClient(None, "sandbox")  # type: ignore[arg-type]


def test_labels_reach_the_emulator_unchanged(emulator: ClusterManagerEmulator) -> None:
    pool = rendered(gpu("nvidia-h100-80gb"))

    async def scenario(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    run(emulator, scenario)
    stored = emulator.node_pool(pool_path(pool.name))
    assert stored is not None
    assert dict(stored.config.resource_labels) == LABELS
    assert dict(stored.config.labels) == LABELS
    assert FAST.operation_latency_seconds < 1
