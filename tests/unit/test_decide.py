"""The reconcile decision (`dws_operator.reconcile`): observed state in; status, actions,
events and requeue out. Pure: every test builds `Observed` values by hand."""

from __future__ import annotations

import copy as copy_module
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest

from dws_operator.api import (
    Condition,
    NodePoolStatus,
    ObjectReference,
    Phase,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.errors import InvalidSpec
from dws_operator.naming import default_node_pool_name
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.reconcile import (
    CancelPoolOperation,
    CreateJob,
    CreateNodePool,
    CreateService,
    Decision,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    Event,
    JobView,
    Observed,
    OperationView,
    PoolState,
    PoolView,
    ReconcileConfig,
    RequestView,
    ScaleNodePoolToZero,
    TakeOverNodePool,
    decide,
    failed,
    pool_name_for,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.conditions import set_condition
from dws_operator.reconcile.decide import (
    DRAIN_SECONDS,
    PAST_DEADLINE_SECONDS,
    RUNNING_POLL_SECONDS,
    planned,
)
from dws_operator.workload import (
    MAX_RUN_ANNOTATION,
    QUEUE_LABEL,
    RequestRef,
    render_job,
    render_service,
)
from tests.builders import gpu, spec_body, tpu

NAME = "llama"
NAMESPACE = "ml"
UID = "6f1c2a40-0000-4000-8000-00000000beef"
POOL = default_node_pool_name(NAME, UID)
REF = RequestRef(NAME, NAMESPACE, UID)
T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
NODE_POOL_LABEL = "cloud.google.com/gke-nodepool"
CONFIG = ReconcileConfig(location="us-east5")
KUEUE = ReconcileConfig(kueue=True, location="us-east5")

MULTI = spec_body(tpu("v6e", "4x4"))  # 4 x ct6e-standard-4t
SINGLE = spec_body(tpu("v6e", "2x2"))  # 1 x ct6e-standard-4t
GPU_ONE = spec_body(gpu("nvidia-h100-80gb"))  # 1 x a3-highgpu-8g
GPU_TWO = spec_body(gpu("nvidia-h100-80gb", nodes=2))  # 2 x a3-highgpu-8g
QUEUED = spec_body(gpu("nvidia-h100-80gb", nodes=2), mode="QueuedProvisioning")
BODIES = {"multi-tpu": MULTI, "single-tpu": SINGLE, "gpu-1": GPU_ONE, "gpu-2": GPU_TWO}
SHARED = "shared-pool"

A = TypeVar("A")


# -- builders ---------------------------------------------------------------------------


def with_(body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """`body` with top-level fields replaced (`provisioning` is merged)."""
    out = dict(body)
    for key, value in extra.items():
        out[key] = {**out.get(key, {}), **value} if key == "provisioning" else value
    return out


def existing(body: dict[str, Any], cleanup: str = "ScaleToZero") -> dict[str, Any]:
    return with_(body, nodePool={"name": SHARED, "existing": True, "cleanup": cleanup})


def cleanup(body: dict[str, Any], policy: str) -> dict[str, Any]:
    return with_(body, nodePool={"cleanup": policy})


def plan_of(body: dict[str, Any], pool: str = POOL) -> SlicePlan:
    return plan_slice(TrainingRequestSpec.model_validate(body), pool_name=pool)


def request(
    body: dict[str, Any],
    status: TrainingRequestStatus | None = None,
    *,
    generation: int = 1,
    deleting: bool = False,
) -> RequestView:
    return RequestView(
        name=NAME,
        namespace=NAMESPACE,
        uid=UID,
        generation=generation,
        deleting=deleting,
        spec=body,
        status=status if status is not None else TrainingRequestStatus(),
    )


def observed(
    body: dict[str, Any],
    status: TrainingRequestStatus | None = None,
    *,
    pool: PoolView | None = None,
    job: JobView | None = None,
    service: bool = False,
    service_taken: bool = False,
    now: datetime = T0,
    used: int = 0,
    generation: int = 1,
    deleting: bool = False,
) -> Observed:
    return Observed(
        request=request(body, status, generation=generation, deleting=deleting),
        now=now,
        pool=pool,
        job=job,
        service_exists=service,
        service_taken=service_taken,
        nodes_used_by_others=used,
    )


def pool_for(
    body: dict[str, Any],
    state: PoolState = PoolState.RUNNING,
    *,
    ours: bool = True,
    max_nodes: int | None = None,
    name: str = POOL,
    machine_type: str | None = None,
    accelerator_type: str | None = None,
    message: str = "",
) -> PoolView:
    """The pool as the plan of `body` would have it created (max = nodes of the slice)."""
    plan = plan_of(body, name)
    return PoolView(
        name=name,
        state=state,
        ours=ours,
        max_nodes=plan.nodes if max_nodes is None else max_nodes,
        machine_type=machine_type or plan.machine_type,
        accelerator_type=accelerator_type,
        message=message,
    )


def job_view(name: str = NAME, **fields: Any) -> JobView:
    return JobView(name=name, **{"ours": True, **fields})


def only(actions: list[Any], kind: type[A]) -> list[A]:
    return [a for a in actions if isinstance(a, kind)]


def kinds(decision: Decision) -> list[str]:
    return [type(a).__name__ for a in decision.actions]


def condition(decision: Decision | TrainingRequestStatus, type_: str) -> Condition:
    status = decision.status if isinstance(decision, Decision) else decision
    found = cond.condition(status.conditions, type_)
    assert found is not None, f"no {type_} condition in {status.conditions}"
    return found


def cond_tuple(decision: Decision, type_: str) -> tuple[str, str]:
    c = condition(decision, type_)
    return (c.status, c.reason)


def event_reasons(decision: Decision) -> list[str]:
    return [e.reason for e in decision.events]


def status_at(
    phase: Phase,
    body: dict[str, Any] = MULTI,
    *,
    requested: datetime | None = T0,
    started: datetime | None = None,
    job: str | None = NAME,
    **fields: Any,
) -> TrainingRequestStatus:
    """A status as an earlier pass of `decide` would have left it."""
    spec = TrainingRequestSpec.model_validate(body)
    pool_name = pool_name_for(request(body))
    return TrainingRequestStatus(
        phase=phase,
        plan=plan_of(body, pool_name).summary(),
        node_pool=NodePoolStatus(
            name=pool_name, managed=not spec.node_pool.existing, location="us-east5"
        ),
        job=ObjectReference(name=job) if job else None,
        requested_at=requested,
        started_at=started,
        provisioned_at=started,
        observed_generation=1,
        **fields,
    )


def run(obs: Observed, config: ReconcileConfig = CONFIG) -> Decision:
    """`decide`, checking the invariants every decision keeps."""
    before = obs.request.status.model_dump()
    decision = decide(obs, config)
    assert obs.request.status.model_dump() == before, "decide mutated the observed status"
    assert decision.status is not obs.request.status
    assert decision.status.observed_generation == obs.request.generation
    assert len({c.type for c in decision.status.conditions}) == len(decision.status.conditions)
    for event in decision.events:
        assert event.type in ("Normal", "Warning")
    if not obs.request.deleting:
        assert decision.released is False
    return decision


# -- pool_name_for ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_pool", "expected"),
    [
        (None, POOL),
        ({}, POOL),
        ({"cleanup": "Delete"}, POOL),
        ({"name": "my-pool"}, "my-pool"),
        ({"name": "my-pool", "existing": True}, "my-pool"),
        ({"name": ""}, POOL),
        ({"name": None}, POOL),
        ({"name": 42}, POOL),
        ("not-a-mapping", POOL),
    ],
)
def test_pool_name_for(node_pool: Any, expected: str) -> None:
    body = dict(MULTI)
    if node_pool is not None:
        body["nodePool"] = node_pool
    assert pool_name_for(request(body)) == expected


def test_derived_pool_name_is_deterministic_per_uid() -> None:
    assert POOL.startswith("dws-llama-")
    assert len(POOL) <= 40
    again = pool_name_for(request(MULTI))
    other = RequestView(NAME, NAMESPACE, "another-uid", 1, False, MULTI, TrainingRequestStatus())
    assert again == POOL
    assert pool_name_for(other) != POOL


# -- a fresh request ----------------------------------------------------------------------


@pytest.mark.parametrize("body", BODIES.values(), ids=BODIES.keys())
def test_fresh_request_creates_the_node_pool(body: dict[str, Any]) -> None:
    d = run(observed(body))
    plan = plan_of(body)
    assert d.actions == [CreateNodePool(name=POOL, plan=plan)]
    assert only(d.actions, CreateNodePool)[0].plan.node_pool.name == POOL
    assert d.status.phase == Phase.PROVISIONING
    assert d.status.message == f"Creating node pool {POOL}"
    assert d.status.requested_at == T0
    assert d.status.plan == plan.summary()
    assert d.status.node_pool == NodePoolStatus(name=POOL, managed=True, location="us-east5")
    assert d.status.job is None
    assert cond_tuple(d, cond.VALID) == ("True", "Planned")
    assert condition(d, cond.VALID).message == f"{plan.nodes} x {plan.machine_type}"
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "Creating")
    assert condition(d, cond.NODE_POOL_READY).last_transition_time == T0
    assert d.events == [Event("Normal", "Provisioning", f"Creating node pool {POOL}")]
    # The scheduler wakes it when GKE is done; the timer is maxWaitDuration's deadline.
    assert d.requeue_after == 24 * 3600 + PAST_DEADLINE_SECONDS
    assert d.released is False


def test_named_pool_is_created_under_its_name() -> None:
    body = with_(MULTI, nodePool={"name": "my-pool"})
    d = run(observed(body))
    assert d.actions == [CreateNodePool(name="my-pool", plan=plan_of(body, "my-pool"))]
    assert d.status.node_pool is not None
    assert d.status.node_pool.name == "my-pool"
    assert d.status.plan is not None
    assert d.status.plan.node_selector[NODE_POOL_LABEL] == "my-pool"


def test_requested_at_is_kept_on_later_passes() -> None:
    first = run(observed(MULTI, now=T0))
    later = run(observed(MULTI, first.status, now=T0 + timedelta(minutes=5)))
    assert later.status.requested_at == T0


# -- the pool comes up ----------------------------------------------------------------------


@pytest.mark.parametrize("state", [PoolState.PROVISIONING, PoolState.STOPPING])
def test_pool_not_ready_waits(state: PoolState) -> None:
    status = status_at(Phase.PROVISIONING, job=None)
    d = run(observed(MULTI, status, pool=pool_for(MULTI, state)))
    assert d.actions == []
    assert d.status.phase == Phase.PROVISIONING
    assert d.status.message == f"Node pool {POOL} is {state.value.lower()}"
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "Provisioning")
    assert d.events == []
    # The pool's next snapshot wakes it; the timer is maxWaitDuration's deadline.
    assert d.requeue_after == 24 * 3600 + PAST_DEADLINE_SECONDS


