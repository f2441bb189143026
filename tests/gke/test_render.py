"""render_node_pool: the exact NodePool for every provisioning mode and accelerator kind."""

from __future__ import annotations

from typing import Any

import pytest
from google.cloud.container_v1 import (
    AcceleratorConfig,
    GPUDriverInstallationConfig,
    NodeConfig,
    NodeManagement,
    NodePool,
    NodePoolAutoscaling,
    ReservationAffinity,
)
from google.protobuf.duration_pb2 import Duration

from dws_operator.catalog import GpuType
from dws_operator.gke import render_node_pool
from dws_operator.planning import plan_slice
from tests.builders import gpu, make_spec, tpu
from tests.gke.harness import LABELS, rendered

SEVEN_DAYS = 7 * 24 * 3600
ANY = NodePoolAutoscaling.LocationPolicy.ANY
COMPACT = NodePool.PlacementPolicy.Type.COMPACT
NO_RESERVATION = ReservationAffinity(
    consume_reservation_type=ReservationAffinity.Type.NO_RESERVATION
)
REPAIR_OFF = NodeManagement(auto_repair=False, auto_upgrade=True)


def specific(name: str) -> ReservationAffinity:
    return ReservationAffinity(
        consume_reservation_type=ReservationAffinity.Type.SPECIFIC_RESERVATION,
        key="compute.googleapis.com/reservation-name",
        values=[name],
    )


def config(machine_type: str, **fields: Any) -> NodeConfig:
    return NodeConfig(machine_type=machine_type, labels=LABELS, resource_labels=LABELS, **fields)


def gpus(count: int, kind: str, driver: str = "DEFAULT") -> list[AcceleratorConfig]:
    return [
        AcceleratorConfig(
            accelerator_count=count,
            accelerator_type=kind,
            gpu_driver_installation_config=GPUDriverInstallationConfig(gpu_driver_version=driver),
        )
    ]


