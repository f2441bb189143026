"""What a decision changed that the operator's metrics count: worked out with the
decision, from the status the pass read and the one it writes, so the metrics add it up
without looking at statuses themselves. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from dws_operator.api import (
    TERMINAL_PHASES,
    AttemptOutcome,
    BookingState,
    Phase,
    PlanSummary,
    ProvisioningSpec,
    TrainingRequestStatus,
)
from dws_operator.catalog import ProvisioningMode
from dws_operator.estimate import Wait, capacity_key
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.facts import StepWords

#: GKE's cluster autoscaler removes an unneeded node after 10 minutes by default: what a
#: pool left to the autoscaler would have kept, per node, after the work ended.
AUTOSCALER_SCALE_DOWN_SECONDS = 600.0


@dataclass(frozen=True)
class Tally:
    """A decision's contribution to the counters, counted once its status is written."""

    #: The phase change (from, to), if any.
    transition: tuple[str, str] | None = None
    #: Seconds from asking for capacity to the work starting, when it started now:
    #: from the request's creation (earlier ladder steps included), or after a restart
    #: from its new capacity request.
    waited_seconds: float | None = None
    #: Restarts decided now.
    restarts: int = 0
    #: Recoveries from a stuck request decided now.
    recoveries: int = 0
    #: Chip-seconds of a hold that ended now: every node ready until the work ended, was
    #: restarted (its nodes lost) or the request was deleted while it ran.
    chip_seconds: float = 0.0
    #: The request failed now for want of capacity in time.
    capacity_timeout: bool = False
    #: Seconds from the work's end to its pools at zero, when they got there now.
    emptied_seconds: float | None = None
    #: Node-seconds GKE's autoscaler would have kept after the end, spared by that.
    spared_node_seconds: float = 0.0
    #: Ladder attempts that ended now: (mode, outcome) each.
    attempts_ended: tuple[tuple[str, str], ...] = ()
    #: Seconds from a Calendar-mode booking's submit to its approval, when seen now.
    approval_seconds: float | None = None
    #: Node-hours a finished request used of its calendar block's, when it ended now.
    block_utilisation: float | None = None
    #: Asks for capacity that ended now, with or without it, by kind of capacity
    #: (`estimate.capacity_key`): the estimates' history.
    waits: tuple[tuple[str, Wait], ...] = ()
    #: A wait that got its capacity now over the p50 the request was shown while it
    #: waited (`status.estimate`): how good the estimates are (1 is spot on).
    estimate_ratio: float | None = None
    #: A long run's rollovers decided now (a segment stopped for the next).
    rollovers: int = 0
    #: Seconds from the last segment's stop to this one's workload running, when it
    #: started now.
    rollover_gap: float | None = None
    #: Seconds before the last segment's capacity ended that the next one's was asked
    #: for (its pools made ahead), when a rollover was decided now.
    requested_ahead: float | None = None


def tally(
    before: TrainingRequestStatus,
    after: TrainingRequestStatus,
    created: datetime | None,
    now: datetime,
    first_step: StepWords | None = None,
) -> Tally:
    """What changed from `before` to `after` (`created`: the request's creation time;
    `first_step`: the provisioning of a request without a ladder)."""
    plan = after.plan
    slices = plan.slices if plan else 1
    nodes = plan.nodes * slices if plan else 0
    chips = plan.total_chips * slices if plan else 0
    waited = None
    if before.started_at is None and after.started_at is not None:
        # After a restart, from its new capacity request; on a calendar block (booked
        # ahead), from the block's delivery: the wait Calendar mode has, not the booking's.
        on_block = after.booking is not None and after.booking.state in (
            BookingState.DELIVERED,
            BookingState.ENDED,
        )
        again = after.restarts or on_block or (after.segment or 1) > 1
        since = after.requested_at if again else None
        waited = _seconds(after.started_at, since or created or after.requested_at)
    held_until = None
    if before.started_at is not None and after.started_at is None:
        held_until = after.requested_at
    elif before.finished_at is None and after.finished_at is not None:
        held_until = after.finished_at
    elif before.phase == Phase.RUNNING and after.phase == Phase.DELETING:
        held_until = now
    held = _seconds(held_until, before.started_at or after.started_at)
    completed = cond.condition(after.conditions, cond.COMPLETED)
    timed_out = (
        before.phase != Phase.FAILED
        and after.phase == Phase.FAILED
        and completed is not None
        and completed.reason == "CapacityTimeout"
    )
    emptied = None
    if before.scaled_down_at is None and after.scaled_down_at is not None:
        emptied = _seconds(after.scaled_down_at, after.finished_at)
        if after.provisioned_at is None:
            emptied = None  # nothing was provisioned: no scale-down to time
    # An attempt ends once per (outcome, end): a restart reopens it, and it may end
    # again, Preempted or Provisioned once more.
    ended = {
        (a.step, a.outcome, a.ended_at) for a in before.attempts or () if a.ended_at is not None
    }
    attempts = tuple(
        (a.mode, str(a.outcome))
        for a in after.attempts or ()
        if a.ended_at is not None
        and a.outcome is not None
        and (a.step, a.outcome, a.ended_at) not in ended
    )
    spared = 0.0
    if emptied is not None:
        spared = max(AUTOSCALER_SCALE_DOWN_SECONDS - emptied, 0.0) * nodes
    booking = after.booking
    approval = None
    newly_approved = before.booking is None or before.booking.approved_at is None
    if booking is not None and booking.approved_at is not None and newly_approved:
        approval = _seconds(booking.approved_at, booking.submitted_at)
    utilisation = None
    if booking is not None and before.finished_at is None and after.finished_at is not None:
        utilisation = _utilisation(after, nodes)
    waits = _waits(before, after, now, first_step)
    rollovers, gap, ahead = _segments(before, after)
    return Tally(
        transition=(str(before.phase), str(after.phase)) if before.phase != after.phase else None,
        waited_seconds=waited,
        restarts=max(after.restarts - before.restarts, 0),
        recoveries=max(after.recoveries - before.recoveries, 0),
        chip_seconds=held * chips if held is not None else 0.0,
        capacity_timeout=timed_out,
        emptied_seconds=emptied,
        spared_node_seconds=spared,
        attempts_ended=attempts,
        approval_seconds=approval,
        block_utilisation=utilisation,
        waits=waits,
        estimate_ratio=_estimate_ratio(after, waits),
        rollovers=rollovers,
        rollover_gap=gap,
        requested_ahead=ahead,
    )


