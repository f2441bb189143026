"""Kueue-queued GPUs, restarts at every phase, and GKE faults."""

from __future__ import annotations

import pytest

from dws_operator.controller import KueueMode, OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig, MethodFaults
from tests.builders import gpu, tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


def test_queued_provisioning_goes_through_kueue(
    devcluster: DevCluster,
    training_request_crd: str,
    third_party: list[str],
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = OperatorConfig(
        **{**operator_config.__dict__, "kueue": KueueMode.REQUIRED, "default_queue": "dws-queue"}
    )
    # The queue exists (a request naming one that does not waits, saying so).
    scenario.create_local_queue("dws-queue")
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxRunDuration": "12h"},
        )
        [pool] = eventually(scenario.created_pools, what="CreateNodePool")
        assert pool.queued_provisioning.enabled
        assert pool.config.flex_start
        job = scenario.job()
        assert job.metadata.labels["kueue.x-k8s.io/queue-name"] == "dws-queue"
        assert job.metadata.annotations["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] == str(
            12 * 3600
        )
        assert job.spec.suspend is True
        tolerations = {(t.key, t.value) for t in job.spec.template.spec.tolerations}
        assert ("cloud.google.com/gke-queued", "true") in tolerations
        # Suspended: no pods until Kueue admits it.
        assert scenario.pods() == []
        assert scenario.phase() == "WaitingForCapacity"


def _one_pool_one_job(scenario: Scenario) -> None:
    assert len(scenario.created_pools()) == 1, "exactly one pool created"
    assert len(scenario.jobs()) == 1, "exactly one Job"


@pytest.fixture
def emulator_config() -> EmulatorConfig:
    # Slow enough that the operator can be stopped while the pool is still provisioning.
    return EmulatorConfig(operation_latency_seconds=1.5)


def test_restart_in_every_phase_converges(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    def restart() -> None:
        """A new operator process: nothing remembered but what is in the cluster and GKE."""
        OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig).start().stop()

    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig):
        scenario.create(tpu("v6e", "4x4"))
        scenario.wait_phase("Provisioning")
        # Stopped while GKE is still making the pool (the emulator takes 1.5 s).
        eventually(scenario.created_pools, what="CreateNodePool")
    assert scenario.pool() is not None
    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig):
        scenario.wait_phase("WaitingForCapacity")
        # The pass writes its status before it makes what the status tells of: stopped
        # only once the Job is there (a stop before it is what the next restart covers).
        eventually(scenario.jobs, what="the Job")
    _one_pool_one_job(scenario)
    restart()
    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig):
        scenario.mark_pods("Running", 4)
        scenario.wait_phase("Running")
    _one_pool_one_job(scenario)
    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig):
        scenario.mark_pods("Succeeded", 4)
        scenario.wait_phase("Succeeded")
    with OperatorThread(operator_config, kubeconfig=devcluster.kubeconfig):
        eventually(scenario.at_zero, timeout=15, what="the pool at zero")
        eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")
    _one_pool_one_job(scenario)
    assert [c.ok for c in scenario.emulator.calls_for("CreateNodePool")].count(True) == 1


def test_unavailable_bursts_end_in_success(
    operator: OperatorThread, scenario: Scenario, emulator: ClusterManagerEmulator
) -> None:
    emulator.set_faults("CreateNodePool", MethodFaults(error_rate=0.7, error_code="UNAVAILABLE"))
    emulator.set_faults("GetNodePool", MethodFaults(error_rate=0.3, error_code="UNAVAILABLE"))
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    scenario.job()
    scenario.mark_pods("Succeeded", 1)
    scenario.wait_phase("Succeeded", timeout=60)
    emulator.set_faults("GetNodePool", None)
    eventually(scenario.at_zero, what="the pool at zero")
    creates = emulator.calls_for("CreateNodePool")
    assert [c.ok for c in creates].count(True) == 1
    assert len(creates) <= 12, f"{len(creates)} CreateNodePool calls"


def test_quota_exceeded_fails_clearly(
    operator: OperatorThread, scenario: Scenario, emulator: ClusterManagerEmulator
) -> None:
    emulator.set_quota("nvidia-h100-80gb", 8)
    scenario.create(gpu("nvidia-h100-80gb", nodes=4), mode="Spot")
    status = scenario.wait_phase("Failed")
    condition = scenario.condition("Completed")
    assert condition is not None
    assert condition["reason"] == "QuotaExceeded"
    assert "quota" in status["message"].lower()
    assert len(emulator.calls_for("CreateNodePool")) == 1  # terminal: not retried
    assert scenario.jobs() == []
    # The phase change, with the reason in its text: posted after the status write.
    eventually(lambda: "Failed" in scenario.events(), what="the Failed event")


def test_spot_preemption_restarts_the_workload(
    operator: OperatorThread, scenario: Scenario
) -> None:
    scenario.create(tpu("v6e", "2x4"), mode="Spot", checkpointDir="gs://b/ckpt")  # maxRestarts 6
    first = scenario.job()
    assert first.metadata.name == scenario.name
    scenario.mark_pods("Running", 2, attempt=0)
    scenario.wait_phase("Running")
    scenario.preempt_a_pod()
    second = eventually(
        lambda: [j for j in scenario.jobs() if j.metadata.name == f"{scenario.name}-r1"],
        what="the second attempt's Job",
    )[0]
    env = {e.name: e.value for e in second.spec.template.spec.containers[0].env}
    assert env["DWS_ATTEMPT"] == "1"
    assert env["DWS_CHECKPOINT_DIR"] == "gs://b/ckpt"
    eventually(lambda: len(scenario.jobs()) == 1, what="the first attempt's Job gone")
    assert scenario.status()["restarts"] == 1
    eventually(lambda: "Restarting" in scenario.events(), what="the Restarting event")
    scenario.mark_pods("Succeeded", 2, attempt=1)
    status = scenario.wait_phase("Succeeded")
    assert status["restarts"] == 1
    eventually(scenario.at_zero, timeout=10, what="the pool at zero")
    assert len(scenario.created_pools()) == 1
