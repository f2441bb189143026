"""Capacity ladders: `spec.provisioning.fallback`, its validation, its pools' names and
the decision moving from step to step. Pure: `Observed` values are built by hand."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dws_operator.api import AttemptOutcome, Phase, TrainingRequestSpec, TrainingRequestStatus
from dws_operator.catalog import GkeVersion
from dws_operator.controller.status_write import merge_patch
from dws_operator.naming import (
    MAX_NODE_POOL_NAME,
    default_node_pool_name,
    step_pool_base,
)
from dws_operator.planning import plan_slice
from dws_operator.reconcile import (
    CancelPoolOperation,
    CreateJob,
    CreateNodePool,
    Decision,
    DeleteJob,
    DeleteNodePool,
    JobView,
    Observed,
    OperationView,
    PoolState,
    PoolView,
    ReconcileConfig,
    RequestView,
    decide,
)
from dws_operator.reconcile.decision import HELD_BACK_SECONDS
from dws_operator.reconcile.facts import read_spec
from dws_operator.reconcile.step import (
    abandoned_pool_names,
    attempt_number,
    pool_names_for,
    step_pool_names,
)
from dws_operator.validation import spec_errors
from tests.builders import gpu, spec_body, tpu
from tests.unit.decisions import failed

NAME = "ladder"
NAMESPACE = "ml"
UID = "0a1b2c3d-0000-4000-8000-0000000000aa"
T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
CONFIG = ReconcileConfig(location="us-east5", kueue=True, default_queue="q", queued_queue="q")
BASE = default_node_pool_name(NAME, UID, ladder=True)

#: The issue's example: two flex-start zones for 30 minutes each, then Spot.
TPU_LADDER = spec_body(
    tpu("v6e", "4x4"),
    provisioning={
        "zones": ["us-east5-a"],
        "maxWaitDuration": "30m",
        "fallback": [
            {"mode": "FlexStart", "zones": ["us-east5-b"], "maxWaitDuration": "30m"},
            {"mode": "Spot"},
        ],
    },
)
#: QueuedProvisioning -> Spot -> OnDemand for GPUs, 10 minutes a step.
GPU_LADDER = spec_body(
    gpu("nvidia-h100-80gb", nodes=2),
    mode="QueuedProvisioning",
    provisioning={
        "maxWaitDuration": "10m",
        "fallback": [{"mode": "Spot"}, {"mode": "OnDemand"}],
    },
    maxRestarts=1,
)


def request(body: dict[str, Any], status: TrainingRequestStatus) -> RequestView:
    return RequestView(NAME, NAMESPACE, UID, 1, False, read_spec(NAME, UID, body), status)


def observe(
    body: dict[str, Any],
    status: TrainingRequestStatus | None = None,
    *,
    now: datetime = T0,
    pools: dict[str, PoolView] | None = None,
    job: JobView | None = None,
    operations: dict[str, OperationView] | None = None,
    deleting: bool = False,
) -> Observed:
    """What the shell would observe: the current step's pools and those left behind,
    picked by name from `pools` as `observe` picks them from GKE's snapshot."""
    status = status or TrainingRequestStatus()
    view = dataclasses.replace(request(body, status), deleting=deleting)
    pools = pools or {}
    current = [pools.get(name) for name in pool_names_for(view)]
    left = abandoned_pool_names(view)
    return Observed(
        request=view,
        now=now,
        pool=current[0],
        more_pools=tuple(current[1:]),
        job=job,
        operations=operations or {},
        abandoned=tuple(pools[n] for n in left if n in pools),
        abandoned_names=frozenset(left),
    )


def pool(name: str, state: PoolState = PoolState.RUNNING, max_nodes: int = 4) -> PoolView:
    return PoolView(name, state, True, max_nodes, "ct6e-standard-4t")


def names(decision: Decision, kind: type[Any]) -> list[str]:
    return [a.name for a in decision.actions if isinstance(a, kind)]


# -- the API -------------------------------------------------------------------------------


def test_steps_inherit_the_first_steps_wait_and_run() -> None:
    spec = TrainingRequestSpec.model_validate(
        spec_body(
            tpu("v6e", "4x4"),
            provisioning={
                "maxWaitDuration": "45m",
                "maxRunDuration": "12h",
                "fallback": [{"mode": "Spot", "maxWaitDuration": "5m"}, {"mode": "OnDemand"}],
            },
        )
    )
    steps = spec.provisioning.steps
    assert [(s.mode.value, s.max_wait_duration, s.max_run_duration) for s in steps] == [
        ("FlexStart", "45m", "12h"),
        ("Spot", "5m", "12h"),
        ("OnDemand", "45m", "12h"),
    ]
    assert all(s.fallback is None for s in steps)
    assert spec.ladder_steps == 3
    assert spec.at_step(1).provisioning.mode.value == "Spot"


