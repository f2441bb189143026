from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dws_operator.controller import KueueMode, OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, EmulatorThread
from tests.cluster.operator.harness import Scenario


@pytest.fixture(autouse=True)
def operator_log(caplog: pytest.LogCaptureFixture) -> None:
    """The operator's own log lines (each action, each phase change) are shown with a
    failed test: what it did is the first thing to read."""
    caplog.set_level(logging.INFO, logger="dws_operator")


@pytest.fixture
def emulator_config() -> EmulatorConfig:
    return EmulatorConfig(operation_latency_seconds=0.3)


@pytest.fixture
def emulator(emulator_config: EmulatorConfig) -> Iterator[ClusterManagerEmulator]:
    with EmulatorThread(emulator_config) as served:
        yield served


@pytest.fixture
def operator_config(emulator: ClusterManagerEmulator, namespace: str) -> OperatorConfig:
    return OperatorConfig(
        project="dws-sandbox",
        location="us-east5",
        cluster="sandbox",
        gke_endpoint=emulator.endpoint,
        compute_endpoint=emulator.compute_endpoint,
        kueue=KueueMode.DISABLED,
        # Only this test's namespace: earlier tests' leftovers are not its business.
        namespaces=(namespace,),
    )


@pytest.fixture
def operator(
    devcluster: DevCluster, training_request_crd: str, operator_config: OperatorConfig
) -> Iterator[OperatorThread]:
    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig) as running:
        yield running


@pytest.fixture
def scenario(api: k8s.ApiClient, namespace: str, emulator: ClusterManagerEmulator) -> Scenario:
    return Scenario(api, namespace, emulator)
