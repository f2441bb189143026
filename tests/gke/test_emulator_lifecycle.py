"""Operations go PENDING -> RUNNING -> DONE, and pools change only when they are DONE.

A hand-driven clock makes every step deterministic. These tests also serve the
emulator from the test's own event loop (`async with`), next to the threaded fixture.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest
from google.api_core import exceptions as core_exceptions
from google.cloud import container_v1

from dws_operator.gke import connect
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterManagerEmulator,
    EmulatorConfig,
    EmulatorThread,
)
from tests.builders import gpu, tpu
from tests.clocks import ManualClock
from tests.gke.harness import rendered

Operation = container_v1.Operation
PoolStatus = container_v1.NodePool.Status
OPERATIONS = "projects/dws-sandbox/locations/us-east5/operations"


Api = container_v1.ClusterManagerAsyncClient


def serve(
    scenario: Callable[[ClusterManagerEmulator, Api, ManualClock], Awaitable[Any]],
    latency: float = 10.0,
) -> Any:
    clock = ManualClock()

    async def main() -> Any:
        config = EmulatorConfig(operation_latency_seconds=latency)
        async with (
            ClusterManagerEmulator(config, clock=clock) as emulator,
            connect(emulator.endpoint) as api,
        ):
            return await scenario(emulator, api, clock)

    return asyncio.run(main())


async def status_of(api: Api, operation: Operation) -> int:
    current = await api.get_operation(name=f"{OPERATIONS}/{operation.name}")
    return int(current.status)


def test_create_then_delete_step_by_step() -> None:
    pool = rendered(tpu("v6e", "4x4"), provisioning={"zones": ["us-east5-a"]})
    path = f"{DEFAULT_CLUSTER}/nodePools/{pool.name}"

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        created = await api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=pool)
        assert created.status == Operation.Status.PENDING
        assert created.start_time.endswith("Z")
        assert not created.end_time
        assert (await api.get_node_pool(name=path)).status == PoolStatus.PROVISIONING

        clock.tick(3)
        assert await status_of(api, created) == Operation.Status.RUNNING
        assert (await api.get_node_pool(name=path)).status == PoolStatus.PROVISIONING

        clock.tick(7)
        done = await api.get_operation(name=f"{OPERATIONS}/{created.name}")
        assert done.status == Operation.Status.DONE
        assert done.end_time
        assert (await api.get_node_pool(name=path)).status == PoolStatus.RUNNING
        cluster = await api.get_cluster(name=DEFAULT_CLUSTER)
        assert [p.name for p in cluster.node_pools] == [pool.name]

        deleting = await api.delete_node_pool(name=path)
        assert (await api.get_node_pool(name=path)).status == PoolStatus.STOPPING
        clock.tick(9.9)
        assert (await api.get_node_pool(name=path)).status == PoolStatus.STOPPING
        clock.tick(0.1)
        assert await status_of(api, deleting) == Operation.Status.DONE
        with pytest.raises(core_exceptions.NotFound):
            await api.get_node_pool(name=path, retry=None)

        listed = await api.list_operations(parent="projects/dws-sandbox/locations/us-east5")
        assert [(o.operation_type, o.status) for o in listed.operations] == [
            (Operation.Type.CREATE_NODE_POOL, Operation.Status.DONE),
            (Operation.Type.DELETE_NODE_POOL, Operation.Status.DONE),
        ]
        assert emulator.node_pool(path) is None

    serve(scenario)


def test_resize_and_update_apply_when_done() -> None:
    pool = rendered(
        gpu("nvidia-h100-80gb", nodes=4), "Spot", provisioning={"zones": ["us-east5-a"]}
    )
    path = f"{DEFAULT_CLUSTER}/nodePools/{pool.name}"

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        await api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=pool)
        clock.tick(10)
        resizing = await api.set_node_pool_size(request={"name": path, "node_count": 3})
        assert resizing.operation_type == Operation.Type.SET_NODE_POOL_SIZE
        assert (await api.get_node_pool(name=path)).status == PoolStatus.RECONCILING
        assert emulator.node_count(path) == 0
        clock.tick(10)
        assert emulator.node_count(path) == 3
        assert (await api.get_node_pool(name=path)).status == PoolStatus.RUNNING

        await api.set_node_pool_autoscaling(
            request={
                "name": path,
                "autoscaling": container_v1.NodePoolAutoscaling(
                    enabled=True, min_node_count=0, max_node_count=1
                ),
            }
        )
        clock.tick(10)
        # A lowered ceiling removes no node (GKE's autoscaler only stops adding above it
        # and removes nodes as they turn idle); a resize does.
        assert emulator.node_count(path) == 3
        await api.set_node_pool_size(request={"name": path, "node_count": 1})
        clock.tick(10)
        assert emulator.node_count(path) == 1

        await api.update_node_pool(
            request={
                "name": path,
                "labels": container_v1.NodeLabels(labels={"team": "b"}),
                "resource_labels": container_v1.ResourceLabels(labels={"cost-center": "42"}),
            }
        )
        assert dict((await api.get_node_pool(name=path)).config.labels) != {"team": "b"}
        clock.tick(10)
        updated = await api.get_node_pool(name=path)
        assert dict(updated.config.labels) == {"team": "b"}
        assert dict(updated.config.resource_labels) == {"cost-center": "42"}

    serve(scenario)


def test_deprecated_request_fields_still_work() -> None:
    pool = rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot")

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        created = await api.create_node_pool(
            request={
                "project_id": "dws-sandbox",
                "zone": "us-east5",
                "cluster_id": "sandbox",
                "node_pool": pool,
            }
        )
        got = await api.get_node_pool(
            project_id="dws-sandbox",
            zone="us-east5",
            cluster_id="sandbox",
            node_pool_id=pool.name,
        )
        assert got.name == pool.name
        operation = await api.get_operation(
            project_id="dws-sandbox", zone="us-east5", operation_id=created.name
        )
        assert operation.name == created.name

    serve(scenario)


def test_lifecycle_of_the_server() -> None:
    async def main() -> None:
        emulator = ClusterManagerEmulator()
        with pytest.raises(RuntimeError, match="not serving"):
            _ = emulator.endpoint
        async with emulator:
            assert emulator.endpoint.startswith("127.0.0.1:")
            assert emulator.port > 0
            async with connect(emulator.endpoint) as api:
                cluster = await api.get_cluster(name=DEFAULT_CLUSTER)
            assert cluster.name == "sandbox"
            assert cluster.location == "us-east5"
            assert list(cluster.locations) == ["us-east5-a", "us-east5-b", "us-east5-c"]
            endpoint = emulator.endpoint
        # Stopped: nothing answers on that port any more.
        async with connect(endpoint) as api:
            with pytest.raises(core_exceptions.ServiceUnavailable):
                await api.get_cluster(name=DEFAULT_CLUSTER, retry=None, timeout=2)

    asyncio.run(main())


def test_default_operation_latency_is_half_a_second() -> None:
    assert EmulatorConfig().operation_latency_seconds == 0.5


def test_unknown_operation_is_not_found() -> None:
    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        with pytest.raises(core_exceptions.NotFound) as caught:
            await api.get_operation(name=f"{OPERATIONS}/operation-0", retry=None)
        assert caught.value.grpc_status_code == grpc.StatusCode.NOT_FOUND

    serve(scenario)


def test_a_taken_port_is_refused_and_the_thread_ends() -> None:
    with EmulatorThread() as running:
        second = EmulatorThread(port=running.port)
        with pytest.raises(OSError, match="cannot bind"), second:
            pass
    assert [t for t in threading.enumerate() if t.name == "gke-emulator"] == []
