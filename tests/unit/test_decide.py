"""The reconcile decision (`dws_operator.reconcile`): observed state in; status, actions,
events and requeue out. Pure: every test builds `Observed` values by hand (with the
builders of `tests.unit.decisions`). This file: invalid specs, events, conditions and
generations, actions refused for good."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from dws_operator.api import Phase
from dws_operator.reconcile import Event, Observed, PoolState, PoolView, pool_name_for
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.conditions import set_condition
from tests.builders import spec_body, tpu
from tests.unit.decisions import (
    INVALID,
    MULTI,
    QUEUED,
    SHARED,
    T0,
    cond_tuple,
    condition,
    existing,
    failed,
    job_view,
    kinds,
    observed,
    pool_for,
    request,
    run,
    status_at,
)

# -- invalid specs ----------------------------------------------------------------------------


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
        request=dataclasses.replace(obs.request, status=first.status),
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
