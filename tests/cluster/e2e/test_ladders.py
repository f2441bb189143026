"""Capacity ladders end to end: a step that gets no capacity hands over to the next,
its pool and workload go, and the request runs on the step that has capacity."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode, OperatorThread
from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    LOCAL_QUEUE,
    QUEUED_LOCAL_QUEUE,
    dws_objects,
)
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.emulator import MethodFaults
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu, tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, sim
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

#: A regional cluster in us-east5, whose zones a and b serve v6e flex-start.
EAST5 = "projects/dws-sandbox/locations/us-east5/clusters/sandbox"
V6E = "tpu-v6e-slice"


def attempts(scenario: Scenario) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = scenario.status().get("attempts") or []
    return found


def step_pool(scenario: Scenario, step: int) -> str:
    """The pool the request's attempt on `step` (1-based) named."""
    return str(
        eventually(
            lambda: next(
                (a.get("nodePool") for a in attempts(scenario) if a["step"] == step), None
            ),
            timeout=60,
            what=f"step {step}'s attempt",
        )
    )


def test_tpu_ladder_moves_to_the_zone_with_capacity(stack: Stack) -> None:
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK,
            capacity=[
                CapacityRule(zone="us-east5-a", accelerator=V6E, stockout=True),
                CapacityRule(zone="us-east5-b", accelerator=V6E, after_seconds=180),
            ],
        ),
        cluster=EAST5,
    )
    scenario.create(
        tpu("v6e", "4x4"),
        provisioning={
            "zones": ["us-east5-a"],
            "maxWaitDuration": "8s",
            "fallback": [{"mode": "FlexStart", "zones": ["us-east5-b"], "maxWaitDuration": "5m"}],
        },
        template=sim("10s"),
    )
    first = step_pool(scenario, 1)
    eventually(lambda: first in scenario.pool_names(), what="step 1's pool")
    assert scenario.status()["step"] == 1
    second = step_pool(scenario, 2)
    assert second == f"{first}-f1"
    # Step 1 ended: its pool goes (it never had a node: us-east5-a is stocked out).
    eventually(lambda: first not in scenario.pool_names(), what="step 1's pool gone")
    status = scenario.wait_phase("Succeeded", timeout=90)
    assert status["step"] == 2
    assert [(a["step"], a["mode"], a["zones"], a["outcome"]) for a in status["attempts"]] == [
        (1, "FlexStart", ["us-east5-a"], "TimedOut"),
        (2, "FlexStart", ["us-east5-b"], "Provisioned"),
    ]
    assert status["attempts"][0]["nodePool"] == first
    assert status["attempts"][1]["nodePool"] == second
    assert status["attempts"][0]["endedAt"] <= status["attempts"][1]["startedAt"]
    # Step 2's pool ran the Job in us-east5-b and is at zero after it.
    [created] = [
        c.request.node_pool
        for c in scenario.emulator.calls_for("CreateNodePool")
        if c.ok and c.request.node_pool.name == second
    ]
    assert list(created.locations) == ["us-east5-b"]
    eventually(lambda: scenario.pool_nodes(second) == 0, what="step 2 at zero")
    pool = scenario.emulator.node_pool(f"{EAST5}/nodePools/{second}")
    assert pool is not None
    # Resized to zero, never capped: GKE checks a slice pool's maximum against the slice.
    assert pool.autoscaling.max_node_count == 4
    assert first not in scenario.pool_names()
    events = scenario.events()
    assert events.count("StepStarted") == 2
    assert events.count("StepEnded") == 1


