"""Kueue-queued GPUs, restarts at every phase, GKE faults and a Spot preemption, on the
virtual clock."""

from __future__ import annotations

from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_workshop.emulator import MethodFaults
from tests.builders import gpu, tpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.requests import pool_of

#: The Job controller's message when a pod's DisruptionTarget condition meets the Job's
#: podFailurePolicy rule (with reason PodFailurePolicy); the operator reads the reason and
#: the condition's name in it. tests/cluster/operator/test_resilience.py has the real Job
#: controller fail the Job so.
DISRUPTED = "Pod {namespace}/{pod} has condition DisruptionTarget matching FailJob rule at index 0"


def test_queued_provisioning_goes_through_kueue() -> None:
    async def scenario(op: VirtualOperator) -> None:
        # The queue exists (a request naming one that does not waits, saying so).
        path = f"/apis/{KUEUE_GROUP}/{KUEUE_API_VERSION}/namespaces/{op.namespace}/localqueues"
        await op.call(
            "POST",
            path,
            {
                "apiVersion": f"{KUEUE_GROUP}/{KUEUE_API_VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": "dws-queue", "namespace": op.namespace},
                "spec": {"clusterQueue": "dws"},
            },
        )
        await op.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxRunDuration": "12h"},
        )
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        assert pool.queued_provisioning.enabled
        assert pool.config.flex_start
        job = await op.job()
        metadata = job["metadata"]
        assert metadata["labels"]["kueue.x-k8s.io/queue-name"] == "dws-queue"
        assert metadata["annotations"]["provreq.kueue.x-k8s.io/maxRunDurationSeconds"] == str(
            12 * 3600
        )
        # Suspended until Kueue admits it: the Job controller makes no pods for it.
        assert job["spec"]["suspend"] is True
        tolerations = {
            (t.get("key"), t.get("value")) for t in job["spec"]["template"]["spec"]["tolerations"]
        }
        assert ("cloud.google.com/gke-queued", "true") in tolerations
        await op.wait_phase("WaitingForCapacity")

    Virtual(kueue=True, settings={"default_queue": "dws-queue"}).run(scenario)


def one_pool_one_job(op: VirtualOperator) -> None:
    assert len(op.created_pools()) == 1, "exactly one pool created"
    assert len(op.jobs()) == 1, "exactly one Job"


def test_restart_in_every_phase_converges(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        await op.wait_phase("Provisioning")
        await op.until(op.created_pools, "CreateNodePool")
        # Killed while GKE is still making the pool (it takes 20 virtual seconds).
        await op.kill()
        pool = await pool_of(op)
        assert op.pool(pool) is not None
        await op.start()
        await op.wait_phase("WaitingForCapacity")
        await op.until(op.jobs, "the Job")
        one_pool_one_job(op)
        await op.kill()
        # An operator that starts and dies before any virtual time passes.
        await op.start()
        await op.restart()
        await op.job_running(4)
        await op.wait_phase("Running")
        one_pool_one_job(op)
        await op.restart()
        await op.job_succeeded()
        await op.wait_phase("Succeeded")
        await op.restart()
        await op.until(lambda: op.at_zero(pool), "the pool at zero")
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        one_pool_one_job(op)
        assert [c.ok for c in op.emulator.calls_for("CreateNodePool")].count(True) == 1
        assert op.starts == 6

    virtual.run(scenario)


def test_unavailable_bursts_end_in_success(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        emulator = op.emulator
        emulator.set_faults(
            "CreateNodePool", MethodFaults(error_rate=0.7, error_code="UNAVAILABLE")
        )
        emulator.set_faults("GetNodePool", MethodFaults(error_rate=0.3, error_code="UNAVAILABLE"))
        await op.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
        pool = await pool_of(op)
        await op.job_succeeded()
        await op.wait_phase("Succeeded")
        emulator.set_faults("GetNodePool", None)
        await op.until(lambda: op.at_zero(pool), "the pool at zero")
        creates = emulator.calls_for("CreateNodePool")
        assert [c.ok for c in creates].count(True) == 1
        assert any(not c.ok for c in creates)  # the faults did refuse some
        assert len(creates) <= 12, f"{len(creates)} CreateNodePool calls"

    virtual.run(scenario)


def test_quota_exceeded_fails_clearly(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        op.emulator.set_quota("nvidia-h100-80gb", 8)
        await op.create(gpu("nvidia-h100-80gb", nodes=4), mode="Spot")
        status = await op.wait_phase("Failed")
        condition = op.condition("Completed")
        assert condition is not None
        assert condition["reason"] == "QuotaExceeded"
        assert "quota" in status["message"].lower()
        assert len(op.emulator.calls_for("CreateNodePool")) == 1  # terminal: not retried
        assert op.jobs() == []
        # The phase change, with the reason in its text: posted after the status write.
        await op.until(lambda: "Failed" in op.events(), "the Failed event")

    virtual.run(scenario)


def test_spot_preemption_restarts_the_workload(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        # Spot: maxRestarts 6.
        await op.create(tpu("v6e", "2x4"), mode="Spot", checkpointDir="gs://b/ckpt")
        pool = await pool_of(op)
        first = await op.job()
        assert first["metadata"]["name"] == op.name
        await op.job_running(2)
        await op.wait_phase("Running")
        # GKE reclaims a Spot VM: its pod fails with DisruptionTarget, and the Job
        # controller fails the Job by its podFailurePolicy.
        pod = f"{op.name}-0-x7k2p"
        await op.job_failed("PodFailurePolicy", DISRUPTED.format(namespace=op.namespace, pod=pod))
        [second] = await op.until(
            lambda: [j for j in op.jobs() if j["metadata"]["name"] == f"{op.name}-r1"],
            "the second attempt's Job",
        )
        [container] = second["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DWS_ATTEMPT"] == "1"
        assert env["DWS_CHECKPOINT_DIR"] == "gs://b/ckpt"
        # The operator deletes the first attempt's Job itself.
        await op.until(lambda: len(op.jobs()) == 1, "the first attempt's Job gone")
        assert op.status()["restarts"] == 1
        await op.until(lambda: "Restarting" in op.events(), "the Restarting event")
        await op.job_succeeded()
        status = await op.wait_phase("Succeeded")
        assert status["restarts"] == 1
        await op.until(lambda: op.at_zero(pool), "the pool at zero")
        assert len(op.created_pools()) == 1

    virtual.run(scenario)
