"""A queued request whose ProvisioningRequest stuck (Accepted, never provisioned) is asked
for again through a new workload attempt, a bounded number of times per step; and the
ProvisioningRequest is read only once the wait is long enough to have stuck. Pure."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from dws_operator.api import AttemptOutcome, Phase, TrainingRequestStatus
from dws_operator.controller.provreqs import provisioning_request_of
from dws_operator.controller.workloads import WorkloadOwner, workload_owner
from dws_operator.reconcile import (
    RECOVERED,
    CreateJob,
    CreateNodePool,
    DeleteJob,
    DeleteNodePool,
    OperationView,
    ProvisioningRequestView,
    ReconcileConfig,
    provisioning_request_wanted,
)
from dws_operator.reconcile.observed import Observed, PoolState
from dws_operator.reconcile.stuck import DEACTIVATED
from tests.unit.decisions import (
    GPU_TWO,
    KUEUE,
    NAME,
    QUEUED,
    T0,
    job_view,
    observed,
    only,
    pool_for,
    run,
    status_at,
    with_,
)

HOUR = timedelta(hours=1)
QUEUED = with_(QUEUED, queueName="team-a")
#: The default: four hours Accepted and not provisioned.
STUCK = KUEUE.stuck_after_seconds


def waiting(
    now: datetime,
    accepted: datetime | None,
    *,
    body: dict[str, object] = QUEUED,
    status: TrainingRequestStatus | None = None,
    job: str = NAME,
    **fields: object,
) -> Observed:
    """The queued request's Job waiting (suspended by Kueue), its pool up with no node,
    and Kueue's ProvisioningRequest for it Accepted at `accepted`."""
    before = status or status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0, **fields)  # type: ignore[arg-type]
    obs = observed(
        body, before, pool=pool_for(body), job=job_view(job, ready=0), service=True, now=now
    )
    seen = ProvisioningRequestView(f"job-{NAME}-abcde-dws-0", accepted, provisioned=False)
    return dataclasses.replace(obs, provisioning_request=seen)


def test_accepted_and_not_provisioned_for_too_long_is_asked_for_again() -> None:
    now = T0 + timedelta(seconds=STUCK) + HOUR
    decision = run(waiting(now, T0 + HOUR), KUEUE)
    assert only(decision.actions, DeleteJob) == [DeleteJob(NAME, "Job")]
    assert decision.status.recoveries == 1
    assert decision.status.restarts == 0
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    [event] = [e for e in decision.events if e.reason == RECOVERED]
    assert event.type == "Warning"
    assert "was Accepted 4.0h ago and not provisioned" in event.message
    assert decision.tally.recoveries == 1
    # The next pass makes the new attempt's Job (a new Kueue Workload, so a new
    # ProvisioningRequest); the old one's name is not used again.
    nxt = run(observed(QUEUED, decision.status, pool=pool_for(QUEUED), now=now), KUEUE)
    [create] = only(nxt.actions, CreateJob)
    assert create.manifest["metadata"]["name"] == f"{NAME}-r1"


def test_not_yet_stuck_it_looks_again_when_it_would_be() -> None:
    accepted = T0 + HOUR
    now = accepted + timedelta(seconds=STUCK - 600)
    decision = run(waiting(now, accepted), KUEUE)
    assert only(decision.actions, DeleteJob) == []
    assert decision.status.recoveries == 0
    assert decision.requeue_after is not None
    assert decision.requeue_after <= 601


def test_recoveries_are_bounded_then_the_wait_runs_its_course() -> None:
    now = T0 + timedelta(seconds=STUCK) + 2 * HOUR
    used = run(waiting(now, T0 + HOUR, recoveries=KUEUE.max_recoveries), KUEUE)
    assert only(used.actions, DeleteJob) == []
    assert used.status.recoveries == KUEUE.max_recoveries