@pytest.mark.parametrize(
    "state", [PoolState.RUNNING, PoolState.RECONCILING, PoolState.RUNNING_WITH_ERROR]
)
def test_usable_pool_states_go_on_to_the_workload(state: PoolState) -> None:
    status = status_at(Phase.PROVISIONING, job=None)
    d = run(observed(SINGLE, status, pool=pool_for(SINGLE, state)))
    assert kinds(d) == ["CreateJob"]
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("True", "Created")


@pytest.mark.parametrize(
    ("body", "service"),
    [(MULTI, True), (GPU_TWO, True), (SINGLE, False), (GPU_ONE, False)],
    ids=["multi-tpu", "gpu-2", "single-tpu", "gpu-1"],
)
def test_running_pool_creates_service_and_job(body: dict[str, Any], service: bool) -> None:
    status = status_at(Phase.PROVISIONING, body, job=None)
    d = run(observed(body, status, pool=pool_for(body)))
    spec = TrainingRequestSpec.model_validate(body)
    plan = plan_of(body)
    job = render_job(REF, spec, plan, attempt=0, queue=None)
    expected: list[Any] = [CreateService(render_service(REF))] if service else []
    assert d.actions == [*expected, CreateJob(job)]  # the Service first: DNS before pods
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    assert d.status.message == f"Waiting for capacity: 0/{plan.nodes} nodes"
    assert d.status.job == ObjectReference(name=NAME)
    assert d.status.service == (ObjectReference(name=NAME) if service else None)
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("True", "Created")
    assert cond_tuple(d, cond.WORKLOAD_CREATED) == ("True", "JobCreated")
    assert cond_tuple(d, cond.CAPACITY_PROVISIONED) == ("False", "Waiting")
    assert d.events == [Event("Normal", "WaitingForCapacity", d.status.message)]
    # Nothing to poll for: next look at the deadline (maxWaitDuration 1 day), plus 1 s.
    assert d.requeue_after == 24 * 3600 + 1.0
    created = only(d.actions, CreateJob)[0].manifest
    assert created["spec"]["template"]["spec"]["nodeSelector"][NODE_POOL_LABEL] == POOL
    assert created["metadata"]["ownerReferences"][0]["uid"] == UID
    assert QUEUE_LABEL not in created["metadata"]["labels"]
    assert "suspend" not in created["spec"]


