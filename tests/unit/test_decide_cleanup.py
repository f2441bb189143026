"""The reconcile decision once the work ends: completion and the clean-up after it,
and deletion."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.reconcile import (
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    Event,
    JobView,
    OperationView,
    PoolState,
    PoolView,
    ScaleNodePoolToZero,
    pool_name_for,
)
from dws_operator.reconcile import conditions as cond
from tests.unit.decisions import (
    GPU_ONE,
    INVALID,
    MULTI,
    NAME,
    POOL,
    SHARED,
    SINGLE,
    T0,
    cleanup,
    cond_tuple,
    condition,
    event_reasons,
    existing,
    job_view,
    observed,
    only,
    pool_for,
    request,
    run,
    status_at,
)

# -- completion and clean-up --------------------------------------------------------------


def test_success_scales_to_zero_then_records_it_once() -> None:
    started = T0 + timedelta(minutes=10)
    t1, t2, t3 = (T0 + timedelta(hours=h) for h in (2, 3, 4))
    status = status_at(Phase.RUNNING, started=started)
    done = job_view(complete=True)

    first = run(observed(MULTI, status, pool=pool_for(MULTI), job=done, service=True, now=t1))
    assert first.actions == [ScaleNodePoolToZero(POOL)]
    assert first.status.phase == Phase.SUCCEEDED
    assert first.status.message == f"Job {NAME} succeeded"
    assert first.status.finished_at == t1
    assert first.status.scaled_down_at is None
    assert cond_tuple(first, cond.COMPLETED) == ("True", "JobSucceeded")
    assert cond.condition(first.status.conditions, cond.SCALED_DOWN) is None
    assert first.events == [Event("Normal", "Succeeded", f"Job {NAME} succeeded")]
    assert first.requeue_after is None  # the operation's end wakes it

    # Not yet at zero: asked again (idempotent), no new event.
    again = run(observed(MULTI, first.status, pool=pool_for(MULTI), job=done, now=t1))
    assert again.actions == [ScaleNodePoolToZero(POOL)]
    assert again.events == []

    zero = pool_for(MULTI, max_nodes=0)
    second = run(observed(MULTI, again.status, pool=zero, job=done, now=t2))
    assert second.actions == []
    assert second.status.phase == Phase.SUCCEEDED
    assert second.status.scaled_down_at == t2
    assert second.status.finished_at == t1
    assert cond_tuple(second, cond.SCALED_DOWN) == ("True", "ScaledToZero")
    assert second.events == [Event("Normal", "ScaledToZero", f"node pool {POOL} has no nodes")]
    assert second.requeue_after is None

    third = run(observed(MULTI, second.status, pool=zero, job=done, now=t3))
    assert third.actions == []
    assert third.events == []
    assert third.status.scaled_down_at == t2
    assert third.requeue_after is None
    assert condition(third, cond.SCALED_DOWN).last_transition_time == t2

    everything = [*first.events, *again.events, *second.events, *third.events]
    assert [e.reason for e in everything].count("ScaledToZero") == 1


def test_delete_cleanup_deletes_the_pool_then_records_it() -> None:
    body = cleanup(MULTI, "Delete")
    status = status_at(Phase.RUNNING, body, started=T0)
    done = job_view(complete=True)
    t1, t2, t3 = (T0 + timedelta(hours=h) for h in (1, 2, 3))

    first = run(observed(body, status, pool=pool_for(body), job=done, service=True, now=t1))
    assert first.actions == [DeleteNodePool(POOL)]
    assert first.status.phase == Phase.SUCCEEDED
    assert first.requeue_after is None

    stopping = pool_for(body, PoolState.STOPPING)
    second = run(observed(body, first.status, pool=stopping, job=done, now=t2))
    assert second.actions == []  # already being deleted
    assert second.requeue_after is None  # the pool gone from the snapshot wakes it
    assert second.status.scaled_down_at is None

    third = run(observed(body, second.status, pool=None, job=done, now=t3))
    assert third.actions == []
    assert third.status.scaled_down_at == t3
    assert cond_tuple(third, cond.SCALED_DOWN) == ("True", "Deleted")
    assert third.events == [Event("Normal", "Deleted", "node pool deleted")]
    assert third.requeue_after is None

    fourth = run(observed(body, third.status, pool=None, job=done, now=t3 + timedelta(hours=1)))
    assert fourth.events == []
    assert fourth.status.scaled_down_at == t3


def test_keep_cleanup_leaves_the_pool() -> None:
    body = cleanup(MULTI, "Keep")
    status = status_at(Phase.RUNNING, body, started=T0)
    obs = observed(body, status, pool=pool_for(body), job=job_view(complete=True), service=True)
    d = run(obs)
    assert d.actions == []
    assert d.status.phase == Phase.SUCCEEDED
    assert d.status.scaled_down_at is None
    assert cond.condition(d.status.conditions, cond.SCALED_DOWN) is None
    assert d.requeue_after is None
    assert event_reasons(d) == ["Succeeded"]


@pytest.mark.parametrize(
    ("policy", "actions"),
    [
        ("ScaleToZero", [ScaleNodePoolToZero(POOL)]),
        ("Delete", [DeleteNodePool(POOL)]),
        ("Keep", []),
    ],
)
@pytest.mark.parametrize(
    ("reason", "message", "expected_reason", "expected_message"),
    [
        ("BackoffLimitExceeded", "Job has reached the specified backoff limit", None, None),
        ("DeadlineExceeded", "Job was active longer than specified deadline", None, None),
        ("", "", "JobFailed", f"Job {NAME} failed"),
    ],
)
def test_failed_job_fails_the_request_and_cleans_up(
    policy: str,
    actions: list[Any],
    reason: str,
    message: str,
    expected_reason: str | None,
    expected_message: str | None,
) -> None:
    body = cleanup(MULTI, policy)
    status = status_at(Phase.RUNNING, body, started=T0)
    job = job_view(failed=True, failure_reason=reason, failure_message=message)
    now = T0 + timedelta(hours=1)
    d = run(observed(body, status, pool=pool_for(body), job=job, service=True, now=now))
    want_reason = expected_reason or reason
    want_message = expected_message or message
    assert d.actions == actions  # the Job has ended: nothing of it is deleted
    assert d.status.phase == Phase.FAILED
    assert d.status.message == f"{want_reason}: {want_message}"
    assert d.status.finished_at == now
    assert cond_tuple(d, cond.COMPLETED) == ("False", want_reason)
    assert condition(d, cond.COMPLETED).message == want_message
    assert d.events == [Event("Warning", "Failed", f"{want_reason}: {want_message}")]
    assert d.requeue_after is None  # events (Job gone, pool done) wake it


# -- deletion ---------------------------------------------------------------------------------


def test_deletion_removes_job_service_and_pool() -> None:
    status = status_at(Phase.RUNNING, started=T0)
    obs = observed(
        MULTI, status, pool=pool_for(MULTI), job=job_view(ready=4), service=True, deleting=True
    )
    d = run(obs)
    assert d.actions == [DeleteJob(NAME), DeleteService(NAME), DeleteNodePool(POOL)]
    assert d.released is False
    assert d.status.phase == Phase.DELETING
    assert d.requeue_after is None
    assert d.events == [Event("Normal", "Deleting", "Deleting the Job, Service and node pool")]


@pytest.mark.parametrize(
    ("pool", "job", "service", "actions", "released"),
    [
        (None, None, False, [], True),
        (pool_for(MULTI), None, False, [DeleteNodePool(POOL)], False),
        (pool_for(MULTI, PoolState.STOPPING), None, False, [], False),
        (pool_for(MULTI, ours=False), None, False, [], True),
        (None, job_view(), False, [DeleteJob(NAME)], False),
        (None, job_view(deleting=True), False, [], False),
        (None, job_view(ours=False), False, [], True),
        (None, None, True, [DeleteService(NAME)], False),
        (
            pool_for(MULTI, PoolState.STOPPING),
            job_view(complete=True),
            True,
            [DeleteJob(NAME), DeleteService(NAME)],
            False,
        ),
    ],
    ids=[
        "all-gone",
        "pool",
        "pool-stopping",
        "pool-not-ours",
        "job",
        "job-deleting",
        "job-not-ours",
        "service",
        "job-service-pool-stopping",
    ],
)
@pytest.mark.parametrize("policy", ["ScaleToZero", "Delete", "Keep"])
def test_deletion_is_released_only_when_everything_is_gone(
    pool: PoolView | None,
    job: JobView | None,
    service: bool,
    actions: list[Any],
    released: bool,
    policy: str,
) -> None:
    body = cleanup(MULTI, policy)
    d = run(
        observed(
            body, status_at(Phase.DELETING), pool=pool, job=job, service=service, deleting=True
        )
    )
    assert d.actions == actions
    assert d.released is released
    assert d.requeue_after is None  # deletions wake it: no timer
    assert d.status.phase == Phase.DELETING
    assert d.events == []  # already Deleting


@pytest.mark.parametrize("phase", list(Phase))
def test_deletion_event_only_when_entering_deleting(phase: Phase) -> None:
    d = run(observed(MULTI, status_at(phase), deleting=True))
    assert d.released is True
    assert event_reasons(d) == ([] if phase == Phase.DELETING else ["Deleting"])


@pytest.mark.parametrize("ours", [False, True])
def test_deletion_never_deletes_an_existing_pool(ours: bool) -> None:
    body = existing(MULTI)
    pool = pool_for(body, name=SHARED, ours=ours, max_nodes=8)
    status = status_at(Phase.RUNNING, body, started=T0)
    d = run(observed(body, status, pool=pool, job=job_view(), service=True, deleting=True))
    assert d.actions == [DeleteJob(NAME), DeleteService(NAME)]
    assert d.released is False
    d = run(observed(body, d.status, pool=pool, deleting=True))
    assert d.actions == []
    assert d.released is True


@pytest.mark.parametrize(("body", "_field"), INVALID)
def test_deletion_of_an_invalid_request_still_releases(body: dict[str, Any], _field: str) -> None:
    failed_status = TrainingRequestStatus(phase=Phase.FAILED)
    d = run(observed(body, failed_status, deleting=True))
    assert d.actions == []
    assert d.released is True


def test_deletion_leaves_a_service_that_is_not_ours() -> None:
    # A Service with the request's name but without its owner reference belongs to someone
    # else: deleting the TrainingRequest must not delete it.
    for body in (SINGLE, GPU_ONE, MULTI):
        status = status_at(Phase.SUCCEEDED, body, started=T0)
        d = run(observed(body, status, pool=None, service_taken=True, deleting=True))
        assert only(d.actions, DeleteService) == [], d.actions
        assert d.released is True


def test_a_foreign_service_fails_a_multi_host_request() -> None:
    pool = PoolView(
        name=pool_name_for(request(MULTI)),
        state=PoolState.RUNNING,
        ours=True,
        max_nodes=4,
        machine_type="ct6e-standard-4t",
    )
    d = run(observed(MULTI, pool=pool, service_taken=True))
    assert d.status.phase == Phase.FAILED
    assert d.actions == []
    assert "ServiceNameTaken" in (d.status.message or "")


def test_a_deletion_waiting_on_another_requests_operation_looks_again_itself() -> None:
    # Its old pool, taken over by another request whose scale-down is on: that
    # operation's end wakes the other request, so this one sets its own timer.
    theirs = OperationView(kind="ScaleDown", running=True, mine=False)
    obs = dataclasses.replace(
        observed(GPU_ONE, status_at(Phase.DELETING, GPU_ONE), deleting=True),
        operations={POOL: theirs},
    )
    decision = run(obs)
    assert not decision.released
    assert decision.requeue_after is not None
    assert decision.requeue_after <= 5
    # Its own operation's end wakes it: no timer then.
    mine = dataclasses.replace(obs, operations={POOL: dataclasses.replace(theirs, mine=True)})
    assert run(mine).requeue_after is None


# -- a scale-down GKE refuses -------------------------------------------------------------

REFUSED = "GKE Unavailable: SetNodePoolSize: try again"


def _capped_with_nodes_up(operation: OperationView | None, **fields: Any) -> Any:
    """A succeeded GPU request whose pool is capped at zero with its 2 nodes still up,
    and `operation` on the pool."""
    status = status_at(Phase.SUCCEEDED, GPU_ONE, started=T0, finished_at=T0, **fields)
    obs = observed(
        GPU_ONE,
        status,
        pool=pool_for(GPU_ONE, max_nodes=0),
        job=job_view(complete=True),
        now=T0 + timedelta(minutes=5),
    )
    return dataclasses.replace(
        obs,
        nodes_by_pool={POOL: 2},
        operations={} if operation is None else {POOL: operation},
    )


def test_a_scale_down_gke_refuses_is_said_with_its_words_and_the_nodes_up() -> None:
    waiting = OperationView(kind="ScaleDown", running=False, retrying=REFUSED)
    d = run(_capped_with_nodes_up(waiting))
    scaled = condition(d, cond.SCALED_DOWN)
    assert (scaled.status, scaled.reason) == ("False", "Retrying")
    assert scaled.message == (
        f"GKE refused to scale node pool {POOL} down ({REFUSED}); trying again, 2 node(s) still up"
    )
    assert only(d.actions, ScaleNodePoolToZero) == []  # the scheduler tries it again


@pytest.mark.parametrize(
    "operation",
    [
        OperationView(kind="ScaleDown", running=True, retrying=REFUSED),
        OperationView(kind="ScaleDown", running=False, retrying=REFUSED, mine=False),
        OperationView(kind="TakeOver", running=False, retrying=REFUSED),
        OperationView(kind="ScaleDown", running=False),
    ],
    ids=["running-now", "another-requests", "a-takeover", "not-refused"],
)
def test_only_this_requests_refused_scale_down_waiting_to_be_retried_is_said(
    operation: OperationView,
) -> None:
    d = run(_capped_with_nodes_up(operation))
    scaled = cond.condition(d.status.conditions, cond.SCALED_DOWN)
    assert scaled is None or scaled.reason != "Retrying"


def test_once_gke_takes_the_scale_down_the_refusal_is_no_longer_said() -> None:
    refused = run(
        _capped_with_nodes_up(OperationView(kind="ScaleDown", running=False, retrying=REFUSED))
    )
    taken = _capped_with_nodes_up(OperationView(kind="ScaleDown", running=True, retrying=REFUSED))
    d = run(dataclasses.replace(taken, request=request(GPU_ONE, refused.status)))
    assert cond_tuple(d, cond.SCALED_DOWN) == ("False", "Resizing")
    assert condition(d, cond.SCALED_DOWN).message == f"scaling node pool {POOL} down to zero"


def test_a_deletion_waits_for_an_earlier_attempts_job_being_deleted() -> None:
    obs = dataclasses.replace(
        observed(GPU_ONE, status_at(Phase.DELETING, GPU_ONE), deleting=True),
        stale_jobs=(f"{NAME}-r1",),
        stale_going=frozenset({f"{NAME}-r1"}),
    )
    d = run(obs)
    assert d.actions == []  # asked to go already
    assert d.released is False
    gone = run(dataclasses.replace(obs, stale_jobs=(), stale_going=frozenset()))
    assert gone.released is True
