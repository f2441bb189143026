"""Long runs (issue 33) on the virtual clock: a run of 2.5 windows carried over three
segments, a Spot preemption mid-segment, an operator killed mid-rollover or down past a
segment's stop. The test stands in for GKE's autoscaler, the Job controller, the
garbage collector and the workload (tests/virtual/long_run_steps.py): the workload
trains while its pods run, checkpoints when stopped, and finishes once it has trained
`WORK`. tests/cluster/e2e/test_long_runs.py keeps the three-segment run on real servers."""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest

from dws_operator import rfc3339
from dws_operator.workload import ATTEMPT_ENV, CHECKPOINT_ENV, SEGMENT_ENV, job_name
from dws_workshop.sandbox.rollover_bench import rollovers
from tests.builders import gpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.long_run_steps import (
    CHECKPOINT_SECONDS,
    VM_SECONDS,
    LongRunWorld,
    env_of,
    pool_of,
    virtual_seconds,
)

CHECKPOINTS = "gs://ckpt/virtual"
WINDOW = timedelta(hours=10)
#: 2.5 windows of work; a budget with room to spare.
WORK = 25 * 3600.0
RUN = {"duration": "27h", "stopBefore": "10m", "requestAhead": "10m"}
STOP_BEFORE = timedelta(minutes=10)
REQUEST_AHEAD = timedelta(minutes=10)
#: The longest a step of a segment is waited for: a window and its VMs' coming.
SEGMENT = WINDOW.total_seconds() + 3600.0
#: How long a killed operator stays down.
DOWN = 60.0

During = Callable[[], Awaitable[None]]


async def long_run(op: VirtualOperator, mode: str = "FlexStart", nodes: int = 1) -> None:
    await op.create(
        gpu("nvidia-h100-80gb", nodes=nodes),
        mode=mode,
        provisioning={"maxRunDuration": "10h", "maxWaitDuration": "2h"},
        run=RUN,
        checkpointDir=CHECKPOINTS,
    )


def life(mode: str) -> timedelta | None:
    """A VM's life as GKE annotates it: flex-start VMs end after maxRunDuration."""
    return WINDOW if mode == "FlexStart" else None


async def first_segment(world: LongRunWorld, mode: str = "FlexStart") -> dict[str, Any]:
    """The first workload asks for its VMs and runs on them. The workload."""
    op = world.op
    job = await world.job(op.name)
    await world.vms_for(job, life(mode))
    await world.run(job)
    await op.wait_phase("Running")
    return job


async def roll_over(
    world: LongRunWorld,
    segment: int,
    old: dict[str, Any],
    mode: str = "FlexStart",
    while_checkpointing: During | None = None,
) -> dict[str, Any]:
    """The segment before `segment` (its workload `old`) rolls over to it: its holder
    asks for the next pool's VMs ahead, the old workload is stopped and checkpoints, and
    the next one starts on the held VMs once the old one is gone; the old pool goes
    then. The new workload."""
    op = world.op
    holder = await world.holder(segment, SEGMENT)
    pool = await world.vms_for(holder, life(mode))
    await world.run(holder)
    name, old_pool = old["metadata"]["name"], pool_of(old)
    await world.stopped(name, SEGMENT)
    new = job_name(op.name, world.segment()["attempt"])
    if while_checkpointing is not None:
        await while_checkpointing()
    # While the old workload's pods checkpoint, the next waits; the old pool stays.
    await op.sleep(CHECKPOINT_SECONDS / 2 - (op.now() - world.deleting[name]))
    assert world.stored(new) is None
    assert op.phase() == "WaitingForCapacity"
    assert "Waiting for the workload of the last segment" in op.status()["message"]
    assert op.condition("CapacityProvisioned")["reason"] == "RollingOver"
    assert old_pool in op.pool_names()
    await world.checkpointed(name)
    job = await world.job(new)
    # Made as soon as the old one was gone, on the held VMs, the holder deleted first.
    assert world.added[new] - world.gone[name] < 2
    assert pool_of(job) == pool
    assert world.gone[holder["metadata"]["name"]] <= world.added[new]
    await world.run(job)
    await world.vms_gone_with(old_pool)
    return job


async def finish(world: LongRunWorld, job: dict[str, Any], work: float) -> dict[str, Any]:
    """The workload has trained `work` more and succeeds. The request's status."""
    await world.op.sleep(work)
    await world.succeed(job)
    status = await world.op.wait_phase("Succeeded", "Failed")
    assert status["phase"] == "Succeeded", status.get("message")
    return status


