"""A capacity ladder ordered by estimate (`fallbackOrder: Estimated`): the order fixed
once from the history's p50s, each step's pool and mode taken from that order, the
metrics' labels from the step as written."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from dws_operator.api import AttemptOutcome, Phase, TrainingRequestStatus
from dws_operator.cli.plan_render import render_estimates
from dws_operator.controller.metrics import request_labels
from dws_operator.estimate import Estimate, History, Wait
from dws_operator.planning import plan_slice
from dws_operator.reconcile import CreateNodePool, DeleteNodePool, JobView, decide, ladder_keys
from dws_operator.reconcile.order import (
    HISTORY_RETRY_SECONDS,
    HISTORY_WAIT_SECONDS,
    ORDERED,
    estimated_order,
)
from tests.builders import spec_body, tpu
from tests.unit.test_ladder import BASE, CONFIG, T0, names, observe, pool, request


def ladder(spot_zone: str) -> dict[str, Any]:
    """FlexStart in us-east5-a, FlexStart in us-east5-b, Spot in `spot_zone`; Estimated."""
    return spec_body(
        tpu("v6e", "4x4"),
        provisioning={
            "zones": ["us-east5-a"],
            "maxWaitDuration": "30m",
            "fallbackOrder": "Estimated",
            "fallback": [
                {"mode": "FlexStart", "zones": ["us-east5-b"]},
                {"mode": "Spot", "zones": [spot_zone]},
            ],
        },
    )


#: Written so; Spot is the soonest by its history.
LADDER = ladder("us-east5-a")


def estimate(key: str, p50: float | None, observations: int = 20) -> Estimate:
    return Estimate(key, observations, 0, p50, None if p50 is None else p50 * 3)


def test_the_soonest_expected_first_those_without_estimate_after_as_written() -> None:
    spec = request(LADDER, TrainingRequestStatus()).facts.spec
    assert spec is not None
    steps = tuple(spec.provisioning.steps)
    known = (estimate("a", 3600), estimate("b", None), estimate("spot", 300))
    assert estimated_order(steps, known) == [3, 1, 2]
    assert estimated_order(steps, (None, None, None)) == [1, 2, 3]
    assert estimated_order(steps, ()) == [1, 2, 3]
    # A step that waits forever (only the last may) stays last, however soon.
    forever = [*steps[:2], steps[2].model_copy(update={"max_wait_duration": "0s"})]
    assert estimated_order(tuple(forever), known) == [1, 2, 3]


def test_the_history_is_asked_of_every_step_as_written_until_the_order_is_fixed() -> None:
    view = request(LADDER, TrainingRequestStatus())
    keys = ladder_keys(view)
    assert keys == (
        "tpu-v6e.4x4.x1.FlexStart.us-east5-a",
        "tpu-v6e.4x4.x1.FlexStart.us-east5-b",
        "tpu-v6e.4x4.x1.Spot.us-east5-a",
    )
    fixed = request(LADDER, TrainingRequestStatus(ladder_order=[3, 1, 2]))
    assert ladder_keys(fixed) is None
    as_written = spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Spot"}]})
    assert ladder_keys(request(as_written, TrainingRequestStatus())) is None


def test_the_order_is_fixed_first_then_each_step_runs_in_it() -> None:
    observed = observe(LADDER)
    keys = ladder_keys(observed.request)
    assert keys is not None
    history = dict(zip(keys, (3600.0, None, 300.0), strict=True))
    estimates = tuple(estimate(k, history[k]) for k in keys)
    first = decide(dataclasses.replace(observed, step_estimates=estimates), CONFIG)
    # Nothing asked for before the order is in the status.
    assert first.actions == []
    assert first.status.ladder_order == [3, 1, 2]
    assert first.status.phase == Phase.PENDING
    [told] = [e for e in first.events if e.reason == ORDERED]
    assert told.message == (
        "steps by estimated wait: 3 (Spot in us-east5-a, p50 5m), "
        "1 (FlexStart in us-east5-a, p50 1h), 2 (FlexStart in us-east5-b, no estimate)"
    )

    # The first step tried is Spot, on the first step's pool name.
    second = decide(observe(LADDER, first.status), CONFIG)
    creates = [a for a in second.actions if isinstance(a, CreateNodePool)]
    assert [(c.name, c.plan.node_pool.spot, c.plan.node_pool.flex_start) for c in creates] == [
        (BASE, True, False)
    ]
    assert [(a.step, a.mode) for a in second.status.attempts or []] == [(1, "Spot")]
    labels = request_labels(observe(LADDER, second.status).request.facts, second.status)
    assert (labels.mode, labels.zone) == ("Spot", "us-east5-a")

    # Its wait (the first step's as written, 30m) runs out: the next in the order is the
    # FlexStart step in us-east5-a, on the second step's pool name.
    later = T0 + timedelta(minutes=31)
    waiting = observe(LADDER, second.status, now=later, pools={BASE: pool(BASE)})
    waiting = dataclasses.replace(waiting, job=JobView("ladder", ours=True))
    moved = decide(waiting, CONFIG)
    assert moved.status.step == 2
    assert names(moved, DeleteNodePool) == [BASE]
    third = decide(observe(LADDER, moved.status, now=later), CONFIG)
    creates = [a for a in third.actions if isinstance(a, CreateNodePool)]
    assert [(c.name, c.plan.node_pool.zones, c.plan.node_pool.flex_start) for c in creates] == [
        (f"{BASE}-f1", ("us-east5-a",), True)
    ]
    attempts = third.status.attempts or []
    assert [(a.step, a.mode, a.zones, a.outcome) for a in attempts] == [
        (1, "Spot", ["us-east5-a"], AttemptOutcome.TIMED_OUT),
        (2, "FlexStart", ["us-east5-a"], None),
    ]
    assert third.status.ladder_order == [3, 1, 2]


def test_no_history_keeps_the_order_as_written() -> None:
    first = decide(observe(LADDER), CONFIG)
    assert first.status.ladder_order == [1, 2, 3]
    assert "2 (FlexStart in us-east5-b, no estimate)" in first.status.message


def test_a_ladder_already_begun_keeps_the_order_it_tried_in() -> None:
    begun = decide(
        observe(spec_body(tpu("v6e", "4x4"), provisioning={"fallback": [{"mode": "Spot"}]})),
        CONFIG,
    ).status
    assert begun.attempts
    observed = observe(LADDER, begun)
    keys = ladder_keys(observed.request)
    assert keys is not None
    estimates = tuple(estimate(k, 60.0 if "Spot" in k else 7200.0) for k in keys)
    decision = decide(dataclasses.replace(observed, step_estimates=estimates), CONFIG)
    assert decision.status.ladder_order == [1, 2, 3]


def test_an_order_that_is_not_the_ladders_is_read_as_written() -> None:
    status = TrainingRequestStatus(ladder_order=[3, 3, 1])
    decision = decide(observe(LADDER, status), CONFIG)
    creates = [a for a in decision.actions if isinstance(a, CreateNodePool)]
    assert [(c.name, c.plan.node_pool.zones, c.plan.node_pool.flex_start) for c in creates] == [
        (BASE, ("us-east5-a",), True)
    ]


def test_plan_prints_the_order_the_history_gives() -> None:
    spec = request(LADDER, TrainingRequestStatus()).facts.spec
    assert spec is not None
    ladder = [plan_slice(spec.at_step(i)) for i in range(spec.ladder_steps)]
    history = History()
    for minutes in (4, 5, 6):
        history.add("tpu-v6e.4x4.x1.Spot.us-east5-a", Wait(minutes * 60.0, False, T0))
    history.add("tpu-v6e.4x4.x1.FlexStart.us-east5-b", Wait(1800.0, False, T0))
    text = render_estimates(spec, ladder, history)
    assert text.splitlines()[-1].split() == [
        "tried",
        "in",
        "the",
        "order",
        "3,",
        "2,",
        "1",
        "(Estimated)",
    ]


def test_no_idle_pool_is_taken_over_before_the_order_is_fixed() -> None:
    # An idle pool of the first step as written (FlexStart) is offered; Spot comes first.
    observed = observe(LADDER)
    keys = ladder_keys(observed.request)
    assert keys is not None
    estimates = tuple(estimate(k, 300.0 if "Spot" in k else 3600.0) for k in keys)
    offered = dataclasses.replace(observed, offer="dws-idle-flex-pool", step_estimates=estimates)
    first = decide(offered, CONFIG)
    assert first.status.ladder_order == [3, 1, 2]
    assert first.status.node_pool is None


def test_with_the_history_unread_the_order_waits_then_goes_as_written() -> None:
    observed = observe(LADDER)
    young = dataclasses.replace(
        observed, request=dataclasses.replace(observed.request, created=T0 - timedelta(minutes=1))
    )
    waits = decide(young, CONFIG)
    assert waits.status.ladder_order is None
    assert waits.actions == []
    assert waits.requeue_after == HISTORY_RETRY_SECONDS
    old = dataclasses.replace(
        observed,
        request=dataclasses.replace(
            observed.request, created=T0 - timedelta(seconds=HISTORY_WAIT_SECONDS)
        ),
    )
    goes = decide(old, CONFIG)
    assert goes.status.ladder_order == [1, 2, 3]
    assert (goes.status.message or "").endswith(
        "(the capacity history could not be read: as written)"
    )


def test_a_zone_outside_the_cluster_is_named_by_its_step_as_written() -> None:
    body = ladder("us-west4-a")
    decision = decide(observe(body, TrainingRequestStatus(ladder_order=[3, 1, 2])), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "spec.provisioning.fallback[1].zones: us-west4-a" in (decision.status.message or "")
