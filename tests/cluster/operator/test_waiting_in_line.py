"""A request waiting in line for a GKE operation slot: no write held for it beyond its
status until it is next, and deleted while it waits, it goes and nothing is made for it."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.runner import OperatorThread
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, EmulatorThread
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.gke.harness import HeldClock
from tests.polling import eventually

FINALIZER = "dws-operator.dev/cleanup"


@pytest.fixture
def clock() -> HeldClock:
    return HeldClock()


@pytest.fixture
def emulator(emulator_config: EmulatorConfig, clock: HeldClock) -> Iterator[ClusterManagerEmulator]:
    with EmulatorThread(emulator_config, clock=clock) as served:
        yield served


@pytest.fixture
def one_slot(
    devcluster: DevCluster, training_request_crd: str, operator_config: OperatorConfig
) -> Iterator[OperatorThread]:
    config = dataclasses.replace(operator_config, gke_operation_slots=1)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig) as running:
        yield running


@pytest.mark.usefixtures("one_slot")
def test_deleted_while_waiting_for_a_slot_it_goes_and_no_pool_is_made(
    api: k8s.ApiClient,
    namespace: str,
    emulator: ClusterManagerEmulator,
    scenario: Scenario,
    clock: HeldClock,
) -> None:
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(scenario.created_pools, what="the first request's CreateNodePool")

    def queued(position: int, who: str) -> Scenario:
        """A new request, once its status says it waits at `position` in line."""
        request = Scenario(api, namespace, emulator)
        request.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
        waiting = f"waiting for a GKE operation slot, position {position} in line"
        eventually(
            lambda: (
                (request.condition("NodePoolReady") or {}).get("message", "").startswith(waiting)
            ),
            what=who,
        )
        return request

    next_in_line = queued(1, "the second request next in line")
    behind = queued(2, "the third request behind it")
    first = scenario.get()
    assert first is not None
    assert FINALIZER in first["metadata"]["finalizers"]
    # The one next in line is held already (so the slot goes straight to its create);
    # the one behind costs no write: nothing made for it, nothing holds its deletion.
    eventually(
        lambda: (
            FINALIZER in ((next_in_line.get() or {}).get("metadata", {}).get("finalizers") or [])
        ),
        what="the request next in line held",
    )
    waiting = behind.get()
    assert waiting is not None
    assert FINALIZER not in (waiting["metadata"].get("finalizers") or [])

    called_off = [next_in_line.pool_name, behind.pool_name]
    behind.delete()
    next_in_line.delete()
    eventually(lambda: behind.get() is None, what="the request behind gone")
    # The one held: its create called off by the operator, then let go.
    eventually(lambda: next_in_line.get() is None, what="the request next in line gone")
    clock.release()  # the first create ends: its slot goes to whoever is next
    # Creates go in request order: once a later request's create has run, the deleted
    # ones' would have run before it, had they not been called off.
    later = Scenario(api, namespace, emulator)
    later.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(later.created_pools, what="a later request's CreateNodePool")
    made = [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")]
    assert not set(called_off) & set(made)
    assert made == [scenario.pool_name, later.pool_name]
