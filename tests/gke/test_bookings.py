"""The operator's booking client (calendar-mode future reservations) against the
emulated Compute, over its REST API (dws_operator.gke.compute_rest): a submit repeated books
once, a read says where the booking is, a cancel ends one under review."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from dws_operator.gke.bookings import BookingClient, future_reservation
from dws_operator.gke.compute_rest import connect_compute
from dws_operator.gke.compute_types import Accelerator
from dws_operator.gke.retry import RetryPolicy
from dws_operator.reconcile import BookingPlan
from dws_workshop.emulator import EmulatorConfig
from dws_workshop.emulator.config import CalendarReview
from tests.clocks import ManualClock
from tests.gke.harness import MakeEmulator

PROJECT = "dws-sandbox"
UID = "6f1c2a40-0000-4000-8000-00000000beef"


def plan(start_in: timedelta, now: datetime, *, tpu: bool = False) -> BookingPlan:
    start = now + start_in
    return BookingPlan(
        name="dws-train-0a1b2c3d4e",
        zone="us-east5-a",
        start=start,
        end=start + timedelta(days=2),
        count=16 if tpu else 2,
        unit="chips" if tpu else "VMs",
        machine_type="ct6e-standard-4t" if tpu else "a3-highgpu-8g",
        tpu_family="VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E" if tpu else None,
        uid=UID,
        stop_before=600.0,
    )


def test_what_is_booked_for_gpus_and_for_tpus() -> None:
    now = datetime(2030, 1, 1, tzinfo=UTC)
    gpus = future_reservation(plan(timedelta(hours=1), now))
    assert (gpus.reservation_mode, gpus.planning_status) == ("CALENDAR", "SUBMITTED")
    assert gpus.reservation_name == gpus.name
    assert UID in gpus.description
    assert gpus.specific_reservation_required
    assert gpus.auto_delete_auto_created_reservations
    sku = gpus.specific_sku_properties
    assert sku is not None
    assert sku.total_count == 2
    assert sku.instance_properties is not None
    assert sku.instance_properties.machine_type == "a3-highgpu-8g"
    assert gpus.aggregate_reservation is None
    assert gpus.time_window is not None
    assert gpus.time_window.start_time == "2030-01-01T01:00:00Z"
    assert gpus.time_window.end_time == "2030-01-03T01:00:00Z"
    tpus = future_reservation(plan(timedelta(hours=1), now, tpu=True))
    aggregate = tpus.aggregate_reservation
    assert aggregate is not None
    assert aggregate.vm_family == "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E"
    assert aggregate.workload_type == "BATCH"
    sixteen = Accelerator(accelerator_count=16)
    assert [r.accelerator for r in aggregate.reserved_resources] == [sixteen]
    assert tpus.specific_sku_properties is None


def test_submit_twice_books_once_then_read_and_cancel(make_emulator: MakeEmulator) -> None:
    clock = ManualClock()
    config = EmulatorConfig(
        compute_operation_latency_seconds=0.05,
        calendar_review=CalendarReview(review_seconds=600),
    )
    emulator = make_emulator(config, clock)
    apis = connect_compute(emulator.compute_endpoint)
    client = BookingClient(apis, PROJECT, retry=RetryPolicy(attempts=1))
    booking = plan(timedelta(hours=3), emulator.sim_clock.utc())

    async def scenario() -> None:
        assert await client.read(booking.zone, booking.name, UID) is None
        await client.submit(booking)
        clock.tick(1)
        await client.submit(booking)  # the same requestId: its operation, nothing more
        clock.tick(1)
        answers = [c.response for c in emulator.compute.calls_for("futureReservations.insert")]
        assert [a["name"] for a in answers if a] == [answers[0]["name"]] * 2
        assert len(emulator.compute.bookings()) == 1
        seen = await client.read(booking.zone, booking.name, UID)
        assert seen is not None
        assert (seen.procurement, seen.ours) == ("PENDING_APPROVAL", True)
        other = await client.read(booking.zone, booking.name, "another-uid")
        assert other is not None
        assert not other.ours
        await client.cancel(booking.zone, booking.name)
        clock.tick(1)
        cancelled = await client.read(booking.zone, booking.name, UID)
        assert cancelled is not None
        assert cancelled.procurement == "CANCELLED"

    try:
        asyncio.run(scenario())
    finally:
        apis.close()