CASES = [
    pytest.param(
        tpu("v6e", "4x4"),
        "FlexStart",
        {},
        NodePool(
            name="dws-pool",
            config=config(
                "ct6e-standard-4t",
                flex_start=True,
                reservation_affinity=NO_RESERVATION,
                max_run_duration=Duration(seconds=SEVEN_DAYS),
            ),
            initial_node_count=0,
            # A slice lives in one zone (the first GKE documents for v6e flex-start in
            # the sandbox's region) with per-zone limits: GKE checks the slice against
            # the per-zone maximum, 0 with total limits.
            autoscaling=NodePoolAutoscaling(
                enabled=True, min_node_count=0, max_node_count=4, location_policy=ANY
            ),
            locations=["us-east5-a"],
            management=REPAIR_OFF,
            placement_policy=NodePool.PlacementPolicy(type_=COMPACT, tpu_topology="4x4"),
        ),
        id="tpu-flex-start-multi-host",
    ),
    pytest.param(
        tpu("v6e", "1x1"),
        "FlexStart",
        {"provisioning": {"maxRunDuration": "24h"}},
        NodePool(
            name="dws-pool",
            config=config(
                "ct6e-standard-1t",
                flex_start=True,
                reservation_affinity=NO_RESERVATION,
                max_run_duration=Duration(seconds=86400),
            ),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=1, location_policy=ANY
            ),
            management=REPAIR_OFF,
        ),
        id="tpu-flex-start-single-host",
    ),
    pytest.param(
        tpu("v5e", "2x4"),
        "Spot",
        {},
        NodePool(
            name="dws-pool",
            config=config("ct5lp-hightpu-4t", spot=True),
            # Not a flex-start mode: the first of the regional cluster's node locations.
            autoscaling=NodePoolAutoscaling(
                enabled=True, min_node_count=0, max_node_count=2, location_policy=ANY
            ),
            locations=["us-east5-a"],
            placement_policy=NodePool.PlacementPolicy(type_=COMPACT, tpu_topology="2x4"),
        ),
        id="tpu-spot-multi-host",
    ),
    pytest.param(
        tpu("v5p", "2x2x1"),
        "OnDemand",
        {"provisioning": {"zones": ["us-east5-a"]}},
        NodePool(
            name="dws-pool",
            config=config("ct5p-hightpu-4t"),
            autoscaling=NodePoolAutoscaling(enabled=True, min_node_count=0, max_node_count=1),
            locations=["us-east5-a"],
        ),
        id="tpu-on-demand-single-host",
    ),
    pytest.param(
        tpu("v6e", "4x8"),
        "Reservation",
        {"provisioning": {"reservation": "res-v6e", "zones": ["us-east5-b"]}},
        NodePool(
            name="dws-pool",
            config=config("ct6e-standard-4t", reservation_affinity=specific("res-v6e")),
            autoscaling=NodePoolAutoscaling(enabled=True, min_node_count=0, max_node_count=8),
            locations=["us-east5-b"],
            placement_policy=NodePool.PlacementPolicy(type_=COMPACT, tpu_topology="4x8"),
        ),
        id="tpu-reservation-multi-host",
    ),
    pytest.param(
        gpu("nvidia-h100-80gb", nodes=2),
        "FlexStart",
        {},
        NodePool(
            name="dws-pool",
            config=config(
                "a3-highgpu-8g",
                flex_start=True,
                accelerators=gpus(8, "nvidia-h100-80gb"),
                reservation_affinity=NO_RESERVATION,
                max_run_duration=Duration(seconds=SEVEN_DAYS),
            ),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=2, location_policy=ANY
            ),
            management=REPAIR_OFF,
        ),
        id="gpu-flex-start",
    ),
    pytest.param(
        gpu("nvidia-tesla-a100", nodes=4),
        "QueuedProvisioning",
        {},
        NodePool(
            name="dws-pool",
            config=config(
                "a2-highgpu-8g",
                flex_start=True,
                accelerators=gpus(8, "nvidia-tesla-a100"),
                reservation_affinity=NO_RESERVATION,
            ),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=4, location_policy=ANY
            ),
            management=REPAIR_OFF,
            queued_provisioning=NodePool.QueuedProvisioning(enabled=True),
        ),
        id="gpu-queued-provisioning",
    ),
    pytest.param(
        gpu("nvidia-l4", nodes=3, count=1),
        "Spot",
        {},
        NodePool(
            name="dws-pool",
            config=config("g2-standard-4", spot=True, accelerators=gpus(1, "nvidia-l4")),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=3, location_policy=ANY
            ),
        ),
        id="gpu-spot",
    ),
    pytest.param(
        {"gpu": {"type": "nvidia-l4", "nodes": 1, "count": 1, "driver": "Latest"}},
        "Spot",
        {},
        NodePool(
            name="dws-pool",
            config=config("g2-standard-4", spot=True, accelerators=gpus(1, "nvidia-l4", "LATEST")),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=1, location_policy=ANY
            ),
        ),
        id="gpu-latest-driver",
    ),
    pytest.param(
        {"gpu": {"type": "nvidia-l4", "nodes": 1, "count": 1, "driver": "Disabled"}},
        "Spot",
        {},
        NodePool(
            name="dws-pool",
            config=config(
                "g2-standard-4",
                spot=True,
                accelerators=gpus(1, "nvidia-l4", "INSTALLATION_DISABLED"),
            ),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=1, location_policy=ANY
            ),
        ),
        id="gpu-own-driver",
    ),
    pytest.param(
        gpu("nvidia-h200-141gb", nodes=1),
        "OnDemand",
        {},
        NodePool(
            name="dws-pool",
            config=config("a3-ultragpu-8g", accelerators=gpus(8, "nvidia-h200-141gb")),
            autoscaling=NodePoolAutoscaling(
                enabled=True, total_min_node_count=0, total_max_node_count=1
            ),
        ),
        id="gpu-on-demand",
    ),
    pytest.param(
        gpu("nvidia-b200", nodes=2),
        "Reservation",
        {"provisioning": {"reservation": "blocks-b200", "zones": ["us-east5-a"]}},
        NodePool(
            name="dws-pool",
            config=config(
                "a4-highgpu-8g",
                accelerators=gpus(8, "nvidia-b200"),
                reservation_affinity=specific("blocks-b200"),
            ),
            autoscaling=NodePoolAutoscaling(enabled=True, min_node_count=0, max_node_count=2),
            locations=["us-east5-a"],
        ),
        id="gpu-reservation",
    ),
]