def _segments(
    before: TrainingRequestStatus, after: TrainingRequestStatus
) -> tuple[int, float | None, float | None]:
    """A long run's rollovers decided now, the gap between segments that closed now, and
    how far ahead of the last window's end the next segment's capacity was asked for."""
    rollovers = max((after.segment or 1) - (before.segment or 1), 0)
    grown = (after.rollover_seconds or 0.0) - (before.rollover_seconds or 0.0)
    gap = grown if after.rollover_seconds is not None and grown > 0 else None
    if gap is None and before.rollover_seconds != after.rollover_seconds:
        gap = 0.0
    ahead = None
    records = after.segments or []
    if rollovers and len(records) >= 2 and records[-2].ends_at is not None:
        ahead = max((records[-2].ends_at - records[-1].requested_at).total_seconds(), 0.0)
    return rollovers, gap, ahead


def _estimate_ratio(
    after: TrainingRequestStatus, waits: tuple[tuple[str, Wait], ...]
) -> float | None:
    shown = after.estimate
    if shown is None or not shown.p50_seconds:
        return None
    for key, wait in waits:
        if key == shown.key and not wait.censored:
            return wait.seconds / shown.p50_seconds
    return None


#: Attempt outcomes that end an ask without capacity: it ran out of time, GKE said no, it
#: stuck (and asking again did not help), or the request was deleted while it waited.
#: Not Failed (a refusal of another kind, a name taken, a queue missing: no wait for
#: capacity) nor Preempted (the capacity came).
_WITHOUT_CAPACITY = frozenset(
    {
        AttemptOutcome.TIMED_OUT,
        AttemptOutcome.STOCKOUT,
        AttemptOutcome.QUOTA_EXCEEDED,
        AttemptOutcome.STUCK,
        AttemptOutcome.CANCELLED,
    }
)
#: Reasons a request without a ladder fails for want of capacity.
_NO_CAPACITY_REASONS = frozenset(
    {"CapacityTimeout", "Stockout", "QuotaExceeded", "WorkloadDeactivated"}
)


def _waits(
    before: TrainingRequestStatus,
    after: TrainingRequestStatus,
    now: datetime,
    first_step: StepWords | None,
) -> tuple[tuple[str, Wait], ...]:
    """The asks for capacity that ended from `before` to `after`: a ladder's attempts
    that ended now (from the step's ask, or its last restart's, to its end), else the
    request's own ask (to its work starting, or to its failure or deletion before). A
    calendar block's wait is its booking's, not capacity's: not counted."""
    plan = after.plan
    if plan is None:
        return ()
    if after.attempts:
        ended = {(a.step, a.ended_at) for a in before.attempts or () if a.ended_at is not None}
        found: list[tuple[str, Wait]] = []
        for attempt in after.attempts:
            end, outcome = attempt.ended_at, attempt.outcome
            if end is None or outcome is None or (attempt.step, end) in ended:
                continue
            if outcome != AttemptOutcome.PROVISIONED and outcome not in _WITHOUT_CAPACITY:
                continue
            if attempt.mode == ProvisioningMode.CALENDAR:
                continue
            since = attempt.started_at
            asked = after.requested_at
            if attempt.restarts and asked is not None and since < asked <= end:
                since = asked
            key = capacity_key_of(plan, attempt.mode, tuple(attempt.zones or ()))
            censored = outcome != AttemptOutcome.PROVISIONED
            found.append((key, Wait((end - since).total_seconds(), censored, end)))
        return tuple(found)
    if first_step is None or first_step.mode == ProvisioningMode.CALENDAR:
        return ()
    asked = after.requested_at or before.requested_at
    if asked is None:
        return ()
    key = capacity_key_of(plan, first_step.mode, first_step.zones)
    if before.started_at is None and after.started_at is not None:
        return ((key, Wait((after.started_at - asked).total_seconds(), False, now)),)
    completed = cond.condition(after.conditions, cond.COMPLETED)
    no_capacity = completed is not None and completed.reason in _NO_CAPACITY_REASONS
    gave_up = (after.phase == Phase.FAILED and no_capacity) or after.phase == Phase.DELETING
    if before.started_at is None and before.phase not in TERMINAL_PHASES and gave_up:
        if before.phase == Phase.DELETING or after.started_at is not None:
            return ()
        return ((key, Wait(max((now - asked).total_seconds(), 0.0), True, now)),)
    return ()


