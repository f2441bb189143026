"""The autoscaler's pure parts: node shapes, GKE's reservations, capacity rules, Stages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
import yaml
from google.cloud import container_v1

from dws_operator.gke.ceiling import max_nodes
from dws_workshop.devcluster.stages import kwok_config
from dws_workshop.emulator import DEFAULT_CLUSTER
from dws_workshop.emulator.clock import SimClock
from dws_workshop.simulator.autoscaler_view import ScalingPool, schedulable_pending, slice_of
from dws_workshop.simulator.fleet import Fleet
from dws_workshop.simulator.nodes import (
    ZONE_LABEL_KEY,
    PoolShape,
    accepts,
    allocatable_cpu_millis,
    allocatable_memory_mib,
    machine_size,
    node_resources,
    pool_shape,
)
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu, tpu
from tests.gke.harness import queued_tpu, rendered


def test_gke_reservations() -> None:
    # 4 vCPUs: 60 + 10 + 10 millicores; 16 GiB: 1024 + 819.2 + 819.2 MiB + 100 eviction.
    assert allocatable_cpu_millis(4) == 3920
    assert allocatable_memory_mib(16) == 16384 - 2663 - 100
    assert machine_size("g2-standard-96") == (96, 384)
    assert machine_size("a3-highgpu-8g") == (208, 1872)


def test_single_host_tpu_topology_and_slice_size() -> None:
    single = pool_shape(rendered(tpu("v6e", "2x2"), name="one"))
    assert (single.tpu_topology, single.slice_nodes, single.multi_host) == ("2x2", 1, False)
    multi = pool_shape(rendered(tpu("v6e", "4x4"), name="four"))
    assert (multi.tpu_topology, multi.slice_nodes, multi.resource) == (
        "4x4",
        4,
        ("google.com/tpu", 4),
    )


def test_queued_gpu_pool_shape_and_matching() -> None:
    pool = rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", name="q")
    shape = pool_shape(pool)
    assert shape.queued
    assert [t.key for t in shape.taints] == ["nvidia.com/gpu", "cloud.google.com/gke-queued"]
    # The taint only: GKE does not label queued nodes gke-queued.
    assert "cloud.google.com/gke-queued" not in shape.labels
    assert max_nodes(pool) == 2
    selector = {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    # GKE tolerates the GPU and queued taints for a pod that requests GPUs.
    assert accepts(shape, selector, [], {"nvidia.com/gpu"})
    # Without requesting GPUs, the GPU taint needs a toleration.
    assert not accepts(shape, selector, [], set())
    toleration = {"key": "nvidia.com/gpu", "operator": "Exists"}
    assert accepts(shape, selector, [toleration], set())
    assert not accepts(shape, {"cloud.google.com/gke-accelerator": "nvidia-l4"}, [], set())
    assert not accepts(shape, selector, [toleration], {"google.com/tpu"})


def test_queued_tpu_pool_shape_labels_and_taints() -> None:
    shape = pool_shape(queued_tpu("v6e", "4x4", name="q"))
    assert (shape.queued, shape.flex_start, shape.tpu_topology, shape.slice_nodes) == (
        True,
        True,
        "4x4",
        4,
    )
    labels = shape.labels
    assert {k: labels[k] for k in labels if k.startswith("cloud.google.com/gke-")} == {
        "cloud.google.com/gke-nodepool": "q",
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-provisioning": "flex-start",
        "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-container-runtime": "containerd",
    }
    assert [t.manifest() for t in shape.taints] == [
        {"key": "google.com/tpu", "value": "present", "effect": "NoSchedule"},
        {"key": "cloud.google.com/gke-queued", "value": "true", "effect": "NoSchedule"},
    ]
    # The old selector (the gke-queued label) matches no queued node: GKE sets only the
    # taint. The operator's pods select the pool and gke-flex-start instead.
    old = {"cloud.google.com/gke-tpu-topology": "4x4", "cloud.google.com/gke-queued": "true"}
    assert not accepts(shape, old, [], {"google.com/tpu"})
    selector = {"cloud.google.com/gke-nodepool": "q", "cloud.google.com/gke-flex-start": "true"}
    assert accepts(shape, selector, [], {"google.com/tpu"})
    assert not accepts(shape, {**selector, "cloud.google.com/gke-tpu-topology": "2x4"}, [], set())
    # A pool whose NodeConfig asks for the label (Cluster Toolkit's way) has it.
    labelled = queued_tpu("v6e", "4x4", name="q")
    labelled.config.labels["cloud.google.com/gke-queued"] = "true"
    assert accepts(pool_shape(labelled), old, [], {"google.com/tpu"})


DRIVER_LABEL = "cloud.google.com/gke-gpu-driver-version"


@pytest.mark.parametrize(("driver", "label"), [("Default", "default"), ("Latest", "latest")])
def test_gpu_nodes_with_a_gke_driver_offer_their_gpus(driver: str, label: str) -> None:
    accelerator = {"gpu": {"type": "nvidia-h100-80gb", "nodes": 1, "driver": driver}}
    shape = pool_shape(rendered(accelerator, "Spot", name="g"))
    assert shape.labels[DRIVER_LABEL] == label
    capacity, allocatable = node_resources(shape)
    assert (capacity["nvidia.com/gpu"], allocatable["nvidia.com/gpu"]) == ("8", "8")


def _driverless(version: int | None) -> container_v1.NodePool:
    pool = rendered(gpu("nvidia-h100-80gb"), "Spot", name="g")
    accelerator = pool.config.accelerators[0]
    if version is None:  # a raw API call that never mentions the driver
        del accelerator.gpu_driver_installation_config
    else:
        accelerator.gpu_driver_installation_config.gpu_driver_version = version
    return pool


@pytest.mark.parametrize(
    "version",
    [None, container_v1.GPUDriverInstallationConfig.GPUDriverVersion.INSTALLATION_DISABLED],
    ids=["unspecified", "installation-disabled"],
)
def test_gpu_nodes_without_a_driver_offer_no_gpus(version: int | None) -> None:
    pool = _driverless(version)
    set_at_all = "gpu_driver_installation_config" in pool.config.accelerators[0]
    assert set_at_all == (version is not None)
    shape = pool_shape(pool)
    assert DRIVER_LABEL not in shape.labels
    capacity, allocatable = node_resources(shape)
    assert "nvidia.com/gpu" not in capacity
    assert "nvidia.com/gpu" not in allocatable
    # The pool still promises GPUs: the autoscaler scales it up for GPU pods, as GKE's does.
    assert shape.resource == ("nvidia.com/gpu", 8)
    assert accepts(shape, {}, [], {"nvidia.com/gpu"})
    assert shape.labels["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"


def test_tpu_nodes_need_no_gpu_driver() -> None:
    shape = pool_shape(rendered(tpu("v6e", "2x2"), name="t"))
    assert not shape.driverless
    assert node_resources(shape)[1]["google.com/tpu"] == "4"


def test_capacity_rules_first_match_wins() -> None:
    scenario = SimScenario(
        capacity=[
            CapacityRule(zone="us-east5-a", accelerator="nvidia-l4", stockout=True),
            CapacityRule(accelerator="nvidia-l4", after_seconds=300),
        ]
    )
    zones = ["us-east5-a", "us-east5-b"]
    assert scenario.capacity_zone(zones, "nvidia-l4", 299) is None
    assert scenario.capacity_zone(zones, "nvidia-l4", 300) == "us-east5-b"
    assert scenario.capacity_zone(zones, "tpu-v6e-slice", 0) == "us-east5-a"


def test_capacity_rules_by_mode_and_time_window() -> None:
    """Spot is gone for the first hour; flex-start waits ten minutes; on-demand is there."""
    scenario = SimScenario(
        capacity=[
            CapacityRule(mode="Spot", stockout=True, until_seconds=3600),
            CapacityRule(mode="FlexStart", after_seconds=600),
        ]
    )
    zones = ["us-east5-a"]
    assert scenario.capacity_zone(zones, "nvidia-l4", 10_000, mode="Spot", now=3599) is None
    assert scenario.capacity_zone(zones, "nvidia-l4", 0, mode="Spot", now=3600) == "us-east5-a"
    assert scenario.capacity_zone(zones, "nvidia-l4", 599, mode="FlexStart") is None
    assert scenario.capacity_zone(zones, "nvidia-l4", 600, mode="FlexStart") == "us-east5-a"
    assert scenario.capacity_zone(zones, "nvidia-l4", 0, mode="OnDemand") == "us-east5-a"
    later = CapacityRule(zone="us-east5-b", stockout=True, from_seconds=60)
    assert later.matches("us-east5-b", None, now=60)
    assert not later.matches("us-east5-b", None, now=59.9)


@pytest.mark.parametrize(
    ("accelerator", "mode", "extra", "expected"),
    [
        (tpu("v6e", "4x4"), "FlexStart", {}, "FlexStart"),
        (gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", {}, "QueuedProvisioning"),
        (tpu("v6e", "4x4"), "Spot", {}, "Spot"),
        (gpu("nvidia-l4"), "OnDemand", {}, "OnDemand"),
        (gpu("nvidia-l4"), "Reservation", {"reservation": "r1"}, "Reservation"),
    ],
)
def test_a_pools_mode_is_read_from_its_settings(
    accelerator: dict[str, object], mode: str, extra: dict[str, str], expected: str
) -> None:
    provisioning = {"reservation": extra["reservation"]} if extra else {}
    shape = pool_shape(rendered(accelerator, mode, name="p", provisioning=provisioning))
    assert shape.mode == expected


def test_kwok_config_is_stages_for_nodes_and_pods() -> None:
    documents = list(yaml.safe_load_all(kwok_config()))
    assert {d["kind"] for d in documents} == {"Stage"}
    names = {d["metadata"]["name"] for d in documents}
    assert {"node-initialize", "node-heartbeat", "pod-ready", "pod-succeed", "pod-fail"} <= names
    kinds = {d["spec"]["resourceRef"]["kind"] for d in documents}
    assert kinds == {"Node", "Pod"}


def test_a_multi_host_slice_is_its_zone_nodes_in_blocks_of_the_slice() -> None:
    # Preempting one VM of a multi-host slice takes its slice: the zone's nodes, in number
    # order, in blocks of the slice's size (scale-up makes whole slices, one zone each).
    def node(index: int, zone: str) -> dict[str, Any]:
        return {"metadata": {"name": f"gke-sandbox-p-{index}", "labels": {ZONE_LABEL_KEY: zone}}}

    def pool(slice_nodes: int) -> ScalingPool:
        shape = PoolShape(pool="p", machine_type="ct6e-standard-4t", slice_nodes=slice_nodes)
        return ScalingPool(container_v1.NodePool(name="p"), len(nodes), shape, "x/p", nodes)

    def tails(found: list[dict[str, Any]]) -> list[str]:
        return [n["metadata"]["name"].rsplit("-", 1)[-1] for n in found]

    nodes = [node(1, "a"), node(2, "a"), node(3, "b"), node(5, "a"), node(6, "a"), node(4, "b")]
    assert tails(slice_of(pool(2), nodes[4])) == ["5", "6"]
    assert tails(slice_of(pool(2), nodes[0])) == ["1", "2"]
    assert tails(slice_of(pool(2), nodes[5])) == ["3", "4"]
    assert slice_of(pool(1), nodes[3]) == [nodes[3]]


def test_scale_down_waits_while_a_turned_down_pod_fits_a_node_already_there() -> None:
    # The cluster autoscaler skips scale-down in a loop where a pod the scheduler turned
    # down fits existing free capacity: the node it fits is about to be used.
    def node(name: str) -> dict[str, Any]:
        return {"metadata": {"name": name}}

    shape = PoolShape(pool="p", machine_type="g2-standard-8")
    pools = {
        "p": ScalingPool(container_v1.NodePool(name="p"), 2, shape, "x/p", [node("a"), node("b")]),
        "q": ScalingPool(container_v1.NodePool(name="q"), 1, shape, "x/q", [node("c")]),
    }
    pod = {"metadata": {"name": "bad"}}
    running = {"metadata": {"name": "ok"}}
    assert schedulable_pending(pools, {"p": [pod]}, {"a": [running]})
    # Every node of its pool is taken (pool q's free node "c" is not one it fits): it
    # waits for a new node, and scale-down goes on. Nothing pending holds nothing back.
    assert not schedulable_pending(pools, {"p": [pod]}, {"a": [running], "b": [running]})
    assert not schedulable_pending(pools, {}, {})


def test_a_flex_start_vm_ends_on_the_clock_its_readers_decide_on() -> None:
    epoch = datetime(2026, 11, 28, tzinfo=UTC)
    clock = SimClock(60.0, real=lambda: 0.0, epoch=epoch)
    clock.jump(86400.0)
    shared = Fleet(cast(Any, None), cast(Any, None), DEFAULT_CLUSTER, clock, calendar=True)
    # Given the operator's clock: its calendar at the node's creation plus the max run.
    assert shared.terminates_at(clock.now(), 7200.0) == epoch + timedelta(days=1, hours=2)
    # Its own clock: when the sped-up run ends on the wall clock (2 h at 60x: 2 minutes).
    own = Fleet(cast(Any, None), cast(Any, None), DEFAULT_CLUSTER, clock)
    ends = own.terminates_at(clock.now(), 7200.0)
    assert ends is not None
    assert abs((ends - datetime.now(UTC)).total_seconds() - 120.0) < 5.0
    assert shared.terminates_at(clock.now(), None) is None
