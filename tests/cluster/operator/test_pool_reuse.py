"""Pool reuse: a finished request's pool, at zero, serves the next request of its shape
(an update, not a create), one request at a time; idle pools go after their time; a
takeover cut short by a restart is finished, never doubled."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller import OperatorConfig, OperatorThread
from dws_operator.gke.labels import UID_LABEL
from dws_operator.gke.shapes import SHAPE_LABEL
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator
from tests.builders import gpu, tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

L4 = gpu("nvidia-l4", nodes=1, count=1)


def finish(scenario: Scenario) -> None:
    """The request's pods succeed; wait until its pool is back at zero."""
    scenario.job()
    scenario.mark_pods("Succeeded", 1)
    scenario.wait_phase("Succeeded")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")


def another(scenario: Scenario) -> Scenario:
    return Scenario(scenario.api, scenario.namespace, scenario.emulator)


def updates(emulator: ClusterManagerEmulator, pool: str) -> list[str]:
    path = f"{DEFAULT_CLUSTER}/nodePools/{pool}"
    return [
        c.method
        for c in emulator.calls
        if c.ok
        and c.method in ("UpdateNodePool", "SetNodePoolAutoscaling")
        and c.request.name == path
    ]


@pytest.fixture
def reuse_operator(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
) -> Iterator[OperatorThread]:
    config = dataclasses.replace(operator_config, pool_idle_seconds=3600.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig) as running:
        yield running


def writes_per_pass(operator: OperatorThread) -> tuple[float, float, float]:
    """Passes that wrote no status, one status and more than one, as the operator's
    `dws_reconcile_status_writes` histogram counts them. Its buckets are read in one
    collection: the operator goes on passing while the test reads, and a count read
    apart from its buckets can be behind them."""
    buckets = {
        sample.labels["le"]: sample.value
        for metric in operator.metrics.registry.collect()
        if metric.name == "dws_reconcile_status_writes"
        for sample in metric.samples
        if sample.name.endswith("_bucket")
    }
    none, at_most_one, total = buckets["0.0"], buckets["1.0"], buckets["+Inf"]
    return none, at_most_one - none, total - at_most_one


def test_the_next_request_of_a_shape_takes_the_idle_pool_over(
    scenario: Scenario, reuse_operator: OperatorThread
) -> None:
    scenario.create(L4, mode="Spot")
    first_pool = scenario.pool_name
    finish(scenario)
    assert scenario.at_zero()
    label = scenario.pool().config.resource_labels[SHAPE_LABEL]

    second = another(scenario)
    second.create(L4, mode="Spot")
    eventually(lambda: (second.status().get("nodePool") or {}).get("reused"), what="a reused pool")
    assert second.pool_name == first_pool
    job = second.job()  # the pool is ready for it again
    assert job.spec.template.spec.node_selector["cloud.google.com/gke-nodepool"] == first_pool
    pool = second.pool()
    assert pool.config.resource_labels[UID_LABEL] == second.get()["metadata"]["uid"]
    assert pool.config.resource_labels[SHAPE_LABEL] == label
    assert second.pool_max() == 1
    creates = [c for c in scenario.emulator.calls_for("CreateNodePool") if c.ok]
    assert len(creates) == 1  # the second request created nothing
    # An update (labels, then ceiling) after the first request's two scale-down calls.
    assert updates(scenario.emulator, first_pool)[-2:] == [
        "UpdateNodePool",
        "SetNodePoolAutoscaling",
    ]
    assert second.condition("NodePoolReady")["status"] == "True"

    finish(second)
    assert second.at_zero()
    # Binding the idle pool was a pass's decision like any other: one status write.
    none, one, more = writes_per_pass(reuse_operator)
    assert (one >= 10, more) == (True, 0)
    assert none > 0  # passes that changed nothing wrote nothing
    # The first request, finished long ago, leaves the pool to its new holder.
    scenario.delete()
    eventually(lambda: scenario.get() is None, what="the first request gone")
    assert second.pool() is not None


