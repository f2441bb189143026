"""The reconcile decision on a long run (`spec.run.duration` longer than one window):
the next segment's pools made ahead, the stop before the window ends, the rollover,
the next segment once the last one's workload is gone, restarts apart from rollovers,
and the run's duration used up."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from dws_operator.api import Phase, SegmentOutcome, TrainingRequestStatus
from dws_operator.holder import PAUSE_IMAGE, holder_name, holder_segment
from dws_operator.reconcile import (
    STOP_LEAD_SECONDS,
    CreateHolder,
    CreateJob,
    CreateNodePool,
    Decision,
    DeleteJob,
    DeleteNodePool,
    Observed,
    OperationView,
    PoolView,
    ReconcileConfig,
    ScaleNodePoolToZero,
    abandoned_pool_names,
    pool_name_for,
)
from dws_operator.reconcile.decision import PAST_DEADLINE_SECONDS
from dws_operator.reconcile.segments import SEGMENTS_USED_UP
from dws_operator.workload import SEGMENT_END_ENV, SEGMENT_ENV, job_name
from tests.builders import gpu, spec_body, tpu
from tests.unit.decisions import (
    CONFIG,
    KUEUE,
    NAME,
    T0,
    event_reasons,
    job_view,
    only,
    pool_for,
    request,
    run,
    status_at,
    with_,
)

#: Two hours a window, five hours of training: three segments.
LONG = spec_body(
    gpu("nvidia-h100-80gb", nodes=2),
    provisioning={"maxRunDuration": "2h"},
    run={"duration": "5h", "stopBefore": "10m", "requestAhead": "30m"},
    checkpointDir="gs://ckpt/llama",
)
SPOT = spec_body(
    gpu("nvidia-h100-80gb", nodes=2),
    mode="Spot",
    provisioning={"maxRunDuration": "2h"},
    run={"duration": "5h"},
    maxRestarts=3,
)
FIRST = pool_name_for(request(LONG))
SECOND = f"{FIRST}-r2"
#: The first segment's VMs came five minutes after it asked, so they end then + 2h.
VM_END = T0 + timedelta(hours=2, minutes=5)
STARTED = T0 + timedelta(minutes=10)
#: stopBefore and the pass's minute before the VMs end.
STOP = VM_END - timedelta(minutes=10, seconds=STOP_LEAD_SECONDS)
AHEAD = STOP - timedelta(minutes=30)
#: Polls a running request less often than its timers fire.
PATIENT = dataclasses.replace(CONFIG, running_poll_seconds=24 * 3600.0)


def running(
    body: dict[str, Any] = LONG, config: ReconcileConfig = CONFIG, **fields: Any
) -> TrainingRequestStatus:
    """Segment 1 running since STARTED, as the pass that saw it start left it."""
    status = status_at(Phase.RUNNING, body, started=STARTED, job=job_name(NAME, 0), **fields)
    first = run(world(body, status, now=STARTED), config)
    assert first.status.segments is not None
    return first.status


def world(
    body: dict[str, Any],
    status: TrainingRequestStatus,
    *,
    now: datetime,
    job: str | None = None,
    ready: int = 2,
    next_pool: bool = False,
    stale: tuple[str, ...] = (),
    old_pool: bool = False,
    **job_fields: Any,
) -> Observed:
    """What a pass of the run sees: its current pools, its workload, the next segment's
    pool (made ahead), the last segment's pool and workload still there."""
    view = request(body, status)
    current = pool_name_for(view)
    attempt = job_name(NAME, _attempt(status))
    name = job if job is not None else attempt
    workload = None if stale and job is None else job_view(name, ready=ready, **job_fields)
    abandoned: tuple[PoolView, ...] = ()
    if old_pool:
        abandoned = (pool_for(body, name=FIRST),)
    return Observed(
        request=view,
        now=now,
        pool=pool_for(body, name=current),
        job=workload,
        nodes_by_pool={current: 2},
        service_exists=True,
        next_pools=(pool_for(body, name=f"{current}-r2") if next_pool else None,)
        if (status.segment or 1) == 1
        else (None,),
        capacity_ends=VM_END if (status.segment or 1) == 1 else None,
        stale_jobs=stale,
        abandoned=abandoned,
        abandoned_names=frozenset(p.name for p in abandoned),
    )


