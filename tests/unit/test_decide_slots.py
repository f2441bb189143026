"""The reconcile decision around GKE's operation slots (a pool's create waiting its turn)
and pool reuse (an idle pool of the request's shape taken over)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from dws_operator.api import NodePoolStatus, Phase, TrainingRequestStatus
from dws_operator.reconcile import (
    CancelPoolOperation,
    CreateJob,
    CreateNodePool,
    OperationView,
    PoolState,
    ReconcileConfig,
    ScaleNodePoolToZero,
    TakeOverNodePool,
    pool_name_for,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.decision import DRAIN_SECONDS, PAST_DEADLINE_SECONDS
from tests.unit.decisions import (
    CONFIG,
    GPU_ONE,
    MULTI,
    NAMESPACE,
    POOL,
    T0,
    cond_tuple,
    condition,
    job_view,
    kinds,
    observed,
    plan_of,
    pool_for,
    request,
    run,
    status_at,
    with_,
)

# -- GKE's operation slots ----------------------------------------------------------------


def test_a_create_waiting_for_an_operation_slot_says_where_it_stands() -> None:
    status = status_at(Phase.PROVISIONING, MULTI, job=None)
    queued = OperationView(kind="Create", running=False, position=7, queued=40, slots=5)
    obs = dataclasses.replace(observed(MULTI, status), operations={POOL: queued})
    d = run(obs)
    assert d.actions == []  # queued already: not asked for twice
    assert d.status.phase == Phase.PROVISIONING
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "WaitingForOperationSlot")
    message = condition(d, cond.NODE_POOL_READY).message
    assert message == (
        "waiting for a GKE operation slot, position 7 in line "
        "(GKE runs 5 node pool operations at a time in this cluster)"
    )
    assert d.status.message == f"Creating node pool {POOL}: {message}"
    # The scheduler wakes it when its turn comes; the timer is only for maxWaitDuration,
    # which runs while it waits in line (requested at T0, a day's wait).
    assert d.requeue_after == 24 * 3600 + PAST_DEADLINE_SECONDS


def test_a_create_waiting_in_line_past_its_wait_times_out() -> None:
    status = status_at(Phase.PROVISIONING, MULTI, job=None)
    queued = OperationView(kind="Create", running=False, position=7, queued=40, slots=5)
    later = T0 + timedelta(hours=24, seconds=1)
    obs = dataclasses.replace(observed(MULTI, status, now=later), operations={POOL: queued})
    d = run(obs)
    assert d.status.phase == Phase.FAILED
    assert [type(a).__name__ for a in d.actions] == ["CancelPoolOperation"]


def test_a_new_create_behind_others_says_so_in_its_first_status() -> None:
    obs = dataclasses.replace(observed(MULTI), create_position=3)
    d = run(obs)
    assert d.actions == [CreateNodePool(name=POOL, plan=plan_of(MULTI))]
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "WaitingForOperationSlot")
    assert "position 3 in line" in condition(d, cond.NODE_POOL_READY).message


def test_a_running_create_is_creating_and_a_retrying_one_says_why() -> None:
    status = status_at(Phase.PROVISIONING, MULTI, job=None)
    running = OperationView(kind="Create", running=True, retrying="GKE Unavailable: try again")
    d = run(dataclasses.replace(observed(MULTI, status), operations={POOL: running}))
    assert d.actions == []
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "Creating")
    assert d.status.message == (f"Creating node pool {POOL} (GKE Unavailable: try again; retrying)")


def test_scaled_down_only_when_the_billed_nodes_are_gone_too() -> None:
    """GKE's ceiling at zero is not enough: Nodes still registered are still billed."""
    status = status_at(Phase.RUNNING, started=T0)
    done = job_view(complete=True)
    zero = pool_for(MULTI, max_nodes=0)
    obs = dataclasses.replace(observed(MULTI, status, pool=zero, job=done), nodes_by_pool={POOL: 2})
    d = run(obs)
    assert d.actions == [ScaleNodePoolToZero(POOL)]
    assert d.status.scaled_down_at is None
    gone = run(dataclasses.replace(obs, nodes_by_pool={POOL: 0}))
    assert gone.actions == []
    assert gone.status.scaled_down_at == T0


