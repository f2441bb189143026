"""The Kueue objects for DWS (pure builders) and the Kueue releases the operator accepts."""

from __future__ import annotations

import pytest

from dws_operator.kueue_objects import (
    COVERED_RESOURCES,
    QueueSetup,
    cluster_queue,
    gpu_flavor,
    tpu_flavor,
)
from dws_operator.kueue_versions import MINIMUM_KUEUE_RELEASE, unsupported_kueue

SETUP = QueueSetup(
    cluster_queue="dws",
    local_queue="dws-queue",
    namespace="ml",
    flavors=(gpu_flavor("nvidia-h100-80gb"), tpu_flavor("tpu-v6e-slice")),
)


def test_the_cluster_queue_covers_ephemeral_storage_in_every_flavor() -> None:
    [group] = cluster_queue(SETUP)["spec"]["resourceGroups"]
    assert group["coveredResources"] == [
        "cpu",
        "memory",
        "ephemeral-storage",
        "nvidia.com/gpu",
        "google.com/tpu",
    ]
    for flavor in group["flavors"]:
        # Kueue wants each flavor's resources in the order of coveredResources.
        assert [r["name"] for r in flavor["resources"]] == list(COVERED_RESOURCES)
        quotas = {r["name"]: r["nominalQuota"] for r in flavor["resources"]}
        assert quotas["ephemeral-storage"] == "1000Ti"
    gpu, tpu = ({r["name"]: r["nominalQuota"] for r in f["resources"]} for f in group["flavors"])
    assert (gpu["nvidia.com/gpu"], gpu["google.com/tpu"]) == ("100000", "0")
    assert (tpu["nvidia.com/gpu"], tpu["google.com/tpu"]) == ("0", "100000")


@pytest.mark.parametrize(
    "served",
    [
        (),  # Kueue not installed: nothing to refuse
        ("v1beta1", "v1beta2"),  # Kueue v0.15 to v0.19
        ("v1beta2",),  # Kueue v0.20 on
        ("v1alpha1", "v1beta1", "v1beta2"),
    ],
)
def test_kueue_serving_v1beta2_is_accepted(served: tuple[str, ...]) -> None:
    assert unsupported_kueue(served) is None


def test_kueue_serving_only_v1beta1_is_refused_naming_the_minimum() -> None:
    assert MINIMUM_KUEUE_RELEASE == "v0.15.0"
    assert unsupported_kueue(("v1beta1", "v1alpha1")) == (
        "this cluster's Kueue serves kueue.x-k8s.io v1alpha1, v1beta1 but not v1beta2: it is "
        "older than Kueue v0.15.0. dws-operator needs Kueue v0.15.0 or later; upgrade Kueue, "
        "or run without it (DWS_KUEUE=disabled)"
    )
