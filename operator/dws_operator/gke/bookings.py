"""DWS Calendar-mode bookings: Compute future reservations in calendar mode.

`future_reservation` renders what a request books (`reconcile.booking.BookingPlan`):
calendar mode, submitted, the block's window, what is reserved (GPU VMs by machine
type: `specificSkuProperties`; TPU chips by VM family: `aggregateReservation`, BATCH),
consumed only by VMs that name it (`specificReservationRequired`), and its reservation
named as the booking and deleted at the end (`autoDeleteAutoCreatedReservations`).
Sources: the `FutureReservation` message of Compute's discovery document; Compute's
calendar-mode pages (gcloud's `compute future-reservations create
--reservation-mode=CALENDAR`).

`BookingClient` submits it (insert with the booking's `requestId`, so a retry books
nothing more), reads it, and cancels it; calls go through `call_compute` as the
workload policies' do. Nothing waits for the insert's operation: the next pass reads
the booking.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from dws_operator import rfc3339
from dws_operator.gke.compute_errors import classify_operation
from dws_operator.gke.compute_rest import ComputeApis, ZonalName
from dws_operator.gke.compute_types import (
    Accelerator,
    AggregateReservation,
    AggregateResources,
    CalendarModeAdviceRequest,
    CalendarModeAdviceResponse,
    CalendarModeAdviceRpcRequest,
    FlexibleTimeRange,
    FutureReservation,
    FutureReservationStatus,
    FutureResourcesSpec,
    InsertFutureReservationRequest,
    InstanceProperties,
    LocationPolicy,
    LocationPreference,
    ReservedResource,
    SpecificSkuProperties,
    SpecificSkuResources,
    TargetResources,
    TimeWindow,
)
from dws_operator.gke.errors import GkeError
from dws_operator.gke.policies import call_compute
from dws_operator.gke.retry import RetryPolicy
from dws_operator.reconcile import (
    AdviceQuery,
    AdviceView,
    BookingPlan,
    BookingView,
    CalendarWindow,
)

T = TypeVar("T")
R = TypeVar("R")
#: Training blocks: Compute's aggregate reservations distinguish BATCH from SERVING.
TPU_WORKLOAD_TYPE = "BATCH"


def future_reservation(booking: BookingPlan) -> FutureReservation:
    window = TimeWindow(
        start_time=rfc3339.seconds(booking.start), end_time=rfc3339.seconds(booking.end)
    )
    reservation = FutureReservation(
        name=booking.name,
        description=f"dws-operator: the calendar-mode block of TrainingRequest uid {booking.uid}",
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED",
        reservation_name=booking.name,
        auto_delete_auto_created_reservations=True,
        specific_reservation_required=True,
        time_window=window,
    )
    if booking.tpu_family is None:
        reservation.specific_sku_properties = SpecificSkuProperties(
            total_count=booking.count,
            instance_properties=InstanceProperties(machine_type=booking.machine_type),
        )
    else:
        reservation.aggregate_reservation = AggregateReservation(
            vm_family=booking.tpu_family,
            workload_type=TPU_WORKLOAD_TYPE,
            reserved_resources=[
                ReservedResource(accelerator=Accelerator(accelerator_count=booking.count))
            ],
        )
    return reservation


def insert_booking_request(project: str, booking: BookingPlan) -> InsertFutureReservationRequest:
    """The insert of `booking` as sent (`dws-operator plan --objects` prints it)."""
    return InsertFutureReservationRequest(
        project=project,
        zone=booking.zone,
        future_reservation_resource=future_reservation(booking),
        request_id=booking.request_id,
    )


#: The key of the one resource specification an advice request carries.
ADVICE_SPEC_KEY = "block"


def advice_request(project: str, query: AdviceQuery) -> CalendarModeAdviceRpcRequest:
    """Compute's calendar-mode advice asked when, between the query's earliest and latest,
    its block can start in its zone (a regional call: the zone's region)."""
    if query.tpu_family is None:
        target = TargetResources(
            specific_sku_resources=SpecificSkuResources(
                machine_type=query.machine_type, instance_count=query.count
            )
        )
    else:
        target = TargetResources(
            aggregate_resources=AggregateResources(
                vm_family=query.tpu_family,
                workload_type=TPU_WORKLOAD_TYPE,
                accelerator_count=query.count,
            )
        )
    # google.protobuf.Duration's JSON form: seconds with an "s".
    length = f"{int(query.duration.total_seconds())}s"
    spec = FutureResourcesSpec(
        target_resources=target,
        time_range_spec=FlexibleTimeRange(
            start_time_not_earlier_than=rfc3339.seconds(query.earliest),
            start_time_not_later_than=rfc3339.seconds(query.latest),
            min_duration=length,
            max_duration=length,
        ),
        # A zone not named is allowed: the region's others the operator knows are denied,
        # so the answer is for the request's zone.
        location_policy=LocationPolicy(
            locations={
                f"zones/{zone}": LocationPreference(
                    preference="ALLOW" if zone == query.zone else "DENY"
                )
                for zone in (query.zone, *query.other_zones)
            }
        ),
    )
    return CalendarModeAdviceRpcRequest(
        project=project,
        region=query.zone.rsplit("-", 1)[0],
        calendar_mode_advice_request_resource=CalendarModeAdviceRequest(
            future_resources_specs={ADVICE_SPEC_KEY: spec}
        ),
    )


def advice_view(answer: CalendarModeAdviceResponse, zone: str) -> AdviceView:
    """The first window the answer recommends in `zone`; else why not, in Compute's words
    for the zone (`otherLocations`)."""
    location = f"zones/{zone}"
    why = ""
    for recommendation in answer.recommendations:
        found = recommendation.recommendations_per_spec.get(ADVICE_SPEC_KEY)
        if found is None:
            continue
        if found.location == location and found.start_time and found.end_time:
            return AdviceView(
                CalendarWindow(
                    start=rfc3339.parse(found.start_time),
                    end=rfc3339.parse(found.end_time),
                    recommendation_id=found.recommendation_id,
                )
            )
        other = found.other_locations.get(location)
        if other is not None and not why:
            why = f"{other.status}: {other.details}" if other.details else str(other.status)
    return AdviceView(None, why)


@dataclass
class BookingClient:
    """Submit, read and cancel the calendar-mode bookings of `project`."""

    apis: ComputeApis
    project: str
    call_timeout: float = 30.0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: Called before every attempt (as `NodePoolClient.guard`).
    guard: Callable[[], None] | None = None
    #: The retries' jitter.
    rng: Callable[[], float] = random.random

    async def read(self, zone: str, name: str, uid: str) -> BookingView | None:
        """The booking as Compute has it (`ours`: made for the request with `uid`); None
        when it has none of that name."""
        try:
            found = await self._call(self.apis.bookings.get, ZonalName(self.project, zone, name))
        except GkeError as error:
            if error.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise
        status = found.status or FutureReservationStatus()
        return BookingView(
            procurement=status.procurement_status,
            reservations=tuple(r.rsplit("/", 1)[-1] for r in status.auto_created_reservations),
            ours=uid in found.description,
        )

    async def submit(self, booking: BookingPlan) -> None:
        """Insert the booking. A repeat is harmless: Compute ignores an insert whose
        `requestId` it has seen (answering with its operation), and one of a name it
        holds is refused (409), here taken as done (the read after it tells whether
        that booking is the request's). An insert whose operation already failed raises
        its error (classified): answered again for the same requestId, it would
        otherwise be sent on every pass."""
        try:
            operation = await self._call(
                self.apis.bookings.insert, insert_booking_request(self.project, booking)
            )
        except GkeError as error:
            if error.reason != "AlreadyExists":
                raise
            return
        if operation.done and operation.error.errors:
            failure = classify_operation(operation)
            if failure.reason != "AlreadyExists":
                raise failure

    async def advise(self, query: AdviceQuery) -> AdviceView:
        """Compute's calendar-mode advice for the query's block."""
        answer = await self._call(
            self.apis.advice.calendar_mode, advice_request(self.project, query)
        )
        return advice_view(answer, query.zone)

    async def cancel(self, zone: str, name: str) -> None:
        """Cancel a booking Google has not approved; gone already is done."""
        try:
            await self._call(self.apis.bookings.cancel, ZonalName(self.project, zone, name))
        except GkeError as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise

    async def _call(self, method: Callable[[R, float], T], request: R) -> T:
        return await call_compute(
            method,
            request,
            timeout=self.call_timeout,
            retry=self.retry,
            guard=self.guard,
            rng=self.rng,
        )
