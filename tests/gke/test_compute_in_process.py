"""The in-process Compute (tests/fakes/compute.py, the virtual tier's Compute) held to the
served emulator behind the operator's real Compute session. Every test but the last two
runs on both sides, [served] over HTTP to 127.0.0.1 through `connect_compute(endpoint)`
and [in-process] without HTTP, through the raw `ComputeApis` and the operator's
WorkloadPolicyClient and BookingClient, with the same assertions; the second to last
compares the two call logs record by record. Operations and Google's review move by a
ManualClock the tests move, on both sides; no call waits on the machine's clock (an
operation is waited for once DONE: the served `wait` would otherwise sit out its two
minutes, as the last test says of the in-process one)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from google.api_core import exceptions as core_exceptions

from dws_operator import rfc3339
from dws_operator.gke import GkeError, RetryPolicy
from dws_operator.gke.bookings import BookingClient
from dws_operator.gke.compute_errors import classify_compute
from dws_operator.gke.compute_rest import ComputeApis, RegionalName, ZonalName, connect_compute
from dws_operator.gke.policies import WorkloadPolicyClient, insert_policy_request
from dws_operator.reconcile import AdviceQuery, BookingPlan
from dws_workshop.emulator import ClusterManagerEmulator, ComputeCall, EmulatorConfig, MethodFaults
from dws_workshop.emulator.config import CalendarReview
from tests.clocks import ManualClock
from tests.fakes.compute import ENDPOINT, in_process_compute
from tests.gke.harness import MakeEmulator

T = TypeVar("T")
PROJECT, REGION, ZONE = "dws-sandbox", "us-east5", "us-east5-a"
UID = "6f1c2a40-0000-4000-8000-00000000beef"
EPOCH = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
#: Operations take 10 s of the ManualClock, Google's review 600 s; the calendar starts at
#: EPOCH on both sides.
CONFIG = EmulatorConfig(
    compute_operation_latency_seconds=10.0,
    calendar_epoch=EPOCH,
    calendar_review=CalendarReview(review_seconds=600),
)
SIDES = ("served", "in-process")
POLICY = "dws-high-throughput-2x2x2"
#: One attempt per call: a retry would pause on the machine's clock.
ONCE = RetryPolicy(attempts=1)


@dataclass
class Compute:
    """One side: the emulator, the operator's Compute APIs on it, and the clock both
    go by."""

    emulator: ClusterManagerEmulator
    apis: ComputeApis
    clock: ManualClock
    endpoint: str

    @property
    def policies(self) -> WorkloadPolicyClient:
        return WorkloadPolicyClient(self.apis, PROJECT, retry=ONCE)

    @property
    def bookings(self) -> BookingClient:
        return BookingClient(self.apis, PROJECT, retry=ONCE)

    def statuses(self, method: str) -> list[int]:
        return [call.status for call in self.emulator.compute.calls_for(method)]

    def plain(self, message: str) -> str:
        """`message` with this side's endpoint as ENDPOINT."""
        return message.replace(self.endpoint, "ENDPOINT")


def side_of(name: str, make_emulator: MakeEmulator, config: EmulatorConfig = CONFIG) -> Compute:
    clock = ManualClock()
    if name == "served":
        emulator = make_emulator(config, clock)
        endpoint = emulator.compute_endpoint
        return Compute(emulator, connect_compute(endpoint), clock, endpoint)
    emulator = ClusterManagerEmulator(config, clock=clock)
    return Compute(emulator, in_process_compute(emulator.compute), clock, ENDPOINT)


@pytest.fixture(params=SIDES)
def compute(request: pytest.FixtureRequest, make_emulator: MakeEmulator) -> Iterator[Compute]:
    side = side_of(str(request.param), make_emulator)
    try:
        yield side
    finally:
        side.apis.close()


def run(call: Awaitable[T]) -> T:
    """An operator client's call (each Compute call in a worker thread, as it runs)."""

    async def main() -> T:
        return await call

    return asyncio.run(main())


def refused(call: Awaitable[Any]) -> GkeError:
    with pytest.raises(GkeError) as caught:
        run(call)
    return caught.value


def block(start_in: timedelta, name: str = "dws-train-0a1b2c3d4e") -> BookingPlan:
    """Two H100 VMs for a day from EPOCH + `start_in`, for the request UID."""
    start = EPOCH + start_in
    return BookingPlan(
        name=name,
        zone=ZONE,
        start=start,
        end=start + timedelta(days=1),
        count=2,
        unit="VMs",
        machine_type="a3-highgpu-8g",
        tpu_family=None,
        uid=UID,
        stop_before=600.0,
    )


