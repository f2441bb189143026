"""The one zone of a TPU slice's pool (zones.slice_zone), and its plan."""

from __future__ import annotations

import pytest

from dws_operator.catalog import TPU_GENERATIONS, ProvisioningMode, TpuVersion
from dws_operator.errors import InvalidSpec, SpecError
from dws_operator.planning import plan_slice
from dws_operator.zones import ClusterSite, slice_zone
from tests.builders import SITE, make_spec, tpu

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
