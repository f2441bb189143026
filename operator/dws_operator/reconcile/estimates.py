"""The estimate of a waiting request: which kind of capacity it waits for
(`estimate_key`, asked by the shell of its history), and the status that shows the
history's answer while it waits (`show_estimate`). Pure."""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import EstimateStatus, Phase, TrainingRequestStatus
from dws_operator.durations import format_duration
from dws_operator.estimate import Estimate
from dws_operator.reconcile.observed import RequestView
from dws_operator.reconcile.step import StepPlan, planned
from dws_operator.reconcile.tally import step_key

#: Phases in which a request waits for its capacity.
WAITING = frozenset({Phase.PENDING, Phase.PROVISIONING, Phase.WAITING_FOR_CAPACITY})


def estimate_key(request: RequestView) -> str | None:
    """The kind of capacity the request's current step asks for; None when it has no
    plan, is not waiting, or waits for a calendar block (its booking says when)."""
    if request.deleting or request.status.started_at is not None:
        return None
    if request.status.phase not in WAITING:
        return None
    result = planned(request)
    if not isinstance(result, StepPlan):
        return None
    return step_key(result.plan.summary(), result.ladder[result.step])


def show_estimate(status: TrainingRequestStatus, found: Estimate | None) -> None:
    """`status.estimate` from the history's answer, while the request waits."""
    if found is None or status.started_at is not None or status.phase not in WAITING:
        return
    asked = status.requested_at
    expected = None
    if asked is not None and found.p50 is not None:
        expected = asked + timedelta(seconds=found.p50)
    status.estimate = EstimateStatus(
        key=found.key,
        observations=found.observations,
        censored=found.censored,
        p50_seconds=found.p50,
        p90_seconds=found.p90,
        expected_by=expected,
        message=describe(found),
    )


def describe(found: Estimate) -> str:
    """The estimate in words."""
    if found.observations == 0:
        return f"no data yet for {found.key}"

    def at(share: str, seconds: float | None) -> str:
        if seconds is None:
            return f"{share} unknown"
        return f"{share} {format_duration(timedelta(seconds=round(seconds)))}"

    without = f"; {found.censored} ended without capacity" if found.censored else ""
    return (
        f"{at('p50', found.p50)}, {at('p90', found.p90)} from {found.observations} earlier "
        f"asks for {found.key}{without}"
    )
