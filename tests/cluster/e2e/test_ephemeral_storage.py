"""A pod template that requests ephemeral-storage (common: scratch space for checkpoints and
datasets) runs through the real Kueue: the ClusterQueue covers the resource, so the
workload is admitted, and the nodes GKE makes report it, so the pods are scheduled."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP, LOCAL_QUEUE, dws_objects
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, nodes, sim
from tests.polling import eventually

SCRATCH = "20Gi"


def test_a_template_requesting_ephemeral_storage_runs_through_kueue(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK), kueue=KueueMode.REQUIRED, queue=LOCAL_QUEUE)
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    template = sim("5s")
    [container] = template["spec"]["containers"]
    container["resources"] = {
        "requests": {"cpu": "1", "memory": "4Gi", "ephemeral-storage": SCRATCH},
        "limits": {"ephemeral-storage": SCRATCH},
    }
    scenario.create(gpu("nvidia-l4", count=1), template=template)  # one g2-standard-4

    objects = k8s.CustomObjectsApi(scenario.api)

    def admitted() -> dict[str, Any] | None:
        listed: Any = objects.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_API_VERSION, scenario.namespace, "workloads"
        )
        for workload in listed["items"]:
            for condition in (workload.get("status") or {}).get("conditions", []):
                if condition["type"] == "Admitted" and condition["status"] == "True":
                    return dict(workload)
        return None

    workload = eventually(admitted, timeout=60, what="the Workload admitted by Kueue")
    [assignment] = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["resourceUsage"]["ephemeral-storage"] == SCRATCH
    assert assignment["flavors"]["ephemeral-storage"] == "nvidia-l4"

    [pod] = eventually(scenario.pods, timeout=60, what="the admitted Job's pod")
    requests = pod.spec.containers[0].resources.requests
    assert requests["ephemeral-storage"] == SCRATCH
    assert requests["nvidia.com/gpu"] == "1"
    scenario.wait_phase("Succeeded", timeout=90)
    [ran] = scenario.pods()
    assert ran.status.phase == "Succeeded"
    assert ran.spec.node_name.startswith(f"gke-sandbox-{scenario.pool_name}-")
    eventually(lambda: nodes(scenario) == [], what="the nodes gone")