@pytest.mark.parametrize(("accelerator", "mode", "extra", "expected"), CASES)
def test_exact_node_pool(
    accelerator: dict[str, Any], mode: str, extra: dict[str, Any], expected: NodePool
) -> None:
    pool = rendered(accelerator, mode, **extra)
    # Field by field first, so a failure names the field; then the whole message,
    # which also catches a submessage present where it must be absent.
    assert pool.config == expected.config
    assert pool.autoscaling == expected.autoscaling
    assert ("management" in pool) == ("management" in expected)
    assert pool.management == expected.management
    assert ("placement_policy" in pool) == ("placement_policy" in expected)
    assert pool.placement_policy == expected.placement_policy
    assert ("queued_provisioning" in pool) == ("queued_provisioning" in expected)
    assert list(pool.locations) == list(expected.locations)
    assert pool == expected


@pytest.mark.parametrize(
    ("topology", "machine_type", "multi_host"),
    [
        ("1x1", None, False),
        ("2x2", None, False),
        ("2x4", "ct6e-standard-8t", False),
        ("2x4", None, True),
        ("16x16", None, True),
    ],
)
def test_placement_policy_only_for_multi_host_tpu(
    topology: str, machine_type: str | None, multi_host: bool
) -> None:
    pool = rendered(tpu("v6e", topology, machine_type))
    assert ("placement_policy" in pool) is multi_host
    if multi_host:
        assert pool.placement_policy.type_ == COMPACT
        assert pool.placement_policy.tpu_topology == topology


def test_gpus_never_get_a_placement_policy() -> None:
    for mode in ("FlexStart", "QueuedProvisioning", "Spot", "OnDemand"):
        assert "placement_policy" not in rendered(gpu("nvidia-h100-80gb", nodes=8), mode)


def test_name_and_labels_come_from_the_caller() -> None:
    plan = plan_slice(make_spec(tpu("v6e", "4x4")), pool_name="ignored-by-render")
    pool = render_node_pool(plan, name="dws-other", labels={"k": "v"})
    assert pool.name == "dws-other"
    assert dict(pool.config.labels) == {"k": "v"}
    assert dict(pool.config.resource_labels) == {"k": "v"}


def test_rendering_does_not_share_the_labels_dict() -> None:
    labels = dict(LABELS)
    plan = plan_slice(make_spec(tpu("v6e", "4x4")), pool_name="dws-pool")
    pool = render_node_pool(plan, name="dws-pool", labels=labels)
    labels["changed"] = "afterwards"
    assert "changed" not in pool.config.labels


@pytest.mark.parametrize("gpu_type", [t.value for t in GpuType])
def test_every_gpu_pool_asks_gke_for_a_driver(gpu_type: str) -> None:
    """Unset, GKE's API installs no driver at all (gcloud fills in `default`; we must)."""
    [accelerator] = rendered(gpu(gpu_type), "OnDemand").config.accelerators
    assert "gpu_driver_installation_config" in accelerator
    installation = accelerator.gpu_driver_installation_config
    assert installation.gpu_driver_version == GPUDriverInstallationConfig.GPUDriverVersion.DEFAULT


def test_tpu_pools_carry_no_accelerator_config() -> None:
    assert list(rendered(tpu("v6e", "2x4"), "Spot").config.accelerators) == []


def test_round_trips_the_wire_format() -> None:
    pool = rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning")
    assert NodePool.deserialize(NodePool.serialize(pool)) == pool