def test_provisioned_failed_or_with_nodes_coming_is_not_stuck() -> None:
    now = T0 + timedelta(seconds=STUCK) + 2 * HOUR
    obs = waiting(now, T0 + HOUR)
    assert obs.provisioning_request is not None
    for seen in (
        dataclasses.replace(obs.provisioning_request, provisioned=True),
        dataclasses.replace(obs.provisioning_request, failed=True),
        dataclasses.replace(obs.provisioning_request, accepted_at=None),
    ):
        decision = run(dataclasses.replace(obs, provisioning_request=seen), KUEUE)
        assert only(decision.actions, DeleteJob) == [], seen
    nodes = dataclasses.replace(obs, nodes_by_pool={pool_for(QUEUED).name: 1})
    assert only(run(nodes, KUEUE).actions, DeleteJob) == []
    off = ReconcileConfig(kueue=True, location="us-east5", stuck_after_seconds=0)
    assert only(run(obs, off).actions, DeleteJob) == []


def test_the_provisioning_request_is_read_only_when_it_may_have_stuck() -> None:
    config = KUEUE
    request = waiting(T0, None).request
    assert provisioning_request_wanted(request, T0 + HOUR, config) is None
    late = T0 + timedelta(seconds=STUCK)
    assert provisioning_request_wanted(request, late, config) == NAME
    off = ReconcileConfig(kueue=True, location="us-east5", stuck_after_seconds=0)
    assert provisioning_request_wanted(request, late, off) is None
    flex = status_at(Phase.WAITING_FOR_CAPACITY, GPU_TWO, requested=T0)
    assert provisioning_request_wanted(observed(GPU_TWO, flex).request, late, config) is None
    running = status_at(Phase.RUNNING, QUEUED, requested=T0, started=T0 + HOUR)
    assert provisioning_request_wanted(observed(QUEUED, running).request, late, config) is None
    deleting = observed(with_(QUEUED), status_at(Phase.WAITING_FOR_CAPACITY, QUEUED), deleting=True)
    assert provisioning_request_wanted(deleting.request, late, config) is None


def test_the_provisioning_request_is_the_workloads_own_not_a_namesakes() -> None:
    def item(name: str, made: str, accepted: str | None = None) -> dict[str, object]:
        conditions = (
            [{"type": "Accepted", "status": "True", "lastTransitionTime": accepted}]
            if accepted
            else []
        )
        return {
            "metadata": {"name": name, "creationTimestamp": made},
            "status": {"conditions": conditions},
        }

    items = [
        item("job-train-big-0a1b2-dws-queued-provisioning-1", "2025-06-01T12:05:00Z"),
        item("job-train-3c4d5-dws-queued-provisioning-1", "2025-06-01T12:00:00Z"),
        item(
            "job-train-3c4d5-dws-queued-provisioning-2",
            "2025-06-01T12:03:00Z",
            "2025-06-01T12:04:00Z",
        ),
        item("jobset-train-9e8f7-dws-queued-provisioning-1", "2025-06-01T12:06:00Z"),
    ]
    found = provisioning_request_of(items, "Job", "train")
    assert found is not None
    assert found.name == "job-train-3c4d5-dws-queued-provisioning-2"
    assert found.accepted_at == T0 + timedelta(minutes=4)
    assert (found.provisioned, found.failed) == (False, False)
    assert provisioning_request_of(items, "JobSet", "train") is not None
    assert provisioning_request_of(items, "Job", "tra") is None


# -- a workload Kueue deactivated -----------------------------------------------------------

#: Kueue's Evicted message when it rejected the ProvisioningRequest check.
GAVE_UP = (
    "The workload is deactivated due to AdmissionCheck in Rejected state: "
    '"dws-queued-provisioning" (Provisioning Request wasn\'t provisioned)'
)
#: The queued request with a Spot step after it.
LADDER = with_(QUEUED, provisioning={"maxWaitDuration": "10h", "fallback": [{"mode": "Spot"}]})


def deactivated(body: dict[str, object], **status: object) -> Observed:
    """The request's Job suspended, its Workload deactivated by Kueue, an hour in."""
    before = status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0, **status)  # type: ignore[arg-type]
    return observed(
        body,
        before,
        pool=pool_for(body),
        job=job_view(ready=0, deactivated=GAVE_UP),
        service=True,
        now=T0 + HOUR,
    )


def deactivated_again(first: TrainingRequestStatus, now: datetime) -> Observed:
    """After `first` (a ladder's first recovery), its recoveries used up: the new
    attempt's workload deactivated by Kueue too, at `now`."""
    attempts = first.attempts or []
    attempts[-1].recoveries = KUEUE.max_recoveries
    return observed(
        LADDER,
        first,
        pool=pool_for(LADDER),
        job=job_view(f"{NAME}-r1", ready=0, deactivated=GAVE_UP),
        service=True,
        now=now,
    )


