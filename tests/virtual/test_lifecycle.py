"""A TrainingRequest from creation to a pool scaled to zero, on the virtual clock, for
every mode; an Ironwood slice, placed by a Compute workload policy, in
tests/virtual/test_workload_policies.py."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud import container_v1

from tests.builders import gpu, tpu
from tests.gke.harness import rendered
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.requests import make_pool


def test_tpu_slice_runs_and_its_pool_goes_to_zero(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        assert pool.config.flex_start
        assert list(pool.locations) == ["us-east5-a"]
        job = await op.job()
        assert job["spec"]["completions"] == 4
        await op.wait_phase("WaitingForCapacity")
        await op.nodes_up(op.pool_name, 4)
        await op.job_running(4)
        status = await op.wait_phase("Running")
        assert status["startedAt"]
        await op.job_succeeded()
        finished = op.now()
        await op.wait_phase("Succeeded")
        await op.nodes_up(op.pool_name, 0)
        await op.until(lambda: op.at_zero(op.pool_name), "the pool at zero")
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        assert op.now() - finished < 60
        assert op.condition("ScaledDown")["status"] == "True"
        told = {"Provisioning", "WaitingForCapacity", "Running", "Succeeded", "ScaledToZero"}
        await op.until(lambda: told <= set(op.events()), f"the events {sorted(told)}")
        assert len(op.created_pools()) == 1

    virtual.run(scenario)


def test_an_operator_killed_while_its_pool_is_made_makes_no_second_one(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        await op.until(op.created_pools, "CreateNodePool")
        # Killed while GKE's operation runs (it takes 20 virtual seconds here).
        await op.kill()
        await op.sleep(5)
        await op.start()
        await op.wait_phase("WaitingForCapacity")
        await op.nodes_up(op.pool_name, 4)
        await op.job_running(4)
        await op.wait_phase("Running")
        # Not even asked for twice: the new operator found GKE making it.
        assert len(op.emulator.calls_for("CreateNodePool")) == 1
        assert len(op.jobs()) == 1
        assert op.starts == 2

    virtual.run(scenario)


def test_a_request_deleted_while_running_lets_go_only_once_its_pool_is_gone(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        await op.wait_phase("WaitingForCapacity")
        pool = op.pool_name
        await op.nodes_up(pool, 4)
        await op.job_running(4)
        await op.wait_phase("Running")
        assert "dws-operator.dev/cleanup" in (op.get() or {})["metadata"]["finalizers"]
        await op.delete()
        # Held by the finalizer while the pool goes.
        await op.sleep(1)
        assert op.get() is not None
        await op.until(lambda: pool not in op.pool_names(), "the pool deleted")
        await op.until(lambda: op.get() is None, "the request gone")
        assert op.emulator.calls_for("DeleteNodePool")

    virtual.run(scenario)


def test_a_tpu_v6e_4x4_flex_start_slice_gets_its_pool_job_and_service(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        assert pool.config.flex_start
        # No zones named on a regional cluster: the slice lives in one zone, the first of
        # the region's documented v6e flex-start zones, with per-zone limits of one slice.
        assert list(pool.locations) == ["us-east5-a"]
        scaling = pool.autoscaling
        assert (scaling.enabled, scaling.min_node_count, scaling.max_node_count) == (True, 0, 4)
        assert (scaling.total_min_node_count, scaling.total_max_node_count) == (0, 0)
        assert pool.placement_policy.tpu_topology == "4x4"
        assert pool.config.machine_type == "ct6e-standard-4t"

        job = await op.job()
        spec = job["spec"]
        assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == (
            "Indexed",
            4,
            4,
        )
        assert spec["backoffLimit"] == 0
        pod = spec["template"]["spec"]
        assert pod["restartPolicy"] == "Never"
        assert pod["subdomain"] == op.name
        assert pod["nodeSelector"] == {
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "4x4",
            "cloud.google.com/gke-flex-start": "true",
            "cloud.google.com/gke-nodepool": op.pool_name,
        }
        assert [(t["key"], t["value"], t["effect"]) for t in pod["tolerations"]] == [
            ("google.com/tpu", "present", "NoSchedule")
        ]
        container = pod["containers"][0]
        assert container["resources"]["requests"] == {"google.com/tpu": "4"}
        assert container["resources"]["limits"] == {"google.com/tpu": "4"}
        env = {e["name"]: e for e in container["env"]}
        assert env["TPU_WORKER_HOSTNAMES"]["value"] == ",".join(
            f"{op.name}-{i}.{op.name}" for i in range(4)
        )
        assert env["TPU_WORKER_ID"]["valueFrom"]
        service = await op.until(op.service, "the Service")
        assert service["spec"]["clusterIP"] == "None"
        assert job["metadata"]["ownerReferences"][0]["kind"] == "TrainingRequest"

        await op.wait_phase("WaitingForCapacity")
        await op.job_running(4)
        status = await op.wait_phase("Running")
        assert status["startedAt"]
        await op.job_succeeded()
        finished = op.now()
        await op.wait_phase("Succeeded")
        await op.until(lambda: op.at_zero(op.pool_name), "the pool at zero")
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        # GKE's resize to zero takes 20 virtual seconds here.
        assert op.now() - finished < 60
        assert op.condition("Completed")["status"] == "True"
        assert op.condition("ScaledDown")["status"] == "True"
        # Events are posted after the status write that they tell of.
        told = {"Provisioning", "WaitingForCapacity", "Running", "Succeeded", "ScaledToZero"}
        await op.until(lambda: told <= set(op.events()), f"the events {sorted(told)}")
        # Exactly one pool was asked for.
        assert len(op.created_pools()) == 1

    virtual.run(scenario)


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
    ],
    ids=["single-host-tpu", "spot-gpu", "on-demand-gpu", "reservation-tpu"],
)
def test_modes_run_to_completion(
    virtual: Virtual, accelerator: dict[str, Any], mode: str, extra: dict[str, Any], check: str
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(accelerator, mode=mode, **extra)
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        job = await op.job()
        pod = job["spec"]["template"]["spec"]
        limits = pod["containers"][0]["resources"]["limits"]
        if check == "single-host":
            assert job["spec"].get("completionMode") != "Indexed"
            assert pod["restartPolicy"] == "OnFailure"
            assert not pool.placement_policy.tpu_topology
            assert op.service() is None
        if check == "spot":
            assert pool.config.spot
            assert pod["nodeSelector"]["cloud.google.com/gke-spot"] == "true"
            assert limits == {"nvidia.com/gpu": "1"}
        if check == "on-demand":
            assert not pool.config.spot
            assert not pool.config.flex_start
            assert limits == {"nvidia.com/gpu": "8"}
        if check == "reservation":
            affinity = pool.config.reservation_affinity
            assert affinity.consume_reservation_type == (
                container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
            )
            assert list(affinity.values) == ["blk-7"]
        await op.job_succeeded()
        await op.wait_phase("Succeeded")
        await op.until(lambda: op.at_zero(str(pool.name)), "the pool at zero")

    virtual.run(scenario)


def test_existing_pool_is_never_created_or_deleted(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        team = rendered(gpu("nvidia-h100-80gb", nodes=4), "OnDemand", name="team-h100")
        await make_pool(op, team)
        await op.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="OnDemand",
            nodePool={"existing": True, "name": "team-h100"},
        )
        job = await op.job()
        selector = job["spec"]["template"]["spec"]["nodeSelector"]
        assert selector["cloud.google.com/gke-nodepool"] == "team-h100"
        await op.job_succeeded()
        await op.wait_phase("Succeeded")
        await op.delete()
        await op.until(lambda: op.get() is None, "the TrainingRequest gone")
        calls = [c.method for c in op.emulator.calls]
        assert calls.count("CreateNodePool") == 1  # the test's own
        for method in ("DeleteNodePool", "SetNodePoolSize", "SetNodePoolAutoscaling"):
            assert method not in calls
        assert op.pool("team-h100") is not None

    virtual.run(scenario)


def test_max_wait_expiry(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "2x4"), provisioning={"maxWaitDuration": "10m"})
        created = op.now()
        await op.job()
        status = await op.wait_phase("Failed")
        # Not before its wait is over.
        assert op.now() - created >= 600
        assert op.condition("Completed")["reason"] == "CapacityTimeout"
        assert "CapacityTimeout" in status["message"]
        await op.until(lambda: op.jobs() == [], "the Job deleted")
        # A pool that never got capacity is not left behind.
        pool = op.pool_name
        await op.until(lambda: op.pool(pool) is None, "the pool deleted")
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")

    virtual.run(scenario)


def test_deleting_a_running_request_removes_everything(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"), nodePool={"cleanup": "Keep"})
        await op.job_running(4)
        await op.wait_phase("Running")
        pool = op.pool_name
        assert op.service() is not None
        await op.delete()
        await op.until(lambda: op.get() is None, "the TrainingRequest gone")
        # Deleted by the operator itself (the in-memory server has no garbage collector).
        assert op.jobs() == []
        assert op.service() is None
        await op.until(lambda: op.pool(pool) is None, "the pool deleted")
        deletes = [c for c in op.emulator.calls_for("DeleteNodePool") if c.ok]
        assert [c.request.name.rsplit("/", 1)[-1] for c in deletes] == [pool]

    virtual.run(scenario)


def test_an_operation_of_a_kind_never_seen_done_is_looked_at_every_two_seconds(
    virtual: Virtual,
) -> None:
    """Until one operation of a kind has ended, how long GKE takes for it is unknown: the
    operator looks every 2 s (POLL_SECONDS), not at a share of a guess."""

    async def scenario(op: VirtualOperator) -> None:
        sent = op.now()
        await op.create(tpu("v6e", "4x4"))
        await op.until(op.created_pools, "CreateNodePool")
        name = op.pool_name
        await op.until(lambda: (p := op.pool(name)) is not None and p.status == 2, "RUNNING")
        took = op.now() - sent
        looks = op.emulator.calls_for("GetOperation")
        assert took >= 20  # GKE's create takes 20 s here
        assert 0 < len(looks) <= took / 2 + 1

    virtual.run(scenario)