def test_existing_service_is_not_created_again() -> None:
    status = status_at(Phase.PROVISIONING, job=None)
    d = run(observed(MULTI, status, pool=pool_for(MULTI), service=True))
    assert kinds(d) == ["CreateJob"]
    assert d.status.service == ObjectReference(name=NAME)


def test_missing_service_is_recreated_while_the_job_waits() -> None:
    status = status_at(Phase.WAITING_FOR_CAPACITY)
    d = run(observed(MULTI, status, pool=pool_for(MULTI), job=job_view(), service=False))
    assert d.actions == [CreateService(render_service(REF))]
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY


@pytest.mark.parametrize(("restarts", "name"), [(0, "llama"), (1, "llama-r1"), (3, "llama-r3")])
def test_job_of_the_current_attempt(restarts: int, name: str) -> None:
    status = status_at(Phase.PROVISIONING, job=None, restarts=restarts)
    d = run(observed(MULTI, status, pool=pool_for(MULTI), service=True))
    (create,) = only(d.actions, CreateJob)
    assert create.manifest["metadata"]["name"] == name
    assert d.status.job == ObjectReference(name=name)
    hostnames = create.manifest["spec"]["template"]["spec"]["containers"][0]["env"][1]["value"]
    assert hostnames.split(",")[0] == f"{name}-0.{NAME}"


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
    assert d.requeue_after == 23 * 3600 + 1.0  # an hour of the day's wait is gone


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


