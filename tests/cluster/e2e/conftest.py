"""The whole DWS flow: devcluster + controllers + scheduler + kwok + Kueue + the GKE
emulator with its autoscaler + the operator. Every test here is marked `e2e`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dws_operator.controller import KueueMode, OperatorThread
from dws_workshop.devcluster import DevCluster
from dws_workshop.devcluster.jobset import JobSetManager
from dws_workshop.devcluster.kueue import KueueManager
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ClusterManagerEmulator,
    EmulatorConfig,
    EmulatorThread,
)
from dws_workshop.sandbox.emulated_operator import emulated_config, on_emulator_clock
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import SimScenario
from tests.cluster.namespaces import fresh_namespace
from tests.cluster.operator.harness import Scenario

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def simcluster_e2e(devcluster: DevCluster) -> DevCluster:
    """The worker's one control plane (it runs kwok for the simulation's Nodes)."""
    return devcluster


@pytest.fixture(scope="session")
def e2e_api(api: k8s.ApiClient, training_request_crd: str, third_party: list[str]) -> k8s.ApiClient:
    return api


@pytest.fixture(scope="session")
def e2e_jobset(jobset_controller: JobSetManager) -> JobSetManager:
    """The JobSet controller, which runs the JobSets Kueue admits."""
    return jobset_controller


@pytest.fixture(scope="session")
def e2e_kueue(kueue: KueueManager) -> KueueManager:
    return kueue


@pytest.fixture
def e2e_namespace(e2e_api: k8s.ApiClient) -> Iterator[str]:
    with fresh_namespace(e2e_api, "e2e") as name:
        yield name


Stack = Callable[..., Scenario]


@pytest.fixture
def stack(
    simcluster_e2e: DevCluster,
    e2e_api: k8s.ApiClient,
    e2e_namespace: str,
    e2e_jobset: JobSetManager,
) -> Iterator[Stack]:
    """Starts emulator + autoscaler (with `scenario`) + operator; all stopped afterwards."""
    with contextlib.ExitStack() as resources:

        def start(
            scenario: SimScenario,
            kueue: KueueMode = KueueMode.DISABLED,
            queue: str | None = None,
            queued_queue: str | None = None,
            operator: bool = True,
            cluster: str = DEFAULT_CLUSTER,
            emulator_clock: float | None = None,
        ) -> Scenario:
            """`operator=False`: the test starts (and stops) operators itself, with the
            scenario's `operator_config`. `cluster`: the emulated GKE cluster's path (its
            location decides the zones its pools may use). `emulator_clock`: the
            emulator's simulated clock runs that many times faster (a calendar block's
            days), and the operator (`OperatorTime`) and the autoscaler run on that clock
            too (the scenario's `clock_factor` is then unused)."""
            emulator_config = EmulatorConfig(
                operation_latency_seconds=0.5,
                clusters=[ClusterConfig(name=cluster)],
                clock_factor=emulator_clock or 1.0,
            )
            emulator: ClusterManagerEmulator = resources.enter_context(
                EmulatorThread(emulator_config)
            )
            # On the emulator's clock when the operator decides on it too: the nodes'
            # termination times, flex-start ends and the workloads' progress agree with it.
            autoscaler = resources.enter_context(
                Autoscaler(
                    emulator,
                    simcluster_e2e.kubeconfig,
                    scenario,
                    cluster=cluster,
                    clock=emulator.sim_clock if emulator_clock is not None else None,
                )
            )
            config = emulated_config(
                emulator,
                cluster,
                kueue=kueue,
                default_queue=queue,
                queued_queue=queued_queue,
                # Only this test's namespace: earlier tests' leftovers are not its business.
                namespaces=(e2e_namespace,),
            )
            if emulator_clock is not None:
                # Idle pools wait on the operator's clock, here the emulator's fast one:
                # a day of it keeps them (the tests read them after their request ends).
                config = dataclasses.replace(
                    config, time=on_emulator_clock(emulator), pool_idle_seconds=86400.0
                )
            if operator:
                resources.enter_context(
                    OperatorThread(config, kubeconfig=simcluster_e2e.kubeconfig)
                )
            made = Scenario(e2e_api, e2e_namespace, emulator, cluster)
            made.operator_config = config
            made.operator_kubeconfig = simcluster_e2e.kubeconfig
            made.autoscaler = autoscaler
            return made

        yield start
