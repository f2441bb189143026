"""No node pool outlives its request: a create GKE carried out but whose answer was lost,
then the request deleted before any listing showed the pool."""

from __future__ import annotations

import contextlib
import dataclasses

from kubernetes import client as k8s

from dws_operator.controller import OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import ClusterManagerEmulator, MethodFaults
from tests.builders import gpu
from tests.cluster.namespaces import let_go
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually, never


def test_a_deleted_request_lets_go_only_once_gke_says_its_pool_is_gone(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
    emulator: ClusterManagerEmulator,
) -> None:
    # No listing of its own during the test: only what the operator asks GKE shows it.
    config = dataclasses.replace(operator_config, gke_refresh_seconds=3600.0)
    # GKE makes the pool but the answer is lost; every retry after that fails without
    # being carried out, so only the first call made the pool.
    emulator.set_faults("CreateNodePool", MethodFaults(lost_answers=1, error_rate=1.0))
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
        lost = eventually(
            lambda: next(iter(emulator.calls_for("CreateNodePool")), None),
            what="a create carried out whose answer was lost",
        )
        assert lost.code.name == "DEADLINE_EXCEEDED"
        pool = str(lost.request.node_pool.name)
        assert pool in scenario.pool_names()
        scenario.delete()
        eventually(lambda: scenario.get() is None, what="the request gone")
        # Gone only after its pool: the operator asked GKE before it let go.
        assert pool not in scenario.pool_names()
        deletes = [c.request.name for c in emulator.calls_for("DeleteNodePool") if c.ok]
        assert [name.rsplit("/", 1)[-1] for name in deletes] == [pool]


def orphaned_pools(operator: OperatorThread) -> float:
    [value] = [
        sample.value
        for metric in operator.metrics.registry.collect()
        if metric.name == "dws_orphaned_node_pools"
        for sample in metric.samples
    ]
    return value


def test_an_orphaned_pool_is_counted_and_deleted_once_it_has_no_node(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = dataclasses.replace(operator_config, gke_refresh_seconds=1.0, orphan_grace_seconds=1.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
        eventually(scenario.created_pools, what="the pool")
        eventually(lambda: scenario.pool() is not None, what="the pool in GKE")
    pool = scenario.pool_name
    # What a crash or an impatient admin leaves: the request forced out (its finalizer
    # taken off) while no operator ran, its pool still up (ceiling above zero), a Node on it.
    core = scenario.core
    core.create_node(
        {"metadata": {"name": pool, "labels": {"cloud.google.com/gke-nodepool": pool}}}
    )
    try:
        assert let_go(scenario.api, scenario.namespace) == 1
        scenario.delete()
        eventually(lambda: scenario.get() is None, what="the request gone")
        with OperatorThread(config, kubeconfig=devcluster.kubeconfig) as operator:
            eventually(lambda: orphaned_pools(operator) == 1, what="the orphan counted")
            # Not while a Node is on it: something may still run there.
            never(lambda: pool not in scenario.pool_names(), 4.0, "deleted under its Node")
            core.delete_node(pool)
            eventually(lambda: pool not in scenario.pool_names(), what="the orphan deleted")
            eventually(lambda: orphaned_pools(operator) == 0, what="no orphan left")
    finally:
        with contextlib.suppress(k8s.ApiException):
            core.delete_node(pool)
