"""A v6e 4x4 TPU pool with flex-start and queued provisioning (ct6e-standard-4t, one
slice of 4 nodes) against a real API server, scheduler and kwok: pending pods never
grow it; a ProvisioningRequest gets the whole slice at once, or nothing."""

from __future__ import annotations

from typing import Any

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_workshop.simulator.scenario import SimScenario
from tests.cluster.sim.conftest import StartAutoscaler
from tests.cluster.sim.harness import CONTAINER_IMAGE, Sim
from tests.gke.harness import LABELS, queued_tpu
from tests.polling import eventually, never

POOL = "v6e-q"
#: One simulated minute per real second.
FAST = 60.0
#: What the operator's queued pods select: the slice and flex-start. Not the
#: `gke-queued` label: GKE taints queued nodes but labels them so only when the pool
#: asks for it (Cluster Toolkit's blueprints add it to the pool's labels themselves).
SLICE_SELECTOR = {
    "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
    "cloud.google.com/gke-tpu-topology": "4x4",
    "cloud.google.com/gke-flex-start": "true",
}
TOLERATIONS = [
    {"key": "google.com/tpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"},
    {
        "key": "cloud.google.com/gke-queued",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    },
]
CHIPS = {"google.com/tpu": "4"}

Conditions = dict[str, tuple[str, str, str]]


def create_template(sim: Sim) -> None:
    sim.core.create_namespaced_pod_template(
        sim.namespace,
        {
            "metadata": {
                "name": "slice",
                "labels": {"cloud.google.com/apply-warden-policies": "true"},
            },
            "template": {
                "spec": {
                    "nodeSelector": SLICE_SELECTOR,
                    "tolerations": TOLERATIONS,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": CONTAINER_IMAGE,
                            "resources": {"requests": CHIPS, "limits": CHIPS},
                        }
                    ],
                }
            },
        },
    )


def create_request(sim: Sim, name: str, count: int, topology: str) -> None:
    sim.create_custom(
        "provisioningrequests",
        {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": name},
            "spec": {
                "provisioningClassName": "queued-provisioning.gke.io",
                "parameters": {"tpu-topology": topology, "maxRunDurationSeconds": "3600"},
                "podSets": [{"podTemplateRef": {"name": "slice"}, "count": count}],
            },
        },
    )


def conditions(sim: Sim, name: str) -> Conditions:
    status: dict[str, Any] = sim.provisioning_request(name).get("status") or {}
    return {
        c["type"]: (c["status"], c["reason"], c["message"]) for c in status.get("conditions") or []
    }


