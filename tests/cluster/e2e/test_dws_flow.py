"""End-to-end flows: capacity that arrives late, Kueue and ProvisioningRequests, deletion
mid-run.

Capacity that never arrives (maxWaitDuration's expiry, no pool left behind) is tested on the
virtual clock (tests/virtual/test_lifecycle.py: a wait the test steps over rather than sits
out); a Spot preemption through the real Job controller's podFailurePolicy in
tests/cluster/operator/test_resilience.py, and its whole handling on the virtual clock
(tests/virtual/test_resilience.py)."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    QUEUED_LOCAL_QUEUE,
    dws_objects,
)
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu, tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

POOL_LABEL = "cloud.google.com/gke-nodepool"
#: GKE's minutes run as seconds.
CLOCK = 60.0

#: A hang guard for what the cluster does on its own (nodes, pods, garbage collection):
#: seconds on a quiet machine; a loaded CI runner took over 30 s to delete a Job's pods.
SETTLE = 120.0


def sim(seconds: str) -> dict[str, Any]:
    return {
        "metadata": {"annotations": {"dws-operator.dev/sim-duration": seconds}},
        "spec": {"containers": [{"name": "train", "image": "example/train:1"}]},
    }


def forever() -> dict[str, Any]:
    """A pod template whose pods run until their node goes or the test lets them finish
    (`Scenario.finish_pods`)."""
    return {"spec": {"containers": [{"name": "train", "image": "example/train:1"}]}}


def nodes(scenario: Scenario) -> list[k8s.V1Node]:
    selector = f"{POOL_LABEL}={scenario.pool_name}"
    return list(scenario.core.list_node(label_selector=selector).items)


def job_complete(scenario: Scenario) -> bool:
    conditions = scenario.job().status.conditions or []
    return any(c.type == "Complete" and c.status == "True" for c in conditions)


def test_flex_start_capacity_after_five_simulated_minutes(stack: Stack) -> None:
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK,
            capacity=[CapacityRule(accelerator="tpu-v6e-slice", after_seconds=300)],
        )
    )
    scenario.create(tpu("v6e", "4x4"), template=sim("10s"))
    scenario.wait_phase("WaitingForCapacity")
    assert nodes(scenario) == []
    arrived = eventually(
        lambda: len(nodes(scenario)) == 4 and nodes(scenario), timeout=SETTLE, what="4 nodes"
    )
    labels = arrived[0].metadata.labels
    assert labels["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert labels["cloud.google.com/gke-tpu-topology"] == "4x4"
    assert labels["cloud.google.com/gke-flex-start"] == "true"
    node_names = {n.metadata.name for n in arrived}

    def running_on_the_slice() -> list[k8s.V1Pod] | None:
        running = [
            p
            for p in scenario.pods()
            if p.status.phase == "Running" and p.spec.node_name in node_names
        ]
        return running if len(running) == 4 else None  # all four, not the first ones

    running = eventually(running_on_the_slice, timeout=SETTLE, what="4 pods running on the slice")
    assert {p.spec.node_name for p in running} == node_names
    # Idle time counts from the Job's completion as the test sees it (polling every
    # 0.1 s), so it includes the operator's own time to notice, not only the scale-down.
    eventually(lambda: job_complete(scenario), timeout=60, what="the Job complete")
    finished = time.monotonic()
    scenario.wait_phase("Succeeded", timeout=SETTLE)
    eventually(lambda: nodes(scenario) == [], timeout=SETTLE, what="the nodes gone")
    idle = time.monotonic() - finished
    print(f"\nidle node time after the Job finished: {idle:.1f}s (GKE default ~600s)")
    assert idle < 15
    assert scenario.at_zero()


def test_gpu_queued_provisioning_through_kueue(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(
        SimScenario(clock_factor=CLOCK), kueue=KueueMode.REQUIRED, queued_queue=QUEUED_LOCAL_QUEUE
    )
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    scenario.create(
        gpu("nvidia-h100-80gb", nodes=2), mode="QueuedProvisioning", template=sim("10s")
    )
    objects = k8s.CustomObjectsApi(scenario.api)

    def provreqs() -> list[dict[str, Any]]:
        listed: Any = objects.list_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", scenario.namespace, "provisioningrequests"
        )
        return list(listed["items"])

    [provreq] = eventually(provreqs, timeout=60, what="Kueue's ProvisioningRequest")
    assert provreq["spec"]["provisioningClassName"] == "queued-provisioning.gke.io"
    provisioned = eventually(
        lambda: next(
            (
                c
                for c in (provreqs()[0].get("status") or {}).get("conditions", [])
                if c["type"] == "Provisioned" and c["status"] == "True"
            ),
            None,
        ),
        timeout=60,
        what="Provisioned",
    )
    pods = eventually(
        lambda: len(scenario.pods()) == 2 and scenario.pods(),
        timeout=60,
        what="the admitted Job's pods",
    )
    for pod in pods:
        annotations = pod.metadata.annotations or {}
        assert (
            annotations["autoscaling.x-k8s.io/consume-provisioning-request"]
            == (provreq["metadata"]["name"])
        )
        assert annotations["autoscaling.x-k8s.io/provisioning-class-name"] == (
            "queued-provisioning.gke.io"
        )
    workloads: Any = objects.list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_API_VERSION.split("/")[-1], scenario.namespace, "workloads"
    )
    [workload] = workloads["items"]
    admitted = next(c for c in workload["status"]["conditions"] if c["type"] == "Admitted")
    assert admitted["status"] == "True"
    assert admitted["lastTransitionTime"] >= provisioned["lastTransitionTime"]
    scenario.wait_phase("Succeeded", timeout=60)
    eventually(lambda: nodes(scenario) == [], timeout=SETTLE, what="the nodes gone")


def test_deleted_mid_run(stack: Stack) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK))
    scenario.create(tpu("v6e", "4x4"), template=sim("120s"))
    scenario.wait_phase("Running", timeout=40)
    assert len(nodes(scenario)) == 4
    scenario.delete()
    eventually(lambda: scenario.get() is None, timeout=SETTLE, what="the request gone")
    assert scenario.jobs() == []
    assert scenario.service() is None
    eventually(lambda: scenario.pods() == [], timeout=SETTLE, what="the pods gone")
    eventually(lambda: scenario.pool() is None, timeout=SETTLE, what="the pool gone")
    eventually(lambda: nodes(scenario) == [], timeout=SETTLE, what="the nodes gone")
