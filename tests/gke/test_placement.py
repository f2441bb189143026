"""Where GKE puts a slice's VMs: tpu7x multi-host pools need a workload policy.

The ClusterManager emulator checks a pool's placement against the Compute resource
policies the same emulator serves, as GKE checks them against Compute.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import grpc
import pytest
import requests
from google.cloud import container_v1

from dws_operator.gke import GkeError, NodePoolClient, WorkloadPolicyClient, connect_compute
from dws_workshop.emulator import ClusterConfig, ClusterManagerEmulator, EmulatorConfig
from dws_workshop.emulator.placement import SINGLE_HOST_TOPOLOGY
from dws_workshop.simulator.nodes import pool_shape
from tests.builders import gpu, tpu
from tests.gke.harness import (
    FAST,
    UID,
    MakeEmulator,
    ManualClock,
    make_policy,
    policies_url,
    policy_ready,
    rendered,
    run,
)

NodePool = container_v1.NodePool
Placement = NodePool.PlacementPolicy
COMPACT = Placement.Type.COMPACT
PROJECT, REGION = "dws-sandbox", "us-east5"
CLUSTER = f"projects/{PROJECT}/locations/{REGION}/clusters/sandbox"
GKE_MESSAGE = (
    "Creation of a managed instance group with tpu7x-standard-4t machine type with "
    "placement policy is not supported. Use workload policy instead."
)


def placed(pool: NodePool, **placement: Any) -> NodePool:
    """`pool` with its placement policy replaced by `placement`."""
    pool.placement_policy = Placement(**placement)
    return pool


def tpu7x(topology: str = "2x2x2", **placement: Any) -> NodePool:
    """A multi-host tpu7x Spot pool whose placement is `placement` alone (the renderer
    would place it by the operator's workload policy)."""
    pool = rendered(tpu("tpu7x", topology), "Spot", workload_policy="rendered")
    return placed(pool, **placement)


def create(emulator: ClusterManagerEmulator, pool: NodePool) -> NodePool:
    """Create `pool` and wait for it; the pool as GKE then reports it."""

    async def scenario(client: NodePoolClient) -> NodePool:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        got = await client.get(pool.name)
        assert got is not None
        return got

    return run(emulator, scenario)


def refused(emulator: ClusterManagerEmulator, pool: NodePool) -> GkeError:
    with pytest.raises(GkeError) as caught:
        create(emulator, pool)
    return caught.value


# A tpu7x slice placed the way earlier generations are ----------------------------


@pytest.mark.parametrize(
    "placement",
    [
        pytest.param({"type_": COMPACT, "tpu_topology": "2x2x2"}, id="compact-and-topology"),
        pytest.param({"tpu_topology": "2x2x2"}, id="topology-only"),
    ],
)
def test_compact_placement_is_accepted_then_fails_as_gke_does(
    emulator: ClusterManagerEmulator, placement: dict[str, Any]
) -> None:
    pool = tpu7x(**placement)
    error = refused(emulator, pool)
    assert (error.retryable, error.reason, error.message) == (False, "InvalidArgument", GKE_MESSAGE)
    [call] = emulator.calls_for("CreateNodePool")
    assert call.ok  # accepted: the failure comes with the operation
    failed = emulator.node_pool(f"{CLUSTER}/nodePools/{pool.name}")
    assert failed is not None
    assert failed.status == NodePool.Status.ERROR
    assert failed.status_message == GKE_MESSAGE
    [operation] = emulator.operations()
    assert operation.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]


def test_single_host_tpu7x_needs_no_policy(emulator: ClusterManagerEmulator) -> None:
    pool = rendered(tpu("tpu7x", "2x2x1"), "Spot")
    assert "placement_policy" not in pool
    assert create(emulator, pool).status == NodePool.Status.RUNNING


# With a workload policy -------------------------------------------------------------


