"""A TrainingRequest from creation to a pool scaled to zero, for every mode."""

from __future__ import annotations

import time

import pytest
from google.cloud import container_v1

from tests.builders import gpu, tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

pytestmark = pytest.mark.usefixtures("operator")


def test_tpu_v6e_4x4_flex_start(scenario: Scenario) -> None:
    scenario.create(tpu("v6e", "4x4"))
    [pool] = eventually(scenario.created_pools, what="CreateNodePool")
    assert pool.config.flex_start
    # No zones named on a regional cluster: the slice lives in one zone, the first of the
    # region's documented v6e flex-start zones, with per-zone limits of one slice.
    assert list(pool.locations) == ["us-east5-a"]
    scaling = pool.autoscaling
    assert (scaling.enabled, scaling.min_node_count, scaling.max_node_count) == (True, 0, 4)
    assert (scaling.total_min_node_count, scaling.total_max_node_count) == (0, 0)
    assert pool.placement_policy.tpu_topology == "4x4"
    assert pool.config.machine_type == "ct6e-standard-4t"

    job = scenario.job()
    assert (job.spec.completion_mode, job.spec.completions, job.spec.parallelism) == (
        "Indexed",
        4,
        4,
    )
    assert job.spec.backoff_limit == 0
    pod = job.spec.template.spec
    assert pod.restart_policy == "Never"
    assert pod.subdomain == scenario.name
    assert pod.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-nodepool": scenario.pool_name,
    }
    assert [(t.key, t.value, t.effect) for t in pod.tolerations] == [
        ("google.com/tpu", "present", "NoSchedule")
    ]
    container = pod.containers[0]
    assert container.resources.requests == {"google.com/tpu": "4"}
    assert container.resources.limits == {"google.com/tpu": "4"}
    env = {e.name: e for e in container.env}
    assert env["TPU_WORKER_HOSTNAMES"].value == ",".join(
        f"{scenario.name}-{i}.{scenario.name}" for i in range(4)
    )
    assert env["TPU_WORKER_ID"].value_from is not None
    service = scenario.service()
    assert service is not None
    assert service.spec.cluster_ip == "None"
    assert job.metadata.owner_references[0].kind == "TrainingRequest"

    scenario.wait_phase("WaitingForCapacity")
    scenario.mark_pods("Running", 4)
    status = scenario.wait_phase("Running")
    assert status["startedAt"]
    scenario.mark_pods("Succeeded", 4)
    finished = time.monotonic()
    status = scenario.wait_phase("Succeeded")
    eventually(scenario.at_zero, timeout=10, what="the pool at zero")
    elapsed = time.monotonic() - finished
    eventually(lambda: scenario.status().get("scaledDownAt"), timeout=10, what="scaledDownAt")
    print(f"\npool scaled to zero {elapsed:.1f}s after the pods succeeded")
    assert elapsed < 10
    assert scenario.condition("Completed")["status"] == "True"
    assert scenario.condition("ScaledDown")["status"] == "True"
    # Events are posted after the status write that they tell of.
    told = {"Provisioning", "WaitingForCapacity", "Running", "Succeeded", "ScaledToZero"}
    eventually(lambda: told <= set(scenario.events()), what=f"the events {sorted(told)}")
    # Exactly one pool was asked for.
    assert len(scenario.created_pools()) == 1


