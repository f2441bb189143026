"""The one zone of a TPU slice's pool (zones.slice_zone), and its plan."""

from __future__ import annotations

import dataclasses

import pytest

from dws_operator.api import TrainingRequestStatus
from dws_operator.catalog import TPU_GENERATIONS, ProvisioningMode, TpuVersion
from dws_operator.errors import InvalidSpec, SpecError
from dws_operator.planning import plan_slice
from dws_operator.reconcile.facts import read_spec
from dws_operator.reconcile.observed import RequestView
from dws_operator.reconcile.step import planned
from dws_operator.zones import ClusterSite, slice_zone
from tests.builders import SITE, make_spec, spec_body, tpu

V6E = TPU_GENERATIONS[TpuVersion.V6E]
TPU7X = TPU_GENERATIONS[TpuVersion.TPU7X]
FLEX = ProvisioningMode.FLEX_START


def test_a_named_zone_wins() -> None:
    assert slice_zone(("us-east5-b",), V6E, FLEX, SITE) == "us-east5-b"


def test_a_zonal_cluster_uses_its_zone() -> None:
    assert slice_zone((), V6E, FLEX, ClusterSite("us-east5-b")) == "us-east5-b"


def test_flex_start_takes_the_first_documented_zone_of_the_region() -> None:
    assert slice_zone((), V6E, FLEX, SITE) == "us-east5-a"
    tokyo = ClusterSite("asia-northeast1", ("asia-northeast1-a", "asia-northeast1-b"))
    assert slice_zone((), V6E, ProvisioningMode.QUEUED_PROVISIONING, tokyo) == ("asia-northeast1-b")


def test_flex_start_outside_the_documented_zones_is_refused_naming_them() -> None:
    with pytest.raises(SpecError) as caught:
        slice_zone((), V6E, FLEX, ClusterSite("us-central1", ("us-central1-a",)))
    assert caught.value.field == "spec.provisioning.zones"
    assert "asia-northeast1-b, us-east5-a, us-east5-b" in caught.value.message
    assert "us-central1" in caught.value.message


@pytest.mark.parametrize(
    ("generation", "mode"), [(V6E, ProvisioningMode.SPOT), (TPU7X, FLEX)], ids=["spot", "tpu7x"]
)
def test_otherwise_the_first_node_location(generation: object, mode: ProvisioningMode) -> None:
    site = ClusterSite("us-east5", ("us-east5-c", "us-east5-b"))
    assert slice_zone((), generation, mode, site) == "us-east5-b"  # type: ignore[arg-type]
    with pytest.raises(SpecError):
        slice_zone((), generation, mode, ClusterSite("us-east5"))  # type: ignore[arg-type]


def test_the_plan_of_a_slice_has_one_zone_and_per_zone_limits() -> None:
    plan = plan_slice(make_spec(tpu("v6e", "4x4")), pool_name="p", site=SITE)
    scaling = plan.node_pool.autoscaling
    assert plan.node_pool.zones == ("us-east5-a",)
    assert (scaling.total, scaling.max_node_count) == (False, 4)


def test_v5e_flex_start_in_the_sandbox_region_is_an_invalid_spec() -> None:
    with pytest.raises(InvalidSpec) as caught:
        plan_slice(make_spec(tpu("v5e", "4x4")), pool_name="p", site=SITE)
    assert "us-west4-a" in str(caught.value)


def test_several_zones_for_a_tpu_are_refused() -> None:
    spec = make_spec(tpu("v6e", "4x4"), provisioning={"zones": ["us-east5-a", "us-east5-b"]})
    with pytest.raises(InvalidSpec) as caught:
        plan_slice(spec, pool_name="p", site=SITE)
    assert caught.value.first.field == "spec.provisioning.zones"


def test_a_reservation_slice_on_a_regional_cluster_needs_its_zone_named() -> None:
    reservation = ProvisioningMode.RESERVATION
    with pytest.raises(SpecError) as caught:
        slice_zone((), V6E, reservation, SITE)
    assert caught.value.field == "spec.provisioning.zones"
    assert "reservation's zone" in caught.value.message
    assert slice_zone(("us-east5-c",), V6E, reservation, SITE) == "us-east5-c"
    assert slice_zone((), V6E, reservation, ClusterSite("us-east5-b")) == "us-east5-b"


def test_a_ladder_step_that_cannot_be_placed_is_refused_before_the_first_step() -> None:
    # Spot places anywhere in the region; the FlexStart step after it has no documented
    # v6e zone in europe-west4. The request is refused on its first pass, naming the step,
    # not when the ladder reaches it with step 1's pool to clean up.
    body = spec_body(
        tpu("v6e", "4x4"),
        mode="Spot",
        provisioning={"maxWaitDuration": "1h", "fallback": [{"mode": "FlexStart"}]},
    )
    europe = ClusterSite("europe-west4", ("europe-west4-a", "europe-west4-b"))
    view = RequestView(
        "r",
        "ns",
        "uid-ladder",
        1,
        False,
        read_spec("r", "uid-ladder", body),
        TrainingRequestStatus(),
        europe,
    )
    result = planned(view)
    assert isinstance(result, InvalidSpec)
    [error] = result.errors
    assert error.field == "spec.provisioning.fallback[0].zones"
    assert "europe-west4" in error.message
    # In us-east5 both steps have a zone: the first step plans.
    east = dataclasses.replace(view, uid="uid-ladder-east", site=SITE)
    result = planned(east)
    assert not isinstance(result, InvalidSpec)
    assert result.plan.node_pool.zones == ("us-east5-a",)