def test_a_workload_policy_places_the_slice(emulator: ClusterManagerEmulator) -> None:
    """The whole flow: the client makes the policy, the renderer names it, GKE accepts."""

    async def make() -> str:
        apis = connect_compute(emulator.compute_endpoint)
        try:
            return await WorkloadPolicyClient(apis, PROJECT).ensure_workload_policy(REGION, "2x2x2")
        finally:
            apis.close()

    name = asyncio.run(make())
    pool = rendered(tpu("tpu7x", "2x2x2"), "Spot", workload_policy=name)
    got = create(emulator, pool)
    assert got.status == NodePool.Status.RUNNING
    [call] = emulator.calls_for("CreateNodePool")
    assert call.request.node_pool.placement_policy == Placement(policy_name=name)
    # GKE reads the topology out of the policy and reports it (and labels nodes with it).
    assert got.placement_policy == Placement(policy_name=name, tpu_topology="2x2x2")
    shape = pool_shape(got)
    assert (shape.slice_nodes, shape.labels["cloud.google.com/gke-tpu-topology"]) == (2, "2x2x2")


def test_cluster_toolkits_form_is_accepted(emulator: ClusterManagerEmulator) -> None:
    """COMPACT + policy name + the same topology, as Cluster Toolkit's gke-tpu-7x sends."""
    make_policy(emulator, "tpu7x-workload-policy")
    pool = tpu7x(type_=COMPACT, policy_name="tpu7x-workload-policy", tpu_topology="2x2x2")
    assert create(emulator, pool).status == NodePool.Status.RUNNING


def test_a_zonal_clusters_policies_live_in_its_region(make_emulator: MakeEmulator) -> None:
    zonal = f"projects/{PROJECT}/locations/us-east5-b/clusters/zonal"
    emulator = make_emulator(FAST.model_copy(update={"clusters": [ClusterConfig(name=zonal)]}))
    make_policy(emulator, "wp")
    pool = tpu7x(policy_name="wp")
    # The operator plans a zonal cluster's slice in the cluster's zone.
    pool.locations[:] = ["us-east5-b"]

    async def scenario(client: NodePoolClient) -> NodePool | None:
        created = await client.create(pool, UID)
        assert created.operation is not None
        await client.wait(created.operation)
        return await client.get(pool.name)

    got = run(emulator, scenario, cluster=zonal)
    assert got is not None
    assert got.status == NodePool.Status.RUNNING


# Refused at the call ------------------------------------------------------------------

Setup = Callable[[ClusterManagerEmulator], None]


def policy(name: str, workload: dict[str, Any] | None = None, **options: Any) -> Setup:
    return lambda emulator: make_policy(emulator, name, workload, **options)


def nothing(emulator: ClusterManagerEmulator) -> None:
    return None


POLICY_FIELD = "node_pool.placement_policy.policy_name"
TOPOLOGY_FIELD = "node_pool.placement_policy.tpu_topology"
POLICY_PATH = f"projects/{PROJECT}/regions/{REGION}/resourcePolicies"

