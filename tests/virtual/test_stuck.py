"""Requests that stop making progress, on the virtual clock: a queued request whose
ProvisioningRequest sticks (Accepted, never provisioned, as kueue#3245 and
autoscaler#9490 report) waits out its maxWaitDuration without the guard, and with it is
asked for again once stuck; one whose pool is deleted under it gets its pool made again;
a workload Kueue gives up on is asked for again, then the ladder moves on; a flex-start
pool stuck at zero is made again. The test stands in for Kueue and GKE's answers to its
ProvisioningRequests (tests/virtual/kueue_steps.py) and for the autoscaler.

The guard's threshold is half an hour here (DWS_STUCK_AFTER_SECONDS, 4 h by default): a
virtual hour of waiting is 360 of the operator's ListNodePools (one every 10 s), each a
turn of the loop. Its recoveries are at their default (DWS_MAX_RECOVERIES, 2)."""

from __future__ import annotations

from typing import Any

from google.cloud import container_v1

from dws_operator import rfc3339
from dws_operator.controller.provreqs import PROVREQ_GROUP
from dws_operator.reconcile.decision import MAX_RECOVERIES
from tests.builders import gpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.kueue_steps import REJECTED, Kueue, QueuedVirtual
from tests.virtual.ladder_steps import event_messages, job_named
from tests.virtual.requests import pool_of

H100S = gpu("nvidia-h100-80gb", nodes=2)
HOUR = 3600.0
#: How often a test looks while hours pass: Kueue and GKE answer within this.
MINUTE = 60.0
#: The guard's threshold here.
STUCK_AFTER_SECONDS = 1800.0
GUARDED = {"stuck_after_seconds": STUCK_AFTER_SECONDS}


def provreq_reads(op: VirtualOperator) -> int:
    """The operator's lists of ProvisioningRequests."""
    return sum(1 for method, path in op.kube.calls if PROVREQ_GROUP in path and method == "GET")


def job_gone(op: VirtualOperator, job: dict[str, Any]) -> bool:
    return all(j["metadata"]["uid"] != job["metadata"]["uid"] for j in op.jobs())


def test_a_stuck_queued_request_without_the_guard_waits_out_its_time() -> None:
    async def scenario(op: VirtualOperator) -> None:
        kueue = Kueue(op)
        await kueue.queues()
        await op.create(H100S, mode="QueuedProvisioning", provisioning={"maxWaitDuration": "2h"})
        job = await job_named(op, op.name)
        asked = op.now()
        # Accepted, never provisioned.
        await kueue.provisioning_request(await kueue.workload(job))
        await op.until(lambda: op.phase() == "Failed", "Failed", within=3 * HOUR, step=MINUTE)
        failed = op.status()
        assert "CapacityTimeout" in failed["message"]
        assert failed.get("recoveries", 0) == 0
        # The whole of its maxWaitDuration, and no more than the test's look after it.
        assert 2 * HOUR <= op.now() - asked <= 2 * HOUR + MINUTE
        # Without the guard the ProvisioningRequest is never read.
        assert provreq_reads(op) == 0
        assert "StuckRequestRecovered" not in op.events()
        assert len(op.created_pools()) == 1

    QueuedVirtual(settings={"stuck_after_seconds": 0}).run(scenario)


def test_a_stuck_queued_request_with_the_guard_is_asked_for_again_and_runs() -> None:
    async def scenario(op: VirtualOperator) -> None:
        kueue = Kueue(op)
        await kueue.queues()
        await op.create(H100S, mode="QueuedProvisioning", provisioning={"maxWaitDuration": "6h"})
        job = await job_named(op, op.name)
        stuck = await kueue.provisioning_request(await kueue.workload(job))
        accepted = op.now()
        again = await job_named(op, f"{op.name}-r1", step=MINUTE, within=HOUR)
        # Asked again once Accepted for the threshold (and the pass a moment after).
        assert STUCK_AFTER_SECONDS <= op.now() - accepted <= STUCK_AFTER_SECONDS + MINUTE
        assert op.status()["recoveries"] == 1
        # The stuck request's Job went: Kueue's Workload and ProvisioningRequest go with it.
        assert [j["metadata"]["name"] for j in op.jobs()] == [f"{op.name}-r1"]
        await kueue.collect()
        # The new Workload's ProvisioningRequest is served.
        provreq = await kueue.provisioning_request(await kueue.workload(again))
        await op.nodes_up(op.pool_name, 2)
        await kueue.provisioned(provreq)
        await op.job_running(2)
        await op.wait_phase("Running")
        await op.job_succeeded()
        done = await op.wait_phase("Succeeded")
        assert done["recoveries"] == 1
        assert done.get("restarts", 0) == 0
        [recovered] = event_messages(op, "StuckRequestRecovered")
        assert f"ProvisioningRequest {stuck} was Accepted 0.5h ago" in recovered
        assert done["job"]["name"] == f"{op.name}-r1"
        # The same pool served the new attempt.
        assert len(op.created_pools()) == 1

    QueuedVirtual(settings=GUARDED).run(scenario)