def test_a_workload_kueue_deactivated_is_asked_for_again_at_once() -> None:
    decision = run(deactivated(QUEUED), KUEUE)
    assert only(decision.actions, DeleteJob) == [DeleteJob(NAME, "Job")]
    assert decision.status.recoveries == 1
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    [event] = [e for e in decision.events if e.reason == RECOVERED]
    assert event.message.startswith(f"Kueue deactivated the workload of {NAME}: {GAVE_UP}")
    assert event.message.endswith("asking again with a new Job (recovery 1/2)")


def test_one_a_person_deactivated_or_kueue_did_not_is_left_waiting() -> None:
    waiting_ = deactivated(QUEUED)
    assert waiting_.job is not None
    active = dataclasses.replace(waiting_, job=dataclasses.replace(waiting_.job, deactivated=None))
    decision = run(active, KUEUE)
    assert only(decision.actions, DeleteJob) == []
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY


def test_recoveries_used_up_a_deactivated_workload_fails_on_the_last_step() -> None:
    decision = run(deactivated(QUEUED, recoveries=KUEUE.max_recoveries), KUEUE)
    assert decision.status.phase == Phase.FAILED
    assert only(decision.actions, DeleteJob) == [DeleteJob(NAME, "Job")]
    [completed] = [c for c in decision.status.conditions or [] if c.type == "Completed"]
    assert completed.reason == DEACTIVATED
    assert (
        completed.message
        == f"Kueue deactivated the workload of {NAME}: {GAVE_UP} after 2 recoveries"
    )


def test_recoveries_used_up_a_ladder_moves_on_to_its_next_step() -> None:
    first = run(deactivated(LADDER), KUEUE)
    # The first pass on a ladder begins its attempt; the deactivated Job is asked again.
    assert first.status.recoveries == 1
    attempts = first.status.attempts or []
    assert [a.recoveries for a in attempts] == [1]
    again = deactivated_again(first.status, T0 + 2 * HOUR)
    moved = run(again, KUEUE)
    assert moved.status.step == 2
    [ended] = (moved.status.attempts or [])[:1]
    assert ended.outcome == AttemptOutcome.STUCK
    assert "Kueue deactivated the workload" in (ended.message or "")


def test_a_stuck_provisioning_request_with_its_recoveries_used_moves_down_the_ladder() -> None:
    now = T0 + timedelta(seconds=STUCK) + 2 * HOUR
    first = run(waiting(now, T0 + HOUR, body=LADDER), KUEUE)
    # The ladder's first pass begins its attempt, and asks again (the first recovery).
    attempts = first.status.attempts or []
    assert [(a.step, a.recoveries) for a in attempts] == [(1, 1)]
    attempts[-1].recoveries = KUEUE.max_recoveries
    again = waiting(now, T0 + HOUR, body=LADDER, status=first.status, job=f"{NAME}-r1")
    moved = run(again, KUEUE)
    assert moved.status.step == 2
    ended = (moved.status.attempts or [])[0]
    assert ended.outcome == AttemptOutcome.STUCK
    assert "2 recoveries used" in (ended.message or "")
    assert only(moved.actions, DeleteJob) == [DeleteJob(f"{NAME}-r1", "Job")]


def test_kueue_says_who_deactivated_a_workload() -> None:
    def workload(active: bool, reason: str | None, owner: str = "Job") -> dict[str, object]:
        conditions = [{"type": "Evicted", "status": "True", "reason": reason, "message": "m"}]
        return {
            "metadata": {"ownerReferences": [{"kind": owner, "name": "train-r1"}]},
            "spec": {"active": active},
            "status": {"conditions": conditions if reason else []},
        }

    assert workload_owner(workload(False, "DeactivatedDueToAdmissionCheck")) == WorkloadOwner(
        "jobs", "train-r1", "m"
    )
    assert workload_owner(workload(False, "DeactivatedDueToAdmissionCheck", "JobSet")) == (
        WorkloadOwner("jobsets", "train-r1", "m")
    )
    # A person's deactivation (reason Deactivated alone), an active one, an evicted one.
    assert workload_owner(workload(False, "Deactivated")) == WorkloadOwner("jobs", "train-r1", None)
    assert workload_owner(workload(True, None)) == WorkloadOwner("jobs", "train-r1", None)
    assert workload_owner(workload(True, "Preempted")) == WorkloadOwner("jobs", "train-r1", None)
    assert workload_owner(workload(False, "DeactivatedDueToX", "Pod")) is None