REFUSED = [
    pytest.param(
        nothing,
        tpu7x(policy_name="nope"),
        POLICY_FIELD,
        f"resource policy {POLICY_PATH}/nope not found",
        id="policy-missing",
    ),
    pytest.param(
        policy("wp", region="europe-west4"),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        f"resource policy {POLICY_PATH}/wp not found",
        id="policy-in-another-region",
    ),
    pytest.param(
        policy("wp"),
        tpu7x(policy_name=f"{POLICY_PATH}/wp"),
        POLICY_FIELD,
        "is not a resource policy name",
        id="policy-path-not-name",
    ),
    pytest.param(
        policy("wp", {"type": "HIGH_AVAILABILITY"}),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        "is a HIGH_AVAILABILITY workload policy",
        id="policy-high-availability",
    ),
    pytest.param(
        policy("wp", {"collocation": "COLLOCATED", "vmCount": 2}),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        "is not a workload policy",
        id="policy-group-placement",
    ),
    pytest.param(
        policy("wp", {"type": "HIGH_THROUGHPUT"}),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        "has no accelerator topology",
        id="policy-without-topology",
    ),
    pytest.param(
        policy("wp", {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "1x72"}),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        "'1x72' is not a 3-D topology of TPU tpu7x",
        id="policy-topology-dimensions",
    ),
    pytest.param(
        policy("wp", {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "4x4x5"}),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        "workload policy 'wp' topology 4x4x5 (80 chips) does not fit machine type",
        id="policy-topology-not-a-slice",
    ),
    pytest.param(
        policy("wp", {"type": "HIGH_THROUGHPUT", "acceleratorTopology": "2x2x1"}),
        tpu7x(policy_name="wp"),
        POLICY_FIELD,
        SINGLE_HOST_TOPOLOGY,
        id="policy-topology-single-host",
    ),
    pytest.param(
        policy("wp"),
        tpu7x(policy_name="wp", tpu_topology="2x2x4"),
        TOPOLOGY_FIELD,
        "'2x2x4' differs from the accelerator topology 2x2x2 of workload policy 'wp'",
        id="topology-disagrees-with-policy",
    ),
    pytest.param(
        nothing,
        placed(rendered(tpu("v6e", "2x4", "ct6e-standard-8t"), "Spot"), tpu_topology="2x4"),
        TOPOLOGY_FIELD,
        SINGLE_HOST_TOPOLOGY,
        id="single-host-topology",
    ),
    pytest.param(
        nothing,
        placed(rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot"), policy_name="nope"),
        POLICY_FIELD,
        f"resource policy {POLICY_PATH}/nope not found",
        id="gpu-policy-missing",
    ),
]


@pytest.mark.parametrize(("setup", "pool", "field", "text"), REFUSED)
def test_refused_at_the_call(
    emulator: ClusterManagerEmulator, setup: Setup, pool: NodePool, field: str, text: str
) -> None:
    setup(emulator)
    error = refused(emulator, pool)
    assert (error.retryable, error.reason) == (False, "InvalidArgument")
    assert error.message.startswith(f"{field}: ")
    assert text in error.message
    [call] = emulator.calls_for("CreateNodePool")
    assert call.code == grpc.StatusCode.INVALID_ARGUMENT
    assert emulator.node_pools(CLUSTER) == []


def test_a_gpu_pool_may_name_an_existing_policy(emulator: ClusterManagerEmulator) -> None:
    make_policy(emulator, "gpu-wp", {"type": "HIGH_THROUGHPUT", "maxTopologyDistance": "BLOCK"})
    pool = placed(rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot"), policy_name="gpu-wp")
    got = create(emulator, pool)
    assert got.status == NodePool.Status.RUNNING
    assert got.placement_policy == Placement(policy_name="gpu-wp")


# A policy in use cannot be deleted --------------------------------------------------------


def test_a_policy_in_use_cannot_be_deleted(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(EmulatorConfig(operation_latency_seconds=0.05))
    make_policy(emulator, "wp")
    pool = tpu7x(policy_name="wp")
    create(emulator, pool)
    refused_delete = requests.delete(policies_url(emulator, "wp"), timeout=10)
    assert refused_delete.status_code == 400
    [detail] = refused_delete.json()["error"]["errors"]
    assert detail["reason"] == "resourceInUseByAnotherResource"
    assert detail["message"] == (
        f"The resource_policy resource '{POLICY_PATH}/wp' is already being used by "
        f"'projects/{PROJECT}/zones/us-east5-a/instanceGroupManagers/gke-sandbox-dws-pool-grp'"
    )
    policy_left = emulator.compute.policy(PROJECT, REGION, "wp")
    assert policy_left is not None
    assert policy_left.status == "READY"

    async def delete_pool(client: NodePoolClient) -> None:
        operation = await client.delete(pool.name)
        assert operation is not None
        await client.wait(operation)

    run(emulator, delete_pool)
    deleted = requests.delete(policies_url(emulator, "wp"), timeout=10)
    assert deleted.status_code == 200
    assert deleted.json()["operationType"] == "delete"


def test_a_policy_being_created_deleted_or_gone_cannot_place_new_pools(
    make_emulator: MakeEmulator,
) -> None:
    # The policy's operations move only with this clock: a slow call never finds it on.
    clock = ManualClock()
    emulator = make_emulator(FAST, clock)
    make_policy(emulator, "wp", ready=False)
    creating = refused(emulator, tpu7x(policy_name="wp"))
    assert (creating.retryable, creating.reason) == (False, "InvalidArgument")
    assert creating.message.startswith(f"{POLICY_FIELD}: ")
    assert "is CREATING, not READY" in creating.message
    clock.now += 1
    policy_ready(emulator, "wp", REGION)
    assert requests.delete(policies_url(emulator, "wp"), timeout=10).status_code == 200
    assert "is DELETING, not READY" in refused(emulator, tpu7x(policy_name="wp")).message
    clock.now += 1
    assert emulator.compute.policy(PROJECT, REGION, "wp") is None
    assert f"{POLICY_PATH}/wp not found" in refused(emulator, tpu7x(policy_name="wp")).message
    assert emulator.node_pools(CLUSTER) == []