def _attempt(status: TrainingRequestStatus) -> int:
    return status.restarts + status.recoveries + max((status.segment or 1) - 1, 0)


def test_a_segment_runs_with_a_timer_for_the_next_segments_pools() -> None:
    status = running()
    decision = run(world(LONG, status, now=T0 + timedelta(hours=1)), PATIENT)
    assert decision.status.phase == Phase.RUNNING
    assert decision.actions == []
    assert decision.status.segment == 1
    [record] = decision.status.segments or []
    assert (record.segment, record.attempt, record.node_pool) == (1, 0, FIRST)
    assert record.started_at == STARTED
    assert record.ends_at == VM_END
    ahead = (AHEAD - (T0 + timedelta(hours=1))).total_seconds()
    assert decision.requeue_after == ahead + PAST_DEADLINE_SECONDS


def test_the_next_segments_pools_are_made_request_ahead_before_the_stop() -> None:
    status = running()
    assert (
        only(run(world(LONG, status, now=AHEAD - timedelta(seconds=1))).actions, CreateNodePool)
        == []
    )
    decision = run(world(LONG, status, now=AHEAD))
    [create] = only(decision.actions, CreateNodePool)
    assert create.name == SECOND
    assert decision.status.phase == Phase.RUNNING
    # Once made (or being made), not asked again.
    made = run(world(LONG, status, now=AHEAD + timedelta(minutes=1), next_pool=True), PATIENT)
    assert only(made.actions, CreateNodePool) == []
    assert (
        made.requeue_after
        == (STOP - AHEAD - timedelta(minutes=1)).total_seconds() + PAST_DEADLINE_SECONDS
    )


def test_the_stop_deletes_the_workload_in_the_foreground_and_says_the_next_segment_first() -> None:
    status = running()
    decision = run(world(LONG, status, now=STOP, next_pool=True))
    [delete] = only(decision.actions, DeleteJob)
    assert (delete.name, delete.foreground) == (job_name(NAME, 0), True)
    assert only(decision.actions, DeleteNodePool) == []  # its pods checkpoint on it
    new = decision.status
    assert new.segment == 2
    assert new.restarts == 0
    assert new.phase == Phase.WAITING_FOR_CAPACITY
    assert new.started_at is None
    first, second = new.segments or []
    assert (first.outcome, first.stopped_at) == (SegmentOutcome.ROLLED_OVER, STOP)
    assert (second.segment, second.attempt, second.node_pool) == (2, 1, SECOND)
    assert second.outcome is None
    # Its capacity was asked for ahead (the pool made then).
    assert second.requested_at == AHEAD
    assert new.trained_seconds == (STOP - STARTED).total_seconds()
    assert "RolledOver" in event_reasons(decision)


def rolled() -> Decision:
    return run(world(LONG, running(), now=STOP, next_pool=True))


def test_the_next_segment_waits_for_the_last_ones_workload_to_be_gone() -> None:
    """As after an operator killed mid-rollover: the status says segment 2, the old Job
    is still there (deleting): it is deleted again, nothing new starts, no old pool goes."""
    status = rolled().status
    later = STOP + timedelta(seconds=30)
    old = job_name(NAME, 0)
    decision = run(world(LONG, status, now=later, stale=(old,), old_pool=True))
    assert only(decision.actions, CreateJob) == []
    assert only(decision.actions, DeleteNodePool) == []
    [delete] = only(decision.actions, DeleteJob)
    assert (delete.name, delete.foreground) == (old, True)
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    assert "checkpointing" in (decision.status.message or "")


def test_once_it_is_gone_the_next_segment_starts_on_its_pool_and_the_old_pool_goes() -> None:
    status = rolled().status
    later = STOP + timedelta(minutes=2)
    obs = world(LONG, status, now=later, old_pool=True)
    decision = run(dataclasses.replace(obs, job=None))
    [create] = only(decision.actions, CreateJob)
    manifest = create.manifest
    assert manifest["metadata"]["name"] == job_name(NAME, 1)
    pod = manifest["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-nodepool"] == SECOND
    assert pod["terminationGracePeriodSeconds"] == 600
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env[SEGMENT_ENV] == "2"
    assert env["DWS_ATTEMPT"] == "1"
    assert env["DWS_CHECKPOINT_DIR"] == "gs://ckpt/llama"
    # Its VMs come after the workload: it runs at least maxRunDuration less the stop.
    assert env[SEGMENT_END_ENV] == "2025-06-01T15:45:00Z"  # 13:56 + 2h - 10m - 1m
    assert [d.name for d in only(decision.actions, DeleteNodePool)] == [FIRST]


