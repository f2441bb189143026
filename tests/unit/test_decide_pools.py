"""The reconcile decision on a request's node pools: their names, a fresh request, the pool
coming up, pools and Jobs not ours, an existing pool."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from dws_operator.api import (
    NodePoolStatus,
    ObjectReference,
    Phase,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.reconcile import (
    CreateJob,
    CreateNodePool,
    CreateService,
    DeleteJob,
    DeleteNodePool,
    Event,
    PoolState,
    PoolView,
    RequestView,
    ScaleNodePoolToZero,
    pool_name_for,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.decision import PAST_DEADLINE_SECONDS
from dws_operator.reconcile.facts import read_spec
from dws_operator.workload import QUEUE_LABEL, render_job, render_service
from tests.unit.decisions import (
    BODIES,
    GPU_ONE,
    GPU_TWO,
    MULTI,
    NAME,
    NAMESPACE,
    NODE_POOL_LABEL,
    POOL,
    REF,
    SHARED,
    SINGLE,
    T0,
    UID,
    cleanup,
    cond_tuple,
    condition,
    event_reasons,
    existing,
    job_view,
    kinds,
    observed,
    only,
    plan_of,
    pool_for,
    request,
    run,
    status_at,
    with_,
)

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
    other = RequestView(
        NAME,
        NAMESPACE,
        "another-uid",
        1,
        False,
        read_spec(NAME, "another-uid", MULTI),
        TrainingRequestStatus(),
    )
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
