"""Compute's calendar-mode advice as the emulator serves it, asked through the operator's
booking client (`advice.calendarMode` over REST, dws_operator.gke.compute_rest): a window
at the earliest start when capacity is free, after the blocks booked when it is not, none in range,
TPU zones that do not serve the family, and the requests Compute refuses. Time is a
`ManualClock` the test moves."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

import pytest
from google.api_core import exceptions as core_exceptions

from dws_operator import rfc3339
from dws_operator.api import TrainingRequestSpec
from dws_operator.cli.plan_render import render_advice
from dws_operator.gke.bookings import BookingClient, advice_request
from dws_operator.gke.compute_rest import COMPUTE_ENDPOINT_ENV, connect_compute
from dws_operator.gke.compute_types import LocationPreference
from dws_operator.gke.errors import GkeError
from dws_operator.gke.retry import RetryPolicy
from dws_operator.planning import plan_slice
from dws_operator.reconcile import AdviceQuery, AdviceView, BookingPlan, query_for
from dws_workshop.emulator import ClusterManagerEmulator, EmulatorConfig
from dws_workshop.emulator.config import CalendarReview
from tests.builders import gpu, spec_body, tpu
from tests.clocks import ManualClock
from tests.gke.harness import MakeEmulator

PROJECT, ZONE = "dws-sandbox", "us-east5-a"
H100 = "a3-highgpu-8g"
V6E = "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E"
UID = "6f1c2a40-0000-4000-8000-00000000beef"
DAY = timedelta(days=1)


def emulator_with(
    make_emulator: MakeEmulator, capacity: dict[str, dict[str, int]] | None = None
) -> tuple[ClusterManagerEmulator, ManualClock]:
    clock = ManualClock()
    review = CalendarReview(review_seconds=600, capacity=capacity or {})
    config = EmulatorConfig(compute_operation_latency_seconds=0.05, calendar_review=review)
    return make_emulator(config, clock), clock


def ask(
    emulator: ClusterManagerEmulator,
    *,
    earliest: timedelta,
    latest: timedelta,
    days: int = 2,
    count: int = 4,
    tpu_family: str | None = None,
    zone: str = ZONE,
) -> AdviceView:
    now = emulator.sim_clock.utc()
    query = AdviceQuery(
        zone=zone,
        earliest=now + earliest,
        latest=now + latest,
        duration=days * DAY,
        count=count,
        machine_type=H100 if tpu_family is None else "ct6e-standard-4t",
        tpu_family=tpu_family,
    )
    apis = connect_compute(emulator.compute_endpoint)
    try:
        client = BookingClient(apis, PROJECT, retry=RetryPolicy(attempts=1))
        return asyncio.run(client.advise(query))
    finally:
        apis.close()


def book(emulator: ClusterManagerEmulator, clock: ManualClock, start: datetime, count: int) -> None:
    """A block of H100 VMs from `start` for two days, submitted and its insert done."""
    booking = BookingPlan(
        name=f"held-{count}-{start:%d%H}",
        zone=ZONE,
        start=start,
        end=start + 2 * DAY,
        count=count,
        unit="VMs",
        machine_type=H100,
        tpu_family=None,
        uid=UID,
        stop_before=600.0,
    )
    apis = connect_compute(emulator.compute_endpoint)
    try:
        asyncio.run(BookingClient(apis, PROJECT, retry=RetryPolicy(attempts=1)).submit(booking))
    finally:
        apis.close()
    clock.tick(1)


def test_free_capacity_is_offered_from_the_earliest_start(make_emulator: MakeEmulator) -> None:
    emulator, _ = emulator_with(make_emulator)
    now = emulator.sim_clock.utc()
    advice = ask(emulator, earliest=3 * DAY, latest=10 * DAY)
    assert advice.window is not None
    assert advice.window.start == (now + 3 * DAY).replace(microsecond=0)
    assert advice.window.end == advice.window.start + 2 * DAY
    assert advice.window.recommendation_id


def test_no_window_sooner_than_a_day_ahead(make_emulator: MakeEmulator) -> None:
    # TPU availability is shown "1 to 120 days in advance": a start asked for within the
    # day is offered a day on.
    emulator, _ = emulator_with(make_emulator)
    now = emulator.sim_clock.utc()
    advice = ask(emulator, earliest=timedelta(hours=1), latest=5 * DAY)
    assert advice.window is not None
    assert advice.window.start == (now + DAY).replace(microsecond=0)


def test_a_full_zone_offers_the_end_of_the_block_that_holds_it(
    make_emulator: MakeEmulator,
) -> None:
    emulator, clock = emulator_with(make_emulator, {ZONE: {H100: 8}})
    now = emulator.sim_clock.utc()
    first = now + 3 * DAY
    book(emulator, clock, first, count=6)
    # 4 more do not fit beside 6 of 8 until that block ends, two days on.
    advice = ask(emulator, earliest=3 * DAY, latest=10 * DAY, count=4)
    assert advice.window is not None
    assert advice.window.start == (first + 2 * DAY).replace(microsecond=0)
    # 2 fit at once (a second after the block was booked: the earliest asked).
    asked = emulator.sim_clock.utc() + 3 * DAY
    two = ask(emulator, earliest=3 * DAY, latest=10 * DAY, count=2)
    assert two.window is not None
    assert two.window.start == asked.replace(microsecond=0)


def test_no_window_in_range_says_why(make_emulator: MakeEmulator) -> None:
    emulator, clock = emulator_with(make_emulator, {ZONE: {H100: 8}})
    now = emulator.sim_clock.utc()
    book(emulator, clock, now + 3 * DAY, count=8)
    advice = ask(emulator, earliest=3 * DAY, latest=4 * DAY)
    assert advice.window is None
    assert advice.why_none.startswith("NO_CAPACITY: no block of 4 a3-highgpu-8g")
    too_many = ask(emulator, earliest=3 * DAY, latest=30 * DAY, count=9)
    assert too_many.window is None
    assert "NO_CAPACITY" in too_many.why_none


def test_gpu_windows_look_sixty_days_ahead(make_emulator: MakeEmulator) -> None:
    emulator, _ = emulator_with(make_emulator)
    advice = ask(emulator, earliest=61 * DAY, latest=70 * DAY)
    assert advice.window is None
    assert "NO_CAPACITY" in advice.why_none
    tpus = ask(emulator, earliest=61 * DAY, latest=70 * DAY, count=16, tpu_family=V6E)
    assert tpus.window is not None  # TPUs: 120 days


def test_a_tpu_family_is_advised_only_in_the_zones_that_serve_it(
    make_emulator: MakeEmulator,
) -> None:
    emulator, _ = emulator_with(make_emulator)
    served = ask(emulator, earliest=2 * DAY, latest=5 * DAY, count=16, tpu_family=V6E)
    assert served.window is not None
    elsewhere = ask(
        emulator, earliest=2 * DAY, latest=5 * DAY, count=16, tpu_family=V6E, zone="us-east5-c"
    )
    assert elsewhere.window is None
    assert elsewhere.why_none.startswith("NOT_SUPPORTED")
    # The answer recommended a zone that serves it instead, and named it.
    answers = [c.response for c in emulator.compute.calls_for("advice.calendarMode")]
    last = answers[-1]
    assert last is not None
    found = last["recommendations"][0]["recommendationsPerSpec"]["block"]
    assert found["location"] in ("zones/us-east5-a", "zones/us-east5-b")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda r: r.future_resources_specs["block"].time_range_spec.__setattr__(
                "min_duration", "3600s"
            ),
            "timeRangeSpec",
        ),
        (
            lambda r: r.future_resources_specs[
                "block"
            ].target_resources.specific_sku_resources.__setattr__("instance_count", 81),
            "instanceCount",
        ),
        (
            lambda r: r.future_resources_specs["block"].location_policy.locations.__setitem__(
                "zones/europe-west4-a",
                LocationPreference(preference="ALLOW"),
            ),
            "locationPolicy",
        ),
        (
            lambda r: r.future_resources_specs.__setitem__(
                "second", r.future_resources_specs["block"]
            ),
            "futureResourcesSpecs",
        ),
    ],
)
def test_compute_refuses_what_it_does_not_advise_on(
    make_emulator: MakeEmulator, change: object, field: str
) -> None:
    emulator, _ = emulator_with(make_emulator)
    now = emulator.sim_clock.utc()
    query = AdviceQuery(ZONE, now + 2 * DAY, now + 5 * DAY, 2 * DAY, 4, H100, None)
    request = advice_request(PROJECT, query)
    assert callable(change)
    change(request.calendar_mode_advice_request_resource)
    apis = connect_compute(emulator.compute_endpoint)
    try:
        with pytest.raises(core_exceptions.BadRequest) as refused:
            apis.advice.calendar_mode(request, 30.0)
    finally:
        apis.close()
    assert field in str(refused.value)


def test_the_operator_client_classifies_a_refusal_as_terminal(
    make_emulator: MakeEmulator,
) -> None:
    emulator, _ = emulator_with(make_emulator)
    with pytest.raises(GkeError) as refused:
        ask(emulator, earliest=2 * DAY, latest=5 * DAY, count=81)
    assert not refused.value.retryable


def test_plan_prints_the_window_the_advice_offers(
    make_emulator: MakeEmulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    emulator, _ = emulator_with(make_emulator)
    monkeypatch.setenv(COMPUTE_ENDPOINT_ENV, emulator.compute_endpoint)
    # `plan` asks on the wall clock, as a person would; the emulator's starts at it.
    now = emulator.sim_clock.utc()
    earliest, latest = now + 3 * DAY, now + 9 * DAY
    spec = TrainingRequestSpec.model_validate(
        spec_body(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="Calendar",
            provisioning={
                "zones": [ZONE],
                "calendar": {
                    "earliest": rfc3339.seconds(earliest),
                    "latest": rfc3339.seconds(latest),
                    "duration": "48h",
                },
            },
        )
    )
    text = render_advice(spec, plan_slice(spec), PROJECT)
    assert text is not None
    assert text.startswith(f"Advice      {rfc3339.seconds(earliest)} to ")
    assert f"in {ZONE}" in text
    assert emulator.compute.calls_for("advice.calendarMode")
    fixed = TrainingRequestSpec.model_validate(
        spec_body(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="Calendar",
            provisioning={
                "zones": [ZONE],
                "calendar": {"startTime": rfc3339.seconds(earliest), "duration": "48h"},
            },
        )
    )
    assert render_advice(fixed, plan_slice(fixed), PROJECT) is None


def test_a_block_in_the_regions_second_zone_gets_its_own_window(
    make_emulator: MakeEmulator,
) -> None:
    # Left unsaid, us-east5-a would be considered too, and win the tie; the operator's
    # query denies it.
    emulator, _ = emulator_with(make_emulator)
    now = emulator.sim_clock.utc()
    spec = TrainingRequestSpec.model_validate(
        spec_body(
            tpu("v6e", "4x4"),
            mode="Calendar",
            provisioning={
                "zones": ["us-east5-b"],
                "calendar": {
                    "earliest": rfc3339.seconds(now + 2 * DAY),
                    "latest": rfc3339.seconds(now + 9 * DAY),
                    "duration": "48h",
                },
            },
        )
    )
    query = query_for(spec, plan_slice(spec), now)
    assert query is not None
    apis = connect_compute(emulator.compute_endpoint)
    try:
        advice = asyncio.run(
            BookingClient(apis, PROJECT, retry=RetryPolicy(attempts=1)).advise(query)
        )
    finally:
        apis.close()
    assert advice.window is not None, advice.why_none
    answers = [c.response for c in emulator.compute.calls_for("advice.calendarMode")]
    found = answers[-1]["recommendations"][0]["recommendationsPerSpec"]["block"]  # type: ignore[index]
    assert found["location"] == "zones/us-east5-b"