@pytest.mark.parametrize(
    ("accelerator", "mode", "extra", "check"),
    [
        (tpu("v5e", "2x2"), "FlexStart", {}, "single-host"),
        (gpu("nvidia-l4", nodes=2, count=1), "Spot", {}, "spot"),
        (gpu("nvidia-a100-80gb", nodes=1), "OnDemand", {}, "on-demand"),
        (
            tpu("v5p", "2x2x2"),
            "Reservation",
            # A reservation's slice lives in the reservation's zone, named.
            {"provisioning": {"reservation": "blk-7", "zones": ["us-east5-b"]}},
            "reservation",
        ),
        (tpu("tpu7x", "2x2x2"), "FlexStart", {}, "workload-policy"),
    ],
    ids=["single-host-tpu", "spot-gpu", "on-demand-gpu", "reservation-tpu", "ironwood"],
)
def test_modes_run_to_completion(
    scenario: Scenario, accelerator: dict, mode: str, extra: dict, check: str
) -> None:
    scenario.create(accelerator, mode=mode, **extra)
    [pool] = eventually(scenario.created_pools, what="CreateNodePool")
    job = scenario.job()
    nodes = job.spec.parallelism
    pod = job.spec.template.spec
    if check == "single-host":
        assert job.spec.completion_mode != "Indexed"
        assert pod.restart_policy == "OnFailure"
        assert not pool.placement_policy.tpu_topology
        assert scenario.service() is None
    if check == "spot":
        assert pool.config.spot
        assert pod.node_selector["cloud.google.com/gke-spot"] == "true"
        assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "1"}
    if check == "on-demand":
        assert not (pool.config.spot)
        assert not (pool.config.flex_start)
        assert pod.containers[0].resources.limits == {"nvidia.com/gpu": "8"}
    if check == "reservation":
        affinity = pool.config.reservation_affinity
        assert affinity.consume_reservation_type == (
            container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
        )
        assert list(affinity.values) == ["blk-7"]
    if check == "workload-policy":
        # Ironwood's multi-host pool is placed by the workload policy the operator made.
        assert pool.placement_policy.policy_name == "dws-high-throughput-2x2x2"
        assert not pool.placement_policy.tpu_topology
        policy = scenario.emulator.compute.policy(
            "dws-sandbox", "us-east5", "dws-high-throughput-2x2x2"
        )
        assert policy is not None
        assert policy.workload_policy.accelerator_topology == "2x2x2"
        assert policy.workload_policy.type_ == "HIGH_THROUGHPUT"
    scenario.mark_pods("Succeeded", nodes)
    scenario.wait_phase("Succeeded")
    eventually(scenario.at_zero, timeout=10, what="the pool at zero")


def test_existing_pool_is_never_created_or_deleted(scenario: Scenario) -> None:
    from tests.gke.harness import rendered  # noqa: PLC0415 - shared GKE test helper

    pool = rendered(gpu("nvidia-h100-80gb", nodes=4), "OnDemand", name="team-h100")
    scenario.emulator_create(pool)
    scenario.create(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="OnDemand",
        nodePool={"existing": True, "name": "team-h100"},
    )
    job = scenario.job()
    assert job.spec.template.spec.node_selector["cloud.google.com/gke-nodepool"] == "team-h100"
    scenario.mark_pods("Succeeded", 2)
    scenario.wait_phase("Succeeded")
    scenario.delete()
    eventually(lambda: scenario.get() is None, what="the TrainingRequest gone")
    calls = [c.method for c in scenario.emulator.calls]
    assert calls.count("CreateNodePool") == 1  # the test's own
    for method in ("DeleteNodePool", "SetNodePoolSize", "SetNodePoolAutoscaling"):
        assert method not in calls


def test_max_wait_expiry(scenario: Scenario) -> None:
    scenario.create(tpu("v6e", "2x4"), provisioning={"maxWaitDuration": "3s"})
    scenario.job()
    status = scenario.wait_phase("Failed", timeout=20)
    assert scenario.condition("Completed")["reason"] == "CapacityTimeout"
    assert "CapacityTimeout" in status["message"]
    eventually(lambda: scenario.jobs() == [], what="the Job deleted")
    # A pool that never got capacity is not left behind.
    eventually(lambda: scenario.pool() is None, timeout=10, what="the pool deleted")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")


def test_deleting_a_running_request_removes_everything(scenario: Scenario) -> None:
    scenario.create(tpu("v6e", "4x4"), nodePool={"cleanup": "Keep"})
    scenario.job()
    scenario.mark_pods("Running", 4)
    scenario.wait_phase("Running")
    pool_name = scenario.pool_name
    scenario.delete()
    eventually(lambda: scenario.get() is None, what="the TrainingRequest gone")
    assert scenario.jobs() == []
    assert scenario.service() is None
    eventually(lambda: scenario.pool() is None, what="the pool deleted")
    deletes = [c for c in scenario.emulator.calls_for("DeleteNodePool") if c.ok]
    assert [c.request.name.rsplit("/", 1)[-1] for c in deletes] == [pool_name]