def test_pending_pods_alone_never_grow_a_queued_tpu_pool(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    start_autoscaler(SimScenario(clock_factor=FAST))
    sim.create_pool(queued_tpu("v6e", "4x4", name=POOL))
    # Two pods name the pool, two only select the slice's labels: neither way scales it.
    for index in range(4):
        named = {NODE_POOL_LABEL_KEY: POOL} if index % 2 else {}
        sim.create_pod(
            f"worker-{index}",
            node_selector={**SLICE_SELECTOR, **named},
            resources=CHIPS,
            tolerations=TOLERATIONS,
        )
    eventually(
        lambda: all(sim.unschedulable(f"worker-{i}") for i in range(4)),
        what="the workers unschedulable",
    )
    # 2 real seconds = 2 simulated minutes: a plain scale-up would have come by now.
    never(lambda: sim.nodes(POOL), 2.0, "a node for pods without a ProvisioningRequest")
    assert sim.node_count(POOL) == 0
    assert {sim.phase(f"worker-{i}") for i in range(4)} == {"Pending"}


def test_only_a_whole_slice_request_is_provisioned_all_at_once(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    start_autoscaler(SimScenario(clock_factor=FAST))
    sim.create_pool(queued_tpu("v6e", "4x4", name=POOL))
    create_template(sim)
    create_request(sim, "half", 2, "4x4")
    create_request(sim, "wrong-shape", 4, "2x4")

    refusals = {
        "half": "Node pool v6e-q provisions its 4x4 TPU slice whole (4 nodes); "
        "the request asks for 2.",
        "wrong-shape": "Node pool v6e-q provisions TPU slices of topology 4x4; "
        "the request asks for tpu-topology 2x4.",
    }
    for name, message in refusals.items():
        said = eventually(lambda n=name: conditions(sim, n).get("Provisioned"), what=name)
        assert said == ("False", "NotProvisioned", message)
        assert conditions(sim, name)["Accepted"][0] == "True"
    never(lambda: sim.nodes(POOL), 1.5, "a node for a request that is not a whole slice")
    assert sim.node_count(POOL) == 0

    create_request(sim, "whole", 4, "4x4")
    counts: set[int] = set()

    def provisioned() -> tuple[str, str, str] | None:
        counts.add(sim.node_count(POOL))
        said = conditions(sim, "whole").get("Provisioned")
        return said if said and said[0] == "True" else None

    said = eventually(provisioned, what="whole Provisioned")
    zone = "us-east5-a"
    assert said == ("True", "Provisioned", f"Provisioned 4 node(s) in node pool {POOL} in {zone}.")
    # One resize by the whole slice: the pool never held part of it.
    assert counts <= {0, 4}
    assert sim.node_count(POOL) == 4
    nodes = sim.nodes(POOL)
    names = sorted(n.metadata.name for n in nodes)
    assert names == [f"gke-sandbox-{POOL}-{i}" for i in range(1, 5)]
    details = sim.provisioning_request("whole")["status"]["provisioningClassDetails"]
    assert details["NodePoolName"] == POOL
    assert details["SelectedZone"] == zone
    assert details["ResizeRequestName"].startswith("whole-")
    for node in nodes:
        assert node.metadata.labels == {
            **LABELS,
            "cloud.google.com/gke-nodepool": POOL,
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "4x4",
            "cloud.google.com/gke-flex-start": "true",
            "cloud.google.com/gke-provisioning": "flex-start",
            "cloud.google.com/machine-family": "ct6e",
            "cloud.google.com/gke-os-distribution": "cos",
            "cloud.google.com/gke-container-runtime": "containerd",
            "node.kubernetes.io/instance-type": "ct6e-standard-4t",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/hostname": node.metadata.name,
            "topology.kubernetes.io/zone": zone,
            "topology.kubernetes.io/region": "us-east5",
        }
        assert node.status.allocatable["google.com/tpu"] == "4"
    # Once Ready (the not-ready taint lifted): GKE's TPU and queued taints only.
    eventually(
        lambda: all(
            sorted((t.key, t.value, t.effect) for t in n.spec.taints or [])
            == [
                ("cloud.google.com/gke-queued", "true", "NoSchedule"),
                ("google.com/tpu", "present", "NoSchedule"),
            ]
            for n in sim.nodes(POOL)
        ),
        what="the TPU and queued taints only",
    )
    # The refused requests stay refused; the pool stays one slice.
    assert conditions(sim, "half")["Provisioned"] == ("False", "NotProvisioned", refusals["half"])
    assert conditions(sim, "wrong-shape")["Provisioned"] == (
        "False",
        "NotProvisioned",
        refusals["wrong-shape"],
    )

    # The slice's workers consume the request and run one per node.
    for index in range(4):
        sim.create_pod(
            f"worker-{index}",
            node_selector=SLICE_SELECTOR,
            resources=CHIPS,
            tolerations=TOLERATIONS,
            annotations={
                "autoscaling.x-k8s.io/consume-provisioning-request": "whole",
                "autoscaling.x-k8s.io/provisioning-class-name": "queued-provisioning.gke.io",
            },
        )

    def running() -> set[str] | None:
        pods = [sim.pod(f"worker-{i}") for i in range(4)]
        if all(p.status.phase == "Running" for p in pods):
            return {p.spec.node_name for p in pods}
        return None

    assert eventually(running, what="the workers running") == set(names)
    never(lambda: len(sim.nodes(POOL)) != 4, 1.0, "the pool changing size")
    assert sim.node_count(POOL) == 4