def test_a_scale_down_in_flight_is_not_asked_for_again() -> None:
    status = status_at(Phase.RUNNING, started=T0)
    done = job_view(complete=True)
    scaling = OperationView(kind="ScaleDown", running=True)
    obs = dataclasses.replace(
        observed(MULTI, status, pool=pool_for(MULTI), job=done), operations={POOL: scaling}
    )
    d = run(obs)
    assert d.actions == []
    assert d.status.scaled_down_at is None
    assert d.status.phase == Phase.SUCCEEDED


# -- pool reuse -----------------------------------------------------------------------------


def reused_status(body: dict[str, Any], pool: str) -> TrainingRequestStatus:
    status = status_at(Phase.PROVISIONING, body, job=None)
    status.node_pool = NodePoolStatus(name=pool, managed=True, reused=True)
    return status


def test_a_reused_binding_names_the_pool_and_its_takeover_is_asked_for() -> None:
    idle = "dws-someone-else-0123456789"
    status = reused_status(GPU_ONE, idle)
    assert pool_name_for(request(GPU_ONE, status)) == idle
    pool = pool_for(GPU_ONE, name=idle, ours=False, max_nodes=0)
    d = run(dataclasses.replace(observed(GPU_ONE, status, pool=pool), takeover=True))
    plan = plan_of(GPU_ONE, idle)
    assert d.actions == [TakeOverNodePool(name=idle, plan=plan)]
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "Reusing")
    assert d.status.node_pool is not None
    assert (d.status.node_pool.name, d.status.node_pool.reused) == (idle, True)
    assert d.status.phase == Phase.PROVISIONING


def test_an_idle_pool_offered_is_bound_first_and_taken_over_on_the_next_pass() -> None:
    idle = "dws-someone-else-0123456789"
    fresh = run(dataclasses.replace(observed(GPU_ONE), offer=idle))
    # The binding is the pass's whole decision: written before anything is done with it.
    assert fresh.actions == []
    assert fresh.requeue_after == 0
    assert fresh.events == []
    assert fresh.status.node_pool == NodePoolStatus(
        name=idle, managed=True, reused=True, location=CONFIG.location
    )
    assert fresh.status.phase == Phase.PENDING
    assert fresh.status.message == f"Taking over idle node pool {idle}"
    # The next pass acts on the binding its status now carries.
    pool = pool_for(GPU_ONE, name=idle, ours=False, max_nodes=0)
    bound = dataclasses.replace(observed(GPU_ONE, fresh.status, pool=pool), takeover=True)
    assert run(bound).actions == [TakeOverNodePool(name=idle, plan=plan_of(GPU_ONE, idle))]


def test_a_binding_lost_goes_and_the_request_plans_its_own_pool_next() -> None:
    idle = "dws-someone-else-0123456789"
    status = reused_status(GPU_ONE, idle)
    lost = run(dataclasses.replace(observed(GPU_ONE, status), binding_lost=True))
    assert lost.actions == []
    assert lost.requeue_after == 0
    assert lost.status.node_pool is None
    assert lost.status.phase == Phase.PROVISIONING
    again = run(observed(GPU_ONE, lost.status))
    own = request(GPU_ONE).facts.base_pool
    assert [type(a) for a in again.actions] == [CreateNodePool]
    assert again.status.node_pool is not None
    assert again.status.node_pool.name == own != idle