def test_a_spec_without_fallback_has_one_step() -> None:
    spec = TrainingRequestSpec.model_validate(spec_body(tpu("v6e", "2x2")))
    assert spec.ladder_steps == 1
    assert spec.at_step(0) == spec


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            spec_body(
                tpu("v4", "2x2x1"),
                mode="Spot",
                provisioning={"fallback": [{"mode": "OnDemand"}, {"mode": "FlexStart"}]},
            ),
            "spec.provisioning.fallback[1].mode",
            "flex-start VMs do not serve it",
        ),
        (
            spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Reservation"}]}),
            "spec.provisioning.fallback[0].reservation",
            "required when mode is Reservation",
        ),
        (
            spec_body(
                tpu("v6e", "4x4"),
                provisioning={"fallback": [{"mode": "Spot", "reservation": "r1"}]},
            ),
            "spec.provisioning.fallback[0].reservation",
            "only allowed when mode is Reservation",
        ),
        (
            spec_body(
                tpu("v6e", "4x4", slices=2),
                provisioning={"fallback": [{"mode": "QueuedProvisioning"}]},
            ),
            "spec.provisioning.fallback[0].mode",
            "one slice per ProvisioningRequest",
        ),
        (
            spec_body(
                tpu("v6e", "4x4"),
                provisioning={"maxWaitDuration": "0s", "fallback": [{"mode": "Spot"}]},
            ),
            "spec.provisioning.maxWaitDuration",
            "only the last step may wait forever",
        ),
        (
            spec_body(
                tpu("v6e", "4x4"),
                provisioning={
                    "fallback": [{"mode": "Spot", "maxWaitDuration": "0s"}, {"mode": "OnDemand"}]
                },
            ),
            "spec.provisioning.fallback[0].maxWaitDuration",
            "only the last step may wait forever",
        ),
        (
            spec_body(
                tpu("v6e", "4x4"),
                provisioning={"fallback": [{"mode": "Spot"}]},
                nodePool={"name": "shared", "existing": True},
            ),
            "spec.provisioning.fallback",
            "nodePool.existing",
        ),
        (
            spec_body(
                tpu("v6e", "4x4"),
                provisioning={"fallback": [{"mode": "Spot"}]},
                nodePool={"name": "p" * 38},
            ),
            "spec.nodePool.name",
            "at most 37 characters with fallback steps",
        ),
    ],
)
def test_invalid_ladders_name_the_step_and_field(
    body: dict[str, Any], field: str, words: str
) -> None:
    errors = spec_errors(TrainingRequestSpec.model_validate(body))
    assert [e.field for e in errors] == [field]
    assert words in errors[0].message


def test_the_last_step_may_wait_forever() -> None:
    body = spec_body(
        tpu("v6e", "4x4"),
        provisioning={"fallback": [{"mode": "Spot", "maxWaitDuration": "0s"}]},
    )
    assert spec_errors(TrainingRequestSpec.model_validate(body)) == []