# -- a flex-start pool that sits at zero ----------------------------------------------------

FLEX_LADDER = with_(
    GPU_TWO, provisioning={"maxWaitDuration": "10h", "fallback": [{"mode": "Spot"}]}
)


def at_zero(body: dict[str, object], now: datetime, **status: object) -> Observed:
    """The flex-start request's Job waiting, its pool up with no node and no operation."""
    before = status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0, **status)  # type: ignore[arg-type]
    return observed(body, before, pool=pool_for(body), job=job_view(ready=0), service=True, now=now)


def test_a_flex_start_pool_at_zero_past_the_threshold_is_made_again() -> None:
    early = run(at_zero(GPU_TWO, T0 + timedelta(seconds=STUCK - 60)), KUEUE)
    assert only(early.actions, DeleteNodePool) == []
    assert early.requeue_after is not None
    assert early.requeue_after <= 61
    now = T0 + timedelta(seconds=STUCK)
    decision = run(at_zero(GPU_TWO, now), KUEUE)
    pool = pool_for(GPU_TWO).name
    assert only(decision.actions, DeleteNodePool) == [DeleteNodePool(pool)]
    assert only(decision.actions, DeleteJob) == [DeleteJob(NAME, "Job")]
    assert (decision.status.recoveries, decision.status.recovered_at) == (1, now)
    [event] = [e for e in decision.events if e.reason == RECOVERED]
    assert event.message.startswith(f"node pool {pool}: no node and no operation 4.0h after")
    # The threshold counts again from the recovery, on the operator's clock.
    again = at_zero(GPU_TWO, now + HOUR, recoveries=1)
    again = dataclasses.replace(
        again,
        request=dataclasses.replace(
            again.request,
            status=again.request.status.model_copy(update={"recovered_at": now}),
        ),
    )
    assert only(run(again, KUEUE).actions, DeleteNodePool) == []


def test_a_flex_start_pool_with_nodes_or_an_operation_is_not_stuck() -> None:
    now = T0 + timedelta(seconds=STUCK) + HOUR
    obs = at_zero(GPU_TWO, now)
    pool = pool_for(GPU_TWO).name
    nodes = dataclasses.replace(obs, nodes_by_pool={pool: 1})
    assert only(run(nodes, KUEUE).actions, DeleteNodePool) == []
    busy = dataclasses.replace(obs, operations={pool: OperationView("ScaleDown", True)})
    assert only(run(busy, KUEUE).actions, DeleteNodePool) == []
    off = ReconcileConfig(kueue=True, location="us-east5", stuck_after_seconds=0)
    assert only(run(obs, off).actions, DeleteNodePool) == []
    queued = waiting(now, None)
    assert only(run(queued, KUEUE).actions, DeleteNodePool) == []


def test_a_flex_start_pool_still_at_zero_after_its_recoveries_waits_out_its_step() -> None:
    # A pool at zero is also what scarce capacity looks like: the guard alone never
    # ends a step before its own maxWaitDuration (10h here).
    now = T0 + timedelta(seconds=STUCK) + HOUR
    first = run(at_zero(FLEX_LADDER, now), KUEUE)
    attempts = first.status.attempts or []
    assert [(a.step, a.recoveries) for a in attempts] == [(1, 1)]
    attempts[-1].recoveries = KUEUE.max_recoveries
    # Its pool was made again since (and sits at zero again).
    status = first.status.model_copy(update={"recovered_at": T0, "pools_to_remake": None})
    later = observed(
        FLEX_LADDER,
        status,
        pool=pool_for(FLEX_LADDER),
        job=job_view(f"{NAME}-r1", ready=0),
        service=True,
        now=now,
    )
    waits = run(later, KUEUE)
    assert waits.status.step == 1
    assert only(waits.actions, DeleteNodePool) == []
    assert waits.status.phase == Phase.WAITING_FOR_CAPACITY


