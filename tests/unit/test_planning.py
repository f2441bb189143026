"""Pod placement and node pool settings per accelerator and provisioning mode."""

from __future__ import annotations

import pytest

from dws_operator.catalog import ReservationAffinity
from dws_operator.planning import plan_slice
from tests.builders import gpu, make_spec, tpu

FLEX_LABEL = "cloud.google.com/gke-flex-start"
SPOT_LABEL = "cloud.google.com/gke-spot"


def test_seed_example_v6e_4x4_flex_start() -> None:
    plan = plan_slice(make_spec(tpu("v6e", "4x4")), pool_name="dws-train-abc")
    assert plan.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        FLEX_LABEL: "true",
        "cloud.google.com/gke-nodepool": "dws-train-abc",
    }
    assert [(t.key, t.operator, t.value, t.effect) for t in plan.tolerations] == [
        ("google.com/tpu", "Equal", "present", "NoSchedule")
    ]
    pool = plan.node_pool
    assert pool.flex_start
    assert not pool.queued_provisioning
    assert not pool.spot
    assert (pool.autoscaling.enabled, pool.autoscaling.min_node_count) == (True, 0)
    assert pool.autoscaling.max_node_count == 4
    assert pool.autoscaling.location_policy == "ANY"
    assert pool.initial_node_count == 0
    assert pool.reservation_affinity is not None
    assert pool.reservation_affinity.consume_reservation_type == ReservationAffinity.NO_RESERVATION
    assert pool.auto_repair is False
    assert pool.placement_policy is not None
    assert (pool.placement_policy.type, pool.placement_policy.tpu_topology) == ("COMPACT", "4x4")
    assert pool.max_run_duration_seconds == 7 * 24 * 3600
    assert pool.name == "dws-train-abc"


def test_queued_provisioning_gpu() -> None:
    plan = plan_slice(make_spec(gpu("nvidia-h100-80gb", nodes=2), mode="QueuedProvisioning"))
    pool = plan.node_pool
    assert pool.queued_provisioning
    assert pool.flex_start
    assert pool.needs_provisioning_request
    assert pool.autoscaling.max_node_count == 2
    assert pool.auto_repair is False
    assert pool.placement_policy is None
    # Queued nodes carry cloud.google.com/gke-queued=true:NoSchedule.
    assert ("cloud.google.com/gke-queued", "true") in [(t.key, t.value) for t in plan.tolerations]
    assert ("nvidia.com/gpu", "present") in [(t.key, t.value) for t in plan.tolerations]
    # GKE taints queued nodes but does not label them gke-queued: pods select
    # gke-flex-start, which GKE sets on flex-start nodes, queued ones too.
    assert plan.node_selector == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        "cloud.google.com/gke-flex-start": "true",
    }


def test_queued_provisioning_tpu_slice() -> None:
    """Flex-start with queued provisioning serves TPU slices: the whole slice or nothing."""
    plan = plan_slice(make_spec(tpu("v6e", "4x4"), mode="QueuedProvisioning"), pool_name="q")
    pool = plan.node_pool
    assert (pool.flex_start, pool.queued_provisioning, pool.needs_provisioning_request) == (
        True,
        True,
        True,
    )
    assert (pool.autoscaling.min_node_count, pool.autoscaling.max_node_count) == (0, 4)
    assert pool.autoscaling.location_policy == "ANY"
    assert pool.reservation_affinity is not None
    assert pool.reservation_affinity.consume_reservation_type == "NO_RESERVATION"
    assert pool.auto_repair is False
    assert pool.placement_policy is not None
    assert pool.placement_policy.tpu_topology == "4x4"
    assert plan.node_selector == {
        "cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
        "cloud.google.com/gke-tpu-topology": "4x4",
        "cloud.google.com/gke-flex-start": "true",
        "cloud.google.com/gke-nodepool": "q",
    }
    assert [(t.key, t.value, t.effect) for t in plan.tolerations] == [
        ("google.com/tpu", "present", "NoSchedule"),
        ("cloud.google.com/gke-queued", "true", "NoSchedule"),
    ]


@pytest.mark.parametrize("version", ["v5e", "v5p", "v6e", "tpu7x"])
def test_queued_provisioning_serves_every_flex_start_tpu(version: str) -> None:
    topology = {"v5e": "2x4", "v6e": "2x4"}.get(version, "2x2x2")
    plan = plan_slice(make_spec(tpu(version, topology), mode="QueuedProvisioning"))
    assert plan.node_pool.queued_provisioning


def test_multi_slice_plan() -> None:
    plan = plan_slice(make_spec(tpu("v5p", "2x2x2", slices=2)), pool_name="dws-x")
    assert (plan.slices, plan.nodes, plan.total_nodes, plan.total_chips) == (2, 2, 4, 8)
    assert plan.pool_names == ("dws-x-s0", "dws-x-s1")
    # Each slice's pods select their own pool (the JobSet adds it per slice).
    assert "cloud.google.com/gke-nodepool" not in plan.node_selector
    assert plan.node_pool.autoscaling.max_node_count == 2
    summary = plan.summary()
    assert (summary.slices, summary.total_nodes) == (2, 4)


