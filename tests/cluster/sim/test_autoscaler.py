"""The emulator's autoscaler against a real API server, scheduler and kwok."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from google.cloud import container_v1
from kubernetes.client import V1Node

from dws_operator import rfc3339
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION, SIM_EXIT_CODE_ANNOTATION
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.autoscaler_view import DISRUPTION_REASON
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu, tpu
from tests.cluster.sim.conftest import StartAutoscaler
from tests.cluster.sim.harness import Sim
from tests.gke.harness import LABELS, rendered
from tests.polling import eventually, never

TPU_TOLERATION = {"key": "google.com/tpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
ZONE = "topology.kubernetes.io/zone"
#: One simulated minute per real second.
FAST = 60.0


def l4_pod(sim: Sim, name: str, pool: str, **annotations: str) -> None:
    sim.create_pod(
        name,
        node_selector={NODE_POOL_LABEL_KEY: pool},
        resources={"nvidia.com/gpu": "8"},
        tolerations=[GPU_TOLERATION],
        annotations=annotations,
    )


def test_v6e_flex_start_slice_nodes_carry_gke_labels_taints_and_resources(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    autoscaler = start_autoscaler(SimScenario(clock_factor=FAST))
    sim.create_pool(rendered(tpu("v6e", "4x4"), "FlexStart", name="v6e-flex"))
    selector = {
        NODE_POOL_LABEL_KEY: "v6e-flex",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-flex-start": "true",
    }
    for index in range(4):
        sim.create_pod(
            f"worker-{index}",
            node_selector=selector,
            resources={"google.com/tpu": "4"},
            tolerations=[TPU_TOLERATION],
        )

    nodes = eventually(lambda: len(sim.nodes("v6e-flex")) == 4 and sim.nodes("v6e-flex"))
    names = sorted(n.metadata.name for n in nodes)
    assert names == [f"gke-sandbox-v6e-flex-{i}" for i in range(1, 5)]
    zones = {n.metadata.labels["topology.kubernetes.io/zone"] for n in nodes}
    assert len(zones) == 1, "a slice lives in one zone"
    for node in nodes:
        name = node.metadata.name
        assert node.metadata.labels == {
            **LABELS,
            "cloud.google.com/gke-nodepool": "v6e-flex",
            "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
            "cloud.google.com/gke-tpu-topology": "4x4",
            "cloud.google.com/gke-flex-start": "true",
            "cloud.google.com/gke-provisioning": "flex-start",
            "cloud.google.com/gke-max-run-duration-seconds": "604800",
            "cloud.google.com/machine-family": "ct6e",
            "cloud.google.com/gke-os-distribution": "cos",
            "cloud.google.com/gke-container-runtime": "containerd",
            "node.kubernetes.io/instance-type": "ct6e-standard-4t",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/os": "linux",
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/hostname": name,
            "topology.kubernetes.io/zone": "us-east5-a",
            "topology.kubernetes.io/region": "us-east5",
        }
        assert node.status.capacity == {
            "cpu": "180",
            "memory": "720Gi",
            "ephemeral-storage": "98831908Ki",
            "pods": "110",
            "google.com/tpu": "4",
        }
        assert node.status.allocatable == {
            "cpu": "179480m",
            "memory": "715512Mi",
            "ephemeral-storage": "47060071478",
            "pods": "110",
            "google.com/tpu": "4",
        }
        annotations = node.metadata.annotations
        assert annotations["kwok.x-k8s.io/node"] == "fake"
        ends = datetime.fromisoformat(annotations["node.gke.io/machine-termination-datetime"])
        # 7 simulated days at 60x: about 2.8 real hours from now.
        remaining = (ends - datetime.now(UTC)).total_seconds()
        assert 604800 / FAST - 60 < remaining <= 604800 / FAST + 1
    assert sim.node_count("v6e-flex") == 4

    # kwok makes the nodes Ready and runs the pods on them, one per node.
    def running() -> set[str] | None:
        pods = [sim.pod(f"worker-{i}") for i in range(4)]
        if all(p.status.phase == "Running" for p in pods):
            return {p.spec.node_name for p in pods}
        return None

    assert eventually(running, what="the workers running") == set(names)
    for node in sim.nodes("v6e-flex"):
        ready = [c.status for c in node.status.conditions or [] if c.type == "Ready"]
        assert ready == ["True"]
    # Once Ready (the node lifecycle controller's not-ready taint lifted): GKE's taint only.
    eventually(
        lambda: all(
            [(t.key, t.value, t.effect) for t in n.spec.taints or []]
            == [("google.com/tpu", "present", "NoSchedule")]
            for n in sim.nodes("v6e-flex")
        ),
        what="only the TPU taint",
    )
    # The slice is complete: no second one for pods that are running, however many
    # more times the autoscaler looks.
    looked = autoscaler.passes
    eventually(lambda: autoscaler.passes >= looked + 3, what="three more autoscaler passes")
    assert len(sim.nodes("v6e-flex")) == 4


def node_once_waited(sim: Sim, autoscaler: Autoscaler, pod: str, pool: str, waits: float) -> V1Node:
    """The pool's first node for `pod`, made at the latest in the pass after `waits`
    simulated seconds since the autoscaler first saw the pod waiting: counted on the
    autoscaler's own clock and passes, not on how fast this machine runs."""
    # Marked unschedulable, unless the node came so soon that it never had to wait.
    eventually(lambda: sim.unschedulable(pod) or sim.nodes(pool), what=f"{pod} waiting")
    seen = autoscaler.passes
    eventually(lambda: autoscaler.passes >= seen + 2, what=f"a whole pass that saw {pod}")
    by = autoscaler.clock.now() + waits
    eventually(
        lambda: autoscaler.clock.now() >= by,
        timeout=autoscaler.clock.real_seconds(waits) + 10,
        what=f"{waits:g} simulated seconds",
    )
    after = autoscaler.passes
    eventually(lambda: autoscaler.passes >= after + 2, what="a whole pass after the wait")
    nodes = sim.nodes(pool)
    assert nodes, f"no node of {pool} a whole pass after {pod} waited {waits:g}s"
    return nodes[0]


