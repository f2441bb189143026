"""A request waiting in line for a GKE operation slot: no write held for it beyond its
status, and deleted while it waits, it goes at once and nothing is made for it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.runner import OperatorThread
from dws_operator.devcluster import DevCluster
from dws_operator.emulator import ClusterManagerEmulator, EmulatorConfig
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

FINALIZER = "dws-operator.dev/cleanup"


@pytest.fixture
def emulator_config() -> EmulatorConfig:
    # The first create holds the only slot long enough to look at the one behind it.
    return EmulatorConfig(operation_latency_seconds=4.0)


@pytest.fixture
def one_slot(
    devcluster: DevCluster, training_request_crd: str, operator_config: OperatorConfig
) -> Iterator[OperatorThread]:
    config = dataclasses.replace(operator_config, gke_operation_slots=1)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig) as running:
        yield running


@pytest.mark.usefixtures("one_slot")
def test_deleted_while_waiting_for_a_slot_it_goes_and_no_pool_is_made(
    api: k8s.ApiClient, namespace: str, emulator: ClusterManagerEmulator, scenario: Scenario
) -> None:
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(scenario.created_pools, what="the first request's CreateNodePool")
    behind = Scenario(api, namespace, emulator)
    behind.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(
        lambda: (
            (behind.condition("NodePoolReady") or {}).get("reason") == "WaitingForOperationSlot"
        ),
        what="the second request waiting for the slot",
    )
    waiting = behind.get()
    assert waiting is not None
    # Nothing made for it yet: nothing to clean up, so nothing holds its deletion.
    assert FINALIZER not in (waiting["metadata"].get("finalizers") or [])
    first = scenario.get()
    assert first is not None
    assert FINALIZER in first["metadata"]["finalizers"]

    behind_pool = behind.pool_name
    behind.delete()
    eventually(lambda: behind.get() is None, what="the waiting request gone")
    # Creates go in request order: once a later request's create has run, the deleted
    # one's would have run before it, had it not been called off.
    later = Scenario(api, namespace, emulator)
    later.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(later.created_pools, timeout=30, what="a later request's CreateNodePool")
    made = [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")]
    assert behind_pool not in made
    assert made == [scenario.pool_name, later.pool_name]
