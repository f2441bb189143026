"""The emulator autoscaler's judgements of what it reads: which pods wait for which pool,
which nodes are busy, how a disrupted pod looks. Pure: no API server."""

from __future__ import annotations

from typing import Any

from google.cloud import container_v1

from dws_workshop.simulator.autoscaler_view import (
    DISRUPTION_REASON,
    ScalingPool,
    busy_nodes,
    consumed,
    disrupted_status,
    node_index,
    pending_by_pool,
    place_nodes,
    queued_pools_for,
    unschedulable,
    zones_with_room,
)
from dws_workshop.simulator.nodes import pool_shape
from tests.builders import gpu, tpu
from tests.gke.harness import queued_tpu, rendered

CONSUME = "autoscaling.x-k8s.io/consume-provisioning-request"


def view(pool: container_v1.NodePool, *, running: bool = True) -> ScalingPool:
    status = container_v1.NodePool.Status
    pool.status = status.RUNNING if running else status.PROVISIONING
    return ScalingPool(pool=pool, count=0, shape=pool_shape(pool), path=f"p/{pool.name}")


def pod(
    name: str,
    *,
    phase: str = "Pending",
    node: str | None = None,
    selector: dict[str, str] | None = None,
    resources: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduled: str | None = "Unschedulable",
    namespace: str = "ns",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"limits": resources or {}}}],
        "nodeSelector": selector or {},
    }
    if node:
        spec["nodeName"] = node
    conditions = (
        [{"type": "PodScheduled", "status": "False", "reason": scheduled}] if scheduled else []
    )
    return {
        "metadata": {"name": name, "namespace": namespace, "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": phase, "conditions": conditions},
    }


def test_unschedulable_is_pending_unbound_and_refused_by_the_scheduler() -> None:
    assert unschedulable(pod("a"))
    assert not unschedulable(pod("a", node="n-1"))
    assert not unschedulable(pod("a", phase="Running"))
    assert not unschedulable(pod("a", scheduled=None))  # the scheduler has not tried yet
    assert not unschedulable(pod("a", scheduled="SchedulingGated"))
    deleting = pod("a")
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert not unschedulable(deleting)


def test_busy_nodes_ignore_finished_and_unbound_pods() -> None:
    pods = [
        pod("run", phase="Running", node="n-1"),
        pod("done", phase="Succeeded", node="n-2"),
        pod("failed", phase="Failed", node="n-1"),
        pod("waiting"),
    ]
    busy = busy_nodes(pods)
    assert list(busy) == ["n-1"]
    assert [p["metadata"]["name"] for p in busy["n-1"]] == ["run"]