# -- pools and Jobs that are not ours -----------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "reason", "message"),
    [
        (
            pool_for(MULTI, ours=False),
            "NodePoolNameTaken",
            f"node pool {POOL} exists and belongs to something else",
        ),
        (
            pool_for(MULTI, ours=False, state=PoolState.ERROR),
            "NodePoolNameTaken",
            f"node pool {POOL} exists and belongs to something else",
        ),
        (
            pool_for(MULTI, PoolState.ERROR, message="Quota exceeded for TPUS_PER_REGION"),
            "NodePoolError",
            "Quota exceeded for TPUS_PER_REGION",
        ),
        (pool_for(MULTI, PoolState.ERROR), "NodePoolError", f"node pool {POOL} is in error"),
    ],
    ids=["taken", "taken-error", "error-message", "error-default"],
)
def test_pool_problems_fail_the_request(pool: PoolView, reason: str, message: str) -> None:
    status = status_at(Phase.PROVISIONING, job=None)
    now = T0 + timedelta(minutes=1)
    d = run(observed(MULTI, status, pool=pool, now=now))
    assert d.actions == []
    assert d.status.phase == Phase.FAILED
    assert d.status.message == f"{reason}: {message}"
    assert cond_tuple(d, cond.COMPLETED) == ("False", reason)
    assert d.status.finished_at == now
    assert d.events == [Event("Warning", "Failed", f"{reason}: {message}")]


def test_a_pool_that_is_not_ours_is_never_touched_afterwards() -> None:
    theirs = pool_for(MULTI, ours=False)
    status = status_at(Phase.PROVISIONING, job=None)
    first = run(observed(MULTI, status, pool=theirs))
    for policy in ("ScaleToZero", "Delete", "Keep"):
        body = cleanup(MULTI, policy)
        later = run(observed(body, first.status, pool=theirs, now=T0 + timedelta(minutes=1)))
        assert later.actions == [], policy
        assert later.events == []
        assert later.requeue_after is None
        assert later.status.scaled_down_at is None


def test_job_name_taken_fails_without_creating_a_job() -> None:
    status = status_at(Phase.PROVISIONING, job=None)
    theirs = job_view(ours=False, ready=4)
    d = run(observed(MULTI, status, pool=pool_for(MULTI), job=theirs, service=True))
    assert only(d.actions, CreateJob) == []
    assert only(d.actions, DeleteJob) == []
    assert d.status.phase == Phase.FAILED
    assert cond_tuple(d, cond.COMPLETED) == ("False", "JobNameTaken")
    assert d.status.message == f"JobNameTaken: Job {NAME} exists and belongs to something else"
    assert d.status.started_at is None  # its ready pods are not our capacity
    assert event_reasons(d) == ["Failed"]


def test_a_job_that_is_not_ours_is_never_deleted_afterwards() -> None:
    status = status_at(Phase.PROVISIONING, job=None)
    theirs = job_view(ours=False)
    first = run(observed(MULTI, status, pool=pool_for(MULTI), job=theirs, service=True))
    assert first.status.phase == Phase.FAILED
    later = run(
        observed(
            MULTI,
            first.status,
            pool=pool_for(MULTI),
            job=theirs,
            service=True,
            now=T0 + timedelta(seconds=1),
        )
    )
    assert DeleteJob(NAME) not in later.actions, later.actions
    assert later.events == []


# -- an existing node pool ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "pool", "reason", "message"),
    [
        (
            existing(MULTI),
            None,
            "NodePoolNotFound",
            f"existing node pool {SHARED} does not exist",
        ),
        (
            existing(MULTI),
            pool_for(MULTI, name=SHARED, ours=False, machine_type="ct6e-standard-8t"),
            "NodePoolMismatch",
            f"node pool {SHARED} runs ct6e-standard-8t, the request needs ct6e-standard-4t",
        ),
        (
            existing(GPU_TWO),
            pool_for(GPU_TWO, name=SHARED, ours=False, machine_type="a2-highgpu-8g"),
            "NodePoolMismatch",
            f"node pool {SHARED} runs a2-highgpu-8g, the request needs a3-highgpu-8g",
        ),
        (
            existing(GPU_TWO),
            pool_for(GPU_TWO, name=SHARED, ours=False, accelerator_type="nvidia-h100-mega-80gb"),
            "NodePoolMismatch",
            f"node pool {SHARED} carries nvidia-h100-mega-80gb, not nvidia-h100-80gb",
        ),
        (
            existing(MULTI),
            pool_for(MULTI, name=SHARED, ours=False, max_nodes=3),
            "NodePoolTooSmall",
            f"node pool {SHARED} has at most 3 nodes; the slice needs 4",
        ),
        (
            existing(GPU_TWO),
            pool_for(GPU_TWO, name=SHARED, ours=False, max_nodes=0),
            "NodePoolTooSmall",
            f"node pool {SHARED} has at most 0 nodes; the slice needs 2",
        ),
    ],
    ids=["missing", "tpu-machine", "gpu-machine", "gpu-accelerator", "too-small", "empty"],
)
def test_existing_pool_that_cannot_run_the_slice(
    body: dict[str, Any], pool: PoolView | None, reason: str, message: str
) -> None:
    d = run(observed(body, pool=pool))
    assert d.actions == []
    assert d.status.phase == Phase.FAILED
    assert d.status.message == f"{reason}: {message}"
    assert cond_tuple(d, cond.COMPLETED) == ("False", reason)
    assert d.status.node_pool == NodePoolStatus(name=SHARED, managed=False, location="us-east5")
    assert d.events == [Event("Warning", "Failed", f"{reason}: {message}")]