def test_a_refused_action_fails_the_request_in_the_decision() -> None:
    status = status_at(Phase.WAITING_FOR_CAPACITY, GPU_ONE)
    refused = ("WorkloadRejected", "Job x refused (422): bad")
    d = run(dataclasses.replace(observed(GPU_ONE, status), refusal=refused))
    assert d.status.phase == Phase.FAILED
    assert d.status.message == "WorkloadRejected: Job x refused (422): bad"
    assert cond_tuple(d, cond.COMPLETED) == ("False", "WorkloadRejected")
    # The Job the last pass named was never made: the status no longer says it was.
    assert d.status.job is None
    assert cond_tuple(d, cond.WORKLOAD_CREATED) == ("False", "WorkloadRejected")
    # Deleting wins: the clean-up runs whatever was refused.
    gone = run(dataclasses.replace(observed(GPU_ONE, status, deleting=True), refusal=refused))
    assert gone.status.phase == Phase.DELETING


def test_a_pool_not_free_to_take_is_still_refused() -> None:
    idle = "dws-someone-else-0123456789"
    status = reused_status(GPU_ONE, idle)
    pool = pool_for(GPU_ONE, name=idle, ours=False)
    d = run(observed(GPU_ONE, status, pool=pool))
    assert d.status.phase == Phase.FAILED
    assert cond_tuple(d, cond.COMPLETED) == ("False", "NodePoolNameTaken")


def test_our_pool_capped_at_zero_before_the_work_gets_its_ceiling_back() -> None:
    """A takeover cut short after the labels: ours, still at zero. The same action
    finishes it (relabelling again changes nothing)."""
    idle = "dws-someone-else-0123456789"
    status = reused_status(GPU_ONE, idle)
    pool = pool_for(GPU_ONE, name=idle, max_nodes=0)
    d = run(observed(GPU_ONE, status, pool=pool))
    assert d.actions == [TakeOverNodePool(name=idle, plan=plan_of(GPU_ONE, idle))]
    running = OperationView(kind="TakeOver", running=True)
    again = run(
        dataclasses.replace(observed(GPU_ONE, status, pool=pool), operations={idle: running})
    )
    assert again.actions == []


def test_a_pool_relabelled_while_its_ceiling_is_set_is_not_ready_yet() -> None:
    """GKE shows the pool ours (relabelled) and RECONCILING, capped at zero, while the
    takeover's second call sets its ceiling: no Job until the takeover ends."""
    idle = "dws-someone-else-0123456789"
    status = reused_status(GPU_ONE, idle)
    pool = pool_for(GPU_ONE, PoolState.RECONCILING, name=idle, max_nodes=0)
    running = OperationView(kind="TakeOver", running=True)
    d = run(dataclasses.replace(observed(GPU_ONE, status, pool=pool), operations={idle: running}))
    assert d.actions == []
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "Reusing")
    assert d.status.phase == Phase.PROVISIONING
    # Once it ended, the pool carries the request's ceiling: ready, and the Job made.
    done = run(observed(GPU_ONE, status, pool=pool_for(GPU_ONE, name=idle)))
    assert cond_tuple(done, cond.NODE_POOL_READY) == ("True", "Created")
    assert [type(a) for a in done.actions] == [CreateJob]


def test_nodes_still_going_after_a_scale_down_are_given_their_time() -> None:
    """Right after a scale-down the Node objects lag GKE's VMs: no second resize then,
    and ScaledDown waits for them; past the drain window a pool still showing Nodes is
    resized again (level-triggered)."""
    status = status_at(Phase.RUNNING, started=T0)
    done = job_view(complete=True)
    zero = pool_for(MULTI, max_nodes=0)
    lagging = dataclasses.replace(
        observed(MULTI, status, pool=zero, job=done),
        nodes_by_pool={POOL: 2},
        draining=frozenset({POOL}),
    )
    d = run(lagging)
    assert d.actions == []
    assert d.status.scaled_down_at is None
    assert d.requeue_after == DRAIN_SECONDS
    later = run(dataclasses.replace(lagging, draining=frozenset()))
    assert later.actions == [ScaleNodePoolToZero(POOL)]


