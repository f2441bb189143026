"""Pool reuse on the virtual clock: a finished request's pool, at zero, serves the next
request of its shape (an update, not a create), one request at a time; idle pools go
after their time; a takeover cut short by a restart is finished, never doubled."""

from __future__ import annotations

import pytest

from dws_operator import rfc3339
from dws_operator.gke.labels import UID_LABEL
from dws_operator.gke.shapes import SHAPE_LABEL
from tests.builders import gpu, tpu
from tests.virtual.harness import EPOCH, Virtual, VirtualOperator
from tests.virtual.requests import (
    another,
    creates,
    finish,
    patch,
    pool_max,
    pool_of,
    reused,
    updates,
    writes_per_pass,
)

L4 = gpu("nvidia-l4", nodes=1, count=1)
SLICE = tpu("v6e", "2x4")  # a multi-host slice: 2 VMs, one zone, never capped
#: Long enough that no idle pool is deleted while a test runs.
IDLE = 3600.0


@pytest.fixture
def virtual() -> Virtual:
    return Virtual(settings={"pool_idle_seconds": IDLE})


def uid(op: VirtualOperator) -> str:
    uid: str = (op.get() or {})["metadata"]["uid"]
    return uid


def test_the_next_request_of_a_shape_takes_the_idle_pool_over(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        first_pool = await pool_of(op)
        await finish(op)
        assert op.at_zero(first_pool)
        label = op.pool(first_pool).config.resource_labels[SHAPE_LABEL]

        second = another(op)
        await second.create(L4, mode="Spot")
        await op.until(lambda: reused(second), "a reused pool")
        assert second.pool_name == first_pool
        job = await second.job()  # the pool is ready for it again
        selector = job["spec"]["template"]["spec"]["nodeSelector"]
        assert selector["cloud.google.com/gke-nodepool"] == first_pool
        pool = op.pool(first_pool)
        assert pool.config.resource_labels[UID_LABEL] == uid(second)
        assert pool.config.resource_labels[SHAPE_LABEL] == label
        assert pool_max(op, first_pool) == 1
        assert creates(op) == 1  # the second request created nothing
        # An update (labels, then ceiling) after the first request's two scale-down calls.
        assert updates(op, first_pool)[-2:] == ["UpdateNodePool", "SetNodePoolAutoscaling"]
        assert second.condition("NodePoolReady")["status"] == "True"

        await finish(second)
        assert op.at_zero(first_pool)
        # Binding the idle pool was a pass's decision like any other: one status write.
        none, one, more = writes_per_pass(op)
        assert (one >= 10, more) == (True, 0)
        assert none > 0  # passes that changed nothing wrote nothing
        # The first request, finished long ago, leaves the pool to its new holder.
        await op.delete()
        await op.until(lambda: op.get() is None, "the first request gone")
        assert op.pool(first_pool) is not None
        assert op.pool(first_pool).config.resource_labels[UID_LABEL] == uid(second)

    virtual.run(scenario)


def test_a_pool_serves_one_request_at_a_time(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        first_pool = await pool_of(op)
        await finish(op)
        b, c = another(op), another(op)
        await b.create(L4, mode="Spot")
        await c.create(L4, mode="Spot")
        await b.job()
        await c.job()
        pools = {await pool_of(b), await pool_of(c)}
        assert len(pools) == 2, pools
        assert first_pool in pools
        assert creates(op) == 2  # one for the first request, one for whichever found none

    virtual.run(scenario)


def test_a_takeover_cut_short_by_a_restart_is_finished(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        idle = await pool_of(op)
        await finish(op)
        await op.kill()
        # The operator died right after it wrote the binding, before any GKE call: the
        # state a crash between the two leaves.
        second = another(op)
        await second.create(L4, mode="Spot")
        binding = {"nodePool": {"name": idle, "managed": True, "reused": True}}
        await patch(second, {"status": binding}, status=True)
        await op.start()
        await second.job()
        assert second.pool_name == idle
        assert pool_max(op, idle) == 1
        assert op.pool(idle).config.resource_labels[UID_LABEL] == uid(second)
        assert creates(op) == 1

    virtual.run(scenario)


def test_an_operator_restarted_while_gke_sets_a_taken_pools_ceiling_waits_for_it(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        idle = await pool_of(op)
        await finish(op)
        second = another(op)
        await second.create(L4, mode="Spot")
        # Relabelled (ours now), and GKE setting its ceiling: the operator dies then.
        await op.until(
            lambda: updates(op, idle)[-2:] == ["UpdateNodePool", "SetNodePoolAutoscaling"],
            lambda: f"the relabel done and the ceiling asked for ({updates(op, idle)})",
        )
        assert pool_max(op, idle) == 0
        await op.kill()
        await op.start()
        # Never ready while capped at zero: no Job until the ceiling is up.
        while pool_max(op, idle) == 0:
            assert second.jobs() == [], "a Job made on a pool capped at zero"
            await op.sleep(1)
        await second.job()
        assert second.pool_name == idle
        assert pool_max(op, idle) == 1
        assert creates(op) == 1

    virtual.run(scenario)


def test_an_idle_pool_is_deleted_after_its_time() -> None:
    idle_seconds = 600.0

    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        pool = await pool_of(op)
        await finish(op)
        # Idle since its scale-down (status.scaledDownAt).
        released = (rfc3339.parse(op.status()["scaledDownAt"]) - EPOCH).total_seconds()
        # Kept while the next request of its shape may come.
        await op.sleep(released + idle_seconds - 1 - op.now())
        assert op.pool(pool) is not None
        await op.until(lambda: op.pool(pool) is None, "the idle pool deleted")
        # Within a minute of its time: the sweep runs every 10 s (GKE's listing
        # interval), and GKE's delete takes 20 s here.
        assert op.now() - released < idle_seconds + 60
        assert op.phase() == "Succeeded"

    Virtual(settings={"pool_idle_seconds": idle_seconds}).run(scenario)


def test_no_reuse_when_turned_off() -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(L4, mode="Spot")
        first_pool = await pool_of(op)
        await finish(op)
        second = another(op)
        await second.create(L4, mode="Spot")
        await second.job()
        assert await pool_of(second) != first_pool
        assert op.at_zero(first_pool)  # kept at zero, not deleted

    Virtual(settings={"pool_idle_seconds": 0.0}).run(scenario)


def test_a_tpu_slice_pool_is_taken_over_after_its_scale_down(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(SLICE, mode="Spot")
        first_pool = await pool_of(op)
        await finish(op)
        second = another(op)
        await second.create(SLICE, mode="Spot")
        await op.until(lambda: reused(second), "a reused pool")
        assert second.pool_name == first_pool
        await second.job()  # the pool is ready for it again: relabelled, then the workload
        assert op.pool(first_pool).config.resource_labels[UID_LABEL] == uid(second)
        assert creates(op) == 1
        # Its bounds were the slice's all along: never capped at zero, by either request.
        assert pool_max(op, first_pool) == 2
        ceilings = op.emulator.calls_for("SetNodePoolAutoscaling")
        assert ceilings
        for call in ceilings:
            assert call.request.autoscaling.max_node_count == 2, call.request

    virtual.run(scenario)


def test_a_kept_tpu_slice_pool_stays_its_requests(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(SLICE, mode="Spot", nodePool={"cleanup": "Keep"})
        kept = await pool_of(op)
        await op.job_succeeded()
        await op.wait_phase("Succeeded")
        # No Node and its holder finished, but `Keep` never scaled it down: not idle.
        assert op.pool_nodes(kept) == 0
        assert op.status().get("scaledDownAt") is None
        second = another(op)
        await second.create(SLICE, mode="Spot")
        await second.job()
        assert await pool_of(second) != kept
        assert not reused(second)
        assert op.pool(kept) is not None
        assert op.pool(kept).config.resource_labels[UID_LABEL] == uid(op)
        assert op.status().get("scaledDownAt") is None

    virtual.run(scenario)