def test_a_workload_policy_is_inserted_waited_for_read_and_adopted(compute: Compute) -> None:
    apis = compute.apis
    request = insert_policy_request(PROJECT, REGION, "2x2x2")
    operation = apis.policies.insert(request, 10.0)
    assert (operation.status, operation.done) == ("PENDING", False)
    name = RegionalName(PROJECT, REGION, POLICY)
    assert apis.policies.get(name, 10.0).status == "CREATING"
    compute.clock.tick(10)
    done = apis.operations.wait(RegionalName(PROJECT, REGION, operation.name), 10.0)
    assert (done.name, done.status, done.error.errors) == (operation.name, "DONE", [])
    policy = apis.policies.get(name, 10.0)
    assert policy.status == "READY"
    assert policy.workload_policy is not None
    assert (policy.workload_policy.type_, policy.workload_policy.accelerator_topology) == (
        "HIGH_THROUGHPUT",
        "2x2x2",
    )
    # The operator's client finds it made and takes it; a raw second insert is refused.
    assert run(compute.policies.ensure_workload_policy(REGION, "2x2x2")) == POLICY
    with pytest.raises(core_exceptions.Conflict) as raw:
        apis.policies.insert(request, 10.0)
    [error] = raw.value.errors
    assert error["reason"] == "alreadyExists"
    assert compute.plain(raw.value.message) == (
        f"POST ENDPOINT/compute/v1/projects/{PROJECT}/regions/{REGION}/resourcePolicies: "
        f"The resource 'projects/{PROJECT}/regions/{REGION}/resourcePolicies/{POLICY}' "
        "already exists"
    )
    assert compute.statuses("resourcePolicies.insert") == [200, 409]
    assert compute.statuses("regionOperations.wait") == [200]
    assert compute.statuses("resourcePolicies.get") == [200, 200, 200]


def test_a_booking_is_submitted_once_reviewed_read_and_cancelled(compute: Compute) -> None:
    apis, bookings = compute.apis, compute.bookings
    plan = block(timedelta(days=3))
    assert run(bookings.read(ZONE, plan.name, UID)) is None
    run(bookings.submit(plan))
    compute.clock.tick(1)
    # The same requestId: the first insert's operation again, nothing more booked.
    run(bookings.submit(plan))
    inserts = compute.emulator.compute.calls_for("futureReservations.insert")
    assert [c.query for c in inserts] == [{"requestId": plan.request_id}] * 2
    assert len({(c.response or {})["name"] for c in inserts}) == 1
    compute.clock.tick(10)
    seen = run(bookings.read(ZONE, plan.name, UID))
    assert seen is not None
    assert (seen.procurement, seen.reservations, seen.ours) == ("PENDING_APPROVAL", (), True)
    booked = apis.bookings.get(ZonalName(PROJECT, ZONE, plan.name), 10.0)
    assert booked.time_window is not None
    assert booked.time_window.start_time == rfc3339.seconds(plan.start)
    assert booked.specific_sku_properties is not None
    assert booked.specific_sku_properties.total_count == 2
    # Cancelled under review: its zone operation, then CANCELLED.
    run(bookings.cancel(ZONE, plan.name))
    compute.clock.tick(10)
    cancelled = run(bookings.read(ZONE, plan.name, UID))
    assert cancelled is not None
    assert cancelled.procurement == "CANCELLED"
    assert compute.statuses("futureReservations.cancel") == [200]
    assert compute.statuses("futureReservations.get") == [404, 200, 200, 200]
    [(project, zone, reservation)] = compute.emulator.compute.bookings()
    assert (project, zone, reservation.name) == (PROJECT, ZONE, plan.name)


def test_a_booking_approved_is_delivered_at_its_start(compute: Compute) -> None:
    plan = block(timedelta(hours=2))
    run(compute.bookings.submit(plan))
    compute.clock.tick(600 + 10)
    approved = run(compute.bookings.read(ZONE, plan.name, UID))
    assert approved is not None
    assert approved.procurement == "PROCURING"
    compute.clock.tick(2 * 3600)
    delivered = run(compute.bookings.read(ZONE, plan.name, UID))
    assert delivered is not None
    assert (delivered.procurement, delivered.reservations) == ("FULFILLED", (plan.name,))
    assert compute.emulator.compute.reservation_active(PROJECT, ZONE, plan.name)


