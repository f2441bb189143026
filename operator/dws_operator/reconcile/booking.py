"""DWS Calendar mode: the block a request books, and the pass's decision while the
booking goes from approval to delivery and to the block's end. Pure.

A booking commits the project to pay for the block once Google approves it, and an
approved booking cannot be cancelled, so it is never made by surprise: the request
first shows what it would book (`status.booking`, AwaitingApproval) and it is submitted
only when `spec.approveBooking` is true (or the operator books without approval). It
is submitted at most once: the future reservation's name and the insert's `requestId`
come from the request's uid, so a retried insert, or one whose answer was lost, books
nothing more, and a restarted operator finds the booking again by name.

Then Compute is read every pass: Google's review (UnderReview), its answer (Approved,
or Declined: the request fails, or moves down its capacity ladder), the delivery at
the start time (Delivered: the pool is made on the delivered reservation and the
workload runs), and `stopBefore` ahead of the end the workload is deleted so its pods
get SIGTERM and that long to checkpoint before Compute takes the VMs back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from dws_operator import rfc3339
from dws_operator.api import (
    AttemptOutcome,
    BookingState,
    BookingStatus,
    Phase,
    TrainingRequestSpec,
)
from dws_operator.catalog import TPU_GENERATIONS
from dws_operator.durations import format_duration, parse_duration
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import DeleteJob, SubmitBooking
from dws_operator.reconcile.decision import (
    BLOCK_ENDED,
    BOOKING_POLL_SECONDS,
    PAST_DEADLINE_SECONDS,
    STOP_LEAD_SECONDS,
    SUBMIT_POLL_SECONDS,
    Decision,
    Draft,
    ReconcileConfig,
)
from dws_operator.reconcile.ladder import next_step
from dws_operator.reconcile.observed import BookingView
from dws_operator.reconcile.step import StepPlan

#: Compute's procurement states, as the decision reads them.
UNDER_REVIEW = frozenset({"DRAFTING", "PENDING_APPROVAL", "PENDING_AMENDMENT_APPROVAL"})
REFUSED = frozenset({"DECLINED", "FAILED", "FAILED_PARTIALLY_FULFILLED", "CANCELLED"})
DELIVERED = "FULFILLED"
#: Derives a booking's `requestId` from the request's uid.
_REQUEST_ID_NAMESPACE = uuid.UUID("8d4bd1f4-3c3e-4d65-9a3b-5f0c1e6f2a11")


@dataclass(frozen=True)
class BookingPlan:
    """What the request books: one future reservation in calendar mode."""

    #: The future reservation, and the reservation Compute delivers at the start.
    name: str
    zone: str
    start: datetime
    end: datetime
    #: VMs (GPU) or chips (TPU).
    count: int
    unit: Literal["VMs", "chips"]
    machine_type: str
    #: Compute's VM family of a TPU block; None for GPU VMs.
    tpu_family: str | None
    #: The request's uid, which the future reservation's description names.
    uid: str
    #: Seconds before the end that the workload is stopped.
    stop_before: float
    #: The Compute advice the window came from (calendar.earliest and latest); else None.
    recommendation_id: str | None = None

    @property
    def request_id(self) -> str:
        """The insert's idempotency key, the same for every try of this request's booking."""
        return request_id_for(self.uid)

    @property
    def stop_at(self) -> datetime:
        """When the workload is told to stop: stopBefore, and a lead, before the end."""
        return self.end - timedelta(seconds=self.stop_before + STOP_LEAD_SECONDS)


def request_id_for(uid: str) -> str:
    return str(uuid.uuid5(_REQUEST_ID_NAMESPACE, uid))


def plan_booking(
    name: str,
    uid: str,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    start: datetime,
    recommendation_id: str | None = None,
) -> BookingPlan:
    """The block `spec` (a Calendar step, admission-checked) books for the slice `plan`
    from `start` (`block_start`), as the future reservation `name`
    (`RequestFacts.booking_name`: from the request's name and uid, whatever its pool is
    called)."""
    provisioning = spec.provisioning
    block = provisioning.calendar
    zones = provisioning.zones or []
    if block is None or len(zones) != 1:
        raise ValueError("a Calendar step has a calendar block and exactly one zone")
    tpu = spec.accelerator.tpu
    family = TPU_GENERATIONS[tpu.version].calendar_family if tpu is not None else None
    return BookingPlan(
        name=name,
        zone=zones[0],
        start=start,
        end=start + parse_duration(block.duration),
        count=plan.total_chips if tpu is not None else plan.nodes,
        unit="chips" if tpu is not None else "VMs",
        machine_type=plan.machine_type,
        tpu_family=family,
        uid=uid,
        stop_before=parse_duration(block.stop_before).total_seconds(),
        recommendation_id=recommendation_id,
    )


def book(
    run: Draft, step: StepPlan, booking: BookingPlan, config: ReconcileConfig
) -> Decision | None:
    """The pass's decision while the block is not on yet (or has ended); None while it is
    on, with a timer set for the stop before its end."""
    seen = run.observed.booking
    status = _booking_status(run, booking, seen)
    run.status.booking = status
    if seen is None:
        return _not_booked_yet(run, step, booking, config)
    if not seen.ours:
        why = (
            f"Compute holds a future reservation {booking.name} in {booking.zone} that this "
            "request did not make (its description does not name the request's uid)"
        )
        run.condition(cond.BOOKED, "False", "BookingNameTaken", why)
        # Nothing of this request's in Compute: not read again, never cancelled.
        status.state = BookingState.DECLINED
        return run.fail("BookingNameTaken", why)
    procurement = seen.procurement
    if procurement in REFUSED:
        status.state = (
            BookingState.CANCELLED if procurement == "CANCELLED" else BookingState.DECLINED
        )
        return no_block(run, step, f"Compute says the booking {booking.name} is {procurement}")
    if procurement != DELIVERED and run.now >= booking.stop_at:
        return no_block(
            run,
            step,
            f"the booking {booking.name} was not delivered before its block's end "
            f"({rfc3339.seconds(booking.end)}); Compute says {procurement}",
        )
    if procurement in UNDER_REVIEW:
        status.state = BookingState.UNDER_REVIEW
        run.condition(cond.BOOKED, "False", "UnderReview", f"{booking.name} is under review")
        return run.phase(
            Phase.PENDING,
            f"Booking {_window(booking)} is under Google's review",
            requeue=BOOKING_POLL_SECONDS,
        )
    status.approved_at = status.approved_at or run.now
    if procurement != DELIVERED:
        status.state = BookingState.APPROVED
        run.condition(cond.BOOKED, "True", "Approved", f"{booking.name}: {_window(booking)}")
        until = (booking.start - run.now).total_seconds()
        if until > 0:
            return run.phase(
                Phase.PENDING,
                f"Booked {_window(booking)}; the block starts in "
                f"{format_duration(timedelta(seconds=int(until)))}",
                requeue=until + PAST_DEADLINE_SECONDS,
            )
        return run.phase(
            Phase.WAITING_FOR_CAPACITY,
            f"The block {booking.name} has started; Compute is delivering its reservation",
            requeue=BOOKING_POLL_SECONDS,
        )
    status.state = BookingState.DELIVERED
    run.condition(cond.BOOKED, "True", "Delivered", f"{booking.name}: {_window(booking)}")
    return _on_the_block(run, booking)


def no_block(run: Draft, step: StepPlan, why: str, reason: str = "BookingDeclined") -> Decision:
    """No block will be delivered: the ladder's next step, else the request fails."""
    booking = run.status.booking
    if booking is not None and booking.state != BookingState.CANCELLED:
        booking.state = BookingState.DECLINED
    run.condition(cond.BOOKED, "False", reason, why)
    if step.step + 1 < len(step.ladder):
        return next_step(run, step, AttemptOutcome.FAILED, why)
    return run.fail(reason, why)


