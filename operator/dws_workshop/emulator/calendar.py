"""Compute's future reservations in calendar mode and the reservations they deliver, on
the emulator's simulated clock.

A submitted request (`planningStatus: SUBMITTED`) waits in PENDING_APPROVAL for
Google's review, which takes `CalendarReview.review_seconds` and ends APPROVED or
DECLINED as the review says. An approved request is locked at once (PROCURING: no
more changes, no cancelling). At its start time Compute creates the reservation
(`reservationName`, or the prefix and the date) and the request is FULFILLED, its
`autoCreatedReservations` naming it (or, when the review says `partial`, with fewer VMs or
chips than asked, FAILED_PARTIALLY_FULFILLED); at its end time the reservation is deleted, and
with it the VMs that consumed it (the simulator's part). A draft stays DRAFTING.

Sources: the `FutureReservationStatus.ProcurementStatus` values and their meanings in
Compute's discovery document; Compute's calendar-mode pages (delivered at the start
time, the reservation and the VMs on it deleted at the end time; a request may be
cancelled, then deleted, and deleted after its end). How long the review takes, and
that approval locks the request at once, are ours: Google publishes neither.

Time moves lazily: every read and write first runs `advance`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from google.cloud import compute_v1

from dws_operator import rfc3339
from dws_workshop.emulator.calendar_rules import SUBMITTED, Window, reserved_count
from dws_workshop.emulator.compute_api import COMPUTE_ROOT, ComputeApiError, not_found
from dws_workshop.emulator.config import CalendarReview
from dws_workshop.emulator.ruleids import behaviour

#: (project, zone, name) of a future reservation or a reservation.
ZonalKey = tuple[str, str, str]
#: Procurement states in which a request may still be cancelled.
CANCELLABLE = ("DRAFTING", "PENDING_APPROVAL", "APPROVED")
#: Procurement states after which a request may be deleted whatever the time.
DELETABLE = ("DRAFTING", "CANCELLED", "DECLINED", "FAILED")


def future_reservation_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/futureReservations/{name}"


def reservation_path(project: str, zone: str, name: str) -> str:
    return f"projects/{project}/zones/{zone}/reservations/{name}"


@dataclass
class Booking:
    project: str
    zone: str
    #: What `get` answers: the request as inserted plus what Compute fills in.
    reservation: compute_v1.FutureReservation
    window: Window
    #: When Google's review answers, and how: fixed when the request is submitted.
    review_due: datetime
    approve: bool
    #: What is delivered at the start when not all of it (the review's `partial`).
    partial: int | None = None

    @property
    def key(self) -> ZonalKey:
        return (self.project, self.zone, self.reservation.name)

    @property
    def procurement(self) -> str:
        # Compute's protos carry enums as strings: the value's name.
        return str(self.reservation.status.procurement_status)

    def set_procurement(self, status: str) -> None:
        self.reservation.status.procurement_status = status

    @property
    def delivered_name(self) -> str:
        """The reservation Compute creates at the start time."""
        named = self.reservation.reservation_name
        return named or f"{self.reservation.name_prefix}-{self.window.start:%Y%m%d}-0001"


@dataclass
class Delivered:
    """A reservation a calendar-mode request delivered, live for its window."""

    project: str
    zone: str
    name: str
    window: Window
    count: int


@dataclass
class CalendarState:
    """Every future reservation and the reservations delivered, by (project, zone, name)."""

    #: Simulated UTC now: the emulator's clock, `clock_factor` times real time.
    now: Callable[[], datetime]
    review: Callable[[], CalendarReview]
    bookings: dict[ZonalKey, Booking] = field(default_factory=dict)
    #: Requests whose insert has not finished yet.
    pending: dict[ZonalKey, Booking] = field(default_factory=dict)
    delivered: dict[ZonalKey, Delivered] = field(default_factory=dict)

    def booking(self, project: str, zone: str, name: str) -> Booking:
        self.advance()
        record = self.bookings.get((project, zone, name))
        if record is None:
            raise not_found(future_reservation_path(project, zone, name))
        return record

    def zone_bookings(self, project: str, zone: str) -> list[Booking]:
        self.advance()
        return [b for k, b in sorted(self.bookings.items()) if k[:2] == (project, zone)]

    def add(
        self,
        project: str,
        zone: str,
        reservation: compute_v1.FutureReservation,
        window: Window,
        ids: int,
    ) -> Booking:
        """A request accepted by an insert: held apart (`pending`) until its operation is
        done (`made`), so until then a read finds nothing of that name."""
        now = self.now()
        path = future_reservation_path(project, zone, reservation.name)
        reservation.kind = "compute#futureReservation"
        reservation.id = ids
        reservation.creation_timestamp = rfc3339.milliseconds(now)
        reservation.zone = f"{COMPUTE_ROOT}/projects/{project}/zones/{zone}"
        reservation.self_link = f"{COMPUTE_ROOT}/{path}"
        submitted = reservation.planning_status == SUBMITTED
        reservation.status = compute_v1.FutureReservationStatus(
            procurement_status="PENDING_APPROVAL" if submitted else "DRAFTING"
        )
        review = self.review()
        record = Booking(
            project,
            zone,
            reservation,
            window,
            review_due=now + timedelta(seconds=review.review_seconds),
            approve=review.outcome != "decline",
            partial=review.partial_count if review.outcome == "partial" else None,
        )
        self.pending[record.key] = record
        return record

    def made(self, key: ZonalKey) -> None:
        """The insert's operation is done: the request is there."""
        record = self.pending.pop(key, None)
        if record is not None:
            self.bookings[key] = record

    def taken(self, key: ZonalKey) -> bool:
        """Whether a request of that name is there or on its way."""
        return key in self.bookings or key in self.pending

    @behaviour("CE-FR-CANCEL")
    def cancel(self, project: str, zone: str, name: str) -> Booking:
        record = self.booking(project, zone, name)
        _refuse_tpu(record, "cancelled", rule="CE-FR-CANCEL")
        if record.procurement not in CANCELLABLE:
            raise ComputeApiError(
                400,
                "invalid",
                f"The future reservation '{name}' is {record.procurement} and can no longer "
                "be cancelled.",
                rule="CE-FR-CANCEL",
            )
        record.set_procurement("CANCELLED")
        return record

    @behaviour("CE-FR-DELETE")
    def check_delete(self, project: str, zone: str, name: str) -> Booking:
        record = self.booking(project, zone, name)
        _refuse_tpu(record, "deleted", rule="CE-FR-DELETE")
        if record.procurement not in DELETABLE and self.now() < record.window.end:
            raise ComputeApiError(
                400,
                "invalid",
                f"The future reservation '{name}' is {record.procurement}: cancel it first, "
                "or delete it after its end time.",
                rule="CE-FR-DELETE",
            )
        return record

    def remove(self, key: ZonalKey) -> None:
        self.bookings.pop(key, None)
        self.pending.pop(key, None)

    def active(self, project: str, zone: str, name: str) -> Delivered | None:
        """The delivered reservation `name` while its window is on, else None."""
        self.advance()
        return self.delivered.get((project, zone, name))

    def known(self, project: str, zone: str, name: str) -> bool:
        """Whether `name` is (or will be) a reservation a request here delivers."""
        return any(
            (b.project, b.zone, b.delivered_name) == (project, zone, name)
            for b in self.bookings.values()
        )

    @behaviour("CE-FR-REVIEW", "CE-FR-DELIVERY")
    def advance(self) -> None:
        now = self.now()
        for record in self.bookings.values():
            if record.procurement == "PENDING_APPROVAL" and now >= record.window.start:
                # Not answered by its start: nothing is provided (ours; Compute's FAILED
                # is "no reservations provided").
                record.set_procurement("FAILED")
            if record.procurement == "PENDING_APPROVAL" and now >= record.review_due:
                record.set_procurement("APPROVED" if record.approve else "DECLINED")
                if record.approve:
                    record.reservation.status.lock_time = rfc3339.milliseconds(now)
                    record.set_procurement("PROCURING")
            if record.procurement == "PROCURING" and now >= record.window.start:
                asked = reserved_count(record.reservation)
                count = asked if record.partial is None else min(record.partial, asked - 1)
                delivered = Delivered(
                    record.project, record.zone, record.delivered_name, record.window, count
                )
                path = reservation_path(record.project, record.zone, delivered.name)
                record.reservation.status.auto_created_reservations = [f"{COMPUTE_ROOT}/{path}"]
                record.reservation.status.fulfilled_count = delivered.count
                record.set_procurement(
                    "FULFILLED" if count == asked else "FAILED_PARTIALLY_FULFILLED"
                )
                self.delivered[(record.project, record.zone, delivered.name)] = delivered
        for key, delivered in list(self.delivered.items()):
            if now >= delivered.window.end:
                del self.delivered[key]


def _refuse_tpu(record: Booking, done: str, *, rule: str) -> None:
    """A TPU calendar-mode request can be neither cancelled nor deleted."""
    if "aggregate_reservation" in record.reservation:
        raise ComputeApiError(
            400,
            "invalid",
            f"The future reservation '{record.reservation.name}' reserves TPUs: a TPU "
            f"calendar-mode request cannot be {done}.",
            rule=rule,
        )
