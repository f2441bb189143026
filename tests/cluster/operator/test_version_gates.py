"""The operator on a cluster too old for a feature: the request fails at once, naming the
feature, GKE's minimum and the cluster's version, and no node pool is ever asked for."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ClusterManagerEmulator,
    EmulatorConfig,
)
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

pytestmark = pytest.mark.usefixtures("operator")

OLD = "1.31.5-gke.1000"


@pytest.fixture
def emulator_config() -> EmulatorConfig:
    return EmulatorConfig(
        operation_latency_seconds=0.3,
        clusters=[ClusterConfig(name=DEFAULT_CLUSTER, version=OLD)],
    )


def test_gpu_flex_start_on_an_old_cluster_fails_at_once(
    scenario: Scenario, api: k8s.ApiClient, namespace: str, emulator: ClusterManagerEmulator
) -> None:
    started = time.monotonic()
    scenario.create(gpu("nvidia-h100-80gb"))
    status = scenario.wait_phase("Failed", timeout=15)
    took = time.monotonic() - started
    completed = scenario.condition("Completed")
    assert completed is not None
    assert (completed["status"], completed["reason"]) == ("False", "GkeVersionTooOld")
    assert completed["message"] == (
        f"GPU flex-start requires GKE 1.32.2-gke.1652000 or later; this cluster runs GKE {OLD}"
    )
    assert status["message"] == f"GkeVersionTooOld: {completed['message']}"
    print(f"\nfailed {took:.2f}s after creation")
    # Every phase change is an Event: straight to Failed, never Provisioning.
    assert eventually(scenario.events, what="the Failed event") == ["Failed"]
    assert scenario.jobs() == []

    # The same old cluster still serves what needs no newer GKE: a spot pool is created,
    # and the version read for the first request is reused (one GetCluster in all).
    spot = Scenario(api, namespace, emulator)
    spot.create(gpu("nvidia-h100-80gb"), mode="Spot")
    eventually(spot.created_pools, what="the spot request's CreateNodePool")
    created = [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")]
    assert created == [spot.pool_name]
    assert scenario.phase() == "Failed"
    assert len(emulator.calls_for("GetCluster")) == 1
