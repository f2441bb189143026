"""GKE version gates: comparing GKE versions, which features a request needs, and the
decision failing a request at once when the cluster is too old for one of them."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dws_operator.api import Phase
from dws_operator.catalog import (
    VERSION_GATES,
    GkeVersion,
    ProvisioningMode,
    TpuVersion,
    unmet_gates,
    version_gates,
)
from dws_operator.reconcile import CreateNodePool, Event, Observed, PoolState, ReconcileConfig
from dws_operator.reconcile import conditions as cond
from tests.builders import gpu, spec_body, tpu
from tests.unit.decisions import (
    CONFIG,
    T0,
    cond_tuple,
    existing,
    observed,
    only,
    pool_for,
    run,
)

#: GKE's documented minimums, restated here so a drifting catalog fails a test.
GPU_FLEX_MIN = "1.32.2-gke.1652000"
TPU_FLEX_MIN = "1.33.0-gke.1712000"
TPU7X_MIN = "1.34.0-gke.2201000"
MULTISLICE_MIN = "1.27.4-gke.900"
OLD = "1.31.5-gke.1000"
QUEUED = ReconcileConfig(kueue=True, queued_queue="dws-queued", location="us-east5")
#: A cluster serving JobSets, which several slices need besides a new enough GKE.
SLICES = dataclasses.replace(CONFIG, jobset=True)

GPU_FLEX = spec_body(gpu("nvidia-h100-80gb"))
GPU_QUEUED = spec_body(gpu("nvidia-h100-80gb", nodes=2), mode="QueuedProvisioning")
GPU_SPOT = spec_body(gpu("nvidia-h100-80gb"), mode="Spot")
V6E_FLEX = spec_body(tpu("v6e", "4x4"))
TPU7X_FLEX = spec_body(tpu("tpu7x", "2x2x1"))
V5P_SLICES = spec_body(tpu("v5p", "2x2x2", slices=2), mode="Spot")


def v(text: str) -> GkeVersion:
    return GkeVersion.parse(text)


def at(body: dict[str, Any], version: str | None, **extra: Any) -> Observed:
    """What the shell observes for `body` on a cluster running GKE `version`."""
    cluster = None if version is None else v(version)
    return dataclasses.replace(observed(body, **extra), cluster_version=cluster)


# -- comparing versions -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        ("1.33.0-gke.1712000", "1.33.1-gke.100"),  # the patch decides before the build
        ("1.32.2-gke.900", "1.32.2-gke.1652000"),  # builds compare as numbers, not text
        ("1.9.0-gke.1", "1.10.0-gke.1"),  # minors too
        ("1.33.9-gke.999999", "1.33.10-gke.1"),  # and patches
        ("1.33.0", "1.33.0-gke.1"),  # no build counts as build 0
        ("1.34.1-gke.1000000", "2.0.0-gke.1"),
    ],
)
def test_versions_order_by_their_numbers(older: str, newer: str) -> None:
    assert v(older) < v(newer)
    assert v(newer) > v(older)
    assert sorted([v(newer), v(older)]) == [v(older), v(newer)]


def test_text_order_would_be_wrong() -> None:
    # Why versions are parsed: as strings, the older build sorts after the newer one.
    assert GPU_FLEX_MIN < "1.32.2-gke.900"
    assert v("1.32.2-gke.900") < v(GPU_FLEX_MIN)


def test_equal_versions_compare_equal_whatever_the_prefix() -> None:
    assert v("v1.33.0-gke.1712000") == v("1.33.0-gke.1712000")
    assert not v("1.33.0-gke.1712000") < v(TPU_FLEX_MIN)
    assert str(v(" 1.33.0-gke.1712000 ")) == "1.33.0-gke.1712000"
    assert str(GkeVersion(1, 33, 0, 5)) == "1.33.0-gke.5"


@pytest.mark.parametrize("text", ["latest", "1.33", "1.33.0-gke.", "1.33.0-gke.x", "1.33.0.1", ""])
def test_what_is_not_a_gke_version_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a GKE version"):
        GkeVersion.parse(text)


# -- which gates a request meets ----------------------------------------------------------


def test_the_catalog_holds_gkes_documented_minimums() -> None:
    assert {g.feature: str(g.minimum) for g in VERSION_GATES} == {
        "GPU flex-start": GPU_FLEX_MIN,
        "GPU flex-start with queued provisioning": GPU_FLEX_MIN,
        "TPU flex-start": TPU_FLEX_MIN,
        "TPU flex-start with queued provisioning": TPU_FLEX_MIN,
        "Ironwood (tpu7x)": TPU7X_MIN,
        "Multislice": MULTISLICE_MIN,
    }


M = ProvisioningMode


@pytest.mark.parametrize(
    ("kind", "mode", "version", "slices", "features"),
    [
        ("gpu", M.FLEX_START, None, 1, ["GPU flex-start"]),
        ("gpu", M.QUEUED_PROVISIONING, None, 1, ["GPU flex-start with queued provisioning"]),
        ("gpu", M.SPOT, None, 1, []),
        ("gpu", M.ON_DEMAND, None, 1, []),
        ("tpu", M.FLEX_START, TpuVersion.V6E, 1, ["TPU flex-start"]),
        (
            "tpu",
            M.QUEUED_PROVISIONING,
            TpuVersion.V5P,
            1,
            ["TPU flex-start with queued provisioning"],
        ),
        ("tpu", M.SPOT, TpuVersion.V6E, 1, []),
        ("tpu", M.RESERVATION, TpuVersion.TPU7X, 1, ["Ironwood (tpu7x)"]),
        ("tpu", M.FLEX_START, TpuVersion.TPU7X, 1, ["TPU flex-start", "Ironwood (tpu7x)"]),
        ("tpu", M.SPOT, TpuVersion.V5P, 2, ["Multislice"]),
        ("tpu", M.FLEX_START, TpuVersion.V6E, 4, ["TPU flex-start", "Multislice"]),
    ],
)
def test_gates_follow_accelerator_mode_version_and_slices(
    kind: str, mode: ProvisioningMode, version: TpuVersion | None, slices: int, features: list[str]
) -> None:
    assert [g.feature for g in version_gates(kind, mode, version, slices)] == features


def test_a_cluster_at_the_minimum_meets_the_gate() -> None:
    gates = version_gates("tpu", M.FLEX_START, TpuVersion.TPU7X)
    assert unmet_gates(v(TPU7X_MIN), gates) == ()
    assert [g.feature for g in unmet_gates(v("1.34.0-gke.2200999"), gates)] == ["Ironwood (tpu7x)"]
    assert [g.feature for g in unmet_gates(v("1.33.1-gke.100"), gates)] == ["Ironwood (tpu7x)"]
    assert [g.feature for g in unmet_gates(v("1.32.9-gke.9999999"), gates)] == [
        "TPU flex-start",
        "Ironwood (tpu7x)",
    ]


# -- the decision -------------------------------------------------------------------------


def test_gpu_flex_start_on_an_old_cluster_fails_at_once_without_a_pool() -> None:
    d = run(at(GPU_FLEX, OLD))
    assert d.actions == []
    assert d.status.phase == Phase.FAILED
    assert cond_tuple(d, cond.COMPLETED) == ("False", "GkeVersionTooOld")
    message = d.status.message or ""
    assert message == (
        f"GkeVersionTooOld: GPU flex-start requires GKE {GPU_FLEX_MIN} or later; "
        f"this cluster runs GKE {OLD}"
    )
    assert cond_tuple(d, cond.VALID) == ("True", "Planned")
    assert d.status.requested_at is None
    assert d.events == [Event("Warning", "Failed", message)]
    again = run(at(GPU_FLEX, OLD, status=d.status, now=T0))
    assert again.actions == []
    assert again.events == []
    assert again.status.phase == Phase.FAILED
    assert again.requeue_after is None


def test_every_unmet_feature_is_named() -> None:
    d = run(at(TPU7X_FLEX, "1.32.9-gke.100"))
    assert d.status.message == (
        f"GkeVersionTooOld: TPU flex-start requires GKE {TPU_FLEX_MIN} or later, "
        f"Ironwood (tpu7x) requires GKE {TPU7X_MIN} or later; this cluster runs GKE 1.32.9-gke.100"
    )


@pytest.mark.parametrize(
    ("body", "version", "config"),
    [
        (GPU_FLEX, GPU_FLEX_MIN, CONFIG),
        (GPU_QUEUED, "1.33.0-gke.1", QUEUED),
        (V6E_FLEX, "1.33.1-gke.100", CONFIG),  # a newer patch with a smaller build
        (TPU7X_FLEX, TPU7X_MIN, CONFIG),
        (V5P_SLICES, MULTISLICE_MIN, SLICES),
        (GPU_SPOT, "1.27.0-gke.1", CONFIG),  # nothing to gate
        (GPU_FLEX, None, CONFIG),  # version unknown: GKE judges the pool itself
    ],
)
def test_a_new_enough_cluster_gets_its_pools(
    body: dict[str, Any], version: str | None, config: ReconcileConfig
) -> None:
    d = run(at(body, version), config)
    assert d.status.phase == Phase.PROVISIONING
    assert only(d.actions, CreateNodePool)


def test_queued_gpus_on_an_old_cluster_name_queued_provisioning() -> None:
    d = run(at(GPU_QUEUED, OLD), QUEUED)
    assert cond_tuple(d, cond.COMPLETED) == ("False", "GkeVersionTooOld")
    assert "GPU flex-start with queued provisioning requires GKE" in (d.status.message or "")


def test_multislice_is_gated_on_its_own_minimum() -> None:
    d = run(at(V5P_SLICES, "1.27.3-gke.2000000"), SLICES)
    assert d.status.message == (
        f"GkeVersionTooOld: Multislice requires GKE {MULTISLICE_MIN} or later; "
        "this cluster runs GKE 1.27.3-gke.2000000"
    )
    assert d.actions == []


def test_an_existing_pool_is_not_gated() -> None:
    """The operator creates nothing; GKE already accepted the pool the user brought."""
    body = existing(GPU_FLEX)
    pool = pool_for(body, name="shared-pool")
    d = run(at(body, OLD, pool=pool))
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("True", "Existing")


def test_a_pool_gke_already_created_is_not_gated_again() -> None:
    d = run(at(GPU_FLEX, OLD, pool=pool_for(GPU_FLEX, PoolState.PROVISIONING)))
    assert d.status.phase == Phase.PROVISIONING
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "Provisioning")


def test_deletion_is_not_gated() -> None:
    d = run(at(GPU_FLEX, OLD, deleting=True))
    assert d.status.phase == Phase.DELETING
    assert d.released is True
