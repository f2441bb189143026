"""The estimate in the reconcile decision: which waits a pass counts (got capacity, or
ended without it, per ladder step), which kind of capacity a waiting request asks the
history about, and `status.estimate` while it waits. Pure."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from dws_operator.api import Phase
from dws_operator.estimate import Estimate, Wait
from dws_operator.reconcile import JobView, estimate_key
from dws_operator.reconcile.estimates import describe
from dws_operator.reconcile.observed import Observed
from dws_operator.reconcile.tally import account_phase_time
from tests.builders import gpu, spec_body
from tests.unit import test_ladder as ladder
from tests.unit.decisions import (
    T0,
    job_view,
    observed,
    plan_of,
    pool_for,
    run,
    status_at,
    with_,
)

FLEX = spec_body(gpu("nvidia-h100-80gb", nodes=2), provisioning={"zones": ["us-east5-a"]})
KEY = "nvidia-h100-80gb.16_GPUs.x1.FlexStart.us-east5-a"
KNOWN = Estimate(KEY, observations=30, censored=4, p50=1800.0, p90=5400.0)


def with_estimate(obs: Observed, found: Estimate | None) -> Observed:
    return dataclasses.replace(obs, estimate=found)


def test_a_waiting_request_asks_about_its_kind_of_capacity() -> None:
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, FLEX)
    assert estimate_key(observed(FLEX, waiting).request) == KEY
    spot = with_(FLEX, provisioning={"mode": "Spot", "zones": []})
    assert estimate_key(observed(spot, status_at(Phase.PENDING, spot)).request) == (
        "nvidia-h100-80gb.16_GPUs.x1.Spot.any"
    )
    running = status_at(Phase.RUNNING, FLEX, started=T0)
    assert estimate_key(observed(FLEX, running).request) is None
    assert estimate_key(observed(FLEX, waiting, deleting=True).request) is None


def test_the_status_shows_the_estimate_while_waiting_and_when_to_expect_it() -> None:
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, FLEX, requested=T0)
    obs = observed(FLEX, waiting, pool=pool_for(FLEX), job=job_view(ready=0), service=True)
    decision = run(with_estimate(obs, KNOWN))
    shown = decision.status.estimate
    assert shown is not None
    assert (shown.key, shown.observations, shown.censored) == (KEY, 30, 4)
    assert (shown.p50_seconds, shown.p90_seconds) == (1800.0, 5400.0)
    assert shown.expected_by == T0 + timedelta(minutes=30)
    assert shown.message == (
        f"p50 30m, p90 1h30m from 30 earlier asks for {KEY}; 4 ended without capacity"
    )
    nothing = run(with_estimate(obs, Estimate(KEY, 0, 0, None, None))).status.estimate
    assert nothing is not None
    assert nothing.message == f"no data yet for {KEY}"
    assert nothing.expected_by is None


def test_once_running_the_last_estimate_stays_as_it_was() -> None:
    plan = plan_of(FLEX)
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, FLEX, requested=T0)
    shown = run(
        with_estimate(
            observed(FLEX, waiting, pool=pool_for(FLEX), job=job_view(ready=0), service=True),
            KNOWN,
        )
    ).status
    later = T0 + timedelta(minutes=20)
    obs = observed(
        FLEX, shown, pool=pool_for(FLEX), job=job_view(ready=plan.nodes), service=True, now=later
    )
    other = Estimate(KEY, observations=31, censored=4, p50=1700.0, p90=5000.0)
    running = run(with_estimate(obs, other))
    assert running.status.phase == Phase.RUNNING
    assert running.status.estimate == shown.estimate


def test_a_request_that_gets_its_capacity_counts_one_wait() -> None:
    plan = plan_of(FLEX)
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, FLEX, requested=T0)
    later = T0 + timedelta(minutes=20)
    obs = observed(
        FLEX, waiting, pool=pool_for(FLEX), job=job_view(ready=plan.nodes), service=True, now=later
    )
    assert run(obs).tally.waits == ((KEY, Wait(1200.0, False, later)),)
    # Passes after it count nothing more.
    again = run(dataclasses.replace(obs, request=observed(FLEX, run(obs).status).request))
    assert again.tally.waits == ()


def test_a_request_that_gives_up_counts_a_wait_without_capacity() -> None:
    body: dict[str, Any] = with_(FLEX, provisioning={"maxWaitDuration": "1h"})
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, body, requested=T0)
    late = T0 + timedelta(hours=1, seconds=1)
    timed_out = run(
        observed(body, waiting, pool=pool_for(body), job=job_view(ready=0), service=True, now=late)
    )
    assert timed_out.status.phase == Phase.FAILED
    assert timed_out.tally.waits == ((KEY, Wait(3601.0, True, late)),)
    deleted = run(observed(body, waiting, deleting=True, now=T0 + timedelta(minutes=5)))
    assert deleted.tally.waits == ((KEY, Wait(300.0, True, T0 + timedelta(minutes=5))),)


def test_each_ladder_step_counts_its_own_wait() -> None:
    waiting = ladder._waiting(ladder.TPU_LADDER, T0)
    later = T0 + timedelta(minutes=31)
    pools = {ladder.BASE: ladder.pool(ladder.BASE)}
    job = JobView(ladder.NAME, ours=True)
    moved = ladder.decide(
        ladder.observe(ladder.TPU_LADDER, waiting.status, now=later, pools=pools, job=job),
        ladder.CONFIG,
    )
    assert moved.status.step == 2
    assert moved.tally.waits == (
        ("tpu-v6e.4x4.x1.FlexStart.us-east5-a", Wait(1860.0, True, later)),
    )


def test_the_words_say_what_is_unknown() -> None:
    assert describe(Estimate("k", 5, 4, 60.0, None)) == (
        "p50 1m, p90 unknown from 5 earlier asks for k; 4 ended without capacity"
    )


def test_capacity_that_comes_says_how_good_the_estimate_was() -> None:
    plan = plan_of(FLEX)
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, FLEX, requested=T0)
    obs = observed(FLEX, waiting, pool=pool_for(FLEX), job=job_view(ready=0), service=True)
    shown = run(with_estimate(obs, KNOWN)).status
    later = T0 + timedelta(minutes=20)
    came = observed(
        FLEX, shown, pool=pool_for(FLEX), job=job_view(ready=plan.nodes), service=True, now=later
    )
    assert run(came).tally.estimate_ratio == 1200.0 / 1800.0
    # Without an estimate shown (or one of no data), nothing to compare.
    assert (
        run(dataclasses.replace(came, request=observed(FLEX, waiting).request)).tally.estimate_ratio
        is None
    )


def test_a_failure_that_is_not_about_capacity_is_no_wait() -> None:
    waiting = status_at(Phase.WAITING_FOR_CAPACITY, FLEX, requested=T0)
    taken = job_view(ours=False)
    failed = run(observed(FLEX, waiting, pool=pool_for(FLEX), job=taken, service=True))
    assert failed.status.phase == Phase.FAILED
    assert failed.tally.waits == ()


def test_where_the_time_went_phase_by_phase() -> None:
    first = run(observed(FLEX)).status
    assert (first.phase, first.phase_since, first.phase_seconds) == (
        Phase.PROVISIONING,
        T0,
        None,
    )
    status = first
    for minutes, phase in (
        (5, Phase.WAITING_FOR_CAPACITY),
        (7, Phase.PROVISIONING),  # a restart, say: the phase visited again
        (10, Phase.RUNNING),
    ):
        after = status.model_copy(deep=True)
        after.phase = phase
        account_phase_time(status, after, T0 + timedelta(minutes=minutes))
        status = after
    assert status.phase_seconds == {"Provisioning": 300.0 + 180.0, "WaitingForCapacity": 120.0}
    assert status.phase_since == T0 + timedelta(minutes=10)
    again = status.model_copy(deep=True)
    account_phase_time(status, again, T0 + timedelta(minutes=11))
    assert again == status  # no change of phase: nothing to write
