"""DWS Calendar mode on the virtual clock: a block booked through Compute answered in
process (future reservations in calendar mode, tests/fakes/compute.py), Google's review,
the pool on the delivered reservation, the workload, and the block's end. The test stands
in for GKE's autoscaler (a pool's Nodes), the Job controller (a Job's status) and, at a
block's end, for Compute taking the reservation's VMs back.

A block starts two hours ahead here (the e2e file's ten days were skipped on the
emulator's clock; here they would be ten days of the operator's timers, for the same
decisions: a timer to the start). The stop before a block's end with the real Job
controller, pods' grace periods and the autoscaler is
tests/cluster/e2e/test_calendar.py's.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dws_operator import rfc3339
from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.gke.bookings import BookingClient
from dws_operator.reconcile import STOP_LEAD_SECONDS, BookingPlan
from dws_workshop.emulator import MethodFaults
from dws_workshop.emulator.config import CalendarReview
from tests.builders import gpu, tpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.requests import patch

PROJECT, ZONE = "dws-sandbox", "us-east5-a"
#: How far ahead a block starts.
AHEAD = timedelta(hours=2)
#: Google's review of a submitted booking (the emulator's default), and a margin for
#: the operator's next read of it (every BOOKING_POLL_SECONDS).
REVIEWED = 600.0 + 120.0
#: A wait of hours looks this often (virtual seconds).
LONG_STEP = 60.0
SAMPLE = Path(__file__).parents[2] / "manifests" / "samples" / "gpu-h100-calendar.yaml"


@pytest.fixture
def virtual() -> Virtual:
    return Virtual(compute=True)


def utc(op: VirtualOperator) -> datetime:
    """Now, as the operator decides and Compute's calendar reads it."""
    return op.emulator.sim_clock.utc()


def utc_at(op: VirtualOperator, seconds: float) -> datetime:
    """The virtual clock's `seconds` (a call's `started`) as UTC."""
    return op.emulator.sim_clock.epoch + timedelta(seconds=seconds)


def block(op: VirtualOperator, starts_in: timedelta, **fields: Any) -> dict[str, Any]:
    start = utc(op) + starts_in
    return {"startTime": rfc3339.seconds(start), "duration": "24h", **fields}


def calendar(zone: str, block_: dict[str, Any]) -> dict[str, Any]:
    return {"zones": [zone], "calendar": block_}


async def approve(op: VirtualOperator) -> None:
    await patch(op, {"spec": {"approveBooking": True}})


def booking(op: VirtualOperator) -> dict[str, Any]:
    found: dict[str, Any] = op.status().get("booking") or {}
    return found


def state(op: VirtualOperator) -> str | None:
    return booking(op).get("state")


def condition(op: VirtualOperator, type_: str) -> tuple[str, str]:
    """(status, reason) of the request's condition `type_`, which it has."""
    found = op.condition(type_)
    assert found is not None, f"no {type_} condition in {op.status()}"
    return found["status"], found["reason"]


async def approved(op: VirtualOperator) -> dict[str, Any]:
    """The booking once Google's review approved it."""
    await op.until(lambda: state(op) == "Approved", f"the booking approved ({state(op)})", REVIEWED)
    return booking(op)


async def on_the_block(op: VirtualOperator, nodes: int) -> str:
    """Once the block is on: the pool the operator made on the delivered reservation, its
    `nodes` Nodes up (the autoscaler's part)."""
    start = rfc3339.parse(booking(op)["startTime"])
    left = (start - utc(op)).total_seconds()
    await op.until(op.created_pools, "the pool at the start", left + 600, LONG_STEP)
    await op.nodes_up(op.pool_name, nodes)
    return op.pool_name


async def runs_to_success(op: VirtualOperator, nodes: int) -> None:
    await op.job_running(nodes)
    await op.wait_phase("Running")
    await op.job_succeeded()
    await op.wait_phase("Succeeded")