def test_capacity_arrives_after_simulated_delay(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    scenario = SimScenario(
        clock_factor=FAST,
        capacity=[CapacityRule(accelerator="nvidia-l4", after_seconds=180)],
    )
    autoscaler = start_autoscaler(scenario)
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-late"))
    began = time.monotonic()
    l4_pod(sim, "late", "l4-late")
    node = node_once_waited(sim, autoscaler, "late", "l4-late", 180)
    assert time.monotonic() - began >= 180 / FAST - 0.5
    # By the objects' own times (whole seconds), however late the test looked: the
    # wait starts once the autoscaler sees the pod, after the pod was made.
    made = sim.pod("late").metadata.creation_timestamp
    assert node.metadata.creation_timestamp - made >= timedelta(seconds=180 / FAST)
    eventually(lambda: sim.phase("late") == "Running", what="the pod running")
    assert sim.node_count("l4-late") == 1


def test_gpu_nodes_without_a_driver_offer_no_gpus(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    """Disabled: GKE installs no driver, so the node comes up without nvidia.com/gpu
    and the GPU pod that brought it stays Pending until the user installs one."""
    start_autoscaler(SimScenario(clock_factor=FAST))
    accelerator = {"gpu": {"type": "nvidia-l4", "nodes": 1, "driver": "Disabled"}}
    sim.create_pool(rendered(accelerator, "FlexStart", name="l4-nodriver"))
    l4_pod(sim, "waits", "l4-nodriver")
    [node] = eventually(lambda: sim.nodes("l4-nodriver"), what="the node")
    assert "nvidia.com/gpu" not in node.status.capacity
    assert "nvidia.com/gpu" not in node.status.allocatable
    assert node.metadata.labels["cloud.google.com/gke-accelerator"] == "nvidia-l4"
    assert "cloud.google.com/gke-gpu-driver-version" not in node.metadata.labels
    eventually(
        lambda: (
            [
                c.status
                for c in sim.nodes("l4-nodriver")[0].status.conditions or []
                if c.type == "Ready"
            ]
            == ["True"]
        ),
        what="the node Ready",
    )
    never(lambda: sim.pod("waits").spec.node_name, 2.0, "the GPU pod scheduled without GPUs")
    assert sim.unschedulable("waits")
    assert sim.phase("waits") == "Pending"
    # One node for the one pod: its empty node does not bring more.
    assert sim.node_count("l4-nodriver") == 1


def test_limits_per_zone_or_in_all_in_a_regional_cluster(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    """Both pools span the cluster's three zones. A total limit of 2 is 2 nodes; a
    per-zone limit of 1 is one node in each zone: 3, more than was asked for."""
    start_autoscaler(SimScenario(clock_factor=FAST))
    total = rendered(gpu("nvidia-l4", nodes=2), "Spot", name="l4-total")
    per_zone = rendered(gpu("nvidia-l4", nodes=2), "Spot", name="l4-zonal")
    per_zone.autoscaling = container_v1.NodePoolAutoscaling(
        enabled=True, max_node_count=1, location_policy=per_zone.autoscaling.location_policy
    )
    sim.create_pool(total)
    sim.create_pool(per_zone)
    for pool in ("l4-total", "l4-zonal"):
        for index in range(3):
            sim.create_pod(
                f"{pool}-{index}",
                node_selector={NODE_POOL_LABEL_KEY: pool},
                resources={"nvidia.com/gpu": "8"},
                tolerations=[GPU_TOLERATION],
            )

    zonal = eventually(lambda: len(sim.nodes("l4-zonal")) == 3 and sim.nodes("l4-zonal"))
    assert sorted(n.metadata.labels[ZONE] for n in zonal) == [
        "us-east5-a",
        "us-east5-b",
        "us-east5-c",
    ]
    eventually(lambda: len(sim.nodes("l4-total")) == 2, what="two nodes in all")
    never(lambda: len(sim.nodes("l4-total")) > 2, 1.5, "a node beyond the total limit")
    assert sim.node_count("l4-total") == 2
    assert sim.node_count("l4-zonal") == 3

    def bound() -> list[bool]:
        return sorted(bool(sim.pod(f"l4-total-{i}").spec.node_name) for i in range(3))

    eventually(lambda: bound() == [False, True, True], what="two pods placed, one waiting")


def test_stockout_gives_no_nodes(sim: Sim, start_autoscaler: StartAutoscaler) -> None:
    scenario = SimScenario(
        clock_factor=FAST,
        capacity=[CapacityRule(accelerator="tpu-v6e-slice", stockout=True)],
    )
    start_autoscaler(scenario)
    sim.create_pool(rendered(tpu("v6e", "2x2"), "FlexStart", name="v6e-out"))
    sim.create_pod(
        "starved",
        node_selector={NODE_POOL_LABEL_KEY: "v6e-out"},
        resources={"google.com/tpu": "4"},
        tolerations=[TPU_TOLERATION],
    )
    eventually(lambda: sim.unschedulable("starved"), what="the pod unschedulable")
    # 3 real seconds = 3 simulated minutes: still nothing.
    never(lambda: sim.nodes("v6e-out"), 3.0, "a node despite the stockout")
    assert sim.node_count("v6e-out") == 0
    assert sim.phase("starved") == "Pending"


def test_pods_run_for_their_duration_then_idle_nodes_go(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    # Idle nodes go after one simulated minute: one real second.
    start_autoscaler(SimScenario(clock_factor=FAST, scale_down_unneeded_seconds=60))
    sim.create_pool(rendered(gpu("nvidia-l4", nodes=2), "FlexStart", name="l4-run"))
    l4_pod(sim, "ok", "l4-run", **{SIM_DURATION_ANNOTATION: "2s"})
    l4_pod(
        sim,
        "bad",
        "l4-run",
        **{SIM_DURATION_ANNOTATION: "2s", SIM_EXIT_CODE_ANNOTATION: "3"},
    )

    nodes = eventually(lambda: len(sim.nodes("l4-run")) == 2 and sim.nodes("l4-run"))
    assert {n.status.allocatable["nvidia.com/gpu"] for n in nodes} == {"8"}
    eventually(lambda: sim.phase("ok") == "Succeeded", what="ok succeeded")
    eventually(lambda: sim.phase("bad") == "Failed", what="bad failed")
    terminated = sim.pod("bad").status.container_statuses[0].state.terminated
    assert (terminated.exit_code, terminated.reason) == (3, "Error")
    ok = sim.pod("ok").status.container_statuses[0].state.terminated
    assert (ok.exit_code, ok.reason) == (0, "Completed")
    # It ran for its duration, by its own times (whole seconds): not ended at once.
    assert ok.finished_at - ok.started_at >= timedelta(seconds=2)

    eventually(lambda: not sim.nodes("l4-run"), timeout=10.0, what="the idle nodes gone")
    assert sim.node_count("l4-run") == 0


def test_scale_to_zero_and_delete_remove_nodes(sim: Sim, start_autoscaler: StartAutoscaler) -> None:
    start_autoscaler(SimScenario(clock_factor=FAST))
    sim.create_pool(rendered(gpu("nvidia-l4", nodes=2), "FlexStart", name="l4-zero"))
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-gone"))
    for index in range(2):
        l4_pod(sim, f"zero-{index}", "l4-zero")
    l4_pod(sim, "gone", "l4-gone")
    eventually(lambda: len(sim.nodes("l4-zero")) == 2, what="two nodes")
    eventually(lambda: len(sim.nodes("l4-gone")) == 1, what="one node")
    assert sim.node_count("l4-zero") == 2

    sim.scale_to_zero("l4-zero")
    eventually(lambda: not sim.nodes("l4-zero"), what="the nodes gone after scale to zero")
    assert sim.node_count("l4-zero") == 0
    assert len(sim.nodes("l4-gone")) == 1, "another pool's nodes stay"

    sim.delete_pool("l4-gone")
    eventually(lambda: not sim.nodes("l4-gone"), what="the node gone with its pool")
    # Nothing comes back while the pods are still there.
    never(lambda: sim.nodes("l4-zero") or sim.nodes("l4-gone"), 1.0, "nodes back")


def test_spot_preemption_fails_pods_then_deletes_the_node(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    # Preempted once the pod is seen running (at the test's moment, not a simulated time
    # a loaded machine may reach before the pod runs).
    autoscaler = start_autoscaler(SimScenario(clock_factor=FAST))
    sim.create_pool(rendered(gpu("nvidia-l4"), "Spot", name="l4-spot"))
    l4_pod(sim, "victim", "l4-spot")
    node = eventually(lambda: sim.nodes("l4-spot"), what="the spot node")[0]
    assert node.metadata.labels["cloud.google.com/gke-spot"] == "true"
    assert "cloud.google.com/gke-flex-start" not in node.metadata.labels
    eventually(lambda: sim.phase("victim") == "Running", what="the pod running")

    autoscaler.preempt(pool="l4-spot")
    eventually(lambda: not sim.nodes("l4-spot"), what="the node preempted")
    pod = sim.pod("victim")
    assert pod.status.phase == "Failed"
    disruption = [c for c in pod.status.conditions if c.type == "DisruptionTarget"]
    assert len(disruption) == 1
    assert (disruption[0].status, disruption[0].reason) == ("True", "TerminationByKubelet")
    # The Node goes first, then the pool's count drops: wait for the second.
    eventually(lambda: sim.node_count("l4-spot") == 0, what="the pool's count lowered")


def test_a_preempted_multi_host_slice_goes_whole_and_comes_back_whole(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    # A multi-host slice's VMs are rescheduled together: reclaiming one takes all of them,
    # every pod on the slice fails, and the pods that replace them get a whole new slice.
    autoscaler = start_autoscaler(SimScenario(clock_factor=FAST))
    sim.create_pool(rendered(tpu("v6e", "2x4"), "Spot", name="v6e-spot"))
    selector = {NODE_POOL_LABEL_KEY: "v6e-spot"}

    def workers(prefix: str) -> list[str]:
        names = [f"{prefix}-{index}" for index in range(2)]
        for name in names:
            sim.create_pod(
                name,
                node_selector=selector,
                resources={"google.com/tpu": "4"},
                tolerations=[TPU_TOLERATION],
            )
        return names

    first = workers("first")
    eventually(
        lambda: all(sim.phase(name) == "Running" for name in first), what="the slice running"
    )
    before = sorted(n.metadata.name for n in sim.nodes("v6e-spot"))
    assert len(before) == 2

    with sim.pod_fates() as fates:
        autoscaler.preempt(pool="v6e-spot")
        eventually(
            lambda: all(fates[name].status.phase == "Failed" for name in first),
            what="both workers failed",
        )
    reasons = {
        name: [c.reason for c in fates[name].status.conditions if c.type == "DisruptionTarget"]
        for name in first
    }
    assert reasons == {name: [DISRUPTION_REASON] for name in first}
    eventually(lambda: sim.node_count("v6e-spot") == 0, what="the whole slice gone")
    second = workers("second")
    eventually(
        lambda: all(sim.phase(name) == "Running" for name in second), what="a new slice running"
    )
    after = sorted(n.metadata.name for n in sim.nodes("v6e-spot"))
    assert len(after) == 2
    assert not set(after) & set(before)


def test_provisioning_request_is_accepted_provisioned_then_expires_and_is_revoked(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    # Booking for 2 simulated minutes, max run 8: 2 and 8 real seconds after Provisioned.
    start_autoscaler(SimScenario(clock_factor=FAST, booking_seconds=120))
    sim.create_pool(rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", name="h100-q"))
    sim.core.create_namespaced_pod_template(
        sim.namespace,
        {
            "metadata": {
                "name": "trainer",
                "labels": {"cloud.google.com/apply-warden-policies": "true"},
            },
            "template": {
                "spec": {
                    "nodeSelector": {NODE_POOL_LABEL_KEY: "h100-q"},
                    "tolerations": [
                        GPU_TOLERATION,
                        {"key": "cloud.google.com/gke-queued", "operator": "Exists"},
                    ],
                    "containers": [
                        {
                            "name": "train",
                            "image": "us-docker.pkg.dev/example/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                }
            },
        },
    )
    sim.create_custom(
        "provisioningrequests",
        {
            "apiVersion": "autoscaling.x-k8s.io/v1",
            "kind": "ProvisioningRequest",
            "metadata": {"name": "req"},
            "spec": {
                "provisioningClassName": "queued-provisioning.gke.io",
                "parameters": {"maxRunDurationSeconds": "480"},
                "podSets": [{"podTemplateRef": {"name": "trainer"}, "count": 2}],
            },
        },
    )

    def condition(type_: str) -> dict[str, str] | None:
        conditions = (sim.provisioning_request("req").get("status") or {}).get("conditions")
        return next((c for c in conditions or [] if c["type"] == type_), None)

    accepted = eventually(lambda: condition("Accepted"), what="Accepted")
    assert accepted["status"] == "True"
    provisioned = eventually(lambda: condition("Provisioned"), what="Provisioned")
    assert provisioned["status"] == "True"
    nodes = sim.nodes("h100-q")
    assert len(nodes) == 2
    zone = nodes[0].metadata.labels["topology.kubernetes.io/zone"]
    details = sim.provisioning_request("req")["status"]["provisioningClassDetails"]
    assert details["NodePoolName"] == "h100-q"
    assert details["SelectedZone"] == zone
    assert details["ResizeRequestName"].startswith("req-")
    for node in nodes:
        taints = {(t.key, t.value, t.effect) for t in node.spec.taints}
        taints.discard(("node.kubernetes.io/not-ready", None, "NoSchedule"))
        assert taints == {
            ("nvidia.com/gpu", "present", "NoSchedule"),
            ("cloud.google.com/gke-queued", "true", "NoSchedule"),
        }
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
    assert sim.node_count("h100-q") == 2

    expired = eventually(lambda: condition("BookingExpired"), what="BookingExpired")
    assert expired["status"] == "True"
    revoked = eventually(lambda: condition("CapacityRevoked"), what="CapacityRevoked")
    assert revoked["status"] == "True"
    # By the conditions' own times, however late the test looks: the booking ends 120
    # simulated seconds after the nodes were made, the run 480. Whole seconds, and
    # Provisioned is written up to a second after the nodes: one second off each.
    since = rfc3339.parse(provisioned["lastTransitionTime"])
    booked = rfc3339.parse(expired["lastTransitionTime"]) - since
    ran = rfc3339.parse(revoked["lastTransitionTime"]) - since
    assert booked >= timedelta(seconds=120 / FAST - 1)
    assert ran >= timedelta(seconds=480 / FAST - 1)
    assert ran - booked >= timedelta(seconds=3)  # the booking ended well before the run
    eventually(lambda: not sim.nodes("h100-q"), what="the nodes deleted")
    assert sim.node_count("h100-q") == 0


def test_flex_start_vm_ends_at_its_max_run_duration(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    # 20 simulated minutes of run time at 120x: 10 real seconds, room for a loaded
    # machine to run the pod before the VM ends.
    start_autoscaler(SimScenario(clock_factor=120))
    pool = rendered(
        gpu("nvidia-l4"), "FlexStart", name="l4-short", provisioning={"maxRunDuration": "20m"}
    )
    sim.create_pool(pool)
    l4_pod(sim, "long", "l4-short")
    node = eventually(lambda: sim.nodes("l4-short"), what="the node")[0]
    assert node.metadata.labels["cloud.google.com/gke-max-run-duration-seconds"] == "1200"
    eventually(lambda: sim.phase("long") == "Running", what="the pod running")
    eventually(lambda: not sim.nodes("l4-short"), what="the VM ended")
    pod = sim.pod("long")
    assert pod.status.phase == "Failed"
    assert [c.reason for c in pod.status.conditions if c.type == "DisruptionTarget"] == [
        "TerminationByKubelet"
    ]
    # The simulator drops the pool's count in GKE just after it deletes the Node.
    eventually(lambda: sim.node_count("l4-short") == 0, timeout=10.0, what="the pool at 0")


def test_queued_pool_grows_only_through_requests_matched_by_template(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    start_autoscaler(SimScenario(clock_factor=FAST, provisioning_timeout_seconds=120))
    # One node in all (a total limit), though the pool spans the cluster's three zones.
    sim.create_pool(rendered(gpu("nvidia-h100-80gb"), "QueuedProvisioning", name="h100-q1"))
    # A pod without a ProvisioningRequest never scales a queued pool up.
    sim.create_pod(
        "direct",
        node_selector={NODE_POOL_LABEL_KEY: "h100-q1"},
        resources={"nvidia.com/gpu": "8"},
        tolerations=[GPU_TOLERATION, {"key": "cloud.google.com/gke-queued", "operator": "Exists"}],
    )
    eventually(lambda: sim.unschedulable("direct"), what="the pod unschedulable")
    never(lambda: sim.nodes("h100-q1"), 1.5, "a node for a pod without a request")
    sim.core.delete_namespaced_pod("direct", sim.namespace, grace_period_seconds=0)

    sim.core.create_namespaced_pod_template(
        sim.namespace,
        {
            "metadata": {"name": "trainer"},
            "template": {
                "spec": {
                    # No pool named: matched by the accelerator label and the GPU request.
                    "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
                    "containers": [
                        {
                            "name": "train",
                            "image": "us-docker.pkg.dev/example/train:1",
                            "resources": {"limits": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                }
            },
        },
    )
    for name, count in (("fits", 1), ("too-big", 2)):
        sim.create_custom(
            "provisioningrequests",
            {
                "apiVersion": "autoscaling.x-k8s.io/v1",
                "kind": "ProvisioningRequest",
                "metadata": {"name": name},
                "spec": {
                    "provisioningClassName": "queued-provisioning.gke.io",
                    "podSets": [{"podTemplateRef": {"name": "trainer"}, "count": count}],
                },
            },
        )

    def conditions(name: str) -> dict[str, tuple[str, str]]:
        status = sim.provisioning_request(name).get("status") or {}
        return {c["type"]: (c["status"], c["reason"]) for c in status.get("conditions") or []}

    eventually(lambda: "Provisioned" in conditions("fits"), what="fits Provisioned")
    assert conditions("fits")["Provisioned"] == ("True", "Provisioned")
    assert len(sim.nodes("h100-q1")) == 1
    details = sim.provisioning_request("fits")["status"]["provisioningClassDetails"]
    assert details["NodePoolName"] == "h100-q1"

    # 2 nodes never fit a pool of at most 1: Failed after 2 simulated minutes.
    eventually(lambda: "Failed" in conditions("too-big"), timeout=10.0, what="too-big Failed")
    assert conditions("too-big")["Failed"] == ("True", "WaitTimeExceeded")
    assert conditions("too-big")["Accepted"][0] == "True"
    assert "Provisioned" not in conditions("too-big")
    assert len(sim.nodes("h100-q1")) == 1
    assert sim.node_count("h100-q1") == 1