def refused_booking(run: Draft, step: StepPlan, why: str) -> Decision:
    """Compute refused the booking's submit for good (a start it no longer books, a
    permission missing): as a declined booking, the ladder's next step or a failure."""
    return no_block(run, step, f"Compute refused the booking: {why}")


def _not_booked_yet(
    run: Draft, step: StepPlan, booking: BookingPlan, config: ReconcileConfig
) -> Decision:
    status = run.status.booking
    assert status is not None
    spec = run.request.facts.spec
    # Once submitted, the approval stands: a booking may be in flight whatever the spec
    # says now (setting approveBooking back to false withdraws nothing).
    given = status.approval_generation is None or (
        run.request.generation > status.approval_generation
    )
    approved = (
        config.book_without_approval
        or status.state == BookingState.SUBMITTED
        or (spec is not None and spec.approve_booking and given)
    )
    if status.state not in (BookingState.AWAITING_APPROVAL, BookingState.SUBMITTED):
        # Compute no longer knows a booking it answered for (deleted by hand): never
        # booked again behind the user's back.
        why = f"Compute no longer has the booking {booking.name} (it was {status.state.value})"
        run.condition(cond.BOOKED, "False", "BookingLost", why)
        return run.fail("BookingLost", why)
    if run.now >= booking.start:
        # Not in Compute by its start: a block that has started cannot be booked any more
        # (Compute wants a start in the future).
        if status.state == BookingState.AWAITING_APPROVAL:
            why = "was submitted (spec.approveBooking)"
        else:
            why = "was seen in Compute"
        return no_block(
            run,
            step,
            f"the block's start ({rfc3339.seconds(booking.start)}) passed before the booking {why}",
        )
    if not approved:
        status.state = BookingState.AWAITING_APPROVAL
        ask = "set spec.approveBooking: true"
        if spec is not None and spec.approve_booking:
            ask = (
                "the window approved started before it was booked: set spec.approveBooking "
                "to false and back to true"
            )
        run.condition(cond.BOOKED, "False", "AwaitingApproval", f"{ask} to submit the booking")
        until = (booking.start - run.now).total_seconds()
        return run.phase(
            Phase.PENDING,
            f"Would book {_window(booking)}; {ask} to submit it",
            # Only to give up at the start: the approval itself wakes the request.
            requeue=until + PAST_DEADLINE_SECONDS,
        )
    status.state = BookingState.SUBMITTED
    status.submitted_at = status.submitted_at or run.now
    # Written before the insert goes: a deletion waits for what it may still make.
    status.last_submitted_at = run.now
    run.condition(cond.BOOKED, "False", "Submitted", f"{booking.name} submitted to Compute")
    run.act(SubmitBooking(booking))
    return run.phase(
        Phase.PENDING, f"Submitting the booking of {_window(booking)}", requeue=SUBMIT_POLL_SECONDS
    )