def test_pending_pods_go_to_the_named_pool_or_the_first_that_fits() -> None:
    h100 = view(rendered(gpu("nvidia-h100-80gb", nodes=2), name="b-h100"))
    l4 = view(rendered(gpu("nvidia-l4", nodes=1), name="a-l4"))
    queued = view(rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", name="a-q"))
    starting = view(rendered(gpu("nvidia-h100-80gb", nodes=2), name="a-start"), running=False)
    pools = {p.name: p for p in (h100, l4, queued, starting)}
    wants_h100 = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    pods = [
        pod("named", selector={"cloud.google.com/gke-nodepool": "a-l4"}),
        pod("fits", selector=wants_h100, resources={"nvidia.com/gpu": "8"}),
        pod("no-such-pool", selector={"cloud.google.com/gke-nodepool": "gone"}),
        pod("fits-nothing", selector={"cloud.google.com/gke-accelerator": "nvidia-b200"}),
        pod("ticket", selector=wants_h100, annotations={CONSUME: "pr"}),
        pod("bound", node="n-1", selector=wants_h100),
    ]
    found = pending_by_pool(pools, pods)
    # Neither the queued pool (ProvisioningRequests only) nor the pool still being
    # created takes pods, even though both come first by name and fit.
    assert {k: [p["metadata"]["name"] for p in v] for k, v in found.items()} == {
        "a-l4": ["named"],
        "b-h100": ["fits"],
    }


def test_queued_pools_for_a_provisioning_request_template() -> None:
    first = view(rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", name="q-1"))
    second = view(rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", name="q-2"))
    flex = view(rendered(gpu("nvidia-h100-80gb", nodes=2), name="flex"))
    pools = {p.name: p for p in (second, first, flex)}
    selector = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    spec = {"nodeSelector": selector, "containers": [{"name": "c"}]}
    spec["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    assert queued_pools_for(pools, spec) == [first, second]
    named = {**spec, "nodeSelector": {**selector, "cloud.google.com/gke-nodepool": "q-2"}}
    assert queued_pools_for(pools, named) == [second]
    not_queued = {**spec, "nodeSelector": {"cloud.google.com/gke-nodepool": "flex"}}
    assert queued_pools_for(pools, not_queued) == []
    tpu_spec = {"nodeSelector": {}, "containers": [{"name": "c"}]}
    tpu_spec["containers"][0]["resources"] = {"limits": {"google.com/tpu": "4"}}
    assert queued_pools_for({"t": view(rendered(tpu("v6e", "2x2"), name="t"))}, tpu_spec) == []


def test_queued_tpu_pools_for_the_tpu_selectors() -> None:
    v6e = view(queued_tpu("v6e", "4x4", name="v6e-4x4"))
    v6e_small = view(queued_tpu("v6e", "2x4", name="v6e-2x4"))
    v5e = view(queued_tpu("v5e", "2x2", name="v5e-2x2"))
    flex = view(rendered(tpu("v6e", "4x4"), name="flex"))
    pools = {p.name: p for p in (v6e, v6e_small, v5e, flex)}
    selector = {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-flex-start": "true",
    }
    spec = {"nodeSelector": selector, "containers": [{"name": "c"}]}
    spec["containers"][0]["resources"] = {"limits": {"google.com/tpu": "4"}}
    assert queued_pools_for(pools, spec) == [v6e]
    # Without the topology: both v6e pools, by name; the topology parameter then chooses.
    any_shape = {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice"}
    assert queued_pools_for(pools, {**spec, "nodeSelector": any_shape}) == [v6e_small, v6e]


def test_a_booking_is_consumed_only_by_a_live_pod_in_its_namespace() -> None:
    key = ("ns", "pr")
    assert consumed(key, [pod("a", phase="Running", node="n", annotations={CONSUME: "pr"})])
    assert not consumed(key, [pod("a", phase="Succeeded", annotations={CONSUME: "pr"})])
    assert not consumed(key, [pod("a", annotations={CONSUME: "pr"}, namespace="other")])
    assert not consumed(key, [pod("a", annotations={CONSUME: "other"})])


def test_disrupted_status_reads_like_the_kubelets_graceful_shutdown() -> None:
    running = pod("a", phase="Running", node="n-1")
    running["status"]["containerStatuses"] = [
        {"name": "train", "image": "img:1", "restartCount": 2, "state": {"running": {}}}
    ]
    status = disrupted_status(running, "Spot VM preempted", "2026-11-21T08:00:00Z")
    assert status["phase"] == "Failed"
    target = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", DISRUPTION_REASON)
    assert target["message"] == "Spot VM preempted"
    (container,) = status["containerStatuses"]
    assert container["name"] == "train"
    assert container["restartCount"] == 2
    assert container["state"]["terminated"]["exitCode"] == 137
    assert "containerStatuses" not in disrupted_status(pod("b"), "gone", "t")


def test_node_index_is_the_trailing_number() -> None:
    assert node_index("gke-c-dws-pool-12") == 12
    assert node_index("gke-c-dws-pool") == 0


ZONES = ["us-east5-a", "us-east5-b", "us-east5-c"]


def regional(pool: container_v1.NodePool, nodes_in: list[str]) -> ScalingPool:
    """`pool` over the three zones of a regional cluster, with a node in each of `nodes_in`."""
    pool.locations = ZONES
    pool_view = view(pool)
    pool_view.nodes = [
        {"metadata": {"name": f"n{i}", "labels": {"topology.kubernetes.io/zone": zone}}}
        for i, zone in enumerate(nodes_in)
    ]
    return pool_view


def per_zone(pool: container_v1.NodePool, most: int) -> container_v1.NodePool:
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=True, max_node_count=most)
    return pool


def first(zones: list[str]) -> str | None:
    return zones[0] if zones else None


def test_a_per_zone_maximum_spreads_nodes_over_the_zones() -> None:
    pool = regional(per_zone(rendered(gpu("nvidia-l4"), "Spot"), 1), ["us-east5-a"])
    assert zones_with_room(pool, 1) == ["us-east5-b", "us-east5-c"]
    assert place_nodes(pool, 5, first) == ["us-east5-b", "us-east5-c"]


def test_a_total_maximum_puts_nodes_where_capacity_is() -> None:
    pool = regional(rendered(gpu("nvidia-l4", nodes=3), "Spot"), ["us-east5-a"])
    assert pool.pool.autoscaling.total_max_node_count == 3
    assert zones_with_room(pool, 2) == ZONES
    assert place_nodes(pool, 2, first) == ["us-east5-a", "us-east5-a"]


def test_a_multi_host_slice_is_placed_whole_in_a_zone_with_room() -> None:
    pool = regional(per_zone(rendered(tpu("v6e", "4x4"), "Spot"), 4), [])
    assert place_nodes(pool, 4, first) == ["us-east5-a"] * 4
    # 3 nodes in zone a: the slice of 4 fits only in b or c.
    crowded = regional(per_zone(rendered(tpu("v6e", "4x4"), "Spot"), 4), ["us-east5-a"] * 3)
    assert zones_with_room(crowded, 4) == ["us-east5-b", "us-east5-c"]
    assert place_nodes(crowded, 4, first) == ["us-east5-b"] * 4


def test_placement_stops_where_capacity_ends() -> None:
    pool = regional(per_zone(rendered(gpu("nvidia-l4"), "Spot"), 2), [])

    def only_c(zones: list[str]) -> str | None:
        return "us-east5-c" if "us-east5-c" in zones else None

    assert place_nodes(pool, 6, only_c) == ["us-east5-c", "us-east5-c"]
