"""The emulator's calendar mode (Compute future reservations), through Google's own
compute_v1 clients: the insert's rules, `requestId`, review, delivery at the start
time, the end, cancel and delete. Time is a `ManualClock` the test moves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from google.api_core import exceptions as core_exceptions
from google.api_core.client_options import ClientOptions
from google.auth.credentials import AnonymousCredentials
from google.cloud import compute_v1

from dws_operator import rfc3339
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig
from dws_workshop.emulator.config import CalendarReview
from tests.clocks import ManualClock
from tests.gke.harness import MakeEmulator

PROJECT, ZONE = "dws-sandbox", "us-east5-a"
DAY = 24 * 3600
#: Operations end within a real 0.05 s; the review takes ten simulated minutes.
CONFIG = EmulatorConfig(
    compute_operation_latency_seconds=0.05,
    calendar_review=CalendarReview(review_seconds=600),
)


@dataclass
class Calendar:
    emulator: ClusterManagerEmulator
    clock: ManualClock
    bookings: compute_v1.FutureReservationsClient
    operations: compute_v1.ZoneOperationsClient

    def now(self) -> datetime:
        return self.emulator.sim_clock.utc()

    def move(self, seconds: float) -> None:
        self.clock.tick(seconds)

    def get(self, name: str) -> compute_v1.FutureReservation:
        return self.bookings.get(project=PROJECT, zone=ZONE, future_reservation=name)

    def status(self, name: str) -> str:
        return str(self.get(name).status.procurement_status)

    def insert(
        self, reservation: compute_v1.FutureReservation, request_id: str = ""
    ) -> compute_v1.Operation:
        request = compute_v1.InsertFutureReservationRequest(
            project=PROJECT, zone=ZONE, future_reservation_resource=reservation
        )
        if request_id:
            request.request_id = request_id
        return self.done(self.bookings.insert_unary(request=request))

    def done(self, operation: compute_v1.Operation) -> compute_v1.Operation:
        """The operation once DONE (the clock moved past its latency first)."""
        self.move(1)
        finished = self.operations.wait(project=PROJECT, zone=ZONE, operation=operation.name)
        assert finished.status == compute_v1.Operation.Status.DONE
        return finished

    def cancel(self, name: str) -> None:
        self.done(self.bookings.cancel_unary(project=PROJECT, zone=ZONE, future_reservation=name))

    def delete(self, name: str) -> None:
        self.done(self.bookings.delete_unary(project=PROJECT, zone=ZONE, future_reservation=name))


@pytest.fixture
def calendar(make_emulator: MakeEmulator) -> Iterator[Calendar]:
    clock = ManualClock()
    emulator = make_emulator(CONFIG, clock)
    options = ClientOptions(api_endpoint=emulator.compute_endpoint)
    credentials = AnonymousCredentials()
    served = Calendar(
        emulator,
        clock,
        compute_v1.FutureReservationsClient(credentials=credentials, client_options=options),
        compute_v1.ZoneOperationsClient(credentials=credentials, client_options=options),
    )
    yield served
    served.bookings.transport.close()
    served.operations.transport.close()


def gpu_block(
    start: datetime, days: float = 2, count: int = 2, name: str = "block", **fields: Any
) -> compute_v1.FutureReservation:
    return compute_v1.FutureReservation(
        name=name,
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED",
        reservation_name=f"{name}-rsv",
        auto_delete_auto_created_reservations=True,
        specific_reservation_required=True,
        time_window=compute_v1.FutureReservationTimeWindow(
            start_time=rfc3339.seconds(start), duration=compute_v1.Duration(seconds=int(days * DAY))
        ),
        specific_sku_properties=compute_v1.FutureReservationSpecificSKUProperties(
            total_count=count,
            instance_properties=compute_v1.AllocationSpecificSKUAllocationReservedInstanceProperties(
                machine_type="a3-highgpu-8g"
            ),
        ),
        **fields,
    )


def tpu_block(start: datetime, chips: int, family: str = "CT6E") -> compute_v1.FutureReservation:
    return compute_v1.FutureReservation(
        name="tpus",
        reservation_mode="CALENDAR",
        planning_status="SUBMITTED",
        reservation_name="tpus-rsv",
        auto_delete_auto_created_reservations=True,
        specific_reservation_required=True,
        time_window=compute_v1.FutureReservationTimeWindow(
            start_time=rfc3339.seconds(start), duration=compute_v1.Duration(seconds=7 * DAY)
        ),
        aggregate_reservation=compute_v1.AllocationAggregateReservation(
            vm_family=f"VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_{family}",
            workload_type="BATCH",
            reserved_resources=[
                compute_v1.AllocationAggregateReservationReservedResourceInfo(
                    accelerator=compute_v1.AllocationAggregateReservationReservedResourceInfoAccelerator(
                        accelerator_count=chips
                    )
                )
            ],
        ),
    )


def test_a_block_is_reviewed_delivered_at_its_start_and_gone_at_its_end(
    calendar: Calendar,
) -> None:
    start = calendar.now() + timedelta(hours=2)
    calendar.insert(gpu_block(start))  # one simulated second
    assert calendar.status("block") == "PENDING_APPROVAL"
    calendar.move(598)
    assert calendar.status("block") == "PENDING_APPROVAL"
    calendar.move(1)
    # Approved and locked at once (no cancelling from here on).
    assert calendar.status("block") == "PROCURING"
    assert calendar.get("block").status.lock_time
    assert calendar.emulator.compute.reservation_window(PROJECT, ZONE, "block-rsv") is not None
    assert not calendar.get("block").status.auto_created_reservations
    seconds_to_start = (start - calendar.now()).total_seconds()
    calendar.move(seconds_to_start)
    delivered = calendar.get("block").status
    assert delivered.procurement_status == "FULFILLED"
    assert [r.rsplit("/", 1)[-1] for r in delivered.auto_created_reservations] == ["block-rsv"]
    assert delivered.fulfilled_count == 2
    compute = calendar.emulator.compute
    assert compute.reservation_active(PROJECT, ZONE, "block-rsv")
    calendar.move(2 * DAY - 1)
    assert compute.reservation_active(PROJECT, ZONE, "block-rsv")
    calendar.move(1)
    assert not compute.reservation_active(PROJECT, ZONE, "block-rsv")
    # After its end a fulfilled request may be deleted.
    calendar.delete("block")
    with pytest.raises(core_exceptions.NotFound):
        calendar.get("block")


def test_a_declined_block_is_never_delivered_and_may_be_deleted(calendar: Calendar) -> None:
    calendar.emulator.compute.set_calendar_review(
        CalendarReview(review_seconds=60, outcome="decline")
    )
    start = calendar.now() + timedelta(hours=1)
    calendar.insert(gpu_block(start))
    calendar.move(60)
    assert calendar.status("block") == "DECLINED"
    calendar.move(2 * 3600)
    assert not calendar.get("block").status.auto_created_reservations
    calendar.delete("block")
    assert calendar.emulator.compute.bookings() == []


def test_a_partly_delivered_block_has_fewer_vms_and_says_so(calendar: Calendar) -> None:
    calendar.emulator.compute.set_calendar_review(
        CalendarReview(review_seconds=60, outcome="partial", partial_count=1)
    )
    start = calendar.now() + timedelta(hours=1)
    calendar.insert(gpu_block(start, count=3))
    calendar.move(60)
    assert calendar.status("block") == "PROCURING"
    calendar.move(3600)
    found = calendar.get("block").status
    assert found.procurement_status == "FAILED_PARTIALLY_FULFILLED"
    assert found.fulfilled_count == 1
    [reservation] = found.auto_created_reservations
    assert reservation.endswith("/reservations/block-rsv")


def test_the_same_request_id_books_once(calendar: Calendar) -> None:
    start = calendar.now() + timedelta(hours=2)
    request_id = str(uuid.uuid4())
    first = calendar.insert(gpu_block(start), request_id)
    again = calendar.insert(gpu_block(start), request_id)
    # The same operation, answered again: no second insert was even tried.
    assert (again.name, again.operation_type) == (first.name, "insert")
    assert len(calendar.emulator.compute.calls_for("futureReservations.insert")) == 2
    assert len(calendar.emulator.compute.bookings()) == 1
    # Without it (or with another), the same name is a conflict, not a second booking.
    with pytest.raises(core_exceptions.Conflict):
        calendar.insert(gpu_block(start), str(uuid.uuid4()))
    assert len(calendar.emulator.compute.bookings()) == 1


def test_cancel_before_the_lock_then_delete_but_not_after_it(calendar: Calendar) -> None:
    start = calendar.now() + timedelta(hours=2)
    calendar.insert(gpu_block(start, name="early"))
    # A submitted, undelivered request cannot simply be deleted.
    with pytest.raises(core_exceptions.BadRequest, match="cancel it first"):
        calendar.delete("early")
    calendar.cancel("early")
    assert calendar.status("early") == "CANCELLED"
    calendar.delete("early")
    calendar.insert(gpu_block(start, name="late"))
    calendar.move(600)
    assert not calendar.emulator.compute.reservation_active(PROJECT, ZONE, "late-rsv")
    with pytest.raises(core_exceptions.BadRequest, match="can no longer be cancelled"):
        calendar.cancel("late")
    assert calendar.status("late") == "PROCURING"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        pytest.param({"days": 0.5}, "1 to 90 days", id="too-short"),
        pytest.param({"days": 91}, "1 to 90 days", id="too-long"),
        pytest.param({"count": 81}, "1 to 80 VMs", id="too-many-vms"),
        pytest.param({"reservation_name": ""}, "reservationName and namePrefix", id="no-name"),
        pytest.param({"hours": -1}, "in the future", id="past-start"),
    ],
)
def test_the_insert_refuses_what_calendar_mode_does_not_serve(
    calendar: Calendar, change: dict[str, Any], words: str
) -> None:
    start = calendar.now() + timedelta(hours=change.pop("hours", 2))
    block = gpu_block(start, **{k: v for k, v in change.items() if k in ("days", "count")})
    if "reservation_name" in change:
        block.reservation_name = change["reservation_name"]
    with pytest.raises(core_exceptions.BadRequest, match=words):
        calendar.insert(block)
    assert calendar.emulator.compute.bookings() == []


def test_tpu_blocks_by_chip_count_in_the_zones_that_serve_them(calendar: Calendar) -> None:
    start = calendar.now() + timedelta(days=1)
    with pytest.raises(core_exceptions.BadRequest, match="1, 4, 8, 16"):
        calendar.insert(tpu_block(start, chips=12))
    with pytest.raises(core_exceptions.BadRequest, match="CT5LP is served in europe-west4-b"):
        calendar.insert(tpu_block(start, chips=16, family="CT5LP"))
    calendar.insert(tpu_block(start, chips=16))
    assert calendar.status("tpus") == "PENDING_APPROVAL"
    # A TPU request can be neither cancelled nor deleted, even under review.
    with pytest.raises(core_exceptions.BadRequest, match="cannot be cancelled"):
        calendar.cancel("tpus")
    with pytest.raises(core_exceptions.BadRequest, match="cannot be deleted"):
        calendar.delete("tpus")


def test_a_request_shows_once_its_insert_is_done(calendar: Calendar) -> None:
    start = calendar.now() + timedelta(hours=2)
    request = compute_v1.InsertFutureReservationRequest(
        project=PROJECT, zone=ZONE, future_reservation_resource=gpu_block(start)
    )
    operation = calendar.bookings.insert_unary(request=request)
    with pytest.raises(core_exceptions.NotFound):
        calendar.get("block")
    # Its name is taken meanwhile: a second insert of it is a conflict, not a booking.
    with pytest.raises(core_exceptions.Conflict):
        calendar.bookings.insert_unary(request=request)
    calendar.done(operation)
    assert calendar.status("block") == "PENDING_APPROVAL"


def test_a_review_not_answered_by_the_start_fails(calendar: Calendar) -> None:
    calendar.emulator.compute.set_calendar_review(CalendarReview(review_seconds=7200))
    calendar.insert(gpu_block(calendar.now() + timedelta(hours=1)))
    calendar.move(3600)
    assert calendar.status("block") == "FAILED"
    assert not calendar.emulator.compute.reservation_active(PROJECT, ZONE, "block-rsv")


def test_a_request_id_must_be_a_uuid(calendar: Calendar) -> None:
    start = calendar.now() + timedelta(hours=2)
    with pytest.raises(core_exceptions.BadRequest, match="valid UUID"):
        calendar.insert(gpu_block(start), "not-a-uuid")
    with pytest.raises(core_exceptions.BadRequest, match="valid UUID"):
        calendar.insert(gpu_block(start), str(uuid.UUID(int=0)))
