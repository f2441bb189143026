"""The reconcile decision on a request's workload: waiting for capacity and running,
maxWaitDuration, Kueue and its queues, restarts after preemption."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

import pytest

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.reconcile import (
    CreateJob,
    CreateService,
    Decision,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    Event,
    JobView,
    ReconcileConfig,
    ScaleNodePoolToZero,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.decision import RUNNING_POLL_SECONDS
from dws_operator.workload import MAX_RUN_ANNOTATION, QUEUE_LABEL
from tests.builders import gpu, spec_body, tpu
from tests.unit.decisions import (
    BODIES,
    CONFIG,
    GPU_ONE,
    GPU_TWO,
    KUEUE,
    MULTI,
    NAME,
    POOL,
    QUEUED,
    SINGLE,
    T0,
    cleanup,
    cond_tuple,
    condition,
    event_reasons,
    job_view,
    observed,
    only,
    plan_of,
    pool_for,
    run,
    status_at,
    with_,
)

# -- waiting for capacity, running --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "ready"),
    [(MULTI, 0), (MULTI, 1), (MULTI, 3), (GPU_TWO, 1), (SINGLE, 0), (GPU_ONE, 0)],
)
def test_job_not_ready_keeps_waiting(body: dict[str, Any], ready: int) -> None:
    status = status_at(Phase.WAITING_FOR_CAPACITY, body)
    d = run(
        observed(
            body,
            status,
            pool=pool_for(body),
            job=job_view(ready=ready),
            service=True,
            now=T0 + timedelta(hours=1),
        )
    )
    nodes = plan_of(body).nodes
    assert d.actions == []
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    message = f"Waiting for capacity: {ready}/{nodes} nodes ready"
    assert d.status.message == message
    assert condition(d, cond.CAPACITY_PROVISIONED).message == message
    assert cond_tuple(d, cond.CAPACITY_PROVISIONED) == ("False", "Waiting")
    assert d.status.started_at is None
    assert d.events == []
    # An hour of the day's wait is gone; with no pod ready, it looks again when its pool
    # could have stuck at zero (the stuck guard's threshold) first.
    stuck = CONFIG.stuck_after_seconds - 3600 + 1.0
    assert d.requeue_after == (23 * 3600 + 1.0 if ready else stuck)


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_all_nodes_ready_is_running(body: dict[str, Any]) -> None:
    plan = plan_of(body)
    now = T0 + timedelta(minutes=30)
    status = status_at(Phase.WAITING_FOR_CAPACITY, body)
    job = job_view(ready=plan.nodes)
    d = run(observed(body, status, pool=pool_for(body), job=job, service=True, now=now))
    assert d.actions == []
    assert d.status.phase == Phase.RUNNING
    assert d.status.message == f"Running on {plan.nodes} x {plan.machine_type}"
    assert d.status.started_at == now
    assert d.status.provisioned_at == now
    assert d.status.requested_at == T0
    assert d.status.finished_at is None
    assert cond_tuple(d, cond.CAPACITY_PROVISIONED) == ("True", "NodesReady")
    assert d.events == [Event("Normal", "Running", d.status.message)]
    assert d.requeue_after == RUNNING_POLL_SECONDS  # Job events wake it sooner


def test_running_keeps_its_start_time_even_when_pods_drop() -> None:
    started = T0 + timedelta(minutes=10)
    status = status_at(Phase.RUNNING, started=started)
    later = T0 + timedelta(days=3)  # older than maxWaitDuration: no timeout once started
    obs = observed(
        MULTI, status, pool=pool_for(MULTI), job=job_view(ready=2), service=True, now=later
    )
    d = run(obs)
    assert d.status.phase == Phase.RUNNING
    assert (d.status.started_at, d.status.provisioned_at) == (started, started)
    assert d.actions == []
    assert d.events == []


def test_suspended_job_waits_like_any_other() -> None:
    status = status_at(Phase.WAITING_FOR_CAPACITY)
    job = job_view()  # created suspended: Kueue has not admitted it
    d = run(observed(MULTI, status, pool=pool_for(MULTI), job=job, service=True), KUEUE)
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    assert d.actions == []


# -- maxWaitDuration ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "service", "expected"),
    [
        (
            MULTI,
            True,
            [DeleteJob(NAME), DeleteService(NAME), DeleteNodePool(POOL)],
        ),
        # A pool that never got capacity is deleted even with ScaleToZero (nothing else
        # could use it); Keep still keeps it.
        (GPU_TWO, True, [DeleteJob(NAME), DeleteService(NAME), DeleteNodePool(POOL)]),
        (SINGLE, False, [DeleteJob(NAME), DeleteNodePool(POOL)]),
        (
            cleanup(MULTI, "Delete"),
            True,
            [DeleteJob(NAME), DeleteService(NAME), DeleteNodePool(POOL)],
        ),
        (cleanup(MULTI, "Keep"), True, [DeleteJob(NAME), DeleteService(NAME)]),
    ],
)
def test_capacity_timeout(body: dict[str, Any], service: bool, expected: list[Any]) -> None:
    body = with_(body, provisioning={"maxWaitDuration": "1h"})
    plan = plan_of(body)
    status = status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0)
    now = T0 + timedelta(hours=1, seconds=1)
    job = job_view(ready=plan.nodes - 1 if plan.nodes > 1 else 0)
    d = run(observed(body, status, pool=pool_for(body), job=job, service=service, now=now))
    assert d.actions == expected
    assert d.status.phase == Phase.FAILED
    message = f"no capacity for {plan.nodes} x {plan.machine_type} within 1h"
    assert d.status.message == f"CapacityTimeout: {message}"
    assert cond_tuple(d, cond.COMPLETED) == ("False", "CapacityTimeout")
    assert d.status.finished_at == now
    assert d.status.started_at is None
    assert d.events == [Event("Warning", "Failed", f"CapacityTimeout: {message}")]
    assert d.requeue_after is None
    assert (d.tally.capacity_timeout, d.tally.restarts, d.tally.chip_seconds) == (True, 0, 0.0)


def test_capacity_timeout_follow_up_finishes_the_clean_up_quietly() -> None:
    body = with_(MULTI, provisioning={"maxWaitDuration": "1h"})
    status = status_at(Phase.WAITING_FOR_CAPACITY, body)
    late = T0 + timedelta(hours=2)
    first = run(observed(body, status, pool=pool_for(body), job=job_view(), service=True, now=late))
    assert first.status.phase == Phase.FAILED
    # The Job is still being deleted: ask again, no new event, finished_at unchanged.
    second = run(
        observed(
            body,
            first.status,
            pool=pool_for(body),
            job=job_view(),
            service=True,
            now=late + timedelta(seconds=5),
        )
    )
    assert second.actions == [DeleteJob(NAME), DeleteService(NAME), DeleteNodePool(POOL)]
    assert second.events == []
    assert second.status.finished_at == late
    assert cond_tuple(second, cond.COMPLETED) == ("False", "CapacityTimeout")
    # Everything gone, the pool too: done.
    third = run(observed(body, second.status, pool=None, now=late + timedelta(seconds=10)))
    assert third.actions == []
    assert third.requeue_after is None
    assert third.status.scaled_down_at == late + timedelta(seconds=10)
    assert event_reasons(third) == ["Deleted"]


@pytest.mark.parametrize(
    ("wait", "waited", "times_out"),
    [
        ("1h", timedelta(minutes=59), False),
        ("1h", timedelta(hours=1), False),  # not more than the limit yet
        ("1h", timedelta(hours=1, seconds=1), True),
        ("90m", timedelta(minutes=91), True),
        ("24h", timedelta(hours=23, minutes=59), False),
        ("24h", timedelta(days=1, seconds=1), True),
        ("0s", timedelta(days=365), False),  # 0s waits forever
        ("0s", timedelta(days=3650), False),
    ],
)
def test_max_wait_duration(wait: str, waited: timedelta, times_out: bool) -> None:
    body = with_(MULTI, provisioning={"maxWaitDuration": wait})
    status = status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0)
    obs = observed(
        body, status, pool=pool_for(body), job=job_view(ready=1), service=True, now=T0 + waited
    )
    d = run(obs)
    if times_out:
        assert d.status.phase == Phase.FAILED
        assert cond_tuple(d, cond.COMPLETED) == ("False", "CapacityTimeout")
        assert DeleteJob(NAME) in d.actions
    else:
        assert d.status.phase == Phase.WAITING_FOR_CAPACITY
        assert d.actions == []
        assert d.status.finished_at is None


def test_default_max_wait_is_a_day() -> None:
    status = status_at(Phase.WAITING_FOR_CAPACITY)
    pool = pool_for(MULTI)
    at_limit = run(observed(MULTI, status, pool=pool, job=job_view(), now=T0 + timedelta(hours=24)))
    past = run(
        observed(MULTI, status, pool=pool, job=job_view(), now=T0 + timedelta(hours=24, seconds=1))
    )
    assert at_limit.status.phase == Phase.WAITING_FOR_CAPACITY
    assert past.status.phase == Phase.FAILED
    assert "within 24h" in (past.status.message or "")


@pytest.mark.parametrize(
    ("status", "job", "now"),
    [
        (status_at(Phase.RUNNING, started=T0), job_view(complete=True), T0),
        (status_at(Phase.RUNNING, started=T0), job_view(failed=True), T0),
        (status_at(Phase.WAITING_FOR_CAPACITY), job_view(), T0 + timedelta(days=2)),
        (status_at(Phase.PROVISIONING, job=None), job_view(ours=False), T0),
    ],
    ids=["succeeded", "job-failed", "capacity-timeout", "job-name-taken"],
)
def test_a_pass_that_ends_the_request_creates_nothing(
    status: TrainingRequestStatus, job: JobView, now: datetime
) -> None:
    # The Service of a multi-host slice is missing when the request ends: creating one
    # now only leaves an object behind that nothing will ever use (or delete).
    d = run(observed(MULTI, status, pool=pool_for(MULTI), job=job, service=False, now=now))
    assert d.status.phase in (Phase.SUCCEEDED, Phase.FAILED)
    assert only(d.actions, CreateService) == [], d.actions
    assert only(d.actions, CreateJob) == []


# -- Kueue ----------------------------------------------------------------------------------


def test_queued_provisioning_without_kueue_fails() -> None:
    d = run(observed(QUEUED), CONFIG)
    assert d.actions == []
    assert d.status.phase == Phase.FAILED
    assert cond_tuple(d, cond.COMPLETED) == ("False", "KueueRequired")
    assert (d.status.message or "").startswith("KueueRequired: ")
    assert "Kueue" in (d.status.message or "")
    assert cond_tuple(d, cond.VALID) == ("True", "Planned")
    assert d.events == [Event("Warning", "Failed", d.status.message or "")]
    again = run(observed(QUEUED, d.status, now=T0 + timedelta(seconds=1)), CONFIG)
    assert again.events == []
    assert again.actions == []
    assert again.status.phase == Phase.FAILED
    assert again.requeue_after is None


@pytest.mark.parametrize(
    ("body", "config", "queue", "annotation"),
    [
        (with_(QUEUED, queueName="team-a"), KUEUE, "team-a", "604800"),
        (
            with_(QUEUED, queueName="team-a", provisioning={"maxRunDuration": "6h"}),
            KUEUE,
            "team-a",
            "21600",
        ),
        (QUEUED, ReconcileConfig(kueue=True, default_queue="default-q"), "default-q", "604800"),
        (
            with_(QUEUED, queueName="team-a"),
            ReconcileConfig(kueue=True, default_queue="default-q"),
            "team-a",
            "604800",
        ),
        (with_(MULTI, queueName="team-a"), KUEUE, "team-a", None),
        (GPU_ONE, ReconcileConfig(kueue=True, default_queue="default-q"), "default-q", None),
    ],
)
def test_kueue_queues_the_job_suspended(
    body: dict[str, Any], config: ReconcileConfig, queue: str, annotation: str | None
) -> None:
    status = status_at(Phase.PROVISIONING, body, job=None)
    d = run(observed(body, status, pool=pool_for(body)), config)
    (create,) = only(d.actions, CreateJob)
    job = create.manifest
    assert job["metadata"]["labels"][QUEUE_LABEL] == queue
    assert job["spec"]["suspend"] is True
    if annotation is None:
        assert MAX_RUN_ANNOTATION not in job["metadata"]["annotations"]
    else:
        assert job["metadata"]["annotations"][MAX_RUN_ANNOTATION] == annotation
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY


@pytest.mark.parametrize(
    "config",
    [CONFIG, ReconcileConfig(kueue=False, default_queue="default-q")],
)
def test_without_kueue_no_job_is_queued(config: ReconcileConfig) -> None:
    body = with_(MULTI, queueName="team-a")
    status = status_at(Phase.PROVISIONING, body, job=None)
    d = run(observed(body, status, pool=pool_for(body)), config)
    (create,) = only(d.actions, CreateJob)
    assert QUEUE_LABEL not in create.manifest["metadata"]["labels"]
    assert "suspend" not in create.manifest["spec"]


def test_queued_provisioning_never_creates_a_job_kueue_will_not_admit() -> None:
    # Kueue on, but no queueName and no default queue: a Job without the queue label is
    # never admitted, so no ProvisioningRequest is made and the queued pool (which scales
    # up only through one) never gets nodes: the Job would wait forever.
    status = status_at(Phase.PROVISIONING, QUEUED, job=None)
    d = run(observed(QUEUED, status, pool=pool_for(QUEUED)), KUEUE)
    for create in only(d.actions, CreateJob):
        labels = create.manifest["metadata"]["labels"]
        assert QUEUE_LABEL in labels, "QueuedProvisioning Job created without a Kueue queue"
        assert create.manifest["spec"].get("suspend") is True


# -- restarts after preemption ------------------------------------------------------------------

SPOT = spec_body(tpu("v6e", "4x4"), mode="Spot")  # maxRestarts defaults to 6 for Spot


def _preempted(restarts: int, body: dict[str, Any] = SPOT) -> Decision:
    status = status_at(
        Phase.RUNNING,
        body,
        started=T0,
        restarts=restarts,
        job=NAME if restarts == 0 else f"{NAME}-r{restarts}",
    )
    job = job_view(
        NAME if restarts == 0 else f"{NAME}-r{restarts}",
        failed=True,
        disrupted=True,
        failure_reason="PodFailurePolicy",
        failure_message="Pod has condition DisruptionTarget matching FailJob rule at index 0",
    )
    return run(
        observed(
            body, status, pool=pool_for(body), job=job, service=True, now=T0 + timedelta(minutes=5)
        )
    )


def test_a_preempted_job_is_restarted() -> None:
    d = _preempted(0)
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    assert d.status.restarts == 1
    assert d.status.started_at is None
    assert d.status.requested_at == T0 + timedelta(minutes=5)  # the wait starts again
    # The decision says what the metrics count: one restart, the hold of its chips.
    assert d.tally.restarts == 1
    assert d.tally.transition == ("Running", "WaitingForCapacity")
    assert d.tally.chip_seconds > 0
    assert [a.name for a in only(d.actions, DeleteJob)] == [NAME]
    assert only(d.actions, ScaleNodePoolToZero) == []
    assert "Restarting" in event_reasons(d)
    assert cond_tuple(d, "CapacityProvisioned") == ("False", "Restarting")


def test_the_next_pass_creates_the_next_attempt() -> None:
    status = status_at(Phase.WAITING_FOR_CAPACITY, SPOT, restarts=1)
    d = run(observed(SPOT, status, pool=pool_for(SPOT), service=True))
    [create] = only(d.actions, CreateJob)
    assert create.manifest["metadata"]["name"] == f"{NAME}-r1"
    env = create.manifest["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "DWS_ATTEMPT", "value": "1"} in env
    assert d.status.job is not None
    assert d.status.job.name == f"{NAME}-r1"


def test_restarts_stop_at_max_restarts() -> None:
    d = _preempted(6)
    assert d.status.phase == Phase.FAILED
    assert condition(d, "Completed").reason == "PreemptedTooOften"
    assert d.status.restarts == 6
    assert only(d.actions, ScaleNodePoolToZero)  # and the pool goes back to zero


def test_on_demand_does_not_restart_by_default() -> None:
    body = spec_body(tpu("v6e", "4x4"), mode="OnDemand")
    d = _preempted(0, body)
    assert d.status.phase == Phase.FAILED
    assert condition(d, "Completed").reason == "PreemptedTooOften"


def test_a_failure_of_the_code_is_not_a_preemption() -> None:
    status = status_at(Phase.RUNNING, SPOT, started=T0)
    job = job_view(failed=True, failure_reason="BackoffLimitExceeded", failure_message="exit 1")
    d = run(observed(SPOT, status, pool=pool_for(SPOT), job=job, service=True))
    assert d.status.phase == Phase.FAILED
    assert d.status.restarts == 0
    assert condition(d, "Completed").reason == "BackoffLimitExceeded"
    assert (d.tally.restarts, d.tally.capacity_timeout) == (0, False)


def test_stale_attempts_are_deleted() -> None:
    """A crash between writing restarts=1 and deleting the old Job leaves it behind."""
    status = status_at(Phase.WAITING_FOR_CAPACITY, SPOT, restarts=1)
    obs = dataclasses.replace(
        observed(SPOT, status, pool=pool_for(SPOT), service=True), stale_jobs=(NAME,)
    )
    d = run(obs)
    assert [a.name for a in only(d.actions, DeleteJob)] == [NAME]
    assert [a.manifest["metadata"]["name"] for a in only(d.actions, CreateJob)] == [f"{NAME}-r1"]


def test_a_stale_attempt_being_deleted_is_not_asked_to_go_again() -> None:
    """A delete of a Job being deleted is a write for nothing (a foreground one puts the
    collector's finalizer back, an event that brings another pass: a loop), while the
    new attempt still waits for it."""
    status = status_at(Phase.WAITING_FOR_CAPACITY, SPOT, restarts=1)
    obs = dataclasses.replace(
        observed(SPOT, status, pool=pool_for(SPOT), service=True),
        stale_jobs=(NAME,),
        stale_going=frozenset({NAME}),
    )
    assert only(run(obs).actions, DeleteJob) == []
    deleting = dataclasses.replace(
        obs,
        request=dataclasses.replace(obs.request, deleting=True),
    )
    assert only(run(deleting).actions, DeleteJob) == []


def test_deletion_removes_every_attempt() -> None:
    status = status_at(Phase.RUNNING, SPOT, started=T0, restarts=1, job=f"{NAME}-r1")
    obs = dataclasses.replace(
        observed(SPOT, status, pool=pool_for(SPOT), job=job_view(f"{NAME}-r1"), deleting=True),
        stale_jobs=(NAME,),
    )
    d = run(obs)
    assert sorted(a.name for a in only(d.actions, DeleteJob)) == [NAME, f"{NAME}-r1"]
    assert not d.released


# -- Kueue queue routing -----------------------------------------------------------------------

ROUTED = ReconcileConfig(
    kueue=True, default_queue="dws-queue", queued_queue="dws-queued", location="us-east5"
)


def _queue_of(body: dict[str, Any]) -> str:
    d = run(observed(body, pool=pool_for(body), service=True), ROUTED)
    [create] = only(d.actions, CreateJob)
    return str(create.manifest["metadata"]["labels"]["kueue.x-k8s.io/queue-name"])


def test_queued_provisioning_goes_to_the_queue_with_the_provisioning_check() -> None:
    assert _queue_of(spec_body(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning")) == (
        "dws-queued"
    )


def test_other_modes_go_to_the_default_queue() -> None:
    assert _queue_of(spec_body(gpu("nvidia-h100-80gb", nodes=2), "FlexStart")) == "dws-queue"
    assert _queue_of(MULTI) == "dws-queue"


def test_a_named_queue_wins() -> None:
    body = spec_body(gpu("nvidia-h100-80gb"), "QueuedProvisioning", queueName="team-q")
    assert _queue_of(body) == "team-q"