@pytest.mark.parametrize(
    ("max_nodes", "used", "free"),
    [(4, 1, 3), (8, 5, 3), (8, 8, 0), (4, 4, 0)],
)
def test_existing_pool_busy_with_others_waits(max_nodes: int, used: int, free: int) -> None:
    body = existing(MULTI)
    pool = pool_for(body, name=SHARED, ours=False, max_nodes=max_nodes)
    d = run(observed(body, pool=pool, used=used))
    message = f"{free} of {max_nodes} nodes of {SHARED} free, 4 needed"
    assert d.actions == []
    assert d.status.phase == Phase.PENDING
    assert d.status.message == f"Waiting for nodes of {SHARED}: {message}"
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("False", "NodesInUse")
    assert condition(d, cond.NODE_POOL_READY).message == message
    assert d.requeue_after == 5.0
    assert d.status.requested_at == T0
    assert d.events == []  # still Pending: no phase change


@pytest.mark.parametrize(
    ("body", "max_nodes", "used"),
    [
        (existing(MULTI), 4, 0),
        (existing(MULTI), 8, 4),
        (existing(MULTI), 16, 3),
        (existing(SINGLE), 1, 0),
        (existing(GPU_TWO), 2, 0),
        (existing(GPU_ONE), 5, 4),
    ],
)
def test_existing_pool_that_fits_runs_the_job_on_it(
    body: dict[str, Any], max_nodes: int, used: int
) -> None:
    pool = pool_for(body, name=SHARED, ours=False, max_nodes=max_nodes)
    d = run(observed(body, pool=pool, used=used))
    plan = plan_of(body, SHARED)
    spec = TrainingRequestSpec.model_validate(body)
    assert only(d.actions, CreateJob) == [CreateJob(render_job(REF, spec, plan))]
    for action in d.actions:
        assert not isinstance(action, CreateNodePool | ScaleNodePoolToZero | DeleteNodePool)
    (create,) = only(d.actions, CreateJob)
    assert create.manifest["spec"]["template"]["spec"]["nodeSelector"][NODE_POOL_LABEL] == SHARED
    assert d.status.phase == Phase.WAITING_FOR_CAPACITY
    assert cond_tuple(d, cond.NODE_POOL_READY) == ("True", "Existing")
    assert d.status.node_pool == NodePoolStatus(name=SHARED, managed=False, location="us-east5")
    assert d.status.plan is not None
    assert d.status.plan.node_selector[NODE_POOL_LABEL] == SHARED


def test_existing_pool_accepts_an_unreported_gpu_type() -> None:
    body = existing(GPU_TWO)
    pool = pool_for(body, name=SHARED, ours=False, accelerator_type=None)
    assert kinds(run(observed(body, pool=pool))) == ["CreateService", "CreateJob"]
    pool = pool_for(body, name=SHARED, ours=False, accelerator_type="nvidia-h100-80gb")
    assert kinds(run(observed(body, pool=pool))) == ["CreateService", "CreateJob"]


def test_existing_pool_busy_does_not_hold_back_our_own_running_job() -> None:
    body = existing(MULTI)
    status = status_at(Phase.RUNNING, body, started=T0)
    pool = pool_for(body, name=SHARED, ours=False, max_nodes=4)
    d = run(observed(body, status, pool=pool, job=job_view(ready=4), service=True, used=4))
    assert d.status.phase == Phase.RUNNING
    assert d.actions == []


@pytest.mark.parametrize("policy", ["ScaleToZero", "Keep"])
@pytest.mark.parametrize("ours", [False, True])
def test_existing_pool_is_never_scaled_or_deleted(policy: str, ours: bool) -> None:
    body = existing(MULTI, policy)
    pool = pool_for(body, name=SHARED, ours=ours, max_nodes=8)
    status = status_at(Phase.RUNNING, body, started=T0)
    t1 = T0 + timedelta(hours=1)
    for job in (
        job_view(complete=True),
        job_view(failed=True, failure_reason="BackoffLimitExceeded"),
    ):
        d = run(observed(body, status, pool=pool, job=job, service=True, now=t1))
        assert d.status.phase in (Phase.SUCCEEDED, Phase.FAILED)
        assert d.actions == []
        assert d.requeue_after is None
        again = run(observed(body, d.status, pool=pool, job=job, now=t1))
        assert again.actions == []
        assert again.status.scaled_down_at is None
    gone = run(observed(body, status, pool=pool, deleting=True))
    assert only(gone.actions, DeleteNodePool) == []
    assert gone.released is True


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


# -- invalid specs ----------------------------------------------------------------------------


