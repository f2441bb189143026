"""TPU slices end to end: a whole slice through queued provisioning (real Kueue, its
ProvisioningRequest answered by the emulator's autoscaler)."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import QUEUED_LOCAL_QUEUE, dws_objects
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, nodes, sim
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

PROVREQ = ("autoscaling.x-k8s.io", "v1", "provisioningrequests")


def provisioning_requests(scenario: Scenario) -> list[dict[str, Any]]:
    listed: Any = k8s.CustomObjectsApi(scenario.api).list_namespaced_custom_object(
        PROVREQ[0], PROVREQ[1], scenario.namespace, PROVREQ[2]
    )
    return list(listed["items"])


def provisioned(scenario: Scenario) -> dict[str, Any] | None:
    for request in provisioning_requests(scenario):
        for condition in (request.get("status") or {}).get("conditions", []):
            if condition["type"] == "Provisioned" and condition["status"] == "True":
                return request
    return None


def test_v6e_slice_through_queued_provisioning(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(
        SimScenario(clock_factor=CLOCK), kueue=KueueMode.REQUIRED, queued_queue=QUEUED_LOCAL_QUEUE
    )
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    scenario.create(
        tpu("v6e", "4x4"),
        mode="QueuedProvisioning",
        provisioning={"maxRunDuration": "2h"},
        template=sim("10s"),
    )
    [request] = eventually(
        lambda: provisioning_requests(scenario), timeout=60, what="Kueue's ProvisioningRequest"
    )
    spec = request["spec"]
    assert spec["provisioningClassName"] == "queued-provisioning.gke.io"
    # GKE provisions the whole slice of this topology, for at most the run time asked.
    assert spec["parameters"]["tpu-topology"] == "4x4"
    assert spec["parameters"]["maxRunDurationSeconds"] == "7200"
    assert [p["count"] for p in spec["podSets"]] == [4]
    done = eventually(lambda: provisioned(scenario), timeout=60, what="Provisioned")
    details = done["status"]["provisioningClassDetails"]
    assert details["NodePoolName"] == scenario.pool_name
    # The whole slice arrived through the request: four queued TPU nodes.
    slice_nodes = eventually(lambda: len(nodes(scenario)) == 4 and nodes(scenario), what="4 nodes")
    for node in slice_nodes:
        labels = node.metadata.labels
        # GKE taints queued nodes; it does not label them gke-queued.
        assert "cloud.google.com/gke-queued" not in labels
        assert labels["cloud.google.com/gke-flex-start"] == "true"
        assert labels["cloud.google.com/gke-tpu-topology"] == "4x4"
        taints = {(t.key, t.effect) for t in node.spec.taints or []}
        assert ("cloud.google.com/gke-queued", "NoSchedule") in taints
    pods = eventually(
        lambda: len(scenario.pods()) == 4 and scenario.pods(), timeout=60, what="4 pods"
    )
    name = request["metadata"]["name"]
    for pod in pods:
        annotations = pod.metadata.annotations or {}
        assert annotations["autoscaling.x-k8s.io/consume-provisioning-request"] == name
        assert pod.spec.node_selector["cloud.google.com/gke-flex-start"] == "true"
        assert "cloud.google.com/gke-queued" not in pod.spec.node_selector
    scenario.wait_phase("Succeeded", timeout=90)
    eventually(lambda: nodes(scenario) == [], what="the nodes gone")
    assert scenario.at_zero()