def test_the_second_segment_counts_the_time_between_segments() -> None:
    status = rolled().status
    started = STOP + timedelta(minutes=4)
    decision = run(world(LONG, status, now=started))
    assert decision.status.phase == Phase.RUNNING
    assert decision.status.rollover_seconds == 240.0
    second = (decision.status.segments or [])[-1]
    assert second.started_at == started
    # No VM annotation seen yet: its window is bounded from when it was asked for.
    assert second.ends_at == AHEAD + timedelta(hours=2)


def test_the_last_segment_makes_no_pool_ahead_and_ends_with_the_workload() -> None:
    status = rolled().status
    status = run(world(LONG, status, now=STOP + timedelta(minutes=4))).status
    # Segment 2 trains until its stop; segment 3 has what is left (5h less two windows).
    status.segment = 3
    status.trained_seconds = 4 * 3600.0 - 1200
    status.segments = [*(status.segments or [])]
    status.segments[-1].outcome = SegmentOutcome.ROLLED_OVER
    status.segments[-1].stopped_at = T0 + timedelta(hours=4)
    status.requested_at = T0 + timedelta(hours=4)
    status.started_at = status.provisioned_at = None
    third_start = T0 + timedelta(hours=4, minutes=5)
    decision = run(world(LONG, status, now=third_start))
    assert decision.status.phase == Phase.RUNNING
    later = run(world(LONG, decision.status, now=third_start + timedelta(minutes=50)))
    assert only(later.actions, CreateNodePool) == []
    done = run(world(LONG, later.status, now=third_start + timedelta(minutes=55), complete=True))
    assert done.status.phase == Phase.SUCCEEDED
    last = (done.status.segments or [])[-1]
    assert (last.segment, last.outcome) == (3, SegmentOutcome.SUCCEEDED)
    assert done.status.trained_seconds == 4 * 3600.0 - 1200 + 55 * 60


def test_a_run_that_uses_its_duration_without_finishing_fails() -> None:
    status = running()
    status.segment = 3
    status.trained_seconds = 4 * 3600.0
    status.segments = [*(status.segments or [])]
    status.segments[-1].segment = 3
    decision = run(world(LONG, status, now=STARTED + timedelta(hours=1)))
    assert decision.status.phase == Phase.FAILED
    assert (decision.status.message or "").startswith("RunDurationExceeded")
    assert [d.foreground for d in only(decision.actions, DeleteJob)] == [True]
    assert (decision.status.segments or [])[-1].outcome == SegmentOutcome.FAILED


def test_a_preemption_restarts_the_same_segment_and_counts_as_a_restart() -> None:
    status = running(SPOT)
    lost = STARTED + timedelta(minutes=30)
    decision = run(world(SPOT, status, now=lost, failed=True, disrupted=True))
    assert decision.status.restarts == 1
    assert decision.status.segment == 1
    first, again = decision.status.segments or []
    assert first.outcome == SegmentOutcome.INTERRUPTED
    assert (again.segment, again.attempt, again.outcome) == (1, 1, None)
    assert [d.foreground for d in only(decision.actions, DeleteJob)] == [False]


def test_capacity_that_goes_after_the_planned_stop_is_a_rollover_not_a_restart() -> None:
    """The operator was down at the stop; the VMs ended under the workload."""
    status = running()
    decision = run(world(LONG, status, now=VM_END, failed=True, disrupted=True))
    assert decision.status.restarts == 0
    assert decision.status.segment == 2
    assert (decision.status.segments or [])[0].outcome == SegmentOutcome.ROLLED_OVER


def test_an_ended_run_deletes_the_next_segments_pool_made_ahead() -> None:
    status = running()
    done = run(world(LONG, status, now=AHEAD + timedelta(minutes=1), next_pool=True, complete=True))
    assert done.status.phase == Phase.SUCCEEDED
    view = request(LONG, done.status)
    assert SECOND in abandoned_pool_names(view)


def test_operations_on_the_next_pool_are_not_asked_twice() -> None:
    status = running()
    obs = world(LONG, status, now=AHEAD + timedelta(minutes=1))
    busy = dataclasses.replace(obs, operations={SECOND: OperationView(kind="Create", running=True)})
    assert only(run(busy).actions, CreateNodePool) == []