@pytest.mark.usefixtures("reuse_operator")
def test_a_pool_serves_one_request_at_a_time(scenario: Scenario) -> None:
    scenario.create(L4, mode="Spot")
    finish(scenario)
    b, c = another(scenario), another(scenario)
    b.create(L4, mode="Spot")
    c.create(L4, mode="Spot")
    b.job()
    c.job()
    pools = {b.pool_name, c.pool_name}
    assert len(pools) == 2, pools
    assert scenario.pool_name in pools
    creates = [c for c in scenario.emulator.calls_for("CreateNodePool") if c.ok]
    assert len(creates) == 2  # one for the first request, one for whichever found none


def test_a_takeover_cut_short_by_a_restart_is_finished(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = dataclasses.replace(operator_config, pool_idle_seconds=3600.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(L4, mode="Spot")
        finish(scenario)
    idle = scenario.pool_name
    # The operator stopped right after it wrote the binding, before any GKE call: the
    # state a crash between the two leaves.
    second = another(scenario)
    second.create(L4, mode="Spot")
    second.objects.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        second.namespace,
        PLURAL,
        second.name,
        {"status": {"nodePool": {"name": idle, "managed": True, "reused": True}}},
    )
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        second.job()
        assert second.pool_name == idle
        assert second.pool_max() == 1
        assert second.pool().config.resource_labels[UID_LABEL] == second.get()["metadata"]["uid"]
    creates = [c for c in scenario.emulator.calls_for("CreateNodePool") if c.ok]
    assert len(creates) == 1


def test_an_idle_pool_is_deleted_after_its_time(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = dataclasses.replace(operator_config, pool_idle_seconds=2.0, gke_refresh_seconds=1.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(L4, mode="Spot")
        finish(scenario)
        eventually(lambda: scenario.pool() is None, what="the idle pool deleted")
        assert scenario.phase() == "Succeeded"


def test_no_reuse_when_turned_off(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = dataclasses.replace(operator_config, pool_idle_seconds=0.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(L4, mode="Spot")
        finish(scenario)
        second = another(scenario)
        second.create(L4, mode="Spot")
        second.job()
        assert second.pool_name != scenario.pool_name
        assert scenario.at_zero()  # kept at zero, not deleted


SLICE = tpu("v6e", "2x4")  # a multi-host slice: 2 VMs, one zone, never capped


@pytest.mark.usefixtures("reuse_operator")
def test_a_tpu_slice_pool_is_taken_over_after_its_scale_down(scenario: Scenario) -> None:
    scenario.create(SLICE, mode="Spot")
    scenario.job()
    scenario.mark_pods("Succeeded", 2)
    scenario.wait_phase("Succeeded")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")
    first_pool = scenario.pool_name
    second = another(scenario)
    second.create(SLICE, mode="Spot")
    eventually(lambda: (second.status().get("nodePool") or {}).get("reused"), what="a reused pool")
    assert second.pool_name == first_pool
    second.job()  # the pool is ready for it again: relabelled, then the workload made
    assert second.pool().config.resource_labels[UID_LABEL] == second.get()["metadata"]["uid"]
    assert len([c for c in scenario.emulator.calls_for("CreateNodePool") if c.ok]) == 1
    # Its bounds were the slice's all along: never capped at zero, by either request.
    assert second.pool_max() == 2
    for call in scenario.emulator.calls_for("SetNodePoolAutoscaling"):
        assert call.request.autoscaling.max_node_count == 2, call.request


@pytest.mark.usefixtures("reuse_operator")
def test_a_kept_tpu_slice_pool_stays_its_requests(scenario: Scenario) -> None:
    scenario.create(SLICE, mode="Spot", nodePool={"cleanup": "Keep"})
    scenario.job()
    scenario.mark_pods("Succeeded", 2)
    scenario.wait_phase("Succeeded")
    kept = scenario.pool_name
    # No Node and its holder finished, but `Keep` never scaled it down: not idle.
    assert scenario.pool_nodes(kept) == 0
    assert scenario.status().get("scaledDownAt") is None
    second = another(scenario)
    second.create(SLICE, mode="Spot")
    second.job()
    assert second.pool_name != kept
    assert (second.status().get("nodePool") or {}).get("reused") is None
    assert scenario.pool() is not None
    assert scenario.pool().config.resource_labels[UID_LABEL] == scenario.get()["metadata"]["uid"]
