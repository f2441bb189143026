"""The real JobSet controller-manager on a control plane with kwok, whose TPU slice nodes
run the JobSets' pods to success or failure. The cluster is this directory's own
(`jobset_cluster`): the shared `devcluster` has no kwok."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster, DevClusterOptions
from dws_workshop.devcluster.crds import install_third_party_crds
from dws_workshop.devcluster.jobset import JobSetManager
from dws_workshop.devcluster.stages import kwok_config
from tests.cluster.namespaces import fresh_namespace


@pytest.fixture(scope="session")
def jobset_cluster() -> Iterator[DevCluster]:
    options = DevClusterOptions(controllers=True, kwok=True, stages=kwok_config())
    with DevCluster(options) as cluster:
        print(f"\njobset cluster ready in {cluster.startup_seconds:.2f}s", file=sys.stderr)
        yield cluster


@pytest.fixture(scope="session")
def jobset_api(jobset_cluster: DevCluster) -> Iterator[k8s.ApiClient]:
    client = jobset_cluster.api_client()
    install_third_party_crds(client, kinds=("jobset",))
    yield client
    client.close()


@pytest.fixture(scope="session")
def jobset_manager(
    jobset_cluster: DevCluster, jobset_api: k8s.ApiClient
) -> Iterator[JobSetManager]:
    with JobSetManager(jobset_cluster.kubeconfig) as manager:
        print(f"\njobset controller ready in {manager.startup_seconds:.2f}s", file=sys.stderr)
        yield manager


@pytest.fixture
def jobset_namespace(jobset_api: k8s.ApiClient) -> Iterator[str]:
    with fresh_namespace(jobset_api, "js") as name:
        yield name