def test_a_gpu_block_is_shown_approved_booked_once_delivered_and_run_on(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        compute = op.emulator.compute
        await op.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="Calendar",
            provisioning=calendar(ZONE, block(op, AHEAD)),
        )
        await op.until(lambda: state(op) == "AwaitingApproval", "the booking shown")
        shown = booking(op)
        assert (shown["count"], shown["unit"], shown["machineType"]) == (2, "VMs", "a3-highgpu-8g")
        # Pending: the operator writes no phase then (the API server shows the CRD's
        # default, Pending), and says so in its Ready condition.
        assert op.phase() is None
        assert condition(op, "Ready") == ("False", "Pending")
        assert condition(op, "Booked") == ("False", "AwaitingApproval")
        # Nothing is booked, nor any pool made, however long the approval takes.
        await op.sleep(3600)
        assert state(op) == "AwaitingApproval"
        assert compute.bookings() == []
        assert compute.calls_for("futureReservations.insert") == []
        assert op.emulator.calls_for("CreateNodePool") == []
        await approve(op)
        await approved(op)
        [(project, zone, booked)] = compute.bookings()
        assert (project, zone, booked.name) == (PROJECT, ZONE, shown["name"])
        assert booked.specific_sku_properties.total_count == 2
        assert booked.specific_reservation_required
        assert op.emulator.calls_for("CreateNodePool") == []
        # The pool comes at the start, on the delivered reservation, and the work runs
        # on it.
        pool = await on_the_block(op, 2)
        start = rfc3339.parse(shown["startTime"])
        [create] = op.emulator.calls_for("CreateNodePool")
        assert create.ok
        assert utc_at(op, create.started) >= start
        assert create.request.node_pool.name == pool
        affinity = create.request.node_pool.config.reservation_affinity
        assert list(affinity.values) == [shown["name"]]
        assert state(op) == "Delivered"
        await runs_to_success(op, 2)
        assert rfc3339.parse(op.status()["startedAt"]) >= start
        # Booked once: every insert (one per pass until Compute showed the booking) with
        # the same requestId.
        inserts = compute.calls_for("futureReservations.insert")
        assert len({c.query["requestId"] for c in inserts}) == 1
        assert len(compute.bookings()) == 1

    virtual.run(scenario)


