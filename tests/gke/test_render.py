"""render_node_pool: the exact NodePool for every provisioning mode and accelerator kind."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from google.cloud.container_v1 import (
    AcceleratorConfig,
    GcfsConfig,
    GPUDriverInstallationConfig,
    NodeConfig,
    NodeManagement,
    NodePool,
    NodePoolAutoscaling,
    ReservationAffinity,
    WorkloadMetadataConfig,
)
from google.protobuf.duration_pb2 import Duration

from dws_operator.catalog import GpuType
from dws_operator.gke import render_node_pool
from dws_operator.gke.labels import merge_labels
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.gke.shapes import shape_of
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


NODE_SA = "dws-nodes@dws-sandbox.iam.gserviceaccount.com"
NODE_SETTINGS = PoolDefaults(
    service_account=NODE_SA,
    workload_metadata="GKE_METADATA",
    labels=(("team", "ml"),),
    tags=("dws-nodes",),
    disk_type="hyperdisk-balanced",
    disk_size_gb=200,
    image_streaming=True,
)
METADATA = WorkloadMetadataConfig.Mode


def with_settings(
    defaults: PoolDefaults | None, accelerator: dict[str, Any] | None = None
) -> NodePool:
    plan = plan_slice(make_spec(accelerator or tpu("v6e", "4x4")), pool_name="dws-pool")
    return render_node_pool(plan, name="dws-pool", labels=LABELS, defaults=defaults)


def test_node_settings_are_rendered_on_the_node_config() -> None:
    base = with_settings(None)
    pool = with_settings(NODE_SETTINGS)
    # Exactly the node settings are added; the plan's fields are those of a pool without.
    expected = NodeConfig.deserialize(NodeConfig.serialize(base.config))
    expected.service_account = NODE_SA
    expected.oauth_scopes = ["https://www.googleapis.com/auth/cloud-platform"]
    expected.workload_metadata_config = WorkloadMetadataConfig(mode=METADATA.GKE_METADATA)
    expected.tags = ["dws-nodes"]
    expected.disk_type = "hyperdisk-balanced"
    expected.disk_size_gb = 200
    expected.gcfs_config = GcfsConfig(enabled=True)
    expected.labels = {**LABELS, "team": "ml"}
    expected.resource_labels = {**LABELS, "team": "ml"}
    assert pool.config == expected
    # Everything outside NodeConfig is the plan's alone.
    pool.config = base.config
    assert pool == base


def test_without_node_settings_nothing_is_added() -> None:
    """None: today's pools exactly (GKE's defaults, the Compute Engine default account)."""
    config = with_settings(None).config
    for field in (
        "service_account",
        "oauth_scopes",
        "workload_metadata_config",
        "tags",
        "disk_type",
        "disk_size_gb",
        "gcfs_config",
    ):
        assert field not in config, field


def test_default_node_settings_are_workload_identity_and_cloud_platform() -> None:
    config = with_settings(PoolDefaults()).config
    assert "service_account" not in config  # unset: GKE's default, with a warning at start
    # Nor scopes: cloud-platform on the Compute Engine default account is not ours to give.
    assert "oauth_scopes" not in config
    own = with_settings(PoolDefaults(service_account=NODE_SA)).config
    assert list(own.oauth_scopes) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert config.workload_metadata_config.mode == METADATA.GKE_METADATA
    assert "disk_type" not in config
    assert "gcfs_config" not in config


def test_gce_metadata_can_be_asked_for() -> None:
    config = with_settings(PoolDefaults(workload_metadata="GCE_METADATA")).config
    assert config.workload_metadata_config.mode == METADATA.GCE_METADATA


def test_extra_labels_never_replace_the_operators() -> None:
    assert merge_labels({"a": "1"}, {"b": "2"}) == {"a": "1", "b": "2"}
    with pytest.raises(ValueError, match="clash with the operator's own labels"):
        merge_labels({"team": "ml"}, {"team": "other"})
    plan = plan_slice(make_spec(tpu("v6e", "4x4")), pool_name="dws-pool")
    with pytest.raises(ValueError, match="clash"):
        render_node_pool(plan, name="p", labels={"team": "x"}, defaults=NODE_SETTINGS)


def test_every_accelerator_kind_and_mode_gets_the_node_settings() -> None:
    for accelerator in (tpu("v6e", "4x4"), tpu("v5p", "2x2x2"), gpu("nvidia-h100-80gb", nodes=2)):
        for mode in ("FlexStart", "QueuedProvisioning", "Spot", "OnDemand"):
            plan = plan_slice(make_spec(accelerator, mode), pool_name="dws-pool")
            config = render_node_pool(
                plan, name="dws-pool", labels=LABELS, defaults=NODE_SETTINGS
            ).config
            assert (config.service_account, config.disk_size_gb) == (NODE_SA, 200), mode
            assert config.labels["team"] == "ml"


def test_the_shape_follows_the_node_identity_not_the_extra_labels() -> None:
    """A pool made for another service account (or disk, or metadata mode) is another
    shape, so it is never handed to a request that would get the other identity; the
    same settings give the same shape, so reuse goes on; extra labels, rewritten at
    takeover like the operator's own, do not count."""
    same = shape_of(with_settings(NODE_SETTINGS))
    assert shape_of(with_settings(NODE_SETTINGS)) == same
    relabelled = dataclasses.replace(NODE_SETTINGS, labels=(("team", "other"),))
    assert shape_of(with_settings(relabelled)) == same
    for other in (
        dataclasses.replace(NODE_SETTINGS, service_account="x@p.iam.gserviceaccount.com"),
        dataclasses.replace(NODE_SETTINGS, service_account=None),
        dataclasses.replace(NODE_SETTINGS, workload_metadata="GCE_METADATA"),
        dataclasses.replace(NODE_SETTINGS, disk_size_gb=100),
        dataclasses.replace(NODE_SETTINGS, tags=()),
        dataclasses.replace(NODE_SETTINGS, image_streaming=False),
        dataclasses.replace(
            NODE_SETTINGS, oauth_scopes=("https://www.googleapis.com/auth/logging.write",)
        ),
    ):
        assert shape_of(with_settings(other)) != same, other
    assert shape_of(with_settings(None)) != shape_of(with_settings(PoolDefaults()))


def test_a_tpu_pool_gets_the_disk_type_only_where_its_series_boots_from_it() -> None:
    # v6e boots from hyperdisk-balanced only, v5p from pd-balanced only: one
    # operator-wide type is sent where GKE takes it, left out (GKE's default) elsewhere.
    hyperdisk = PoolDefaults(disk_type="hyperdisk-balanced", disk_size_gb=200)
    v6e = with_settings(hyperdisk, tpu("v6e", "4x4")).config
    assert (v6e.disk_type, v6e.disk_size_gb) == ("hyperdisk-balanced", 200)
    v5p = with_settings(hyperdisk, tpu("v5p", "2x2x2")).config
    assert "disk_type" not in v5p
    assert v5p.disk_size_gb == 200
    balanced = PoolDefaults(disk_type="pd-balanced")
    assert with_settings(balanced, tpu("v5p", "2x2x2")).config.disk_type == "pd-balanced"
    assert "disk_type" not in with_settings(balanced, tpu("v6e", "4x4")).config
    # GPUs and generations with no documented list get it as given.
    assert with_settings(hyperdisk, gpu("nvidia-l4", nodes=1)).config.disk_type == (
        "hyperdisk-balanced"
    )
    assert with_settings(balanced, tpu("tpu7x", "2x2x1")).config.disk_type == "pd-balanced"
