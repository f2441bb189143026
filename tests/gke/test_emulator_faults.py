"""Fault injection, latency and accelerator quota, all from the emulator's config."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.cloud import container_v1
from pydantic import ValidationError

from dws_operator.gke import GkeError, NodePoolClient, PollPolicy, RetryPolicy
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ClusterManagerEmulator,
    EmulatorConfig,
    MethodFaults,
    load_config,
)
from dws_workshop.emulator import server as emulator_server
from tests.builders import gpu, tpu
from tests.gke.harness import UID, MakeEmulator, rendered, run
from tests.sleeps import recorded_sleeps

PoolStatus = container_v1.NodePool.Status
#: These tests look at what the emulator injects, call by call: no client retries.
ONE_ATTEMPT = RetryPolicy(attempts=1)
ZONE: dict[str, Any] = {"provisioning": {"zones": ["us-east5-a"]}}


def fast(**fields: Any) -> EmulatorConfig:
    return EmulatorConfig(operation_latency_seconds=0.05, **fields)


def path(name: str) -> str:
    return f"{DEFAULT_CLUSTER}/nodePools/{name}"


async def create_and_wait(client: NodePoolClient, pool: container_v1.NodePool) -> None:
    created = await client.create(pool, UID)
    assert created.operation is not None
    await client.wait(created.operation)


def test_unavailable_is_retryable_and_changes_nothing(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(
        fast(faults={"CreateNodePool": MethodFaults(error_rate=1.0, error_code="UNAVAILABLE")})
    )
    pool = rendered(tpu("v6e", "4x4"))

    async def attempt(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    with pytest.raises(GkeError) as caught:
        run(emulator, attempt, retry=ONE_ATTEMPT)
    assert caught.value.retryable
    assert caught.value.reason == "Unavailable"
    assert emulator.node_pool(path(pool.name)) is None
    [call] = emulator.calls_for("CreateNodePool")
    assert call.code == grpc.StatusCode.UNAVAILABLE
    assert "injected" in call.message

    emulator.set_faults("CreateNodePool", None)
    run(emulator, attempt)
    assert emulator.node_pool(path(pool.name)) is not None


def test_the_first_answers_lost_then_the_other_faults(make_emulator: MakeEmulator) -> None:
    # The first call is carried out with its answer lost; the error rate spares it and
    # applies to every call after.
    emulator = make_emulator(
        fast(faults={"CreateNodePool": MethodFaults(lost_answers=1, error_rate=1.0)})
    )
    pool = rendered(tpu("v6e", "4x4"))

    async def attempt(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    for _ in range(2):
        with pytest.raises(GkeError):
            run(emulator, attempt, retry=ONE_ATTEMPT)
    codes = [c.code for c in emulator.calls_for("CreateNodePool")]
    assert codes == [grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE]
    assert emulator.node_pool(path(pool.name)) is not None  # the first call made it


def outcomes(emulator: ClusterManagerEmulator, calls: int = 40) -> list[str]:
    """ "ok" or the failure's reason, call by call."""

    async def scenario(client: NodePoolClient) -> list[str]:
        results = []
        for _ in range(calls):
            try:
                await client.get("dws-any")
            except GkeError as error:
                results.append(error.reason)
            else:
                results.append("ok")
        return results

    return run(emulator, scenario, retry=ONE_ATTEMPT)


def test_error_rate_is_seeded(make_emulator: MakeEmulator) -> None:
    def config(seed: int) -> EmulatorConfig:
        return fast(seed=seed, faults={"GetNodePool": MethodFaults(error_rate=0.5)})

    first = outcomes(make_emulator(config(7)))
    again = outcomes(make_emulator(config(7)))
    other = outcomes(make_emulator(config(8)))
    assert first == again
    assert first != other
    assert set(first) == {"ok", "Unavailable"}
    assert 8 <= first.count("Unavailable") <= 32


