"""Fixtures for tests against a real control plane (etcd + kube-apiserver + controllers).

Every test in this directory is marked `cluster`: `pytest -m "not cluster"` skips them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster, DevClusterOptions
from dws_workshop.devcluster.crds import install_third_party_crds, install_training_request_crd
from dws_workshop.devcluster.jobset import JobSetManager
from dws_workshop.devcluster.kueue import KueueManager
from dws_workshop.devcluster.stages import kwok_config
from tests.cluster.namespaces import fresh_namespace

HERE = Path(__file__).parent

Kubectl = Callable[..., subprocess.CompletedProcess[str]]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.cluster)


@pytest.fixture(scope="session")
def devcluster() -> Iterator[DevCluster]:
    """The one control plane of this pytest worker, shared by every test here (each in
    namespaces of its own): controllers, and kwok for the simulation's fake Nodes (kwok
    handles only Nodes annotated `kwok.x-k8s.io/node: fake`; others are left alone). A
    control plane per suite directory cost each worker up to four start-ups on two cores."""
    options = DevClusterOptions(controllers=True, kwok=True, stages=kwok_config())
    with DevCluster(options) as cluster:
        print(
            f"\ndevcluster ready in {cluster.startup_seconds:.2f}s at {cluster.server}",
            file=sys.stderr,
        )
        yield cluster


@pytest.fixture(scope="session")
def api(devcluster: DevCluster) -> Iterator[k8s.ApiClient]:
    client = devcluster.api_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def training_request_crd(api: k8s.ApiClient) -> str:
    """Installs the generated TrainingRequest CRD once per session; returns its name."""
    return install_training_request_crd(api)


@pytest.fixture(scope="session")
def third_party(api: k8s.ApiClient) -> list[str]:
    """Kueue's, JobSet's and the ProvisioningRequest CRDs, installed once per session."""
    return install_third_party_crds(api)


@pytest.fixture(scope="session")
def jobset_controller(devcluster: DevCluster, third_party: list[str]) -> Iterator[JobSetManager]:
    """JobSet's controller-manager on the devcluster, started once per session."""
    with JobSetManager(devcluster.kubeconfig) as manager:
        print(f"\njobset controller ready in {manager.startup_seconds:.2f}s", file=sys.stderr)
        yield manager


@pytest.fixture(scope="session")
def kueue(
    devcluster: DevCluster, third_party: list[str], jobset_controller: JobSetManager
) -> Iterator[KueueManager]:
    """The Kueue manager, started once per session after the third-party CRDs (its
    integrations need them served at its start) and with the JobSet controller, which
    runs the JobSets Kueue admits."""
    with KueueManager(devcluster.kubeconfig) as manager:
        print(f"\nkueue ready in {manager.startup_seconds:.2f}s", file=sys.stderr)
        yield manager


@pytest.fixture
def namespace(api: k8s.ApiClient) -> Iterator[str]:
    """A fresh namespace per test, deleted afterwards."""
    with fresh_namespace(api, "t") as name:
        yield name


@pytest.fixture(scope="session")
def kubectl(devcluster: DevCluster) -> Kubectl:
    """Runs the pinned kubectl against the cluster; never raises on a non-zero exit."""

    def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                str(devcluster.binaries["kubectl"]),
                "--kubeconfig",
                str(devcluster.kubeconfig),
                *args,
            ],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run