def test_several_zones_cap_the_total_not_each_zone() -> None:
    zones = {"provisioning": {"zones": ["us-east5-a", "us-east5-b"]}}
    pool = rendered(gpu("nvidia-h100-80gb", nodes=2), "FlexStart", **zones)
    scaling = pool.autoscaling
    assert (scaling.total_min_node_count, scaling.total_max_node_count) == (0, 2)
    assert (scaling.min_node_count, scaling.max_node_count) == (0, 0)
    assert list(pool.locations) == ["us-east5-a", "us-east5-b"]


def test_without_zones_the_pool_takes_the_clusters_and_caps_the_total() -> None:
    """A regional cluster's pool spans its 3 zones: per-zone limits would allow 3 x 2."""
    pool = rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot")
    assert list(pool.locations) == []
    scaling = pool.autoscaling
    assert (scaling.total_min_node_count, scaling.total_max_node_count) == (0, 2)
    assert (scaling.min_node_count, scaling.max_node_count) == (0, 0)


def test_one_zone_uses_per_zone_limits() -> None:
    pool = rendered(gpu("nvidia-l4", nodes=3), "Spot", provisioning={"zones": ["us-east5-a"]})
    assert (pool.autoscaling.min_node_count, pool.autoscaling.max_node_count) == (0, 3)
    assert pool.autoscaling.total_max_node_count == 0


def test_a_workload_policy_replaces_compact_placement() -> None:
    """tpu7x multi-host: only the policy's name, no COMPACT type and no tpu_topology; the
    plan says so, and rendering it without the policy's name is refused."""
    plan = plan_slice(make_spec(tpu("tpu7x", "2x2x4"), "Spot"), pool_name="dws-pool")
    assert plan.node_pool.placement_policy is not None
    assert plan.node_pool.placement_policy.type == "WORKLOAD_POLICY"
    placed = render_node_pool(
        plan, name="dws-pool", labels=LABELS, workload_policy="dws-high-throughput-2x2x4"
    )
    assert placed.placement_policy == NodePool.PlacementPolicy(
        policy_name="dws-high-throughput-2x2x4"
    )
    assert placed.placement_policy.type_ == NodePool.PlacementPolicy.Type.TYPE_UNSPECIFIED
    assert placed.placement_policy.tpu_topology == ""
    with pytest.raises(ValueError, match="placed by a workload policy"):
        render_node_pool(plan, name="dws-pool", labels=LABELS)
    # Nothing else differs from a v5p slice's pool of the same shape but the placement.
    v5p = render_node_pool(
        plan_slice(make_spec(tpu("v5p", "2x2x4"), "Spot"), pool_name="dws-pool"),
        name="dws-pool",
        labels=LABELS,
    )
    assert v5p.placement_policy == NodePool.PlacementPolicy(type_=COMPACT, tpu_topology="2x2x4")
    assert (placed.autoscaling, placed.config.spot) == (v5p.autoscaling, v5p.config.spot)


@pytest.mark.parametrize(
    "accelerator",
    [
        pytest.param(tpu("tpu7x", "2x2x1"), id="single-host-tpu"),
        pytest.param(gpu("nvidia-h100-80gb", nodes=2), id="gpu"),
    ],
)
def test_a_workload_policy_needs_a_multi_host_slice(accelerator: dict[str, Any]) -> None:
    plan = plan_slice(make_spec(accelerator, "Spot"), pool_name="dws-pool")
    with pytest.raises(ValueError, match="without placement"):
        render_node_pool(plan, name="dws-pool", labels=LABELS, workload_policy="wp")


def test_an_empty_workload_policy_name_is_refused() -> None:
    plan = plan_slice(make_spec(tpu("tpu7x", "2x2x2"), "Spot"), pool_name="dws-pool")
    with pytest.raises(ValueError, match="resource policy name"):
        render_node_pool(plan, name="dws-pool", labels=LABELS, workload_policy="")