INVALID = [
    pytest.param(
        spec_body(tpu("v4", "2x2x2"), mode="QueuedProvisioning"),
        "spec.provisioning.mode",
        id="v4-queued",
    ),
    pytest.param(spec_body(tpu("v6e", "4x")), "spec.accelerator.tpu.topology", id="malformed"),
    pytest.param(spec_body(tpu("v6e", "3x3")), "spec.accelerator.tpu.topology", id="bad-topology"),
    pytest.param(spec_body(tpu("v9", "2x2")), "spec.accelerator.tpu.version", id="bad-version"),
    pytest.param(spec_body(tpu("v4", "2x2x2")), "spec.provisioning.mode", id="v4-flex"),
    pytest.param(
        spec_body({**tpu("v6e", "2x2"), **gpu("nvidia-l4")}), "spec.accelerator", id="both"
    ),
    pytest.param(
        {"accelerator": tpu("v6e", "2x2"), "provisioning": {"mode": "FlexStart"}},
        "spec.template",
        id="no-template",
    ),
    pytest.param(
        spec_body(tpu("v6e", "2x2"), mode="Reservation"),
        "spec.provisioning.reservation",
        id="no-reservation",
    ),
    pytest.param(
        spec_body(tpu("v6e", "2x2"), nodePool={"existing": True}),
        "spec.nodePool.name",
        id="existing-unnamed",
    ),
    pytest.param(
        spec_body(
            tpu("v6e", "2x2"), nodePool={"name": SHARED, "existing": True, "cleanup": "Delete"}
        ),
        "spec.nodePool.cleanup",
        id="existing-delete",
    ),
    pytest.param(
        spec_body(tpu("v6e", "2x2"), provisioning={"maxRunDuration": "200h"}),
        "spec.provisioning.maxRunDuration",
        id="run-too-long",
    ),
    pytest.param(
        spec_body(gpu("nvidia-l4", machine_type="a3-highgpu-8g")),
        "spec.accelerator.gpu.machineType",
        id="gpu-machine",
    ),
    pytest.param(spec_body(gpu("nvidia-l4", nodes=0)), "spec.accelerator.gpu.nodes", id="0-nodes"),
    pytest.param({}, "spec.accelerator", id="empty"),
]


@pytest.mark.parametrize(("body", "field"), INVALID)
def test_invalid_spec_fails_once_naming_the_field(body: dict[str, Any], field: str) -> None:
    d = run(observed(body))
    assert d.actions == []
    assert d.status.phase == Phase.FAILED
    valid = condition(d, cond.VALID)
    assert (valid.status, valid.reason) == ("False", "InvalidSpec")
    assert valid.message.startswith(f"{field}:") or f"; {field}:" in valid.message, valid.message
    assert cond_tuple(d, cond.COMPLETED) == ("False", "InvalidSpec")
    assert d.status.message == f"InvalidSpec: {valid.message}"
    assert d.status.finished_at == T0
    assert d.status.plan is None
    assert d.status.requested_at is None
    assert d.events == [Event("Warning", "Failed", d.status.message)]

    later = T0 + timedelta(minutes=1)
    again = run(observed(body, d.status, now=later))
    assert again.events == []
    assert again.actions == []
    assert again.requeue_after is None
    assert again.status.phase == Phase.FAILED
    assert again.status.message == d.status.message
    assert again.status.finished_at == T0
    assert condition(again, cond.VALID).last_transition_time == T0


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


# -- events only on phase changes --------------------------------------------------------------


def _scenarios() -> list[Any]:
    waiting = status_at(Phase.WAITING_FOR_CAPACITY)
    running = status_at(Phase.RUNNING, started=T0)
    return [
        pytest.param(observed(MULTI), id="fresh"),
        pytest.param(
            observed(MULTI, pool=pool_for(MULTI, PoolState.PROVISIONING)), id="pool-provisioning"
        ),
        pytest.param(observed(MULTI, pool=pool_for(MULTI)), id="pool-running"),
        pytest.param(
            observed(MULTI, waiting, pool=pool_for(MULTI), job=job_view(ready=1), service=True),
            id="waiting",
        ),
        pytest.param(
            observed(MULTI, waiting, pool=pool_for(MULTI), job=job_view(ready=4), service=True),
            id="becomes-running",
        ),
        pytest.param(
            observed(MULTI, running, pool=pool_for(MULTI), job=job_view(complete=True)),
            id="succeeds",
        ),
        pytest.param(
            observed(MULTI, running, pool=pool_for(MULTI), job=job_view(failed=True)),
            id="fails",
        ),
        pytest.param(
            observed(
                MULTI,
                waiting,
                pool=pool_for(MULTI),
                job=job_view(),
                service=True,
                now=T0 + timedelta(days=2),
            ),
            id="times-out",
        ),
        pytest.param(observed(MULTI, pool=pool_for(MULTI, ours=False)), id="pool-taken"),
        pytest.param(observed(QUEUED), id="kueue-required"),
        pytest.param(observed(spec_body(tpu("v6e", "4x"))), id="invalid"),
        pytest.param(
            observed(existing(MULTI), pool=pool_for(MULTI, name=SHARED, ours=False), used=2),
            id="existing-busy",
        ),
        pytest.param(observed(MULTI, running, pool=pool_for(MULTI), deleting=True), id="deleting"),
    ]


