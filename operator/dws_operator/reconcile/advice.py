"""DWS Calendar mode's start: the block's start as the spec gives it, as the status shows
it, or as Compute's calendar-mode advice finds a window for it between the spec's
earliest and latest (the query asked each pass while there is none). Pure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from dws_operator import rfc3339
from dws_operator.api import (
    TERMINAL_PHASES,
    BookingState,
    Phase,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.catalog import TPU_GENERATIONS
from dws_operator.durations import format_duration
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.booking import no_block, plan_booking, refused_booking
from dws_operator.reconcile.decision import PAST_DEADLINE_SECONDS, Decision, Draft
from dws_operator.reconcile.observed import RequestView
from dws_operator.reconcile.step import StepPlan, planned

#: The reason a Calendar request without a window gives: Compute's advice found none
#: between calendar.earliest and latest (yet, or at all).
NO_WINDOW = "NoCalendarWindow"
#: How often Compute's advice is asked again while it finds no window: every ask is a
#: call on the project's Compute quota, and windows open as other blocks are booked.
ADVICE_POLL_SECONDS = 600.0


@dataclass(frozen=True)
class AdviceQuery:
    """What Compute's calendar-mode advice is asked: when, between `earliest` and
    `latest`, a block of `count` (VMs or chips) lasting `duration` can start in `zone`."""

    zone: str
    earliest: datetime
    latest: datetime
    duration: timedelta
    count: int
    machine_type: str
    #: Compute's VM family of a TPU block; None for GPU VMs.
    tpu_family: str | None
    #: The region's other zones the operator knows of (the cluster's node locations, the
    #: calendar zones of a TPU family): denied to the advice, which otherwise considers
    #: every zone it is not told to leave out and may answer for another.
    other_zones: tuple[str, ...] = ()


def advice_query(request: RequestView, now: datetime) -> AdviceQuery | None:
    """What to ask Compute's advice this pass, for a Calendar request that lets the
    operator pick its start (calendar.earliest and latest): while it is on its Calendar
    step, live, and has no window of its own yet, or only one it showed and did not
    submit whose start has come. None otherwise: a window once submitted is the one
    booked, and a shown window is the one the user approves."""
    result = planned(request)
    if not isinstance(result, StepPlan) or result.step != 0 or request.deleting:
        return None
    if request.status.phase in TERMINAL_PHASES:
        return None
    if _shown_start(request.status, request.facts.booking_name, now) is not None:
        return None
    site = request.site.node_locations if request.site is not None else ()
    return query_for(result.spec, result.plan, now, site)


def query_for(
    spec: TrainingRequestSpec, plan: SlicePlan, now: datetime, zones_known: Iterable[str] = ()
) -> AdviceQuery | None:
    """The advice to ask for the block of a Calendar step with calendar.earliest and
    latest, until latest has passed; None for any other step. `zones_known`: zones of
    the cluster, whose others in the block's region are denied."""
    block = spec.provisioning.calendar
    zones = spec.provisioning.zones or []
    if block is None or block.earliest is None or block.latest is None or len(zones) != 1:
        return None
    if now > block.latest:
        return None
    booking = plan_booking("", "", spec, plan, block.earliest)
    zone = zones[0]
    region = zone.rsplit("-", 1)[0]
    tpu = spec.accelerator.tpu
    calendar_zones = TPU_GENERATIONS[tpu.version].calendar_zones if tpu is not None else ()
    others = sorted(
        {z for z in (*zones_known, *calendar_zones) if z.rsplit("-", 1)[0] == region} - {zone}
    )
    return AdviceQuery(
        zone=zone,
        other_zones=tuple(others),
        earliest=max(block.earliest, now),
        latest=block.latest,
        duration=booking.end - booking.start,
        count=booking.count,
        machine_type=booking.machine_type,
        tpu_family=booking.tpu_family,
    )


def _shown_start(status: TrainingRequestStatus, name: str, now: datetime) -> datetime | None:
    """The start of the window the request's status holds: once submitted, for good; not
    yet submitted, until it starts (then another is looked for)."""
    booking = status.booking
    if booking is None or booking.name != name:
        return None
    if booking.state != BookingState.AWAITING_APPROVAL or booking.start_time > now:
        return booking.start_time
    return None


def block_start(run: Draft, step: StepPlan) -> tuple[datetime, str | None] | Decision:
    """When the request's block starts, and the advice it came from: the spec's
    startTime; else the window its status holds (`_shown_start`); else the one Compute's
    advice found this pass between earliest and latest. Without one, a decision: wait
    and ask again, or, past latest, no block."""
    block = step.spec.provisioning.calendar
    assert block is not None
    if block.start_time is not None:
        return block.start_time, None
    shown = _shown_start(run.status, run.request.facts.booking_name, run.now)
    if shown is not None:
        assert run.status.booking is not None
        return shown, run.status.booking.recommendation_id
    assert block.earliest is not None
    assert block.latest is not None
    advice = run.observed.advice
    if advice is not None and advice.refused:
        return refused_booking(run, step, advice.why_none)
    window = advice.window if advice is not None else None
    if window is not None and block.earliest <= window.start <= block.latest:
        return window.start, window.recommendation_id
    span = f"between {rfc3339.seconds(block.earliest)} and {rfc3339.seconds(block.latest)}"
    why = f" ({advice.why_none})" if advice is not None and advice.why_none else ""
    if run.now > block.latest:
        lapsed = run.status.booking is not None
        found = (
            "no window was booked" if lapsed else "Compute's calendar-mode advice found no window"
        )
        return no_block(run, step, f"{found} for the block to start {span}{why}", reason=NO_WINDOW)
    run.condition(
        cond.BOOKED, "False", NO_WINDOW, f"no window for the block to start {span} yet{why}"
    )
    until = (block.latest - run.now).total_seconds()
    return run.phase(
        Phase.PENDING,
        f"Compute's calendar-mode advice has no window for the block to start {span} yet{why}; "
        f"asking again in {format_duration(timedelta(seconds=ADVICE_POLL_SECONDS))}",
        requeue=min(ADVICE_POLL_SECONDS, until + PAST_DEADLINE_SECONDS),
    )