@pytest.mark.parametrize("kind", ["Create", "TakeOver"])
def test_a_deleted_request_calls_off_its_pool_operation_not_yet_started(kind: str) -> None:
    """Else the pool would be made after the request is gone, for nobody."""
    status = status_at(Phase.PROVISIONING, MULTI, job=None)
    queued = OperationView(kind=kind, running=False, position=400, queued=900, slots=5)
    obs = dataclasses.replace(observed(MULTI, status, deleting=True), operations={POOL: queued})
    d = run(obs)
    assert d.actions == [CancelPoolOperation(POOL)]
    assert d.released is False
    gone = run(dataclasses.replace(obs, operations={}))
    assert gone.released is True


def test_a_deleted_request_waits_for_another_requests_takeover_of_its_pool_not_calls_it_off() -> (
    None
):
    """The takeover is the other request's: it goes on, and this one waits for it
    (its old pool is then no longer its own to delete)."""
    status = status_at(Phase.SUCCEEDED, MULTI, job=None)
    theirs = OperationView(kind="TakeOver", running=False, position=2, queued=9, mine=False)
    obs = dataclasses.replace(observed(MULTI, status, deleting=True), operations={POOL: theirs})
    d = run(obs)
    assert d.actions == []
    assert d.released is False


def test_a_deleted_request_waits_for_a_create_already_running() -> None:
    status = status_at(Phase.PROVISIONING, MULTI, job=None)
    running = OperationView(kind="Create", running=True)
    d = run(dataclasses.replace(observed(MULTI, status, deleting=True), operations={POOL: running}))
    assert d.actions == []
    assert d.released is False  # the pool shows when the create ends, then it is deleted


def test_a_timed_out_request_records_no_deletion_while_its_create_is_queued() -> None:
    body = with_(MULTI, provisioning={"maxWaitDuration": "1h"})
    status = status_at(Phase.PROVISIONING, body, job=None)
    queued = OperationView(kind="Create", running=False, position=3, queued=9, slots=5)
    later = T0 + timedelta(hours=2)
    d = run(dataclasses.replace(observed(body, status, now=later), operations={POOL: queued}))
    assert d.status.phase == Phase.FAILED
    assert d.actions == [CancelPoolOperation(POOL)]
    assert d.status.scaled_down_at is None
    assert cond.condition(d.status.conditions, cond.SCALED_DOWN) is None


QUEUEING = ReconcileConfig(kueue=True, default_queue="dws-queue", location="us-east5")


def test_a_missing_local_queue_is_said_and_no_workload_made() -> None:
    body = with_(GPU_ONE, queueName="team-q")
    status = status_at(Phase.PROVISIONING, body, job=None)
    obs = dataclasses.replace(
        observed(body, status, pool=pool_for(body)), local_queues=frozenset({"dws-queue"})
    )
    d = run(obs, QUEUEING)
    assert d.actions == []
    assert cond_tuple(d, cond.WORKLOAD_CREATED) == ("False", "LocalQueueNotFound")
    assert d.status.message == (
        f"Kueue LocalQueue {NAMESPACE}/team-q does not exist: create it, "
        "or set spec.queueName to one that does"
    )
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    assert d.status.job is None
    # Its maxWaitDuration still runs (1 day, plus 1 s); the queue's creation wakes it.
    assert d.requeue_after == 24 * 3600 + 1.0


@pytest.mark.parametrize(
    ("queues", "body"),
    [
        (frozenset({"team-q"}), with_(GPU_ONE, queueName="team-q")),
        (frozenset({"dws-queue"}), GPU_ONE),  # the operator's default queue
        (None, with_(GPU_ONE, queueName="team-q")),  # LocalQueues not watched: no check
    ],
    ids=["named", "default", "unknown"],
)
def test_an_existing_or_unknown_local_queue_gets_the_workload(
    queues: frozenset[str] | None, body: dict[str, Any]
) -> None:
    status = status_at(Phase.PROVISIONING, body, job=None)
    obs = dataclasses.replace(observed(body, status, pool=pool_for(body)), local_queues=queues)
    d = run(obs, QUEUEING)
    assert kinds(d) == ["CreateJob"]
    assert cond_tuple(d, cond.WORKLOAD_CREATED) == ("True", "JobCreated")