@pytest.mark.parametrize("obs", _scenarios())
def test_events_only_on_phase_changes(obs: Observed) -> None:
    first = run(obs)
    changed = first.status.phase != obs.request.status.phase
    assert bool(first.events) is changed
    if changed:
        assert first.events[0].reason == first.status.phase.value
        assert first.events[0].message == first.status.message
        assert first.events[0].type == (
            "Warning" if first.status.phase == Phase.FAILED else "Normal"
        )
    again = Observed(
        request=request(dict(obs.request.spec), first.status, deleting=obs.request.deleting),
        now=obs.now,
        pool=obs.pool,
        job=obs.job,
        service_exists=obs.service_exists,
        service_taken=obs.service_taken,
        nodes_used_by_others=obs.nodes_used_by_others,
    )
    second = run(again)
    assert second.events == []
    assert second.status.phase == first.status.phase


@pytest.mark.parametrize("obs", _scenarios())
def test_decide_is_deterministic(obs: Observed) -> None:
    assert run(obs) == run(obs)


# -- conditions and generations ---------------------------------------------------------------


def test_last_transition_time_moves_only_when_status_changes() -> None:
    t1, t2, t3 = (T0 + timedelta(minutes=m) for m in (1, 2, 3))
    pool = pool_for(MULTI)
    first = run(observed(MULTI, pool=pool, now=T0))
    assert first.status.phase == Phase.WAITING_FOR_CAPACITY
    second = run(observed(MULTI, first.status, pool=pool, job=job_view(ready=1), now=t1))
    third = run(observed(MULTI, second.status, pool=pool, job=job_view(ready=2), now=t2))
    for type_ in (cond.VALID, cond.NODE_POOL_READY, cond.WORKLOAD_CREATED):
        assert condition(third, type_).last_transition_time == T0, type_
    capacity = condition(third, cond.CAPACITY_PROVISIONED)
    assert (capacity.status, capacity.last_transition_time) == ("False", T0)
    assert capacity.message == "Waiting for capacity: 2/4 nodes ready"  # message still updated
    fourth = run(observed(MULTI, third.status, pool=pool, job=job_view(ready=4), now=t3))
    capacity = condition(fourth, cond.CAPACITY_PROVISIONED)
    assert (capacity.status, capacity.reason, capacity.last_transition_time) == (
        "True",
        "NodesReady",
        t3,
    )
    assert condition(fourth, cond.NODE_POOL_READY).last_transition_time == T0


def test_node_pool_ready_transitions_when_the_pool_comes_up() -> None:
    t1 = T0 + timedelta(minutes=4)
    first = run(observed(MULTI, now=T0))
    assert condition(first, cond.NODE_POOL_READY).status == "False"
    provisioning = run(
        observed(MULTI, first.status, pool=pool_for(MULTI, PoolState.PROVISIONING), now=T0)
    )
    ready = condition(provisioning, cond.NODE_POOL_READY)
    assert (ready.status, ready.reason, ready.last_transition_time) == ("False", "Provisioning", T0)
    up = run(observed(MULTI, provisioning.status, pool=pool_for(MULTI), now=t1))
    ready = condition(up, cond.NODE_POOL_READY)
    assert (ready.status, ready.reason, ready.last_transition_time) == ("True", "Created", t1)


@pytest.mark.parametrize("generation", [1, 2, 7, 1000])
@pytest.mark.parametrize("deleting", [False, True])
def test_observed_generation_tracks_the_generation(generation: int, deleting: bool) -> None:
    old = status_at(Phase.WAITING_FOR_CAPACITY)
    old.conditions = set_condition([], cond.VALID, "True", "Planned", "x", T0, 1)
    obs = observed(
        MULTI,
        old,
        pool=pool_for(MULTI),
        job=job_view(),
        service=True,
        generation=generation,
        deleting=deleting,
    )
    d = run(obs)
    assert d.status.observed_generation == generation
    if not deleting:
        assert {c.observed_generation for c in d.status.conditions} == {generation}
        assert condition(d, cond.VALID).last_transition_time == T0


@pytest.mark.parametrize("generation", [1, 4])
def test_observed_generation_on_invalid_and_failed(generation: int) -> None:
    d = run(observed(spec_body(tpu("v6e", "4x")), generation=generation))
    assert d.status.observed_generation == generation
    assert {c.observed_generation for c in d.status.conditions} == {generation}
    f = failed(observed(MULTI, generation=generation), "Boom", "it broke")
    assert f.status.observed_generation == generation
    assert condition(f, cond.COMPLETED).observed_generation == generation