def test_a_run_of_two_and_a_half_windows_finishes_in_three_segments(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        world = LongRunWorld(op)
        await long_run(op)
        job = await first_segment(world)
        first = pool_of(job)
        for segment in (2, 3):
            job = await roll_over(world, segment, job)
        status = await finish(world, job, WORK - world.trained())
        assert status["segment"] == 3
        assert status.get("restarts", 0) == 0
        segments = status["segments"]
        assert [s["outcome"] for s in segments] == ["RolledOver", "RolledOver", "Succeeded"]
        assert [s["segment"] for s in segments] == [1, 2, 3]
        assert [s["nodePool"] for s in segments] == [first, f"{first}-r2", f"{first}-r3"]
        for before, after in itertools.pairwise(segments):
            ends = rfc3339.parse(before["endsAt"])
            # The window's end is the VMs' as GKE annotated their Node.
            assert world.vm_ends[before["nodePool"]] == {ends}
            # The workload was stopped at least stopBefore before its VMs end.
            assert ends - rfc3339.parse(before["stoppedAt"]) >= STOP_BEFORE
            # The next segment's capacity was asked for at least requestAhead before it.
            assert ends - rfc3339.parse(after["requestedAt"]) >= REQUEST_AHEAD
        # Three workloads, one per attempt, one after the other.
        assert world.workload_order() == [job_name(op.name, s["attempt"]) for s in segments]
        assert world.made == world.workload_order()
        assert world.most_at_once == 1
        # The operator counts the workload's running time as the test does, to the
        # moment its passes take.
        assert status["trainedSeconds"] == pytest.approx(WORK, abs=5)
        found = rollovers(status, WINDOW)
        assert len(found) == 2
        for rollover in found:
            # The next VMs were there when the old workload stopped: the gap is its
            # checkpoint.
            assert rollover.gap == pytest.approx(CHECKPOINT_SECONDS, abs=2)
            # Asked for when its pool was asked for: the VMs came VM_SECONDS after the
            # holder, which came once GKE had made the pool.
            assert VM_SECONDS <= rollover.provisioning <= VM_SECONDS + 60
            assert rollover.ahead >= REQUEST_AHEAD.total_seconds()
        assert status["rolloverSeconds"] == pytest.approx(sum(r.gap for r in found), abs=0.01)
        # Nothing left: the first segments' pools deleted, the last one's at zero (its
        # VM then removed), no holder.
        last = segments[-1]["nodePool"]
        await op.until(lambda: op.at_zero(last), "the last pool at zero")
        await op.nodes_up(last, 0)
        await op.until(lambda: op.status().get("scaledDownAt"), "scaledDownAt")
        assert op.pool_names() == {last}
        assert world.holders() == []
        assert world.asked() == [s["nodePool"] for s in segments]
        told = {"RolledOver", "Succeeded", "ScaledToZero"}
        assert told <= set(op.events()), op.events()

    virtual.run(scenario)


def test_a_spot_preemption_mid_segment_resumes_from_the_checkpoint_as_a_restart(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        world = LongRunWorld(op)
        # Two VMs: an Indexed Job that fails as a whole when a VM goes (a single-host
        # Job's own pod restarts would carry on without the operator).
        await long_run(op, mode="Spot", nodes=2)
        job = await first_segment(world, "Spot")
        pool = pool_of(job)
        # Well into the first segment (past three hourly checkpoints), a VM is reclaimed.
        await op.sleep(3.5 * 3600)
        await world.vms_lost(job, 1)
        status = await op.until(lambda: (s := op.status()).get("restarts") == 1 and s, "a restart")
        assert status["segment"] == 1
        assert status["segments"][0]["outcome"] == "Interrupted"
        assert status["segments"][1]["segment"] == 1
        restarted = await world.job(job_name(op.name, 1))
        # The new attempt resumes from the same checkpoints, told it is a restart.
        env = env_of(restarted)
        assert (env[ATTEMPT_ENV], env[CHECKPOINT_ENV], env[SEGMENT_ENV]) == ("1", CHECKPOINTS, "1")
        assert "Restarting" in op.events()
        await op.until(lambda: job["metadata"]["name"] in world.gone, "the failed Job gone")
        # On the same pool: the lost VM comes again for the new attempt's pending pod.
        assert pool_of(restarted) == pool
        await world.vms_for(restarted, None)
        await world.run(restarted)
        job = restarted
        for segment in (2, 3):
            job = await roll_over(world, segment, job, "Spot")
        # The first attempt's last half hour (since its third hourly checkpoint) is
        # trained again.
        status = await finish(world, job, WORK + 1800 - world.trained())
        assert status["restarts"] == 1
        segments = status["segments"]
        assert [(s["segment"], s["outcome"]) for s in segments] == [
            (1, "Interrupted"),
            (1, "RolledOver"),
            (2, "RolledOver"),
            (3, "Succeeded"),
        ]
        assert [s["attempt"] for s in segments] == [0, 1, 2, 3]
        assert world.made == [job_name(op.name, attempt) for attempt in range(4)]
        assert world.most_at_once == 1
        assert status["trainedSeconds"] == pytest.approx(WORK + 1800, abs=5)
        # The restart asked GKE for nothing: the pool was there.
        assert world.asked() == [pool, f"{pool}-r2", f"{pool}-r3"]

    virtual.run(scenario)


async def killed(op: VirtualOperator) -> None:
    """The operator is killed where it stands, and another starts `DOWN` later."""
    await op.kill()
    await op.sleep(DOWN)
    await op.start()


@pytest.mark.parametrize("moment", ["next pool asked for", "old workload checkpointing"])
def test_an_operator_killed_mid_rollover_converges(virtual: Virtual, moment: str) -> None:
    """Killed after the next segment's capacity was asked for, before the old segment
    stopped; or after the stop, while the old workload checkpoints: one next pool, one
    holder, one workload per attempt, never two segments at once."""

    async def scenario(op: VirtualOperator) -> None:
        world = LongRunWorld(op)
        await long_run(op)
        job = await first_segment(world)
        second = f"{pool_of(job)}-r2"
        if moment == "next pool asked for":
            # A couple of minutes before the window's time to ask, then to the ask.
            ends = rfc3339.parse(world.segment()["endsAt"])
            ask = virtual_seconds(ends - STOP_BEFORE - REQUEST_AHEAD) - 120
            await op.sleep(ask - op.now())
            await op.until(lambda: second in world.asked(), "segment 2's pool asked for")
            # GKE is making it (its operation takes 20 virtual seconds).
            made = op.pool(second)
            assert made is not None
            assert made.status.name == "PROVISIONING"
            await killed(op)
            job = await roll_over(world, 2, job)
        else:
            job = await roll_over(world, 2, job, while_checkpointing=lambda: killed(op))
        job = await roll_over(world, 3, job)
        status = await finish(world, job, WORK - world.trained())
        assert op.starts == 2
        assert [s["outcome"] for s in status["segments"]] == [
            "RolledOver",
            "RolledOver",
            "Succeeded",
        ]
        assert status.get("restarts", 0) == 0
        asked = world.asked()
        assert asked == sorted(set(asked), key=asked.index)
        assert asked.count(second) == 1
        assert sorted(world.added) == sorted(
            [*(job_name(op.name, a) for a in range(3)), f"2-hold-{op.name}", f"3-hold-{op.name}"]
        )
        assert world.made == [job_name(op.name, s["attempt"]) for s in status["segments"]]
        assert world.most_at_once == 1

    virtual.run(scenario)


def test_an_operator_down_past_the_stop_rolls_over_when_the_vms_end(virtual: Virtual) -> None:
    """Down from before its segment's stop until after its VMs ended under the
    workload: the operator that starts then rolls over (it missed the stop), it does
    not count a restart."""

    async def scenario(op: VirtualOperator) -> None:
        world = LongRunWorld(op)
        await long_run(op)
        job = await first_segment(world)
        holder = await world.holder(2, SEGMENT)
        await world.vms_for(holder, WINDOW)
        await world.run(holder)
        await op.kill()
        ends = virtual_seconds(rfc3339.parse(world.segment()["endsAt"]))
        await op.sleep(ends - op.now())
        await world.vms_lost(job, 1)
        await op.sleep(DOWN)
        await op.start()
        status = await op.until(
            lambda: (s := op.status()).get("segment") == 2 and s, "segment 2", step=1
        )
        assert status.get("restarts", 0) == 0
        first = status["segments"][0]
        assert first["outcome"] == "RolledOver"
        # Its workload ran until its VMs ended: that is what it trained.
        assert rfc3339.parse(first["stoppedAt"]) >= rfc3339.parse(first["endsAt"])
        second = await world.job(job_name(op.name, 1))
        assert pool_of(second) == pool_of(holder)
        await world.run(second)
        await op.wait_phase("Running")
        assert "RolledOver" in op.events()
        assert "Restarting" not in op.events()

    virtual.run(scenario)
