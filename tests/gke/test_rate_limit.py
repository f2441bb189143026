"""GKE's per-project request quota: N requests per (simulated) minute over every
ClusterManager method, then RESOURCE_EXHAUSTED in Google's words until the minute passes;
the client reads that as a rate limit to wait out, not as a resource quota."""

from __future__ import annotations

import grpc
import pytest
from google.api_core import exceptions as core_exceptions
from google.cloud import container_v1 as c
from pydantic import ValidationError

from dws_operator.gke import classify
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ClusterManagerEmulator,
    EmulatorConfig,
)
from dws_workshop.emulator.ratelimit import project_number, request_project
from tests.builders import gpu
from tests.gke.harness import Api, ManualClock, rendered, serve

OPERATIONS = "projects/dws-sandbox/locations/us-east5/operations"
OTHER_PROJECT = "projects/dws-other/locations/us-east5/clusters/other"


def over_quota(project: str) -> str:
    number = project_number(project)
    return (
        "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of "
        f"service 'container.googleapis.com' for consumer 'project_number:{number}'."
    )


def test_the_call_beyond_the_limit_is_refused_until_its_minute_passes() -> None:
    """Limit 3: calls at 0, 10 and 20 s fill the minute; the fourth (any method) is
    refused, and each slot frees 60 s after the call that took it."""

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        await api.get_cluster(name=DEFAULT_CLUSTER)
        clock.now += 10
        await api.list_node_pools(parent=DEFAULT_CLUSTER)
        clock.now += 10
        pool = rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot", name="dws-pool")
        await api.create_node_pool(parent=DEFAULT_CLUSTER, node_pool=pool)
        clock.now += 10
        with pytest.raises(core_exceptions.ResourceExhausted) as refused:
            await api.list_operations(parent="projects/dws-sandbox/locations/us-east5")
        assert refused.value.grpc_status_code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert refused.value.message == over_quota("dws-sandbox")
        # 59.5 s after the first call: the minute still holds three.
        clock.now += 29.5
        with pytest.raises(core_exceptions.ResourceExhausted):
            await api.get_cluster(name=DEFAULT_CLUSTER)
        # 60 s after the first call, its slot is free: one call, not two.
        clock.now += 0.5
        await api.get_node_pool(name=f"{DEFAULT_CLUSTER}/nodePools/dws-pool")
        with pytest.raises(core_exceptions.ResourceExhausted):
            await api.get_cluster(name=DEFAULT_CLUSTER)
        clock.now += 10
        await api.get_cluster(name=DEFAULT_CLUSTER)

        codes = [c.code for c in emulator.calls]
        ok, exhausted = grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED
        assert codes == [ok, ok, ok, exhausted, exhausted, ok, exhausted, ok]
        assert emulator.refusals() == {"ListOperations": 1, "GetCluster": 2}
        # The refused create never happened; the admitted one did.
        assert emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/dws-pool") is not None

    serve(EmulatorConfig(operation_latency_seconds=1.0, api_rate_limit=3), scenario)


def test_the_minute_is_simulated_and_the_quota_per_project() -> None:
    """At 60x a minute is one real second; another project's calls count on their own."""
    config = EmulatorConfig(
        clock_factor=60.0,
        api_rate_limit=2,
        clusters=[ClusterConfig(name=DEFAULT_CLUSTER), ClusterConfig(name=OTHER_PROJECT)],
    )

    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        for _ in range(2):
            await api.get_cluster(name=DEFAULT_CLUSTER)
        with pytest.raises(core_exceptions.ResourceExhausted) as refused:
            await api.get_cluster(name=DEFAULT_CLUSTER)
        assert refused.value.message == over_quota("dws-sandbox")
        for _ in range(2):
            await api.get_cluster(name=OTHER_PROJECT)
        with pytest.raises(core_exceptions.ResourceExhausted) as other:
            await api.get_cluster(name=OTHER_PROJECT)
        assert other.value.message == over_quota("dws-other")
        assert project_number("dws-other") != project_number("dws-sandbox")

        clock.now += 0.75
        with pytest.raises(core_exceptions.ResourceExhausted):
            await api.get_cluster(name=DEFAULT_CLUSTER)
        clock.now += 0.25
        for _ in range(2):
            await api.get_cluster(name=DEFAULT_CLUSTER)
        assert emulator.refusals() == {"GetCluster": 3}

    serve(config, scenario)


def test_without_a_limit_nothing_is_refused() -> None:
    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        for _ in range(200):
            await api.get_cluster(name=DEFAULT_CLUSTER)
        assert emulator.refusals() == {}
        assert len(emulator.calls) == 200

    serve(EmulatorConfig(), scenario)


def test_the_client_reads_the_refusal_as_a_rate_limit() -> None:
    async def scenario(emulator: ClusterManagerEmulator, api: Api, clock: ManualClock) -> None:
        await api.get_cluster(name=DEFAULT_CLUSTER)
        with pytest.raises(core_exceptions.ResourceExhausted) as refused:
            await api.get_operation(name=f"{OPERATIONS}/operation-1")
        error = classify(refused.value)
        assert (error.reason, error.retryable) == ("RateLimited", True)
        assert error.message == over_quota("dws-sandbox")

    serve(EmulatorConfig(api_rate_limit=1), scenario)


def test_the_limit_is_read_from_the_config_and_must_be_positive() -> None:
    assert EmulatorConfig.model_validate({"api_rate_limit": 600}).api_rate_limit == 600
    assert EmulatorConfig().api_rate_limit is None
    with pytest.raises(ValidationError, match="greater than or equal to 1"):
        EmulatorConfig(api_rate_limit=0)


def test_the_project_counted_is_the_one_the_request_names() -> None:
    assert request_project(c.GetClusterRequest(name=DEFAULT_CLUSTER)) == "dws-sandbox"
    assert request_project(c.ListOperationsRequest(parent="projects/p1/locations/-")) == "p1"
    legacy = c.GetClusterRequest(project_id="p2", zone="us-east5-a", cluster_id="c")
    assert request_project(legacy) == "p2"
    assert request_project(c.GetClusterRequest()) is None
    assert len(str(project_number("dws-sandbox"))) == 12