def test_set_condition() -> None:
    t1, t2 = T0 + timedelta(minutes=1), T0 + timedelta(minutes=2)
    start = set_condition([], "A", "False", "Waiting", "w", T0, 1)
    start = set_condition(start, "B", "True", "Fine", "b", T0, 1)
    snapshot = [c.model_copy() for c in start]

    same = set_condition(start, "A", "False", "StillWaiting", "w2", t1, 2)
    a = cond.condition(same, "A")
    assert a is not None
    assert (a.status, a.reason, a.message, a.last_transition_time, a.observed_generation) == (
        "False",
        "StillWaiting",
        "w2",
        T0,
        2,
    )
    assert cond.condition(same, "B") == cond.condition(start, "B")
    assert [c.type for c in same].count("A") == 1
    assert len(same) == 2

    flipped = set_condition(same, "A", "True", "Done", "d", t2, 3)
    a = cond.condition(flipped, "A")
    assert a is not None
    assert (a.status, a.last_transition_time, a.observed_generation) == ("True", t2, 3)

    unknown = set_condition(flipped, "A", "Unknown", "Lost", "", t2 + timedelta(minutes=1), 3)
    a = cond.condition(unknown, "A")
    assert a is not None
    assert (a.status, a.last_transition_time) == ("Unknown", t2 + timedelta(minutes=1))

    assert start == snapshot  # the input list is left alone
    assert cond.condition(start, "missing") is None


# -- failed() --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phase", "event"),
    [
        (Phase.PENDING, True),
        (Phase.PROVISIONING, True),
        (Phase.WAITING_FOR_CAPACITY, True),
        (Phase.RUNNING, True),
        (Phase.FAILED, False),
    ],
)
def test_failed_helper(phase: Phase, event: bool) -> None:
    status = status_at(phase, started=T0 if phase == Phase.RUNNING else None)
    obs = observed(MULTI, status, pool=pool_for(MULTI), now=T0 + timedelta(minutes=3))
    before = obs.request.status.model_dump()
    d = failed(obs, "QuotaExceeded", "TPU quota exhausted in us-east5")
    assert obs.request.status.model_dump() == before
    assert d.actions == []
    assert d.released is False
    assert d.status.phase == Phase.FAILED
    assert d.status.message == "QuotaExceeded: TPU quota exhausted in us-east5"
    completed = condition(d, cond.COMPLETED)
    assert (completed.status, completed.reason, completed.message) == (
        "False",
        "QuotaExceeded",
        "TPU quota exhausted in us-east5",
    )
    assert d.status.finished_at == T0 + timedelta(minutes=3)
    assert d.requeue_after == 1.0
    expected = [Event("Warning", "Failed", d.status.message)] if event else []
    assert d.events == expected
    # The rest of the status is carried over.
    assert d.status.plan == status.plan
    assert d.status.requested_at == status.requested_at
    assert d.status.started_at == status.started_at


def test_failed_helper_keeps_an_earlier_finish_time() -> None:
    status = status_at(Phase.FAILED, finished_at=T0)
    d = failed(observed(MULTI, status, now=T0 + timedelta(hours=1)), "Boom", "again")
    assert d.status.finished_at == T0


@pytest.mark.parametrize(
    ("state", "actions"),
    [(PoolState.PROVISIONING, ["DeleteNodePool"]), (PoolState.STOPPING, [])],  # already going
)
def test_max_wait_also_covers_a_pool_that_never_becomes_ready(
    state: PoolState, actions: list[str]
) -> None:
    body = spec_body(tpu("v6e", "4x4"), provisioning={"maxWaitDuration": "10m"})
    pool = PoolView(
        name=pool_name_for(request(body)),
        state=state,
        ours=True,
        max_nodes=4,
        machine_type="ct6e-standard-4t",
    )
    status = status_at(Phase.PROVISIONING, body, job=None)
    within = run(observed(body, status, pool=pool, now=T0 + timedelta(minutes=9)))
    assert within.status.phase == Phase.PROVISIONING
    late = run(observed(body, status, pool=pool, now=T0 + timedelta(minutes=11)))
    assert late.status.phase == Phase.FAILED
    completed = cond.condition(late.status.conditions, "Completed")
    assert completed is not None
    assert completed.reason == "CapacityTimeout"
    assert kinds(late) == actions


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


def test_stale_attempts_are_deleted() -> None:
    """A crash between writing restarts=1 and deleting the old Job leaves it behind."""
    status = status_at(Phase.WAITING_FOR_CAPACITY, SPOT, restarts=1)
    obs = dataclasses.replace(
        observed(SPOT, status, pool=pool_for(SPOT), service=True), stale_jobs=(NAME,)
    )
    d = run(obs)
    assert [a.name for a in only(d.actions, DeleteJob)] == [NAME]
    assert [a.manifest["metadata"]["name"] for a in only(d.actions, CreateJob)] == [f"{NAME}-r1"]


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


def test_a_request_is_planned_once_while_its_spec_is_the_same() -> None:
    body = with_(MULTI)
    view = request(body)
    first = planned(view)
    assert planned(view) is first
    # A status write gives the shell a new object with an equal spec: not planned again.
    copy = dataclasses.replace(view, spec=copy_module.deepcopy(view.spec))
    assert planned(copy) is first
    changed = copy_module.deepcopy(view.spec)
    changed["maxRestarts"] = int(changed.get("maxRestarts", 0)) + 1
    replanned = planned(dataclasses.replace(view, spec=changed))
    assert not isinstance(replanned, InvalidSpec)
    assert replanned[0].max_restarts == changed["maxRestarts"]


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