# -- the capacity holder ---------------------------------------------------------------


def test_once_the_next_pools_are_ready_a_holder_asks_for_their_capacity() -> None:
    status = running()
    decision = run(world(LONG, status, now=AHEAD + timedelta(minutes=5), next_pool=True))
    [create] = only(decision.actions, CreateHolder)
    job = create.manifest
    assert job["metadata"]["name"] == holder_name(NAME, 2)
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-nodepool"] == SECOND
    assert [c["image"] for c in pod["containers"]] == [PAUSE_IMAGE]
    assert pod["containers"][0]["resources"]["requests"] == {"nvidia.com/gpu": "8"}
    assert pod["terminationGracePeriodSeconds"] == 0
    assert job["spec"]["completions"] == 2
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]
    # There already: not made again, and kept while segment 1 runs.
    held = dataclasses.replace(
        world(LONG, status, now=AHEAD + timedelta(minutes=6), next_pool=True),
        holders=(holder_name(NAME, 2),),
    )
    assert only(run(held).actions, CreateHolder) == []
    assert only(run(held).actions, DeleteJob) == []


def test_the_next_segments_workload_takes_the_nodes_its_holder_held() -> None:
    status = rolled().status
    obs = world(LONG, status, now=STOP + timedelta(minutes=2), old_pool=True)
    decision = run(dataclasses.replace(obs, job=None, holders=(holder_name(NAME, 2),)))
    [create] = only(decision.actions, CreateJob)
    assert create.manifest["metadata"]["name"] == job_name(NAME, 1)
    deleted = [d.name for d in only(decision.actions, DeleteJob)]
    assert deleted == [holder_name(NAME, 2)]
    # Once the workload is there, a holder left of its segment goes.
    later = world(LONG, decision.status, now=STOP + timedelta(minutes=3))
    again = run(dataclasses.replace(later, holders=(holder_name(NAME, 2),)))
    assert [d.name for d in only(again.actions, DeleteJob)] == [holder_name(NAME, 2)]


def test_queued_provisioning_has_no_holder() -> None:
    queued = spec_body(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="QueuedProvisioning",
        provisioning={"maxRunDuration": "2h"},
        run={"duration": "5h"},
        queueName="dws",
    )
    status = running(queued, KUEUE)
    ahead = world(queued, status, now=AHEAD + timedelta(minutes=5), next_pool=True)
    decision = run(ahead, KUEUE)
    assert decision.status.phase == Phase.RUNNING
    assert only(decision.actions, CreateHolder) == []


def test_an_ended_run_deletes_its_holders() -> None:
    status = running()
    obs = world(LONG, status, now=AHEAD + timedelta(minutes=5), next_pool=True, complete=True)
    done = run(dataclasses.replace(obs, holders=(holder_name(NAME, 2),)))
    assert done.status.phase == Phase.SUCCEEDED
    after = world(LONG, done.status, now=AHEAD + timedelta(minutes=6), complete=True)
    tidy = run(dataclasses.replace(after, holders=(holder_name(NAME, 2),)))
    assert holder_name(NAME, 2) in [d.name for d in only(tidy.actions, DeleteJob)]


# -- review fixes ------------------------------------------------------------------------


def test_a_long_runs_job_deadline_leaves_room_for_its_wait() -> None:
    """The Job's own clock (from its start) must not end a segment the operator stops
    later (counted from when its VMs came)."""
    status = rolled().status
    obs = world(LONG, status, now=STOP + timedelta(minutes=2))
    [create] = only(run(dataclasses.replace(obs, job=None)).actions, CreateJob)
    # maxRunDuration 2h and the default maxWaitDuration 24h.
    assert create.manifest["spec"]["activeDeadlineSeconds"] == (2 + 24) * 3600
    plain = spec_body(gpu("nvidia-h100-80gb", nodes=2), provisioning={"maxRunDuration": "2h"})
    status = status_at(Phase.PROVISIONING, plain, job=None)
    first = run(_fresh(plain, status))
    [job] = only(first.actions, CreateJob)
    assert job.manifest["spec"]["activeDeadlineSeconds"] == 2 * 3600


def _fresh(body: dict[str, Any], status: TrainingRequestStatus) -> Observed:
    view = request(body, status)
    return Observed(
        request=view,
        now=T0,
        pool=pool_for(body, name=pool_name_for(view)),
        service_exists=True,
    )


