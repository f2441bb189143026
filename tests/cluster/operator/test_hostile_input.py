"""Bad and hostile input against the real API server: what it refuses ends the request
clearly and loses nothing; what belongs to someone else is never touched."""

from __future__ import annotations

import dataclasses
from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode, OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import DEFAULT_CLUSTER
from tests.builders import CONTAINER, gpu, tpu
from tests.cluster.operator.harness import Scenario
from tests.gke.harness import rendered
from tests.polling import eventually

POOL_CHANGES = ("DeleteNodePool", "SetNodePoolSize", "SetNodePoolAutoscaling", "UpdateNodePool")


def _template(**container: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{**CONTAINER, **container}]}}


def test_a_pod_template_the_api_server_refuses_fails_the_request(
    operator: OperatorThread, scenario: Scenario
) -> None:
    # The CRD keeps the pod template as the user wrote it; the API server checks it when
    # the Job is created: a port out of range.
    scenario.create(
        gpu("nvidia-l4", nodes=1, count=1),
        mode="Spot",
        template=_template(ports=[{"name": "http", "containerPort": 70000}]),
    )
    status = scenario.wait_phase("Failed")
    condition = scenario.condition("Completed")
    assert condition is not None
    assert condition["reason"] == "WorkloadRejected"
    assert "containerPort" in status["message"]  # the server's message names the field
    assert scenario.jobs() == []
    # It never ran: its pool is deleted, once.
    eventually(lambda: scenario.pool() is None, what="the pool deleted")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")
    assert len(scenario.created_pools()) == 1
    assert len(scenario.emulator.calls_for("DeleteNodePool")) == 1


def test_a_pool_name_that_is_someone_elses_is_never_adopted_nor_touched(
    operator: OperatorThread, scenario: Scenario
) -> None:
    theirs = rendered(gpu("nvidia-l4", nodes=1, count=1), "Spot", name="team-a-l4")
    scenario.emulator_create(theirs)
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot", nodePool={"name": "team-a-l4"})
    status = scenario.wait_phase("Failed")
    assert "team-a-l4" in status["message"]
    assert scenario.jobs() == []
    scenario.delete()
    eventually(lambda: scenario.get() is None, what="the request gone")
    calls = scenario.emulator.calls
    assert not [c for c in calls if c.method in POOL_CHANGES], "their pool was changed"
    left = {pool.name for pool, _ in scenario.emulator.node_pools(DEFAULT_CLUSTER)}
    assert "team-a-l4" in left  # still there, as they made it
    # Theirs was the one create that took: the operator saw the name taken (in its
    # snapshot, or as ALREADY_EXISTS when its snapshot was older than their pool).
    [theirs_made, *ours] = scenario.emulator.calls_for("CreateNodePool")
    assert theirs_made.ok
    assert not [c for c in ours if c.ok]


def test_the_longest_name_admission_allows_runs(
    operator: OperatorThread, scenario: Scenario
) -> None:
    scenario.name = "l" + "o" * 46 + "n"  # 48: metadata.name's limit at admission
    scenario.create(tpu("v6e", "4x4"))  # multi-host: a Service and pod hostnames too
    scenario.wait_phase("WaitingForCapacity")
    [pool] = scenario.created_pools()
    assert len(pool.name) <= 40  # GKE's limit on node pool names
    job = scenario.job()
    assert job.spec.template.spec.subdomain == scenario.service().metadata.name
    assert len(scenario.service().metadata.name) <= 63


def test_a_request_near_the_size_limit_runs(operator: OperatorThread, scenario: Scenario) -> None:
    # ~1 MiB of environment: under etcd's 1.5 MiB, and the Job made from it must fit too.
    env = [{"name": f"BIG_{i:04d}", "value": "v" * 1000} for i in range(1000)]
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot", template=_template(env=env))
    scenario.wait_phase("WaitingForCapacity", timeout=60)
    job = scenario.job()  # made right after the phase is written
    names = [e.name for e in job.spec.template.spec.containers[0].env]
    assert len([n for n in names if n.startswith("BIG_")]) == 1000
    scenario.mark_pods("Succeeded", 1)
    scenario.wait_phase("Succeeded")
    eventually(scenario.at_zero, what="the pool at zero")


def test_a_local_queue_that_does_not_exist_is_said_then_used_once_made(
    devcluster: DevCluster,
    training_request_crd: str,
    third_party: list[str],
    operator_config: OperatorConfig,
    scenario: Scenario,
    api: k8s.ApiClient,
) -> None:
    config = dataclasses.replace(operator_config, kueue=KueueMode.REQUIRED)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot", queueName="team-q")
        condition = eventually(
            lambda: (c := scenario.condition("WorkloadCreated")) and c["status"] == "False" and c,
            what="WorkloadCreated=False",
        )
        assert condition["reason"] == "LocalQueueNotFound"
        assert f"LocalQueue {scenario.namespace}/team-q does not exist" in condition["message"]
        assert scenario.jobs() == []
        scenario.create_local_queue("team-q")
        # The queue's creation wakes the request: its Job is made, in that queue.
        job = scenario.job()
        assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == "team-q"
        assert scenario.condition("WorkloadCreated")["status"] == "True"
