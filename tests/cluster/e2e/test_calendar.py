"""DWS Calendar mode end to end: a block booked through the emulated Compute (future
reservations in calendar mode), Google's review, the pool on the delivered reservation,
the workload, and the block's end. The emulator's clock, which the operator decides on
too, runs days in seconds; around the stop before the end the test slows it down and
skips ahead (`SimClock.jump`), so the stop is looked at closely without days of waiting."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from kubernetes import client as k8s

from dws_operator import rfc3339
from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller import OperatorThread
from dws_operator.gke.bookings import BookingClient
from dws_operator.gke.compute_rest import connect_compute
from dws_operator.reconcile import STOP_LEAD_SECONDS, BookingPlan
from dws_workshop.emulator import MethodFaults
from dws_workshop.emulator.config import CalendarReview
from dws_workshop.sandbox.session import sandbox_cluster
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu, tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import SETTLE, forever, sim
from tests.cluster.e2e.test_samples_run import ALL_SAMPLES, SAMPLES, load
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

#: A day of the emulator's in about 40 real seconds.
FAST = 2000.0
#: Slow enough around the stop that the operator's pass is seconds of simulated time.
CLOSE = 10.0
#: How far ahead a block starts: the test skips to it once the booking is approved.
AHEAD = timedelta(days=10)
AUTOSCALER = SimScenario(clock_factor=60.0)


def block(scenario: Scenario, starts_in: timedelta, **fields: Any) -> dict[str, Any]:
    start = scenario.emulator.sim_clock.utc() + starts_in
    return {"startTime": rfc3339.seconds(start), "duration": "24h", **fields}


def calendar(zone: str, block_: dict[str, Any]) -> dict[str, Any]:
    return {"zones": [zone], "calendar": block_}


def approve(scenario: Scenario) -> None:
    scenario.objects.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        scenario.namespace,
        PLURAL,
        scenario.name,
        {"spec": {"approveBooking": True}},
    )


def booking(scenario: Scenario) -> dict[str, Any]:
    found: dict[str, Any] = scenario.status().get("booking") or {}
    return found


def state(scenario: Scenario) -> str | None:
    return booking(scenario).get("state")


def pool_nodes(scenario: Scenario) -> list[k8s.V1Node]:
    selector = f"cloud.google.com/gke-nodepool={scenario.pool_name}"
    return list(scenario.core.list_node(label_selector=selector).items)


def skip_to_the_start(scenario: Scenario) -> None:
    """Once the booking is approved: on to ten simulated minutes before its block starts."""
    eventually(lambda: state(scenario) == "Approved", timeout=SETTLE, what="the booking approved")
    clock = scenario.emulator.sim_clock
    start = rfc3339.parse(booking(scenario)["startTime"])
    clock.jump(max((start - clock.utc()).total_seconds() - 600, 0))


def test_a_gpu_block_is_shown_approved_booked_once_delivered_and_run_on(stack: Stack) -> None:
    scenario = stack(AUTOSCALER, emulator_clock=FAST)
    compute = scenario.emulator.compute
    scenario.create(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="Calendar",
        provisioning=calendar("us-east5-a", block(scenario, AHEAD)),
        template=sim("5s"),
    )
    eventually(lambda: state(scenario) == "AwaitingApproval", what="the booking shown")
    shown = booking(scenario)
    assert (shown["count"], shown["unit"], shown["machineType"]) == (2, "VMs", "a3-highgpu-8g")
    assert scenario.phase() == "Pending"
    booked_condition = scenario.condition("Booked")
    assert booked_condition is not None
    assert booked_condition["reason"] == "AwaitingApproval"
    # Nothing is booked, nor any pool made, before the approval.
    assert compute.bookings() == []
    assert compute.calls_for("futureReservations.insert") == []
    assert scenario.emulator.calls_for("CreateNodePool") == []
    approve(scenario)
    skip_to_the_start(scenario)
    [(project, zone, booked)] = compute.bookings()
    assert (project, zone, booked.name) == ("dws-sandbox", "us-east5-a", shown["name"])
    assert booked.specific_sku_properties.total_count == 2
    assert booked.specific_reservation_required
    assert scenario.emulator.calls_for("CreateNodePool") == []
    # The pool comes at the start, on the delivered reservation, and the work runs on it.
    scenario.wait_phase("Succeeded", timeout=SETTLE)
    pool = scenario.pool()
    affinity = pool.config.reservation_affinity
    assert list(affinity.values) == [shown["name"]]
    assert booking(scenario)["state"] == "Delivered"
    [create] = [c for c in scenario.emulator.calls_for("CreateNodePool") if c.ok]
    started = rfc3339.parse(scenario.status()["startedAt"])
    assert started >= rfc3339.parse(shown["startTime"])
    assert create.request.node_pool.name == scenario.pool_name
    assert len(compute.bookings()) == 1


def test_a_tpu_block_ends_with_its_workload_stopped_before_the_vms_go(stack: Stack) -> None:
    scenario = stack(AUTOSCALER, emulator_clock=FAST)
    clock = scenario.emulator.sim_clock
    scenario.create(
        tpu("v6e", "4x4"),
        mode="Calendar",
        provisioning=calendar("us-east5-a", block(scenario, AHEAD, stopBefore="30m")),
        template=forever(),
        approveBooking=True,
    )
    skip_to_the_start(scenario)
    running = eventually(
        lambda: (
            len([p for p in scenario.pods() if p.status.phase == "Running"]) == 4
            and scenario.pods()
        ),
        timeout=SETTLE,
        what="four pods running on the delivered slice",
    )
    grace = {p.spec.termination_grace_period_seconds for p in running}
    assert grace == {1800}
    assert booking(scenario)["unit"] == "chips"
    end = rfc3339.parse(booking(scenario)["endTime"])
    stop_at = end - timedelta(minutes=30, seconds=STOP_LEAD_SECONDS)
    scenario.wait_phase("Running", timeout=SETTLE)
    # On to two simulated minutes before the stop, slowed down to look at it closely.
    clock.set_factor(CLOSE)
    clock.jump(max((stop_at - clock.utc()).total_seconds() - 120, 0))
    assert scenario.phase() == "Running"
    failed = scenario.wait_phase("Failed", timeout=SETTLE)
    stopped = rfc3339.parse(failed["finishedAt"])
    assert "BlockEnded" in failed["message"]
    # Told to stop (its Job deleted, so its pods get SIGTERM) at least the pods' grace
    # period before the block's end, and not before the stop was due ...
    assert stop_at <= stopped <= end - timedelta(minutes=30)
    assert all(j.metadata.deletion_timestamp for j in scenario.jobs())
    # ... while the slice's VMs stay until the end (paid for anyway): the pods have
    # their whole grace period on them.
    assert len(pool_nodes(scenario)) == 4
    assert clock.utc() < end
    clock.set_factor(FAST)
    # Gone by the end at the latest (idle, the autoscaler may take them ten minutes sooner).
    eventually(lambda: pool_nodes(scenario) == [], timeout=SETTLE, what="the slice's VMs gone")


def test_a_tpu_block_runs_to_succeeded_and_an_operator_killed_after_its_insert_books_once(
    stack: Stack,
) -> None:
    scenario = stack(AUTOSCALER, emulator_clock=FAST, operator=False)
    compute = scenario.emulator.compute
    # Every insert is carried out with its answer lost, and Compute's reads say there is
    # no such booking (until the test says otherwise): the first operator is stopped with
    # its status saying Submitted and nothing seen.
    compute.set_faults("futureReservations.insert", MethodFaults(lost_answers=100))
    unseen = MethodFaults(error_rate=1.0, error_code="NOT_FOUND")
    compute.set_faults("futureReservations.get", unseen)
    first = OperatorThread(scenario.operator_config, kubeconfig=scenario.operator_kubeconfig)
    first.start()
    try:
        scenario.create(
            tpu("v6e", "2x4"),
            mode="Calendar",
            provisioning=calendar("us-east5-b", block(scenario, AHEAD)),
            template=sim("5s"),
            approveBooking=True,
        )
        eventually(
            lambda: compute.calls_for("futureReservations.insert"), what="the booking's insert"
        )
    finally:
        first.stop()
    assert state(scenario) == "Submitted"
    before = len(compute.calls_for("futureReservations.insert"))
    compute.set_faults("futureReservations.insert", None)
    with OperatorThread(scenario.operator_config, kubeconfig=scenario.operator_kubeconfig):
        # Not seeing the booking, the new operator sends it again ...
        eventually(
            lambda: len(compute.calls_for("futureReservations.insert")) > before,
            what="the insert sent again",
        )
        compute.set_faults("futureReservations.get", None)
        skip_to_the_start(scenario)
        scenario.wait_phase("Succeeded", timeout=SETTLE)
    inserts = compute.calls_for("futureReservations.insert")
    # ... with the same requestId, answered with the first insert's operation: one booking.
    assert len({c.query.get("requestId") for c in inserts}) == 1
    assert len({(c.response or {}).get("name") for c in inserts}) == 1
    [(_, zone, booked)] = compute.bookings()
    assert zone == "us-east5-b"
    chips = [
        r.accelerator.accelerator_count for r in booked.aggregate_reservation.reserved_resources
    ]
    assert chips == [8]
    assert booking(scenario)["state"] == "Delivered"


def test_a_declined_booking_fails_the_request_and_makes_nothing(stack: Stack) -> None:
    scenario = stack(AUTOSCALER, emulator_clock=FAST)
    scenario.emulator.compute.set_calendar_review(CalendarReview(outcome="decline"))
    scenario.create(
        gpu("nvidia-h100-80gb"),
        mode="Calendar",
        provisioning=calendar("us-east5-a", block(scenario, AHEAD)),
        template=forever(),
        approveBooking=True,
    )
    failed = scenario.wait_phase("Failed", timeout=SETTLE)
    assert "DECLINED" in failed["message"]
    booked = scenario.condition("Booked")
    assert booked is not None
    assert (booked["status"], booked["reason"]) == ("False", "BookingDeclined")
    assert state(scenario) == "Declined"
    assert scenario.emulator.calls_for("CreateNodePool") == []


def test_the_calendar_sample_books_its_block_and_runs_on_it(stack: Stack) -> None:
    [path] = [p for p in ALL_SAMPLES if p not in SAMPLES]
    sample = load(path)  # its pods end after 2 s (kwok)
    assert sample["spec"]["approveBooking"] is False
    scenario = stack(AUTOSCALER, emulator_clock=FAST, cluster=sandbox_cluster(sample))
    scenario.name = sample["metadata"]["name"]
    scenario.objects.create_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, PLURAL, sample
    )
    eventually(lambda: state(scenario) == "AwaitingApproval", what="the booking shown")
    approve(scenario)
    skip_to_the_start(scenario)
    scenario.wait_phase("Succeeded", timeout=SETTLE)
    [(_, zone, booked)] = scenario.emulator.compute.bookings()
    assert (zone, booked.specific_sku_properties.total_count) == ("us-east5-a", 2)


def test_a_block_starts_when_computes_advice_finds_room_and_runs_there(stack: Stack) -> None:
    # Two H100 VMs fit in the zone at a time, and a block of two is booked already from
    # ten days on: the advice offers the window after it, which the request shows,
    # books once approved, and runs on.
    scenario = stack(AUTOSCALER, emulator_clock=FAST)
    compute = scenario.emulator.compute
    compute.set_calendar_review(CalendarReview(capacity={"us-east5-a": {"a3-highgpu-8g": 2}}))
    now = scenario.emulator.sim_clock.utc()
    held = BookingPlan(
        name="another-team",
        zone="us-east5-a",
        start=now + AHEAD,
        end=now + AHEAD + timedelta(days=1),
        count=2,
        unit="VMs",
        machine_type="a3-highgpu-8g",
        tpu_family=None,
        uid="another-teams-uid",
        stop_before=600.0,
    )
    apis = connect_compute(scenario.emulator.compute_endpoint)
    try:
        asyncio.run(BookingClient(apis, "dws-sandbox").submit(held))
    finally:
        apis.close()
    eventually(lambda: len(compute.bookings()) == 1, what="the other team's block")
    window = {
        "earliest": rfc3339.seconds(now + AHEAD),
        "latest": rfc3339.seconds(now + AHEAD + timedelta(days=5)),
        "duration": "24h",
    }
    scenario.create(
        gpu("nvidia-h100-80gb", nodes=2),
        mode="Calendar",
        provisioning=calendar("us-east5-a", window),
        template=sim("5s"),
    )
    eventually(lambda: state(scenario) == "AwaitingApproval", what="the window shown")
    shown = booking(scenario)
    assert rfc3339.parse(shown["startTime"]) == held.end.replace(microsecond=0)
    assert shown["recommendationId"]
    assert compute.calls_for("advice.calendarMode")
    approve(scenario)
    skip_to_the_start(scenario)
    scenario.wait_phase("Succeeded", timeout=SETTLE)
    ours = [b for _, _, b in compute.bookings() if b.name == shown["name"]]
    [booked] = ours
    assert booked.time_window.start_time == shown["startTime"]
    started = rfc3339.parse(scenario.status()["startedAt"])
    assert started >= rfc3339.parse(shown["startTime"])