def test_a_restart_after_the_next_capacity_was_held_lets_it_go() -> None:
    status = running(SPOT)
    obs = world(SPOT, status, now=STARTED + timedelta(minutes=30), failed=True, disrupted=True)
    restarted = run(dataclasses.replace(obs, holders=(holder_name(NAME, 2),)))
    after = world(SPOT, restarted.status, now=STARTED + timedelta(minutes=31), job=None)
    decision = run(dataclasses.replace(after, job=None, holders=(holder_name(NAME, 2),)))
    assert holder_name(NAME, 2) in [d.name for d in only(decision.actions, DeleteJob)]


def test_a_ladder_step_left_mid_run_closes_its_segment() -> None:
    ladder = spec_body(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="Spot",
        provisioning={"maxRunDuration": "2h", "fallback": [{"mode": "OnDemand"}]},
        run={"duration": "5h"},
        maxRestarts=0,
    )
    status = running(ladder)
    lost = STARTED + timedelta(minutes=30)
    decision = run(world(ladder, status, now=lost, failed=True, disrupted=True))
    assert decision.status.step == 2
    [first] = decision.status.segments or []
    assert (first.outcome, first.stopped_at) == (SegmentOutcome.INTERRUPTED, lost)
    assert decision.status.trained_seconds == 30 * 60.0


def test_a_run_out_of_duration_waits_for_its_pods_before_its_pools_go() -> None:
    status = running()
    status.trained_seconds = 4 * 3600.0 + 55 * 60
    failed = run(world(LONG, status, now=STARTED + timedelta(minutes=10)))
    assert failed.status.phase == Phase.FAILED
    # The workload is still there (its pods checkpointing): the pools wait.
    again = run(world(LONG, failed.status, now=STARTED + timedelta(minutes=11)))
    assert [d.foreground for d in only(again.actions, DeleteJob)] == [True]
    assert only(again.actions, ScaleNodePoolToZero) == []
    assert only(again.actions, DeleteNodePool) == []
    # Seen deleting (its pods going): not asked again, and the pools still wait.
    seen = world(LONG, failed.status, now=STARTED + timedelta(minutes=11, seconds=30))
    assert seen.job is not None
    going = run(dataclasses.replace(seen, job=dataclasses.replace(seen.job, deleting=True)))
    assert only(going.actions, DeleteJob) == []
    assert only(going.actions, ScaleNodePoolToZero) == only(going.actions, DeleteNodePool) == []
    assert going.requeue_after is not None
    gone = run(
        dataclasses.replace(
            world(LONG, failed.status, now=STARTED + timedelta(minutes=12)), job=None
        )
    )
    assert only(gone.actions, ScaleNodePoolToZero) + only(gone.actions, DeleteNodePool)


def test_a_run_that_takes_its_most_segments_says_so() -> None:
    status = running()
    status.segment = request(LONG).facts.segments
    status.segments = [*(status.segments or [])]
    status.segments[-1].segment = status.segment
    decision = run(world(LONG, status, now=STOP))
    assert (decision.status.message or "").startswith(SEGMENTS_USED_UP)


def test_no_capacity_timeout_while_the_last_segment_checkpoints() -> None:
    short = with_(
        LONG, provisioning={"maxWaitDuration": "5m"}, run={**LONG["run"], "stopBefore": "10m"}
    )
    status = run(world(short, running(short), now=STOP, next_pool=True)).status
    old = job_name(NAME, 0)
    later = STOP + timedelta(minutes=8)
    decision = run(world(short, status, now=later, stale=(old,), old_pool=True))
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY


def test_a_request_without_a_long_run_leaves_no_segment_pool_names_behind() -> None:
    ladder = spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Spot"}]})
    status = status_at(Phase.PROVISIONING, ladder, step=2)
    names = abandoned_pool_names(request(ladder, status))
    assert names
    assert not [n for n in names if n.endswith("-r2")]


def test_a_holder_name_is_never_a_requests_job_name() -> None:
    assert holder_name(NAME, 2) == f"2-hold-{NAME}"
    assert holder_segment(NAME, holder_name(NAME, 12)) == 12
    assert holder_segment(NAME, job_name(NAME, 3)) is None
    assert holder_segment("x", holder_name("x-y", 2)) is None