def test_advice_offers_the_first_window_after_a_block_booked(compute: Compute) -> None:
    # Two H100 VMs fit in the zone at a time; another block holds both from day 10.
    review = CalendarReview(review_seconds=600, capacity={ZONE: {"a3-highgpu-8g": 2}})
    compute.emulator.compute.set_calendar_review(review)
    held = block(timedelta(days=10), name="another-team")
    run(compute.bookings.submit(held))
    compute.clock.tick(10)
    query = AdviceQuery(
        zone=ZONE,
        earliest=EPOCH + timedelta(days=10),
        latest=EPOCH + timedelta(days=15),
        duration=timedelta(days=1),
        count=2,
        machine_type="a3-highgpu-8g",
        tpu_family=None,
        other_zones=("us-east5-b",),
    )
    advice = run(compute.bookings.advise(query))
    assert advice.window is not None
    assert (advice.window.start, advice.window.end) == (held.end, held.end + timedelta(days=1))
    assert advice.window.recommendation_id
    assert compute.statuses("advice.calendarMode") == [200]


def test_an_injected_fault_and_a_lost_answer_are_raised_and_classified_alike(
    compute: Compute,
) -> None:
    apis, emulator = compute.apis, compute.emulator.compute
    faults = MethodFaults(error_rate=1.0, error_code="UNAVAILABLE", error_message="down now")
    emulator.set_faults("futureReservations.get", faults)
    with pytest.raises(core_exceptions.ServiceUnavailable) as raw:
        apis.bookings.get(ZonalName(PROJECT, ZONE, "dws-x"), 10.0)
    assert compute.plain(raw.value.message) == (
        f"GET ENDPOINT/compute/v1/projects/{PROJECT}/zones/{ZONE}/futureReservations/dws-x: "
        "down now"
    )
    assert raw.value.errors == [
        {"message": "down now", "domain": "global", "reason": "backendError"}
    ]
    classified = classify_compute(raw.value)
    assert (classified.reason, classified.retryable) == ("Unavailable", True)
    read = refused(compute.bookings.read(ZONE, "dws-x", UID))
    assert (read.reason, read.retryable, read.message) == ("Unavailable", True, raw.value.message)
    assert compute.statuses("futureReservations.get") == [503, 503]
    # An insert carried out whose answer is lost: a gateway timeout; the booking is made,
    # and the insert again with its requestId answers its operation.
    emulator.set_faults("futureReservations.insert", MethodFaults(lost_answers=1))
    plan = block(timedelta(days=3))
    lost = refused(compute.bookings.submit(plan))
    assert (lost.reason, lost.retryable) == ("DeadlineExceeded", True)
    assert compute.plain(lost.message).endswith(": Deadline exceeded")
    run(compute.bookings.submit(plan))
    compute.clock.tick(10)
    first, second = emulator.calls_for("futureReservations.insert")
    assert (first.status, second.status) == (504, 200)
    assert first.response is not None
    assert second.response == first.response
    assert len(emulator.bookings()) == 1


def test_refusals_by_the_rules_are_raised_alike(compute: Compute) -> None:
    apis, emulator = compute.apis, compute.emulator.compute
    # A block whose start has passed.
    error = refused(compute.bookings.submit(block(-timedelta(hours=1))))
    assert (error.reason, error.retryable) == ("InvalidArgument", False)
    [call] = emulator.calls_for("futureReservations.insert")
    assert (call.status, call.reason) == (400, "invalid")
    assert compute.plain(error.message).endswith(f": {call.message}")
    assert emulator.bookings() == []
    # A policy not there: None to the operator, 404 notFound raw.
    assert run(compute.policies.get(REGION, "dws-none")) is None
    with pytest.raises(core_exceptions.NotFound) as raw:
        apis.policies.get(RegionalName(PROJECT, REGION, "dws-none"), 10.0)
    assert [e["reason"] for e in raw.value.errors] == ["notFound"]
    # A path Compute does not serve: its front end's 404, not logged.
    with pytest.raises(core_exceptions.NotFound) as unknown:
        apis.session.call("GET", "projects", PROJECT, "nothing", timeout=10.0)
    assert compute.plain(unknown.value.message) == (
        f"GET ENDPOINT/compute/v1/projects/{PROJECT}/nothing: The requested URL "
        f"/compute/v1/projects/{PROJECT}/nothing was not found on this server."
    )
    assert [c.method for c in emulator.calls] == [
        "futureReservations.insert",
        "resourcePolicies.get",
        "resourcePolicies.get",
    ]


