"""The operator's node settings (DWS_NODE_*) reach every pool it creates, and a takeover
keeps them: read from the emulator's call log, i.e. the CreateNodePool and UpdateNodePool
requests the operator's google-cloud-container client sent."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from google.cloud import container_v1

from dws_operator.controller import OperatorConfig, OperatorThread
from dws_operator.gke.labels import UID_LABEL
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import DEFAULT_CLUSTER
from tests.builders import gpu, tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

SA = "dws-nodes@dws-sandbox.iam.gserviceaccount.com"
#: No disk type: one type cannot serve both v6e (hyperdisk-balanced) and the L4's G2.
SETTINGS = PoolDefaults(
    service_account=SA,
    labels=(("team", "ml"),),
    tags=("dws-nodes",),
    disk_size_gb=200,
    image_streaming=True,
)
GKE_METADATA = container_v1.WorkloadMetadataConfig.Mode.GKE_METADATA


def carries_the_settings(config: container_v1.NodeConfig) -> None:
    assert config.service_account == SA
    assert list(config.oauth_scopes) == ["https://www.googleapis.com/auth/cloud-platform"]
    assert config.workload_metadata_config.mode == GKE_METADATA
    assert list(config.tags) == ["dws-nodes"]
    assert config.disk_size_gb == 200
    assert config.gcfs_config.enabled
    assert config.labels["team"] == config.resource_labels["team"] == "ml"


@pytest.fixture
def configured_operator(
    devcluster: DevCluster, training_request_crd: str, operator_config: OperatorConfig
) -> Iterator[OperatorThread]:
    config = dataclasses.replace(operator_config, pool_defaults=SETTINGS, pool_idle_seconds=3600.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig) as running:
        yield running


@pytest.mark.usefixtures("configured_operator")
def test_every_created_pool_gets_the_node_settings(scenario: Scenario) -> None:
    gpus = scenario
    tpus = Scenario(scenario.api, scenario.namespace, scenario.emulator)
    gpus.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    tpus.create(tpu("v6e", "2x2"), mode="FlexStart")
    names = {gpus.pool_name, tpus.pool_name}

    def created() -> list[container_v1.NodePool]:
        calls = scenario.emulator.calls_for("CreateNodePool")
        return [c.request.node_pool for c in calls if c.ok and c.request.node_pool.name in names]

    pools = eventually(lambda: created() if len(created()) == 2 else None, what="both pools")
    for pool in pools:
        carries_the_settings(pool.config)
    # GKE keeps them: the emulator's record of each pool, which GetNodePool answers with.
    for name in names:
        kept = scenario.emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/{name}")
        assert kept is not None
        carries_the_settings(kept.config)


@pytest.mark.usefixtures("configured_operator")
def test_a_takeover_keeps_the_extra_labels(scenario: Scenario) -> None:
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    first_pool = scenario.pool_name
    scenario.job()
    scenario.mark_pods("Succeeded", 1)
    scenario.wait_phase("Succeeded")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")

    second = Scenario(scenario.api, scenario.namespace, scenario.emulator)
    second.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(lambda: (second.status().get("nodePool") or {}).get("reused"), what="reused")
    assert second.pool_name == first_pool
    second.job()
    path = f"{DEFAULT_CLUSTER}/nodePools/{first_pool}"
    [relabel] = [
        c.request
        for c in scenario.emulator.calls_for("UpdateNodePool")
        if c.ok and c.request.name == path
    ]
    assert relabel.labels.labels["team"] == relabel.resource_labels.labels["team"] == "ml"
    assert relabel.resource_labels.labels[UID_LABEL] == second.get()["metadata"]["uid"]
    creates = [c for c in scenario.emulator.calls_for("CreateNodePool") if c.ok]
    assert len(creates) == 1  # the same settings, the same shape: reused, not created
    pool = second.pool()
    assert pool.config.labels["team"] == "ml"
    carries_the_settings(pool.config)