def test_a_tpu_block_ends_with_its_workload_stopped_before_the_vms_go(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        await op.create(
            tpu("v6e", "4x4"),
            mode="Calendar",
            provisioning=calendar(ZONE, block(op, AHEAD, stopBefore="30m")),
            approveBooking=True,
        )
        await approved(op)
        pool = await on_the_block(op, 4)
        job = await op.job()
        # The pods' grace period is the stop's lead: their time to checkpoint.
        assert job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 1800
        await op.job_running(4)
        await op.wait_phase("Running")
        assert booking(op)["unit"] == "chips"
        end = rfc3339.parse(booking(op)["endTime"])
        stop_at = end - timedelta(minutes=30, seconds=STOP_LEAD_SECONDS)
        running = len(op.emulator.calls)
        # Two minutes before the stop: still running.
        await op.sleep((stop_at - utc(op)).total_seconds() - 120)
        assert op.phase() == "Running"
        assert len(op.jobs()) == 1
        failed = await op.wait_phase("Failed", within=600)
        stopped = rfc3339.parse(failed["finishedAt"])
        assert "BlockEnded" in failed["message"]
        assert condition(op, "Completed") == ("False", "BlockEnded")
        # Told to stop (its Job deleted, so its pods get SIGTERM) at least the pods' grace
        # period before the block's end, and not before the stop was due ...
        assert stop_at <= stopped <= end - timedelta(minutes=30)
        await op.until(lambda: op.jobs() == [], "the Job deleted", within=60)
        assert utc(op) <= end - timedelta(minutes=30)
        # ... while the slice's VMs stay until the end (paid for anyway): GKE is asked for
        # nothing but its listings and the cluster's version, and the Nodes stay up.
        await op.sleep((end - utc(op)).total_seconds())
        asked = {c.method for c in op.emulator.calls[running:]}
        assert asked <= {"ListNodePools", "GetCluster"}
        assert op.pool_nodes(pool) == 4
        # At the end Compute takes the VMs back; the operator resizes the pool to zero.
        await op.nodes_up(pool, 0)
        await op.until(lambda: op.emulator.calls_for("SetNodePoolSize"), "the resize to zero")
        [resize] = op.emulator.calls_for("SetNodePoolSize")
        assert resize.request.node_count == 0
        assert utc_at(op, resize.started) >= end
        await op.until(lambda: state(op) == "Ended", "the booking Ended")

    virtual.run(scenario)


def test_a_tpu_block_runs_to_succeeded_and_an_operator_killed_after_its_insert_books_once(
    virtual: Virtual,
) -> None:
    async def scenario(op: VirtualOperator) -> None:
        compute = op.emulator.compute
        # Every insert is carried out with its answer lost, and Compute's reads say there
        # is no such booking (until the test says otherwise): the first operator is killed
        # with its status saying Submitted and nothing seen.
        compute.set_faults("futureReservations.insert", MethodFaults(lost_answers=100))
        unseen = MethodFaults(error_rate=1.0, error_code="NOT_FOUND")
        compute.set_faults("futureReservations.get", unseen)
        await op.create(
            tpu("v6e", "2x4"),
            mode="Calendar",
            provisioning=calendar("us-east5-b", block(op, AHEAD)),
            approveBooking=True,
        )
        await op.until(lambda: compute.calls_for("futureReservations.insert"), "the insert")
        await op.sleep(30)
        await op.kill()
        assert state(op) == "Submitted"
        before = len(compute.calls_for("futureReservations.insert"))
        assert before > 1
        compute.set_faults("futureReservations.insert", None)
        await op.start()
        # Not seeing the booking, the new operator sends it again ...
        await op.until(
            lambda: len(compute.calls_for("futureReservations.insert")) > before,
            "the insert sent again",
        )
        compute.set_faults("futureReservations.get", None)
        await approved(op)
        await on_the_block(op, 2)
        await runs_to_success(op, 2)
        inserts = compute.calls_for("futureReservations.insert")
        # ... with the same requestId, answered with the first insert's operation: one
        # booking.
        assert len({c.query.get("requestId") for c in inserts}) == 1
        assert len({(c.response or {}).get("name") for c in inserts}) == 1
        [(_, zone, booked)] = compute.bookings()
        assert zone == "us-east5-b"
        chips = [
            r.accelerator.accelerator_count for r in booked.aggregate_reservation.reserved_resources
        ]
        assert chips == [8]
        assert state(op) == "Delivered"
        assert op.starts == 2

    virtual.run(scenario)


def test_a_declined_booking_fails_the_request_and_makes_nothing(virtual: Virtual) -> None:
    async def scenario(op: VirtualOperator) -> None:
        op.emulator.compute.set_calendar_review(CalendarReview(outcome="decline"))
        await op.create(
            gpu("nvidia-h100-80gb"),
            mode="Calendar",
            provisioning=calendar(ZONE, block(op, AHEAD)),
            approveBooking=True,
        )
        failed = await op.wait_phase("Failed", within=REVIEWED)
        assert "DECLINED" in failed["message"]
        assert condition(op, "Booked") == ("False", "BookingDeclined")
        assert state(op) == "Declined"
        # Nor later, at what would have been the block's start.
        await op.sleep(AHEAD.total_seconds())
        assert op.emulator.calls_for("CreateNodePool") == []
        assert op.jobs() == []

    virtual.run(scenario)


def test_the_calendar_sample_books_its_block_and_runs_on_it() -> None:
    [sample] = [d for d in yaml.safe_load_all(SAMPLE.read_text()) if d]
    assert sample["spec"]["approveBooking"] is False
    # The sample books a block at a fixed date: virtual time starts two hours before it.
    start = rfc3339.parse(sample["spec"]["provisioning"]["calendar"]["startTime"])
    virtual = Virtual(compute=True, epoch=start - AHEAD)

    async def scenario(op: VirtualOperator) -> None:
        op.name = sample["metadata"]["name"]
        await op.call("POST", f"/apis/{GROUP}/{VERSION}/namespaces/{op.namespace}/{PLURAL}", sample)
        await op.until(lambda: state(op) == "AwaitingApproval", "the booking shown")
        await approve(op)
        await approved(op)
        await on_the_block(op, 2)
        await runs_to_success(op, 2)
        [(_, zone, booked)] = op.emulator.compute.bookings()
        assert (zone, booked.specific_sku_properties.total_count) == ("us-east5-a", 2)
        assert booked.time_window.start_time == rfc3339.seconds(start)

    virtual.run(scenario)


def test_a_block_starts_when_computes_advice_finds_room_and_runs_there(virtual: Virtual) -> None:
    # Two H100 VMs fit in the zone at a time, and a block of two is booked already from
    # two hours on: the advice offers the window after it, which the request shows,
    # books once approved, and runs on. The advice looks from an hour on (a day unless
    # the scenario says).
    async def scenario(op: VirtualOperator) -> None:
        compute = op.emulator.compute
        assert op.compute is not None
        review = CalendarReview(capacity={ZONE: {"a3-highgpu-8g": 2}}, advice_lead_seconds=3600)
        compute.set_calendar_review(review)
        now = utc(op)
        held = BookingPlan(
            name="another-team",
            zone=ZONE,
            start=now + AHEAD,
            end=now + AHEAD + timedelta(days=1),
            count=2,
            unit="VMs",
            machine_type="a3-highgpu-8g",
            tpu_family=None,
            uid="another-teams-uid",
            stop_before=600.0,
        )
        await BookingClient(op.compute, PROJECT).submit(held)
        await op.until(lambda: len(compute.bookings()) == 1, "the other team's block")
        window = {
            "earliest": rfc3339.seconds(now + AHEAD),
            "latest": rfc3339.seconds(now + AHEAD + timedelta(days=5)),
            "duration": "24h",
        }
        await op.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="Calendar",
            provisioning=calendar(ZONE, window),
        )
        await op.until(lambda: state(op) == "AwaitingApproval", "the window shown")
        shown = booking(op)
        assert rfc3339.parse(shown["startTime"]) == held.end.replace(microsecond=0)
        assert shown["recommendationId"]
        assert compute.calls_for("advice.calendarMode")
        await approve(op)
        await approved(op)
        await on_the_block(op, 2)
        await runs_to_success(op, 2)
        [booked] = [b for _, _, b in compute.bookings() if b.name == shown["name"]]
        assert booked.time_window.start_time == shown["startTime"]
        assert rfc3339.parse(op.status()["startedAt"]) >= rfc3339.parse(shown["startTime"])

    virtual.run(scenario)
