"""Capacity ladders on the virtual clock: a step that gets no capacity hands over to the
next, its pool and workload go, and the request runs on the step that has capacity.
The test is GKE's autoscaler: a step's pool that never gets nodes is a stocked-out step."""

from __future__ import annotations

from dws_operator.kueue_objects import LOCAL_QUEUE, QUEUED_LOCAL_QUEUE
from dws_operator.workload import QUEUE_LABEL
from dws_workshop.emulator import MethodFaults
from tests.builders import gpu, tpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.kueue_steps import Kueue, QueuedVirtual
from tests.virtual.ladder_steps import attempts, job_named, lasted, step_pool


def test_tpu_ladder_moves_to_the_zone_with_capacity(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(
            tpu("v6e", "4x4"),
            provisioning={
                "zones": ["us-east5-a"],
                "maxWaitDuration": "10m",
                "fallback": [
                    {"mode": "FlexStart", "zones": ["us-east5-b"], "maxWaitDuration": "1h"}
                ],
            },
        )
        first = await step_pool(op, 1)
        await op.until(lambda: first in op.pool_names(), "step 1's pool")
        assert op.status()["step"] == 1
        # us-east5-a is stocked out: step 1's pool never gets a node.
        second = await step_pool(op, 2, every=5)
        assert second == f"{first}-f1"
        ended = attempts(op)[0]
        assert ended["outcome"] == "TimedOut"
        await op.until(lambda: first not in op.pool_names(), "step 1's pool gone")
        # us-east5-b has the slice three minutes after step 2's pods wait for it.
        await op.until(lambda: second in op.pool_names(), "step 2's pool")
        job = await op.job()
        assert job["metadata"]["name"] == f"{op.name}-r1"
        await op.sleep(180)
        await op.nodes_up(second, 4)
        await op.job_running(4)
        await op.wait_phase("Running")
        await op.job_succeeded()
        status = await op.wait_phase("Succeeded")
        assert status["step"] == 2
        assert [(a["step"], a["mode"], a["zones"], a["outcome"]) for a in status["attempts"]] == [
            (1, "FlexStart", ["us-east5-a"], "TimedOut"),
            (2, "FlexStart", ["us-east5-b"], "Provisioned"),
        ]
        assert status["attempts"][0]["nodePool"] == first
        assert status["attempts"][1]["nodePool"] == second
        assert status["attempts"][0]["endedAt"] <= status["attempts"][1]["startedAt"]
        # Step 1 ended when its wait ran out: ten minutes, and the pass a moment after.
        assert 600 < lasted(status["attempts"][0]) <= 602
        [created] = [p for p in op.created_pools() if p.name == second]
        assert list(created.locations) == ["us-east5-b"]
        # The pool is resized to zero once the Job is done, and its Nodes go (GKE's part).
        await op.nodes_up(second, 0)
        await op.until(lambda: op.at_zero(second), "step 2 at zero")
        pool = op.pool(second)
        assert pool is not None
        # Resized to zero, never capped: GKE checks a slice pool's maximum against the slice.
        assert pool.autoscaling.max_node_count == 4
        assert first not in op.pool_names()
        events = op.events()
        assert events.count("StepStarted") == 2
        assert events.count("StepEnded") == 1
        assert sorted(p.name for p in op.created_pools()) == [first, second]

    virtual.run(scenario)


def test_operator_killed_during_a_step_change_resumes_on_the_new_step(virtual: Virtual) -> None:
    """The first operator records step 2 but cannot remove step 1's pool (GKE refuses the
    delete for now) before it is killed; the next one goes on with step 2 and removes
    step 1's pool, which nothing may use any more."""

    async def scenario(op: VirtualOperator) -> None:
        emulator = op.emulator
        await op.create(
            tpu("v6e", "4x4"),
            provisioning={
                "zones": ["us-east5-a"],
                "maxWaitDuration": "10m",
                "fallback": [
                    {"mode": "FlexStart", "zones": ["us-east5-b"], "maxWaitDuration": "1h"}
                ],
            },
        )
        first = await step_pool(op, 1)
        await op.until(lambda: first in op.pool_names(), "step 1's pool")
        emulator.set_faults("DeleteNodePool", MethodFaults(error_rate=1.0))

        def refused() -> bool:
            return any(
                c.request.name.endswith(f"/nodePools/{first}") and not c.ok
                for c in emulator.calls_for("DeleteNodePool")
            )

        await op.until(lambda: op.status().get("step") == 2, "step 2", step=5)
        await op.until(refused, "a refused delete of step 1's pool")
        await op.kill()
        # The operator is gone; step 1's pool is still there.
        assert first in op.pool_names()
        emulator.set_faults("DeleteNodePool", None)
        await op.sleep(30)
        await op.start()
        started = op.now()
        await op.until(lambda: first not in op.pool_names(), "step 1's pool gone")
        # At once: the new operator's first pass asks, and GKE's delete takes 20 s here.
        assert op.now() - started <= 25
        second = f"{first}-f1"
        await op.until(lambda: second in op.pool_names(), "step 2's pool")
        await op.sleep(60)
        await op.nodes_up(second, 4)
        await op.job_running(4)
        await op.job_succeeded()
        status = await op.wait_phase("Succeeded")
        assert status["step"] == 2
        assert [(a["step"], a["outcome"]) for a in status["attempts"]] == [
            (1, "TimedOut"),
            (2, "Provisioned"),
        ]
        # Each pool asked for once: the new operator made nothing of step 1 again.
        creates = [c.request.node_pool.name for c in emulator.calls_for("CreateNodePool")]
        assert sorted(creates) == sorted([first, second])
        deleted = [
            c.request.name.rsplit("/", 1)[-1] for c in emulator.calls_for("DeleteNodePool") if c.ok
        ]
        assert deleted == [first]
        assert [j["metadata"]["name"] for j in op.jobs()] == [f"{op.name}-r1"]

    virtual.run(scenario)


def test_gpu_ladder_ends_on_the_step_with_capacity() -> None:
    """QueuedProvisioning -> Spot -> OnDemand, where only on-demand VMs are to be had."""

    async def scenario(op: VirtualOperator) -> None:
        kueue = Kueue(op)
        await kueue.queues()
        await op.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={
                "maxWaitDuration": "30m",
                "fallback": [{"mode": "Spot"}, {"mode": "OnDemand", "maxWaitDuration": "1h"}],
            },
        )
        # Step 1 asks through the queue whose ClusterQueue has the ProvisioningRequest
        # check: Kueue's ProvisioningRequest is Accepted and never provisioned.
        first = await job_named(op, op.name)
        assert first["metadata"]["labels"][QUEUE_LABEL] == QUEUED_LOCAL_QUEUE
        await kueue.provisioning_request(await kueue.workload(first))
        # Steps 2 and 3 through the queue without it: no Spot H100 comes either.
        # Kueue makes each Workload within seconds of its Job.
        second = await job_named(op, f"{op.name}-r1", step=5)
        assert second["metadata"]["labels"][QUEUE_LABEL] == LOCAL_QUEUE
        await kueue.workload(second)
        third = await job_named(op, f"{op.name}-r2", step=5)
        assert third["metadata"]["labels"][QUEUE_LABEL] == LOCAL_QUEUE
        await kueue.workload(third)
        pools = [a["nodePool"] for a in attempts(op)]
        assert len(pools) == 3
        await op.until(lambda: pools[2] in op.pool_names(), "step 3's pool")
        await op.nodes_up(pools[2], 2)
        await op.job_running(2)
        await op.wait_phase("Running")
        await op.job_succeeded()
        status = await op.wait_phase("Succeeded")
        assert [(a["step"], a["mode"], a["outcome"]) for a in status["attempts"]] == [
            (1, "QueuedProvisioning", "TimedOut"),
            (2, "Spot", "TimedOut"),
            (3, "OnDemand", "Provisioned"),
        ]
        # Steps 1 and 2 each waited the request's maxWaitDuration (and a pass after it).
        assert all(1800 < lasted(a) <= 1802 for a in status["attempts"][:2])
        # Each step's pool of its kind of VMs.
        made = {p.name: p for p in op.created_pools()}
        assert sorted(made) == sorted(pools)
        assert made[pools[0]].queued_provisioning.enabled
        assert made[pools[1]].config.spot
        assert not made[pools[2]].queued_provisioning.enabled
        assert not made[pools[2]].config.spot
        # Nothing of steps 1 and 2 is left: no Job, no pool.
        assert status["job"]["name"] == f"{op.name}-r2"
        assert [j["metadata"]["name"] for j in op.jobs()] == [f"{op.name}-r2"]
        await op.until(lambda: not set(pools[:2]) & op.pool_names(), "steps 1-2 pools gone")
        assert pools[2] in op.pool_names()
        await op.nodes_up(pools[2], 0)
        await op.until(lambda: op.at_zero(pools[2]), "step 3 at zero")

    QueuedVirtual().run(scenario)