def test_an_answer_is_the_callers_own(compute: Compute) -> None:
    apis = compute.apis
    apis.policies.insert(insert_policy_request(PROJECT, REGION, "2x2x2"), 10.0)
    got = apis.session.call(
        "GET", "projects", PROJECT, "regions", REGION, "resourcePolicies", POLICY, timeout=10.0
    )
    got["status"] = "changed by the caller"
    [_, call] = compute.emulator.compute.calls
    assert call.response is not None
    assert call.response["status"] == "CREATING"


def tour(compute: Compute) -> None:
    """A bit of everything above, each step's refusal kept quiet."""
    emulator = compute.emulator.compute
    emulator.set_faults(
        "futureReservations.get", MethodFaults(error_rate=0.5, error_code="INTERNAL")
    )
    emulator.set_faults("futureReservations.insert", MethodFaults(lost_answers=1))
    # The policy's operation is DONE at once: the served `wait` returns without waiting.
    emulator.set_faults("resourcePolicies.insert", MethodFaults(operation_latency_seconds=0.0))

    def step(call: Awaitable[Any]) -> None:
        with contextlib.suppress(GkeError):
            run(call)

    step(compute.policies.ensure_workload_policy(REGION, "2x2x2"))
    step(compute.policies.ensure_workload_policy(REGION, "2x2x2"))
    theirs = replace(block(timedelta(days=4), name="dws-b3"), uid="another-uid")
    plans = [block(timedelta(days=d), name=f"dws-b{d}") for d in (3, 3, -1)]
    for plan in (*plans, theirs):
        step(compute.bookings.submit(plan))
        compute.clock.tick(5)
    for name in ("dws-b3", "dws-b3", "dws-b-1", "dws-b3", "dws-b3"):
        step(compute.bookings.read(ZONE, name, UID))
    step(compute.bookings.cancel(ZONE, "dws-b3"))
    compute.clock.tick(700)
    step(compute.bookings.read(ZONE, "dws-b3", UID))
    step(compute.bookings.cancel(ZONE, "dws-b3"))
    step(compute.bookings.cancel(ZONE, "dws-b-1"))


def transcript(emulator: ClusterManagerEmulator) -> list[tuple[Any, ...]]:
    """The call log without what differs by design: the wall clock in operation names
    and times."""

    def plain(value: Any) -> str:
        text = re.sub(r"operation-\d+-", "operation-", repr(value))
        return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)", "TIME", text)

    def row(c: ComputeCall) -> tuple[Any, ...]:
        texts = (plain(c.params), plain(c.query), plain(c.body), plain(c.response))
        return (c.method, c.status, c.reason, c.message, *texts, c.started, c.duration)

    return [row(call) for call in emulator.compute.calls]


def test_the_call_logs_agree_record_by_record(make_emulator: MakeEmulator) -> None:
    logs = []
    for name in SIDES:
        side = side_of(name, make_emulator, CONFIG.model_copy(update={"seed": 3}))
        try:
            tour(side)
        finally:
            side.apis.close()
        logs.append(transcript(side.emulator))
    served, in_process = logs
    assert {row[1] for row in served} >= {200, 400, 404, 409, 500, 504}
    assert in_process == served


def test_in_process_a_wait_answers_at_once_and_latency_is_refused() -> None:
    # The in-process side alone, where it differs by design: its calls run in a worker
    # thread that cannot wait on the virtual clock, so a wait answers the operation as it
    # stands (the served one waits until DONE or two minutes), and a latency fault is
    # refused rather than ignored.
    clock = ManualClock()
    emulator = ClusterManagerEmulator(CONFIG, clock=clock)
    apis = in_process_compute(emulator.compute)
    operation = apis.policies.insert(insert_policy_request(PROJECT, REGION, "2x2x2"), 10.0)
    clock.tick(5)
    waited = apis.operations.wait(RegionalName(PROJECT, REGION, operation.name), 150.0)
    assert (waited.name, waited.status) == (operation.name, "RUNNING")
    assert clock() == 105
    emulator.compute.set_faults("resourcePolicies.get", MethodFaults(latency_seconds=1.0))
    with pytest.raises(ValueError, match="latency_seconds is not served in process"):
        apis.policies.get(RegionalName(PROJECT, REGION, POLICY), 10.0)
