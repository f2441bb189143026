"""The real JobSet controller-manager on a control plane with kwok, whose TPU slice nodes
run the JobSets' pods to success or failure. The cluster is this directory's own
(`jobset_cluster`): the shared `devcluster` has no kwok."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster
from dws_workshop.devcluster.jobset import JobSetManager
from tests.cluster.namespaces import fresh_namespace


@pytest.fixture(scope="session")
def jobset_cluster(devcluster: DevCluster) -> DevCluster:
    """The worker's one control plane (its kwok runs the slices' pods)."""
    return devcluster


@pytest.fixture(scope="session")
def jobset_api(api: k8s.ApiClient, third_party: list[str]) -> k8s.ApiClient:
    return api


@pytest.fixture(scope="session")
def jobset_manager(jobset_controller: JobSetManager) -> JobSetManager:
    return jobset_controller


@pytest.fixture
def jobset_namespace(jobset_api: k8s.ApiClient) -> Iterator[str]:
    with fresh_namespace(jobset_api, "js") as name:
        yield name
