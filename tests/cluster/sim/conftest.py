"""A control plane with kwok (running the simulation's Stages), the GKE emulator and its
autoscaler. The cluster is this directory's own (`simcluster`), apart from `devcluster`."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster, DevClusterOptions
from dws_workshop.devcluster.crds import install_third_party_crds
from dws_workshop.devcluster.stages import kwok_config
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, EmulatorThread
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import SimScenario
from tests.cluster.namespaces import fresh_namespace
from tests.cluster.sim.harness import Sim

StartAutoscaler = Callable[[SimScenario], Autoscaler]


@pytest.fixture(scope="session")
def simcluster() -> Iterator[DevCluster]:
    options = DevClusterOptions(controllers=True, kwok=True, stages=kwok_config())
    with DevCluster(options) as cluster:
        print(
            f"\nsimcluster ready in {cluster.startup_seconds:.2f}s at {cluster.server}",
            file=sys.stderr,
        )
        yield cluster


@pytest.fixture(scope="session")
def sim_api(simcluster: DevCluster) -> Iterator[k8s.ApiClient]:
    client = simcluster.api_client()
    install_third_party_crds(client)
    yield client
    client.close()


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

    def start(scenario: SimScenario) -> Autoscaler:
        autoscaler = Autoscaler(sim_emulator, simcluster.kubeconfig, scenario, interval=0.1)
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