def step_key(plan: PlanSummary, step: ProvisioningSpec) -> str | None:
    """The kind of capacity a ladder step asks for, for the slice `plan`; None for a
    Calendar step (no history answers for it: its booking says when)."""
    if step.mode == ProvisioningMode.CALENDAR:
        return None
    return capacity_key_of(plan, str(step.mode), tuple(step.zones or ()))


def capacity_key_of(plan: PlanSummary, mode: str, zones: tuple[str, ...]) -> str:
    """The kind of capacity a step of `mode` in `zones` asks for, for the slice `plan`."""
    zone = zones[0] if len(zones) == 1 else ("any" if not zones else "several")
    return capacity_key(plan.accelerator, plan.shape, plan.slices, mode, zone)


def _utilisation(status: TrainingRequestStatus, nodes: int) -> float | None:
    """Node-seconds the work held (started to finished) over those its block reserved
    (its window times its VMs: the reserved chips over the chips of a node)."""
    booking, plan = status.booking, status.plan
    if booking is None or plan is None or status.started_at is None:
        return 0.0 if booking is not None and status.started_at is None else None
    vms = booking.count if booking.unit == "VMs" else booking.count / max(plan.chips_per_node, 1)
    reserved = (booking.end_time - booking.start_time).total_seconds() * vms
    held = _seconds(status.finished_at, status.started_at) or 0.0
    return min(held * nodes / reserved, 1.0) if reserved > 0 else None


def _seconds(later: datetime | None, earlier: datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return max((later - earlier).total_seconds(), 0.0)


def account_phase_time(
    before: TrainingRequestStatus, after: TrainingRequestStatus, now: datetime
) -> None:
    """Where the time went: when the phase changes, the time spent in the one left is
    added to `phaseSeconds`, and `phaseSince` starts the new one (a request first seen
    starts its first phase now)."""
    if after.phase == before.phase and before.phase_since is not None:
        return
    left = before.phase_since
    if left is not None and after.phase != before.phase:
        spent = dict(after.phase_seconds or {})
        key = str(before.phase)
        spent[key] = round(spent.get(key, 0.0) + max((now - left).total_seconds(), 0.0), 3)
        after.phase_seconds = spent
    after.phase_since = now


#: Attempt outcomes that gave up the step's wait: those that ended it without capacity,
#: but Cancelled (the user's own doing).
_GIVEN_UP = _WITHOUT_CAPACITY - {AttemptOutcome.CANCELLED}


def account_lost_time(before: TrainingRequestStatus, after: TrainingRequestStatus) -> None:
    """Time lost (`lostSeconds`): when the pass gives up a wait for capacity (a recovery
    asks again, a ladder step ends without capacity, the request's wait runs out), the
    seconds from its ask (the step's start, or the last recovery since) to now are added."""
    lost = 0.0
    since = [t for t in (before.requested_at, before.recovered_at) if t is not None]
    if after.recoveries > before.recoveries and after.recovered_at is not None and since:
        lost += (after.recovered_at - max(since)).total_seconds()
    ended = [
        (old, new)
        for old, new in zip(before.attempts or [], after.attempts or [], strict=False)
        if old.ended_at is None and new.ended_at is not None and new.outcome in _GIVEN_UP
    ]
    for old, new in ended:
        asked = max([old.started_at, *(t for t in [before.recovered_at] if t is not None)])
        assert new.ended_at is not None
        lost += (new.ended_at - asked).total_seconds()
    completed = cond.condition(after.conditions, cond.COMPLETED)
    timed_out = (
        not after.attempts
        and before.phase != Phase.FAILED
        and after.phase == Phase.FAILED
        and completed is not None
        and completed.reason == "CapacityTimeout"
    )
    if timed_out and since and after.finished_at is not None:
        lost += (after.finished_at - max(since)).total_seconds()
    if lost > 0:
        after.lost_seconds = round((after.lost_seconds or 0.0) + lost, 3)