def test_an_invalid_ladder_fails_the_request_naming_the_step() -> None:
    body = spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Reservation"}]})
    decision = decide(observe(body), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "spec.provisioning.fallback[0].reservation" in (decision.status.message or "")
    assert decision.actions == []


# -- pool names ----------------------------------------------------------------------------


def test_each_step_has_pools_of_its_own() -> None:
    assert step_pool_base("p", 0) == "p"
    assert step_pool_base("p", 3) == "p-f3"
    view = request(TPU_LADDER, TrainingRequestStatus())
    assert step_pool_names(view.facts) == (BASE, f"{BASE}-f1", f"{BASE}-f2")
    sliced = spec_body(tpu("v6e", "4x4", slices=2), provisioning={"fallback": [{"mode": "Spot"}]})
    base = default_node_pool_name(NAME, UID, slices=2, ladder=True)
    assert step_pool_names(request(sliced, TrainingRequestStatus()).facts) == (
        f"{base}-s0",
        f"{base}-s1",
        f"{base}-f1-s0",
        f"{base}-f1-s1",
    )


def test_a_ladder_leaves_room_for_every_suffix() -> None:
    long_name = "x" * 60
    for slices in (1, 2):
        base = default_node_pool_name(long_name, UID, slices=slices, ladder=True)
        longest = f"{step_pool_base(base, 7)}{'-s63' if slices > 1 else ''}"
        assert len(longest) <= MAX_NODE_POOL_NAME
    # Without fallback, names are what they always were.
    assert default_node_pool_name(long_name, UID) == default_node_pool_name(
        long_name, UID, ladder=False
    )
    assert len(default_node_pool_name(long_name, UID)) == MAX_NODE_POOL_NAME


# -- moving down the ladder ----------------------------------------------------------------


def test_a_request_without_fallback_has_no_step_or_attempts() -> None:
    body = spec_body(tpu("v6e", "4x4"))
    decision = decide(observe(body), CONFIG)
    assert decision.status.step is None
    assert decision.status.attempts is None
    assert "StepStarted" not in [e.reason for e in decision.events]


def test_the_first_step_starts_with_its_own_mode_and_zones() -> None:
    decision = decide(observe(TPU_LADDER), CONFIG)
    assert decision.status.step == 1
    attempts = decision.status.attempts or []
    assert [(a.step, a.mode, a.zones, a.node_pool, a.outcome) for a in attempts] == [
        (1, "FlexStart", ["us-east5-a"], BASE, None)
    ]
    creates = [a for a in decision.actions if isinstance(a, CreateNodePool)]
    assert [(c.name, c.plan.node_pool.zones, c.plan.node_pool.flex_start) for c in creates] == [
        (BASE, ("us-east5-a",), True)
    ]
    assert [e.reason for e in decision.events if e.reason == "StepStarted"] == ["StepStarted"]
    assert "step 1 of 3: FlexStart in us-east5-a" in [e.message for e in decision.events]


def _waiting(body: dict[str, Any], at: datetime) -> Decision:
    """The first step with its pool up and its Job created, waiting for capacity."""
    first = decide(observe(body, now=at), CONFIG)
    pools = {BASE: pool(BASE)}
    second = decide(observe(body, first.status, now=at, pools=pools), CONFIG)
    assert CreateJob in [type(a) for a in second.actions]
    return second


def test_a_step_whose_wait_runs_out_hands_over_to_the_next() -> None:
    waiting = _waiting(TPU_LADDER, T0)
    later = T0 + timedelta(minutes=31)
    pools = {BASE: pool(BASE)}
    job = JobView(NAME, ours=True)
    decision = decide(observe(TPU_LADDER, waiting.status, now=later, pools=pools, job=job), CONFIG)
    assert decision.status.phase == Phase.PROVISIONING
    assert decision.status.step == 2
    assert decision.status.requested_at == later
    assert names(decision, DeleteJob) == [NAME]
    assert names(decision, DeleteNodePool) == [BASE]
    assert names(decision, CreateNodePool) == []
    first = (decision.status.attempts or [])[0]
    assert (first.outcome, first.ended_at) == (AttemptOutcome.TIMED_OUT, later)
    assert "within 30m" in (first.message or "")
    ended = [e for e in decision.events if e.reason == "StepEnded"]
    assert len(ended) == 1
    assert "trying step 2 (FlexStart in us-east5-b)" in ended[0].message

    # The next pass: step 2's own pool, in its zone; step 1's pool (deleting) left alone.
    stopping = {BASE: pool(BASE, PoolState.STOPPING)}
    nxt = decide(observe(TPU_LADDER, decision.status, now=later, pools=stopping), CONFIG)
    creates = [a for a in nxt.actions if isinstance(a, CreateNodePool)]
    assert [(c.name, c.plan.node_pool.zones) for c in creates] == [(f"{BASE}-f1", ("us-east5-b",))]
    assert names(nxt, DeleteNodePool) == []
    attempts = nxt.status.attempts or []
    assert [(a.step, a.zones, a.node_pool) for a in attempts] == [
        (1, ["us-east5-a"], BASE),
        (2, ["us-east5-b"], f"{BASE}-f1"),
    ]


def test_a_pool_of_a_step_left_behind_is_deleted_on_any_later_pass() -> None:
    # A crash after the status named step 2 and before step 1's pool was deleted.
    waiting = _waiting(TPU_LADDER, T0)
    later = T0 + timedelta(minutes=31)
    moved = decide(observe(TPU_LADDER, waiting.status, now=later), CONFIG)
    assert moved.status.step == 2
    pools = {BASE: pool(BASE), f"{BASE}-f1": pool(f"{BASE}-f1")}
    decision = decide(observe(TPU_LADDER, moved.status, now=later, pools=pools), CONFIG)
    assert names(decision, DeleteNodePool) == [BASE]
    # ... also once the request has ended, and before it may be released when deleted.
    gone = decide(observe(TPU_LADDER, moved.status, now=later, pools=pools, deleting=True), CONFIG)
    assert BASE in names(gone, DeleteNodePool)
    assert gone.released is False


def test_a_queued_create_of_a_step_left_behind_is_called_off() -> None:
    waiting = _waiting(TPU_LADDER, T0)
    moved = decide(observe(TPU_LADDER, waiting.status, now=T0 + timedelta(hours=1)), CONFIG)
    queued = {BASE: OperationView(kind="Create", running=False, position=3, queued=9, slots=5)}
    decision = decide(observe(TPU_LADDER, moved.status, operations=queued), CONFIG)
    assert names(decision, CancelPoolOperation) == [BASE]


def test_the_next_steps_job_is_a_new_attempt() -> None:
    waiting = _waiting(TPU_LADDER, T0)
    later = T0 + timedelta(minutes=31)
    moved = decide(observe(TPU_LADDER, waiting.status, now=later), CONFIG)
    assert attempt_number(moved.status) == 1
    step2 = f"{BASE}-f1"
    pools = {step2: PoolView(step2, PoolState.RUNNING, True, 4, "ct6e-standard-4t")}
    decision = decide(observe(TPU_LADDER, moved.status, now=later, pools=pools), CONFIG)
    jobs = [a for a in decision.actions if isinstance(a, CreateJob)]
    assert len(jobs) == 1
    manifest = jobs[0].manifest
    assert manifest["metadata"]["name"] == f"{NAME}-r1"
    selector = manifest["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["cloud.google.com/gke-nodepool"] == step2


def test_the_last_step_running_out_fails_capacity_timeout() -> None:
    status = TrainingRequestStatus()
    at = T0
    for _ in range(3):
        decision = decide(observe(TPU_LADDER, status, now=at), CONFIG)
        status = decision.status
        at += timedelta(minutes=31)
    decision = decide(observe(TPU_LADDER, status, now=at), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "on any of 3 steps" in (decision.status.message or "")
    outcomes = [a.outcome for a in decision.status.attempts or []]
    assert outcomes == [AttemptOutcome.TIMED_OUT] * 3


@pytest.mark.parametrize(
    ("reason", "outcome"),
    [("Stockout", AttemptOutcome.STOCKOUT), ("QuotaExceeded", AttemptOutcome.QUOTA_EXCEEDED)],
)
def test_gke_saying_no_capacity_moves_on_at_once(reason: str, outcome: AttemptOutcome) -> None:
    first = decide(observe(GPU_LADDER), CONFIG)
    decision = failed(observe(GPU_LADDER, first.status), reason, "GCE_STOCKOUT or quota")
    assert decision.status.phase == Phase.PROVISIONING
    assert decision.status.step == 2
    assert [a.outcome for a in decision.status.attempts or []] == [outcome]


def test_other_gke_refusals_and_the_last_step_still_fail() -> None:
    first = decide(observe(GPU_LADDER), CONFIG)
    refused = failed(observe(GPU_LADDER, first.status), "InvalidArgument", "bad pool")
    assert refused.status.phase == Phase.FAILED
    assert [a.outcome for a in refused.status.attempts or []] == [AttemptOutcome.FAILED]
    last = first.status.model_copy(update={"step": 3})
    stocked = failed(observe(GPU_LADDER, last), "Stockout", "GCE_STOCKOUT")
    assert stocked.status.phase == Phase.FAILED
    assert (stocked.status.attempts or [])[-1].outcome == AttemptOutcome.STOCKOUT


def test_a_ready_step_is_provisioned() -> None:
    waiting = _waiting(GPU_LADDER, T0)
    job = JobView(NAME, ours=True, ready=2)
    pools = {BASE: PoolView(BASE, PoolState.RUNNING, True, 2, "a3-highgpu-8g")}
    decision = decide(observe(GPU_LADDER, waiting.status, job=job, pools=pools), CONFIG)
    assert decision.status.phase == Phase.RUNNING
    attempt = (decision.status.attempts or [])[0]
    assert (attempt.outcome, attempt.ended_at) == (AttemptOutcome.PROVISIONED, T0)


def test_preemption_restarts_on_the_step_then_climbs_down() -> None:
    """maxRestarts counts per step on a ladder: a step preempted once more than that
    hands over to the next step."""
    spot_first = spec_body(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="Spot",
        provisioning={"maxWaitDuration": "10m", "fallback": [{"mode": "OnDemand"}]},
        maxRestarts=1,
    )
    pools = {BASE: PoolView(BASE, PoolState.RUNNING, True, 2, "a3-highgpu-8g")}
    status = decide(observe(spot_first), CONFIG).status
    status = decide(observe(spot_first, status, pools=pools), CONFIG).status
    running = decide(
        observe(spot_first, status, pools=pools, job=JobView(NAME, ours=True, ready=2)), CONFIG
    ).status
    assert running.phase == Phase.RUNNING
    lost = JobView(NAME, ours=True, failed=True, disrupted=True)
    restart = decide(observe(spot_first, running, pools=pools, job=lost), CONFIG)
    assert restart.status.step == 1
    assert restart.status.restarts == 1
    assert names(restart, DeleteJob) == [NAME]
    assert (restart.status.attempts or [])[0].restarts == 1
    # The second attempt on step 1 runs, and loses its nodes too.
    again = JobView(f"{NAME}-r1", ours=True, ready=2)
    status = decide(observe(spot_first, restart.status, pools=pools, job=again), CONFIG).status
    lost_again = JobView(f"{NAME}-r1", ours=True, failed=True, disrupted=True)
    climb = decide(observe(spot_first, status, pools=pools, job=lost_again), CONFIG)
    assert climb.status.phase == Phase.PROVISIONING
    assert climb.status.step == 2
    assert names(climb, DeleteJob) == [f"{NAME}-r1"]
    assert names(climb, DeleteNodePool) == [BASE]
    attempt = (climb.status.attempts or [])[0]
    assert attempt.outcome == AttemptOutcome.PREEMPTED
    assert attempt.ended_at is not None
    # Step 2's Job is attempt 2 (one restart, one step on).
    assert attempt_number(climb.status) == 2


def test_preemption_on_the_last_step_fails_as_without_a_ladder() -> None:
    spot_last = spec_body(
        gpu("nvidia-h100-80gb", nodes=2),
        provisioning={"maxWaitDuration": "10m", "fallback": [{"mode": "Spot"}]},
        maxRestarts=0,
    )
    status = decide(observe(spot_last), CONFIG).status.model_copy(update={"step": 2})
    step2 = f"{BASE}-f1"
    pools = {step2: PoolView(step2, PoolState.RUNNING, True, 2, "a3-highgpu-8g")}
    status = decide(observe(spot_last, status, pools=pools), CONFIG).status
    lost = JobView(f"{NAME}-r1", ours=True, failed=True, disrupted=True)
    decision = decide(observe(spot_last, status, pools=pools, job=lost), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "PreemptedTooOften" in (decision.status.message or "")


def test_the_plan_follows_the_step() -> None:
    spec = TrainingRequestSpec.model_validate(GPU_LADDER)
    modes = [plan_slice(spec.at_step(i), pool_name="p").node_pool for i in range(spec.ladder_steps)]
    assert [(m.queued_provisioning, m.spot, m.flex_start) for m in modes] == [
        (True, False, True),
        (False, True, False),
        (False, False, False),
    ]


def test_invalid_specs_are_reported_not_raised() -> None:
    body = spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Nope"}]})
    with pytest.raises(ValueError, match="mode"):
        TrainingRequestSpec.model_validate(body)
    decision = decide(observe(body), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "spec.provisioning.fallback" in (decision.status.message or "")


def test_a_zone_outside_the_clusters_region_fails_before_any_step() -> None:
    body = spec_body(
        tpu("v6e", "4x4"),
        provisioning={
            "zones": ["us-east5-a"],
            "fallback": [{"mode": "FlexStart", "zones": ["asia-northeast1-b"]}],
        },
    )
    decision = decide(observe(body), CONFIG)
    assert decision.status.phase == Phase.FAILED
    message = decision.status.message or ""
    assert message.startswith("ZoneOutsideCluster: spec.provisioning.fallback[0].zones")
    assert decision.actions == []
    zonal = dataclasses.replace(CONFIG, location="us-east5-b")
    assert decide(observe(TPU_LADDER), zonal).status.phase == Phase.PROVISIONING


# -- review findings: the step change leaves nothing behind -----------------------------


def test_the_status_patch_clears_what_the_decision_cleared() -> None:
    old = {"phase": "Running", "startedAt": "t", "nodePool": {"name": "q", "reused": True}}
    new = {"phase": "Provisioning", "nodePool": {"name": "q-f1"}}
    assert merge_patch(old, new) == {
        "phase": "Provisioning",
        "startedAt": None,
        "nodePool": {"name": "q-f1", "reused": None},
    }
    assert merge_patch(new, new) == {}


def test_a_left_over_job_goes_even_when_the_request_has_ended() -> None:
    waiting = _waiting(GPU_LADDER, T0)
    last = waiting.status.model_copy(update={"step": 3})
    ended = failed(observe(GPU_LADDER, last), "Stockout", "GCE_STOCKOUT").status
    assert ended.phase == Phase.FAILED
    obs = dataclasses.replace(observe(GPU_LADDER, ended), stale_jobs=(NAME,))
    decision = decide(obs, CONFIG)
    assert names(decision, DeleteJob) == [NAME]


def test_moving_on_calls_off_the_steps_own_queued_create() -> None:
    first = decide(observe(TPU_LADDER), CONFIG)
    queued = {BASE: OperationView(kind="Create", running=False, position=2, queued=9, slots=5)}
    later = T0 + timedelta(minutes=31)
    moved = decide(observe(TPU_LADDER, first.status, now=later, operations=queued), CONFIG)
    assert moved.status.step == 2
    assert names(moved, CancelPoolOperation) == [BASE]


def test_a_pool_whose_delete_gke_refused_is_held_back() -> None:
    waiting = _waiting(TPU_LADDER, T0)
    moved = decide(observe(TPU_LADDER, waiting.status, now=T0 + timedelta(hours=1)), CONFIG)
    pools = {BASE: pool(BASE)}
    obs = dataclasses.replace(observe(TPU_LADDER, moved.status, pools=pools), held_back={BASE})
    decision = decide(obs, CONFIG)
    assert names(decision, DeleteNodePool) == []
    assert decision.requeue_after == HELD_BACK_SECONDS
    # Deleting the request still waits for it.
    gone = dataclasses.replace(obs, request=dataclasses.replace(obs.request, deleting=True))
    assert decide(gone, CONFIG).released is False


def test_a_restart_reopens_the_steps_attempt() -> None:
    spot_first = spec_body(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="Spot",
        provisioning={"maxWaitDuration": "10m", "fallback": [{"mode": "OnDemand"}]},
        maxRestarts=2,
    )
    pools = {BASE: PoolView(BASE, PoolState.RUNNING, True, 2, "a3-highgpu-8g")}
    status = decide(observe(spot_first), CONFIG).status
    status = decide(observe(spot_first, status, pools=pools), CONFIG).status
    ready = JobView(NAME, ours=True, ready=2)
    running = decide(observe(spot_first, status, pools=pools, job=ready), CONFIG).status
    assert (running.attempts or [])[0].outcome == AttemptOutcome.PROVISIONED
    lost = JobView(NAME, ours=True, failed=True, disrupted=True)
    restart = decide(observe(spot_first, running, pools=pools, job=lost), CONFIG).status
    attempt = (restart.attempts or [])[0]
    assert (attempt.outcome, attempt.ended_at, attempt.restarts) == (None, None, 1)
    assert restart.started_at is None


def test_every_steps_gke_version_is_checked_before_the_first_pool() -> None:
    # TPU flex-start needs GKE 1.33.0-gke.1712000: a Spot first step does not, step 2 does.
    body = spec_body(
        tpu("v6e", "4x4"),
        mode="Spot",
        provisioning={"maxWaitDuration": "10m", "fallback": [{"mode": "FlexStart"}]},
    )
    old = GkeVersion.parse("1.32.3-gke.1000")
    obs = dataclasses.replace(observe(body), cluster_version=old)
    decision = decide(obs, CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "TPU flex-start requires GKE" in (decision.status.message or "")
    assert decision.actions == []


def test_deleting_calls_off_a_queued_create_of_a_step_left_behind_once() -> None:
    waiting = _waiting(TPU_LADDER, T0)
    moved = decide(observe(TPU_LADDER, waiting.status, now=T0 + timedelta(hours=1)), CONFIG)
    queued = {BASE: OperationView(kind="Create", running=False, position=3, queued=9, slots=5)}
    gone = decide(observe(TPU_LADDER, moved.status, operations=queued, deleting=True), CONFIG)
    assert names(gone, CancelPoolOperation) == [BASE]
    assert gone.released is False
