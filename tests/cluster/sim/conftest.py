"""A control plane with kwok (running the simulation's Stages), the GKE emulator and its
autoscaler. The cluster is this directory's own (`simcluster`), apart from `devcluster`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, EmulatorThread
from dws_workshop.emulator.clock import SimClock
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import SimScenario
from tests.cluster.namespaces import fresh_namespace
from tests.cluster.sim.harness import Sim


class StartAutoscaler(Protocol):
    """Starts an autoscaler with `scenario`, on `clock` when given (else its own)."""

    def __call__(self, scenario: SimScenario, clock: SimClock | None = None) -> Autoscaler: ...


@pytest.fixture(scope="session")
def simcluster(devcluster: DevCluster) -> DevCluster:
    """The worker's one control plane (it runs kwok for the simulation's Nodes)."""
    return devcluster


@pytest.fixture(scope="session")
def sim_api(api: k8s.ApiClient, third_party: list[str]) -> k8s.ApiClient:
    return api


@pytest.fixture
def sim_namespace(sim_api: k8s.ApiClient) -> Iterator[str]:
    with fresh_namespace(sim_api, "s") as name:
        yield name


@pytest.fixture
def sim_emulator() -> Iterator[ClusterManagerEmulator]:
    with EmulatorThread(EmulatorConfig(operation_latency_seconds=0.05)) as served:
        yield served


@pytest.fixture
def start_autoscaler(
    simcluster: DevCluster, sim_emulator: ClusterManagerEmulator
) -> Iterator[StartAutoscaler]:
    """Starts the autoscaler with a scenario; stops it (deleting its nodes) afterwards,
    and fails the test if any of its passes raised."""
    running: list[Autoscaler] = []

    def start(scenario: SimScenario, clock: SimClock | None = None) -> Autoscaler:
        autoscaler = Autoscaler(
            sim_emulator, simcluster.kubeconfig, scenario, interval=0.1, clock=clock
        )
        autoscaler.start()
        running.append(autoscaler)
        return autoscaler

    yield start
    for autoscaler in running:
        autoscaler.stop()
    errors = [e for a in running for e in a.errors]
    assert not errors, errors


@pytest.fixture
def sim(sim_api: k8s.ApiClient, sim_namespace: str, sim_emulator: ClusterManagerEmulator) -> Sim:
    return Sim(sim_api, sim_namespace, sim_emulator)