def test_a_flex_start_request_queued_by_kueue_is_not_judged_by_its_pool() -> None:
    # Waiting for its queue's quota, its Job has no pod and its pool no node: not stuck.
    queued = ReconcileConfig(kueue=True, location="us-east5", default_queue="team-a")
    decision = run(at_zero(GPU_TWO, T0 + timedelta(seconds=STUCK) + HOUR), queued)
    assert only(decision.actions, DeleteNodePool) == []
    assert decision.status.recoveries == 0


# -- time lost ----------------------------------------------------------------------------


def test_time_lost_adds_each_wait_given_up() -> None:
    # A recovery four hours after the ask gives up those four hours.
    now = T0 + timedelta(seconds=STUCK)
    recovered = run(at_zero(GPU_TWO, now), KUEUE)
    assert recovered.status.lost_seconds == STUCK
    # A ladder step that ends without capacity gives up its wait since its last ask.
    first = run(deactivated(LADDER), KUEUE)  # an hour in: the first recovery
    assert first.status.lost_seconds == HOUR.total_seconds()
    again = deactivated_again(first.status, T0 + 3 * HOUR)
    moved = run(again, KUEUE)
    assert moved.status.step == 2
    # The step's attempt began at the first pass (an hour in), the recovery then too.
    assert moved.status.lost_seconds == HOUR.total_seconds() + 2 * HOUR.total_seconds()


def test_a_wait_that_runs_out_is_time_lost_and_a_wait_that_ends_in_capacity_is_not() -> None:
    body = with_(GPU_TWO, provisioning={"maxWaitDuration": "1h"})
    status = status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0)
    late = T0 + timedelta(hours=1, seconds=1)
    failed = run(
        observed(body, status, pool=pool_for(body), job=job_view(ready=0), now=late), KUEUE
    )
    assert failed.status.phase == Phase.FAILED
    assert failed.status.lost_seconds == 3601.0
    ran = run(
        observed(body, status, pool=pool_for(body), job=job_view(ready=2), now=T0 + HOUR), KUEUE
    )
    assert ran.status.phase == Phase.RUNNING
    assert ran.status.lost_seconds is None


def test_a_step_ended_stuck_and_a_request_kueue_gave_up_on_count_as_waits_without_capacity() -> (
    None
):
    first = run(deactivated(LADDER), KUEUE)
    again = deactivated_again(first.status, T0 + 3 * HOUR)
    moved = run(again, KUEUE)
    assert [(w.seconds, w.censored) for _, w in moved.tally.waits] == [(7200.0, True)]
    failed = run(deactivated(QUEUED, recoveries=KUEUE.max_recoveries), KUEUE)
    assert [(w.seconds, w.censored) for _, w in failed.tally.waits] == [(3600.0, True)]


def test_a_pool_to_make_again_is_deleted_until_seen_gone_then_made_again() -> None:
    now = T0 + timedelta(seconds=STUCK)
    recovered = run(at_zero(GPU_TWO, now), KUEUE)
    pool = pool_for(GPU_TWO)
    assert recovered.status.pools_to_remake == [pool.name]
    # Killed before the delete went: the pool is still there with no operation on it.
    job = job_view(f"{NAME}-r1", ready=0)
    after: dict[str, Any] = {"pool": pool, "job": job, "service": True, "now": now}
    lost = run(observed(GPU_TWO, recovered.status, **after), KUEUE)
    assert only(lost.actions, DeleteNodePool) == [DeleteNodePool(pool.name)]
    assert only(lost.actions, CreateJob) == []
    assert lost.status.recoveries == 1  # the same recovery, not another
    # Being deleted: wait for it.
    stopping = pool_for(GPU_TWO, PoolState.STOPPING)
    waiting_ = run(observed(GPU_TWO, lost.status, **{**after, "pool": stopping}), KUEUE)
    assert only(waiting_.actions, DeleteNodePool) == []
    assert waiting_.status.pools_to_remake == [pool.name]
    # Gone: forgotten, and made again.
    gone = run(observed(GPU_TWO, waiting_.status, **{**after, "pool": None}), KUEUE)
    assert gone.status.pools_to_remake is None
    assert [a.name for a in only(gone.actions, CreateNodePool)] == [pool.name]