def test_single_slice_keeps_its_pool_name() -> None:
    plan = plan_slice(make_spec(tpu("v5p", "2x2x2")), pool_name="dws-x")
    assert plan.pool_names == ("dws-x",)
    assert plan.node_selector["cloud.google.com/gke-nodepool"] == "dws-x"


def test_spot() -> None:
    plan = plan_slice(make_spec(tpu("v5e", "2x4"), mode="Spot"))
    assert plan.node_pool.spot
    assert not plan.node_pool.flex_start
    assert plan.node_selector[SPOT_LABEL] == "true"
    assert FLEX_LABEL not in plan.node_selector
    assert plan.node_pool.reservation_affinity is None
    assert plan.max_restarts == 6  # Vertex AI restarts a preempted spot job up to 6 times


def test_on_demand_is_a_plain_pool() -> None:
    plan = plan_slice(make_spec(gpu("nvidia-l4", nodes=4, count=1), mode="OnDemand"))
    pool = plan.node_pool
    assert not (pool.flex_start)
    assert not (pool.queued_provisioning)
    assert not (pool.spot)
    assert pool.reservation_affinity is None
    assert pool.auto_repair is None
    assert pool.autoscaling.max_node_count == 4
    assert plan.max_restarts == 0
    assert set(plan.node_selector) == {"cloud.google.com/gke-accelerator"}


def test_reservation_targets_the_named_reservation() -> None:
    spec = make_spec(
        tpu("v5p", "2x2x2"), mode="Reservation", provisioning={"reservation": "calendar-block-7"}
    )
    affinity = plan_slice(spec).node_pool.reservation_affinity
    assert affinity is not None
    assert affinity.consume_reservation_type == ReservationAffinity.SPECIFIC_RESERVATION
    assert affinity.key == "compute.googleapis.com/reservation-name"
    assert affinity.values == ("calendar-block-7",)


def test_user_max_restarts_beats_the_mode_default() -> None:
    assert plan_slice(make_spec(tpu("v6e", "4x4"), mode="Spot", maxRestarts=2)).max_restarts == 2


def test_durations_and_zones() -> None:
    spec = make_spec(
        tpu("v6e", "2x2"),
        provisioning={"maxWaitDuration": "0s", "maxRunDuration": "1h30m", "zones": ["us-east5-b"]},
    )
    plan = plan_slice(spec)
    assert plan.max_wait_seconds == 0  # wait forever
    assert plan.max_run_seconds == 5400
    assert plan.node_pool.max_run_duration_seconds == 5400
    assert plan.node_pool.zones == ("us-east5-b",)


def test_defaults_are_24h_wait_and_7_days_run() -> None:
    plan = plan_slice(make_spec(gpu("nvidia-a100-80gb")))
    assert (plan.max_wait_seconds, plan.max_run_seconds) == (86400, 604800)


@pytest.mark.parametrize("mode", ["Spot", "OnDemand", "Reservation"])
def test_vm_max_run_duration_only_for_flex_start(mode: str) -> None:
    extra = {"provisioning": {"reservation": "r"}} if mode == "Reservation" else {}
    plan = plan_slice(make_spec(tpu("v6e", "4x4"), mode=mode, **extra))
    assert plan.node_pool.max_run_duration_seconds is None


def test_gpu_multi_node_is_not_single_host_and_gets_no_tpu_placement() -> None:
    plan = plan_slice(make_spec(gpu("nvidia-b200", nodes=4)))
    assert not plan.single_host
    assert plan.node_pool.placement_policy is None
    assert plan.shape == "32 GPUs"


def test_summary_for_status() -> None:
    summary = plan_slice(make_spec(tpu("v6e", "8x8"))).summary()
    assert summary.model_dump(by_alias=True, include={"accelerator", "shape", "nodes"}) == {
        "accelerator": "tpu-v6e",
        "shape": "8x8",
        "nodes": 16,
    }


@pytest.mark.parametrize(
    ("driver", "expected"),
    [
        (None, "DEFAULT"),
        ("Default", "DEFAULT"),
        ("Latest", "LATEST"),
        ("Disabled", "INSTALLATION_DISABLED"),
    ],
)
def test_gpu_pools_name_their_driver(driver: str | None, expected: str) -> None:
    accelerator = gpu("nvidia-h100-80gb", nodes=2)
    if driver is not None:
        accelerator["gpu"]["driver"] = driver
    assert plan_slice(make_spec(accelerator, "Spot")).node_pool.gpu_driver_version == expected


def test_tpu_pools_have_no_gpu_driver() -> None:
    assert plan_slice(make_spec(tpu("v6e", "4x4"))).node_pool.gpu_driver_version is None
