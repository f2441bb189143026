"""A TrainingRequest from creation to a pool scaled to zero, on the virtual clock."""

from __future__ import annotations

from tests.builders import tpu
from tests.virtual.harness import Virtual, VirtualOperator


def test_tpu_slice_runs_and_its_pool_goes_to_zero(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        [pool] = await op.until(op.created_pools, "CreateNodePool")
        assert pool.config.flex_start
        assert list(pool.locations) == ["us-east5-a"]
        job = await op.job()
        assert job["spec"]["completions"] == 4
        await op.wait_phase("WaitingForCapacity")
        await op.nodes_up(op.pool_name, 4)
        await op.job_running(4)
        status = await op.wait_phase("Running")
        assert status["startedAt"]
        await op.job_succeeded()
        finished = op.now()
        await op.wait_phase("Succeeded")
        await op.nodes_up(op.pool_name, 0)
        await op.until(lambda: op.at_zero(op.pool_name), "the pool at zero")
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        assert op.now() - finished < 60
        assert op.condition("ScaledDown")["status"] == "True"
        told = {"Provisioning", "WaitingForCapacity", "Running", "Succeeded", "ScaledToZero"}
        await op.until(lambda: told <= set(op.events()), f"the events {sorted(told)}")
        assert len(op.created_pools()) == 1

    virtual.run(scenario)


def test_an_operator_killed_while_its_pool_is_made_makes_no_second_one(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        await op.until(op.created_pools, "CreateNodePool")
        # Killed while GKE's operation runs (it takes 20 virtual seconds here).
        await op.kill()
        await op.sleep(5)
        await op.start()
        await op.wait_phase("WaitingForCapacity")
        await op.nodes_up(op.pool_name, 4)
        await op.job_running(4)
        await op.wait_phase("Running")
        # Not even asked for twice: the new operator found GKE making it.
        assert len(op.emulator.calls_for("CreateNodePool")) == 1
        assert len(op.jobs()) == 1
        assert op.starts == 2

    virtual.run(scenario)


def test_a_request_deleted_while_running_lets_go_only_once_its_pool_is_gone(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(tpu("v6e", "4x4"))
        await op.wait_phase("WaitingForCapacity")
        pool = op.pool_name
        await op.nodes_up(pool, 4)
        await op.job_running(4)
        await op.wait_phase("Running")
        assert "dws-operator.dev/cleanup" in (op.get() or {})["metadata"]["finalizers"]
        await op.delete()
        # Held by the finalizer while the pool goes.
        await op.sleep(1)
        assert op.get() is not None
        await op.until(lambda: pool not in op.pool_names(), "the pool deleted")
        await op.until(lambda: op.get() is None, "the request gone")
        assert op.emulator.calls_for("DeleteNodePool")

    virtual.run(scenario)