def _on_the_block(run: Draft, booking: BookingPlan) -> Decision | None:
    """The block is on: None (the pool and the workload follow), with a timer for the
    stop; past the stop, the workload is deleted and the request ends (a workload that
    completed keeps its own outcome)."""
    left = (booking.stop_at - run.now).total_seconds()
    job = run.observed.job
    if left > 0:
        run.wake_within(left + PAST_DEADLINE_SECONDS)
        return None
    if run.now >= booking.end:
        assert run.status.booking is not None
        run.status.booking.state = BookingState.ENDED
    if job is not None and job.ours and job.complete:
        return None
    if job is not None and job.ours and not job.failed:
        run.act(DeleteJob(job.name, run.request.facts.workload_kind))
    return run.fail(
        BLOCK_ENDED,
        f"the calendar block {booking.name} ends at {rfc3339.seconds(booking.end)}: the "
        f"workload was stopped {format_duration(booking.end - booking.stop_at)} before "
        "(spec.provisioning.calendar.stopBefore, and a minute for the operator's pass)",
    )


def _booking_status(run: Draft, booking: BookingPlan, seen: BookingView | None) -> BookingStatus:
    before = run.status.booking
    keep = before if before is not None and before.name == booking.name else None
    return BookingStatus(
        name=booking.name,
        zone=booking.zone,
        start_time=booking.start,
        end_time=booking.end,
        count=booking.count,
        unit=booking.unit,
        machine_type=booking.machine_type,
        state=keep.state if keep is not None else BookingState.AWAITING_APPROVAL,
        procurement_status=seen.procurement if seen is not None else None,
        submitted_at=keep.submitted_at if keep is not None else None,
        last_submitted_at=keep.last_submitted_at if keep is not None else None,
        approved_at=keep.approved_at if keep is not None else None,
        recommendation_id=booking.recommendation_id,
        approval_generation=_approval_generation(run, keep, booking),
    )


def _approval_generation(
    run: Draft, shown: BookingStatus | None, booking: BookingPlan
) -> int | None:
    """From which generation an approval counts: any for the first window shown; for one
    that replaces a shown window that started unbooked, only a later one than now."""
    if shown is None:
        return None
    replaced = shown.state == BookingState.AWAITING_APPROVAL and shown.start_time != booking.start
    return run.request.generation if replaced else shown.approval_generation


def _window(booking: BookingPlan) -> str:
    return (
        f"{booking.count} {booking.unit} of {booking.machine_type} in {booking.zone} from "
        f"{rfc3339.seconds(booking.start)} to {rfc3339.seconds(booking.end)} ({booking.name})"
    )