def test_gpu_ladder_ends_on_the_step_with_capacity(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    """QueuedProvisioning -> Spot -> OnDemand, where only on-demand VMs are to be had."""
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK,
            capacity=[
                CapacityRule(mode="QueuedProvisioning", stockout=True),
                CapacityRule(mode="Spot", stockout=True),
            ],
        ),
        kueue=KueueMode.REQUIRED,
        queue=LOCAL_QUEUE,
        queued_queue=QUEUED_LOCAL_QUEUE,
    )
    # Two queues: ProvisioningRequests for the queued step, none for Spot and OnDemand.
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    scenario.create(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="QueuedProvisioning",
        provisioning={
            "maxWaitDuration": "10s",
            "fallback": [{"mode": "Spot"}, {"mode": "OnDemand", "maxWaitDuration": "5m"}],
        },
        template=sim("10s"),
    )
    objects = k8s.CustomObjectsApi(scenario.api)

    def listed(group: str, version: str, plural: str) -> list[dict[str, Any]]:
        found: Any = objects.list_namespaced_custom_object(
            group, version, scenario.namespace, plural
        )
        return list(found["items"])

    def provreqs() -> list[dict[str, Any]]:
        return listed("autoscaling.x-k8s.io", "v1", "provisioningrequests")

    # Step 1 asks through Kueue's ProvisioningRequest, which never gets capacity.
    eventually(provreqs, timeout=60, what="step 1's ProvisioningRequest")
    status = scenario.wait_phase("Succeeded", timeout=120)
    assert [(a["step"], a["mode"], a["outcome"]) for a in status["attempts"]] == [
        (1, "QueuedProvisioning", "TimedOut"),
        (2, "Spot", "TimedOut"),
        (3, "OnDemand", "Provisioned"),
    ]
    pools = [a["nodePool"] for a in status["attempts"]]
    # Nothing of steps 1 and 2 is left: no ProvisioningRequest, Workload, Job or pool.
    eventually(lambda: provreqs() == [], timeout=60, what="no ProvisioningRequest")
    last_job = status["job"]["name"]
    assert last_job == f"{scenario.name}-r2"
    eventually(
        lambda: [j.metadata.name for j in scenario.jobs()] == [last_job],
        timeout=60,
        what="only step 3's Job",
    )

    def workload_owners() -> list[str]:
        workloads = listed(KUEUE_GROUP, KUEUE_API_VERSION.split("/")[-1], "workloads")
        return sorted(
            ref["name"] for w in workloads for ref in w["metadata"].get("ownerReferences") or []
        )

    eventually(lambda: workload_owners() == [last_job], timeout=60, what="only step 3's Workload")
    eventually(
        lambda: not (set(pools[:2]) & scenario.pool_names()), timeout=60, what="steps 1-2 pools"
    )
    assert pools[2] in scenario.pool_names()
    eventually(lambda: scenario.pool_nodes(pools[2]) == 0, what="step 3 at zero")


def test_operator_killed_during_a_step_change_resumes_on_the_new_step(
    stack: Stack,
) -> None:
    """The first operator records step 2 but cannot remove step 1's pool (GKE refuses the
    delete for now) before it is stopped; the next one goes on with step 2 and removes
    step 1's pool, which nothing may use any more."""
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK,
            capacity=[
                CapacityRule(zone="us-east5-a", accelerator=V6E, stockout=True),
                CapacityRule(zone="us-east5-b", accelerator=V6E, after_seconds=60),
            ],
        ),
        cluster=EAST5,
        operator=False,
    )
    emulator = scenario.emulator
    refused = MethodFaults(error_rate=1.0, error_code="UNAVAILABLE")
    scenario.create(
        tpu("v6e", "4x4"),
        provisioning={
            "zones": ["us-east5-a"],
            "maxWaitDuration": "6s",
            "fallback": [{"mode": "FlexStart", "zones": ["us-east5-b"], "maxWaitDuration": "5m"}],
        },
        template=sim("10s"),
    )
    with OperatorThread(scenario.operator_config, kubeconfig=scenario.operator_kubeconfig):
        first = step_pool(scenario, 1)
        eventually(lambda: first in scenario.pool_names(), what="step 1's pool")
        emulator.set_faults("DeleteNodePool", refused)
        eventually(lambda: scenario.status().get("step") == 2, what="step 2")
        eventually(
            lambda: any(
                c.request.name.endswith(f"/nodePools/{first}") and not c.ok
                for c in emulator.calls_for("DeleteNodePool")
            ),
            what="a refused delete of step 1's pool",
        )
    # The operator is gone; step 1's pool is still there.
    assert first in scenario.pool_names()
    emulator.set_faults("DeleteNodePool", None)
    with OperatorThread(scenario.operator_config, kubeconfig=scenario.operator_kubeconfig):
        eventually(lambda: first not in scenario.pool_names(), what="step 1 gone")
        status = scenario.wait_phase("Succeeded", timeout=90)
    assert status["step"] == 2
    assert [(a["step"], a["outcome"]) for a in status["attempts"]] == [
        (1, "TimedOut"),
        (2, "Provisioned"),
    ]
    creates = [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool") if c.ok]
    assert sorted(creates) == sorted([first, f"{first}-f1"])