def test_added_latency(make_emulator: MakeEmulator, monkeypatch: pytest.MonkeyPatch) -> None:
    emulator = make_emulator(fast(faults={"GetCluster": MethodFaults(latency_seconds=0.3)}))
    # What the emulator sleeps, per call: a loaded machine slows every answer, so only
    # the pauses it adds tell which call was given latency.
    slept = recorded_sleeps(monkeypatch, emulator_server)

    async def scenario(client: NodePoolClient) -> float:
        started = time.monotonic()
        await client.api.get_cluster(name=DEFAULT_CLUSTER)
        slow = time.monotonic() - started
        await client.list_pools()
        return slow

    slow = run(emulator, scenario)
    assert slow >= 0.3
    assert slept == [0.3]  # GetCluster only, not ListNodePools
    [call] = emulator.calls_for("GetCluster")
    assert call.duration >= 0.3
    assert len(emulator.calls_for("ListNodePools")) == 1


def test_wait_rides_out_transient_polling_errors(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(fast(seed=7, faults={"GetOperation": MethodFaults(error_rate=0.5)}))
    pool = rendered(tpu("v6e", "4x4"))
    poll = PollPolicy(initial_delay=0.005, max_delay=0.02, timeout=5.0)

    async def scenario(client: NodePoolClient) -> None:
        await create_and_wait(client, pool)

    run(emulator, scenario, poll=poll)
    codes = [c.code for c in emulator.calls_for("GetOperation")]
    # Seed 7 fails the first three polls.
    assert codes[:3] == [grpc.StatusCode.UNAVAILABLE] * 3
    assert codes[-1] == grpc.StatusCode.OK
    stored = emulator.node_pool(path(pool.name))
    assert stored is not None
    assert stored.status == PoolStatus.RUNNING


def test_operation_ending_in_stockout(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(
        fast(
            quotas={"nvidia-h100-80gb": 16},
            faults={"CreateNodePool": MethodFaults(operation_error_rate=1.0)},
        )
    )
    pool = rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot", **ZONE)

    async def scenario(client: NodePoolClient) -> GkeError:
        with pytest.raises(GkeError) as caught:
            await create_and_wait(client, pool)
        emulator.set_faults("CreateNodePool", None)
        # The failed pool stays, in ERROR, and holds no quota.
        failed = await client.get(pool.name)
        assert failed is not None
        assert failed.status == PoolStatus.ERROR
        assert "GCE_STOCKOUT" in failed.status_message
        await create_and_wait(
            client, rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot", name="dws-other", **ZONE)
        )
        deleting = await client.delete(pool.name)
        assert deleting is not None
        await client.wait(deleting)
        return caught.value

    error = run(emulator, scenario)
    assert not error.retryable
    assert error.reason == "Stockout"
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    [operation] = [o for o in emulator.operations() if o.error.code]
    assert operation.status_message == operation.error.message


def test_operation_error_code_and_message_from_config(make_emulator: MakeEmulator) -> None:
    faults = MethodFaults(
        operation_error_rate=1.0,
        operation_error_code="PERMISSION_DENIED",
        operation_error_message="Required 'compute.instances.create' permission",
    )
    emulator = make_emulator(fast(faults={"CreateNodePool": faults}))

    async def scenario(client: NodePoolClient) -> None:
        await create_and_wait(client, rendered(tpu("v6e", "2x2")))

    with pytest.raises(GkeError) as caught:
        run(emulator, scenario)
    assert (caught.value.reason, caught.value.retryable) == ("PermissionDenied", False)


def test_gpu_quota(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(fast(quotas={"nvidia-h100-80gb": 16}))
    first = rendered(gpu("nvidia-h100-80gb", nodes=2), name="dws-first", **ZONE)
    second = rendered(gpu("nvidia-h100-80gb", nodes=1), name="dws-second", **ZONE)

    async def scenario(client: NodePoolClient) -> GkeError:
        await create_and_wait(client, first)
        with pytest.raises(GkeError) as caught:
            await client.create(second, UID)
        # Scaling the first pool to zero gives its GPUs back.
        await client.scale_to_zero(first.name)
        await create_and_wait(client, second)
        return caught.value

    error = run(emulator, scenario)
    assert not error.retryable
    assert error.reason == "QuotaExceeded"
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert 'resource "nvidia-h100-80gb"' in error.message
    assert "requires '8' and is short '8'" in error.message
    assert "quota of '16' with '0' available" in error.message


def test_per_zone_limits_hold_quota_in_every_zone_of_a_regional_pool(
    make_emulator: MakeEmulator,
) -> None:
    """No zones given: the pool takes the regional cluster's three. A total limit of 2
    holds 2 nodes of quota; a per-zone limit of 2 would let it grow to 6 and holds 6."""
    emulator = make_emulator(fast(quotas={"nvidia-h100-80gb": 16}))
    total = rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot", name="dws-total")
    per_zone = rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot", name="dws-per-zone")
    per_zone.autoscaling = container_v1.NodePoolAutoscaling(
        enabled=True, max_node_count=2, location_policy=per_zone.autoscaling.location_policy
    )

    async def scenario(client: NodePoolClient) -> GkeError:
        await create_and_wait(client, total)
        # Scaling to zero caps the total limit too and gives the GPUs back.
        await client.scale_to_zero(total.name)
        with pytest.raises(GkeError) as caught:
            await client.create(per_zone, UID)
        return caught.value

    error = run(emulator, scenario)
    stored = emulator.node_pool(path(total.name))
    assert stored is not None
    assert list(stored.locations) == ["us-east5-a", "us-east5-b", "us-east5-c"]
    assert stored.autoscaling.total_max_node_count == 0
    assert error.reason == "QuotaExceeded"
    assert "requires '48' and is short '32'" in error.message
    assert emulator.node_pool(path(per_zone.name)) is None


def test_tpu_quota_counts_chips(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(fast(quotas={"tpu-v6e-slice": 16}))
    slice_4x4 = rendered(tpu("v6e", "4x4"), name="dws-big", **ZONE)
    slice_2x2 = rendered(tpu("v6e", "2x2"), name="dws-small", **ZONE)

    async def scenario(client: NodePoolClient) -> GkeError:
        await create_and_wait(client, slice_4x4)
        with pytest.raises(GkeError) as caught:
            await client.create(slice_2x2, UID)
        return caught.value

    error = run(emulator, scenario)
    assert error.reason == "QuotaExceeded"
    assert "resource \"tpu-v6e-slice\": request requires '4'" in error.message


def test_resizing_beyond_quota(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(fast(quotas={"nvidia-l4": 4}))
    pool = rendered(gpu("nvidia-l4", nodes=2, count=1), "Spot", **ZONE)

    async def scenario(client: NodePoolClient) -> GkeError:
        await create_and_wait(client, pool)
        request = container_v1.SetNodePoolSizeRequest(name=path(pool.name), node_count=5)
        with pytest.raises(GkeError) as caught:
            await client.call(client.api.set_node_pool_size, request)
        request.node_count = 4
        await client.wait(await client.call(client.api.set_node_pool_size, request))
        return caught.value

    error = run(emulator, scenario)
    assert error.reason == "QuotaExceeded"
    assert emulator.node_count(path(pool.name)) == 4


def test_quota_can_change_at_run_time(make_emulator: MakeEmulator) -> None:
    emulator = make_emulator(fast())
    emulator.set_quota("nvidia-b200", 8)
    pool = rendered(gpu("nvidia-b200", nodes=2), **ZONE)

    async def attempt(client: NodePoolClient) -> None:
        await client.create(pool, UID)

    with pytest.raises(GkeError, match="QuotaExceeded"):
        run(emulator, attempt)
    emulator.set_quota("nvidia-b200", None)
    run(emulator, attempt)
    assert emulator.node_pool(path(pool.name)) is not None


def test_operation_latency_per_method(make_emulator: MakeEmulator) -> None:
    faults = {"DeleteNodePool": MethodFaults(operation_latency_seconds=60)}
    emulator = make_emulator(fast(faults=faults))
    pool = rendered(tpu("v6e", "2x2"))

    async def create(client: NodePoolClient) -> None:
        await create_and_wait(client, pool)

    async def delete(client: NodePoolClient) -> None:
        deleting = await client.delete(pool.name)
        assert deleting is not None
        await client.wait(deleting)

    run(emulator, create)  # the usual poll (5 s): the create is not what is timed
    with pytest.raises(GkeError, match="OperationTimeout"):
        run(emulator, delete, poll=PollPolicy(initial_delay=0.01, max_delay=0.02, timeout=0.3))
    stored = emulator.node_pool(path(pool.name))
    assert stored is not None
    assert stored.status == PoolStatus.STOPPING


# Config file -------------------------------------------------------------------------


def test_load_config(tmp_path: Path) -> None:
    file = tmp_path / "emulator.yaml"
    file.write_text(
        """
seed: 7
operation_latency_seconds: 0.2
clusters:
  - name: projects/dws-sandbox/locations/us-east5/clusters/sandbox
  - name: projects/ml-team-prod/locations/europe-west4-a/clusters/zonal
    version: 1.33.0-gke.1712000
quotas:
  nvidia-h100-80gb: 16
faults:
  CreateNodePool:
    error_rate: 0.25
    error_code: RESOURCE_EXHAUSTED
    latency_seconds: 0.1
"""
    )
    config = load_config(file)
    assert config.seed == 7
    assert config.operation_latency_seconds == 0.2
    assert [c.name for c in config.clusters][1].endswith("/clusters/zonal")
    assert config.clusters[1].node_zones == ["europe-west4-a"]
    assert config.clusters[0].node_zones == ["us-east5-a", "us-east5-b", "us-east5-c"]
    assert config.quotas == {"nvidia-h100-80gb": 16}
    faults = config.faults["CreateNodePool"]
    assert (faults.error_rate, faults.status, faults.latency_seconds) == (
        0.25,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        0.1,
    )


def test_empty_config_file_gives_the_sandbox(tmp_path: Path) -> None:
    file = tmp_path / "empty.yaml"
    file.write_text("")
    config = load_config(file)
    assert [c.name for c in config.clusters] == [DEFAULT_CLUSTER]
    assert config == EmulatorConfig()


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (
            {"faults": {"CreateNodePool": {"error_code": "NOPE"}}},
            "'NOPE' is not a gRPC status code",
        ),
        ({"faults": {"CreateNodePool": {"error_rate": 1.5}}}, "less than or equal to 1"),
        ({"faults": {"MakeCoffee": {}}}, "MakeCoffee"),
        ({"faults": {"GetCluster": {"eror_rate": 0.1}}}, "eror_rate"),
        ({"clusters": [{"name": "sandbox"}]}, "clusters.0.name"),
        ({"clusters": []}, "clusters"),
        ({"quotas": {"nvidia-l4": -1}}, "quotas.nvidia-l4"),
        ({"operation_latency_seconds": -1}, "operation_latency_seconds"),
    ],
)
def test_invalid_config_is_refused(body: dict[str, Any], complaint: str) -> None:
    with pytest.raises(ValidationError) as caught:
        EmulatorConfig.model_validate(body)
    assert complaint in str(caught.value)


def test_serves_the_configured_clusters(make_emulator: MakeEmulator) -> None:
    zonal = "projects/ml-team-prod/locations/europe-west4-a/clusters/zonal"
    emulator = make_emulator(fast(clusters=[ClusterConfig(name=zonal)]))
    pool = rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot")

    async def scenario(client: NodePoolClient) -> container_v1.NodePool | None:
        await create_and_wait(client, pool)
        return await client.get(pool.name)

    got = run(emulator, scenario, cluster=zonal)
    assert got is not None
    assert list(got.locations) == ["europe-west4-a"]

    async def sandbox(client: NodePoolClient) -> None:
        await client.list_pools()

    with pytest.raises(GkeError, match="ClusterNotFound"):
        run(emulator, sandbox)