def test_a_queued_pool_deleted_under_a_waiting_request_is_made_again_and_the_request_recovers() -> (
    None
):
    # The request's pool is deleted (as node auto-provisioning did in autoscaler#9490)
    # while its ProvisioningRequest waits, which leaves that request bound to the gone
    # pool: never provisioned. Every later request gets its capacity 45 minutes after it
    # is accepted, longer than the guard's threshold.
    capacity_after = 1.5 * STUCK_AFTER_SECONDS

    async def scenario(op: VirtualOperator) -> None:
        kueue = Kueue(op)
        await kueue.queues()
        await op.create(H100S, mode="QueuedProvisioning", provisioning={"maxWaitDuration": "6h"})
        job = await job_named(op, op.name)
        await kueue.provisioning_request(await kueue.workload(job))
        pool = op.pool_name
        await op.until(lambda: pool in op.pool_names(), "the pool")
        path = f"{op.cluster}/nodePools/{pool}"
        await op.gke.delete_node_pool(container_v1.DeleteNodePoolRequest(name=path))
        await op.until(lambda: len(op.created_pools()) == 2, "the pool made again")
        # Each new attempt's request looks stuck before its capacity comes: the guard asks
        # again as often as it may, and no more.
        for attempt in range(1, MAX_RECOVERIES + 1):
            again = await job_named(op, f"{op.name}-r{attempt}", step=MINUTE, within=HOUR)
            await kueue.collect()
            provreq = await kueue.provisioning_request(await kueue.workload(again))
            accepted = op.now()
            assert op.status()["recoveries"] == attempt
        await op.sleep(capacity_after - (op.now() - accepted))
        # The last ask, left alone, gets its capacity.
        assert [j["metadata"]["name"] for j in op.jobs()] == [f"{op.name}-r{MAX_RECOVERIES}"]
        await op.nodes_up(pool, 2)
        await kueue.provisioned(provreq)
        await op.job_running(2)
        await op.job_succeeded()
        done = await op.wait_phase("Succeeded")
        assert [p.name for p in op.created_pools()] == [pool, pool]
        assert done["recoveries"] == MAX_RECOVERIES
        assert done["job"]["name"] == f"{op.name}-r{MAX_RECOVERIES}"
        assert len(event_messages(op, "StuckRequestRecovered")) == MAX_RECOVERIES

    QueuedVirtual(settings=GUARDED).run(scenario)


def test_a_workload_kueue_gives_up_on_is_asked_for_again_then_the_ladder_moves_on() -> None:
    # Queued H100s never come: each ProvisioningRequest fails after a minute (GKE's
    # WaitTimeExceeded), and the queue's check gives up at the first failure
    # (retryStrategy.backoffLimitCount 0), so Kueue deactivates the workload, as kueue#5129
    # and #15255 report. Spot H100s are there.
    async def scenario(op: VirtualOperator) -> None:
        kueue = Kueue(op)
        await kueue.queues()
        await op.create(
            H100S,
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "10h", "fallback": [{"mode": "Spot"}]},
        )
        queued_pool = await pool_of(op)
        for attempt in range(MAX_RECOVERIES + 1):
            name = f"{op.name}-r{attempt}" if attempt else op.name
            job = await job_named(op, name)
            await kueue.collect()
            workload = await kueue.workload(job)
            provreq = await kueue.provisioning_request(workload)
            await op.sleep(MINUTE)
            await kueue.failed(provreq)
            await kueue.deactivate(workload)
            gave_up = op.now()
            # The Workload's watch event wakes the request: no wait for a timer.
            await op.until(lambda job=job: job_gone(op, job), f"{name} deleted")
            assert op.now() - gave_up <= 2
        spot = await job_named(op, f"{op.name}-r{MAX_RECOVERIES + 1}")
        await kueue.workload(spot)
        pool = op.pool_name
        assert pool != queued_pool
        await op.until(lambda: pool in op.pool_names(), "the Spot pool")
        await op.nodes_up(pool, 2)
        await op.job_running(2)
        await op.job_succeeded()
        done = await op.wait_phase("Succeeded")
        assert done["recoveries"] == MAX_RECOVERIES
        assert [(a["mode"], a["outcome"], a.get("recoveries", 0)) for a in done["attempts"]] == [
            ("QueuedProvisioning", "Stuck", MAX_RECOVERIES),
            ("Spot", "Provisioned", 0),
        ]
        assert "Kueue deactivated the workload" in done["attempts"][0]["message"]
        recovered = event_messages(op, "StuckRequestRecovered")
        assert len(recovered) == MAX_RECOVERIES
        assert all(REJECTED in m for m in recovered)
        await op.until(lambda: queued_pool not in op.pool_names(), "the queued step's pool gone")

    QueuedVirtual(settings=GUARDED).run(scenario)


def test_a_flex_start_pool_stuck_at_zero_is_made_again_and_the_request_runs() -> None:
    # The first flex-start pool gets no node, ever; the one made again under the same
    # name (a new node group) gets its node at once.
    async def scenario(op: VirtualOperator) -> None:
        await op.create(gpu("nvidia-l4"), provisioning={"maxWaitDuration": "72h"})
        await op.until(op.created_pools, "CreateNodePool")
        pool = op.pool_name
        await op.until(lambda: len(op.created_pools()) == 2, "the pool made again", HOUR, MINUTE)
        await job_named(op, f"{op.name}-r1")
        await op.nodes_up(pool, 1)
        await op.job_running(1)
        await op.job_succeeded()
        done = await op.wait_phase("Succeeded")
        assert done["recoveries"] == 1
        assert [p.name for p in op.created_pools()] == [pool, pool]
        [recovered] = event_messages(op, "StuckRequestRecovered")
        assert f"node pool {pool}: no node and no operation" in recovered
        assert "its pool is made again" in recovered
        # On the operator's clock: the threshold after it asked, and the pass a moment after.
        asked, again = (rfc3339.parse(done[k]) for k in ("requestedAt", "recoveredAt"))
        assert STUCK_AFTER_SECONDS <= (again - asked).total_seconds() <= STUCK_AFTER_SECONDS + 2

    Virtual(settings=GUARDED).run(scenario)
