"""A capacity ladder end to end, through the real Kueue: a queued step asks through Kueue's
ProvisioningRequest (the queue with the admission check), the Spot and on-demand steps
through the queue without it, and nothing of the steps given up is left (their
ProvisioningRequest, Workloads, Jobs and pools).

The operator's ladder behaviour is tested on the virtual clock in
tests/virtual/test_ladders.py: a TPU ladder moving to the zone with capacity (attempts,
step pools, Events, the slice pool resized to zero), an operator killed during a step
change resuming on the new step, and this GPU ladder's steps, Jobs, queues and pools."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    LOCAL_QUEUE,
    QUEUED_LOCAL_QUEUE,
    dws_objects,
)
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, sim
from tests.polling import eventually


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
        template=sim("3s"),
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
