"""Compute's calendar-mode advice (`advice.calendarMode`): when and where a block of GPU
VMs or TPU chips can start, on the emulator's simulated clock and calendar.

The request carries one resource specification (Compute: "currently only one value is
allowed"): what (`specificSkuResources`: a machine type and a VM count, or
`aggregateResources`: a TPU VM family and a chip count), when
(`timeRangeSpec`: the start's earliest and latest, the block's shortest and longest
duration) and where (`locationPolicy`: zones ALLOWed or DENYed; a zone not named is
allowed). The answer recommends one window in one zone (`location`, `startTime`,
`endTime`, a `recommendationId`) and says of every other zone considered why not
(`otherLocations`: NOT_SUPPORTED, NO_CAPACITY, CONDITIONS_NOT_MET).

Sources: the `CalendarModeAdviceRequest`/`Response`, `FutureResourcesSpec*`,
`FlexibleTimeRange` and `FutureResourcesRecommendation*` messages (google-cloud-compute
1.57's types, Compute's REST reference of advice.calendarMode); Compute's calendar-mode
page (availability shown up to 60 days ahead for GPU VMs; the same limits as a booking:
1 to 90 days, 1 to 80 GPU VMs, TPU chip counts and zones); Cloud TPU's calendar-mode
page (TPU availability "1 to 120 days in advance"). What capacity Google has is not
published: here it is the scenario's (`CalendarReview.capacity`, unlimited unless set),
less what the blocks already booked hold; the earliest start offered is the scenario's
lead away (a day unless set).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.cloud import compute_v1

from dws_operator import rfc3339
from dws_workshop.emulator.calendar import Booking
from dws_workshop.emulator.calendar_rules import (
    MAX_DAYS,
    MAX_GPU_VMS,
    MIN_DAYS,
    SERVING_ONLY,
    TPU_CHIP_COUNTS,
    TPU_ZONES,
    parse_instant,
    reserved_count,
)
from dws_workshop.emulator.compute_rules import invalid, required
from dws_workshop.emulator.ruleids import behaviour

#: How far ahead the advice looks (Compute's calendar-mode page).
GPU_HORIZON = timedelta(days=60)
TPU_HORIZON = timedelta(days=120)
#: Procurement states of a booking that holds (or may come to hold) its capacity.
HOLDING = ("PENDING_APPROVAL", "APPROVED", "PROCURING", "FULFILLED")
_ADVICE_IDS = uuid.UUID("5b1f0c9e-7d1a-4c54-8f0e-2d8a0b7c9e31")


@dataclass(frozen=True)
class AdviceAsk:
    """One advice request, checked."""

    key: str
    #: Machine type (GPU VMs) or VM family (TPU chips): what capacity is counted in.
    resource: str
    count: int
    tpu: bool
    workload_type: str
    earliest: datetime
    latest: datetime
    duration: timedelta
    allowed: tuple[str, ...]
    denied: tuple[str, ...]


@behaviour("CE-ADVICE-REQUEST")
def validate_advice(
    request: compute_v1.CalendarModeAdviceRequest, region: str, now: datetime
) -> AdviceAsk:
    """Raise the 400 Compute would answer the request with; else the request, read."""
    specs = request.future_resources_specs
    if len(specs) != 1:
        raise invalid(
            "futureResourcesSpecs",
            str(len(specs)),
            "Exactly one resource specification is allowed.",
            rule="CE-ADVICE-REQUEST",
        )
    key, spec = next(iter(specs.items()))
    field = f"futureResourcesSpecs[{key}]"
    resource, count, tpu, workload = _target(spec.target_resources, f"{field}.targetResources")
    earliest, latest, duration = _time_range(spec.time_range_spec, f"{field}.timeRangeSpec", now)
    allowed: list[str] = []
    denied: list[str] = []
    for location, preference in spec.location_policy.locations.items():
        zone = location.removeprefix("zones/")
        if not location.startswith("zones/") or zone.rsplit("-", 1)[0] != region:
            raise invalid(
                f"{field}.locationPolicy.locations",
                location,
                f"Must be a zone of region {region}, as zones/ZONE.",
                rule="CE-ADVICE-REQUEST",
            )
        (denied if preference.preference == "DENY" else allowed).append(zone)
    return AdviceAsk(
        key=key,
        resource=resource,
        count=count,
        tpu=tpu,
        workload_type=workload,
        earliest=earliest,
        latest=latest,
        duration=duration,
        allowed=tuple(sorted(allowed)),
        denied=tuple(sorted(denied)),
    )


def _target(
    target: compute_v1.FutureResourcesSpecTargetResources, field: str
) -> tuple[str, int, bool, str]:
    sku = "specific_sku_resources" in target
    aggregate = "aggregate_resources" in target
    if sku == aggregate:
        raise invalid(
            field,
            "",
            "Exactly one of specificSkuResources and aggregateResources must be set.",
            rule="CE-ADVICE-REQUEST",
        )
    if sku:
        vms = target.specific_sku_resources
        if not vms.machine_type:
            raise required(f"{field}.specificSkuResources.machineType", rule="CE-ADVICE-REQUEST")
        if not 1 <= vms.instance_count <= MAX_GPU_VMS:
            raise invalid(
                f"{field}.specificSkuResources.instanceCount",
                str(vms.instance_count),
                f"A calendar-mode block holds 1 to {MAX_GPU_VMS} VMs.",
                rule="CE-ADVICE-REQUEST",
            )
        return vms.machine_type, int(vms.instance_count), False, ""
    chips = target.aggregate_resources
    if chips.vm_family not in TPU_ZONES:
        raise invalid(
            f"{field}.aggregateResources.vmFamily",
            chips.vm_family,
            f"Calendar mode serves {', '.join(TPU_ZONES)}.",
            rule="CE-ADVICE-REQUEST",
        )
    if chips.accelerator_count not in TPU_CHIP_COUNTS:
        raise invalid(
            f"{field}.aggregateResources.acceleratorCount",
            str(chips.accelerator_count),
            "Must be 1, 4, 8, 16, 32, 64, 128, 256, 512 or 1024 chips.",
            rule="CE-ADVICE-REQUEST",
        )
    workload = chips.workload_type or "BATCH"
    return chips.vm_family, int(chips.accelerator_count), True, workload


def _time_range(
    span: compute_v1.FlexibleTimeRange, field: str, now: datetime
) -> tuple[datetime, datetime, timedelta]:
    if not span.min_duration and not span.max_duration:
        raise required(f"{field}.minDuration", rule="CE-ADVICE-REQUEST")
    shortest = _duration(f"{field}.minDuration", span.min_duration or span.max_duration)
    longest = _duration(f"{field}.maxDuration", span.max_duration or span.min_duration)
    if not timedelta(days=MIN_DAYS) <= shortest <= longest <= timedelta(days=MAX_DAYS):
        raise invalid(
            field,
            f"{span.min_duration}/{span.max_duration}",
            f"A calendar-mode block lasts {MIN_DAYS} to {MAX_DAYS} days "
            "(minDuration at most maxDuration).",
            rule="CE-ADVICE-REQUEST",
        )
    earliest = _instant(f"{field}.startTimeNotEarlierThan", span.start_time_not_earlier_than, now)
    latest = _instant(
        f"{field}.startTimeNotLaterThan", span.start_time_not_later_than, earliest + TPU_HORIZON
    )
    if latest < earliest:
        raise invalid(
            f"{field}.startTimeNotLaterThan",
            span.start_time_not_later_than,
            "Must not be earlier than startTimeNotEarlierThan.",
            rule="CE-ADVICE-REQUEST",
        )
    # The longest block that fits is recommended (ours: Compute does not say which).
    return earliest, latest, longest


def _duration(field: str, value: str) -> timedelta:
    try:
        if not value.endswith("s"):
            raise ValueError(value)
        return timedelta(seconds=float(value[:-1]))
    except ValueError as error:
        raise invalid(
            field, value, "Must be a duration in seconds, e.g. 86400s.", rule="CE-ADVICE-REQUEST"
        ) from error


def _instant(field: str, value: str, default: datetime) -> datetime:
    return parse_instant(field, value, rule="CE-ADVICE-REQUEST") if value else default


@behaviour("CE-ADVICE-WINDOWS")
def advise(
    ask: AdviceAsk,
    region: str,
    bookings: Iterable[Booking],
    capacity: dict[str, dict[str, int]],
    lead: timedelta,
    now: datetime,
) -> compute_v1.CalendarModeAdviceResponse:
    """The earliest window in any zone considered; of the others, why not."""
    held = [b for b in bookings if b.procurement in HOLDING and _resource(b) == ask.resource]
    served = TPU_ZONES.get(ask.resource, ()) if ask.tpu else ()
    listed = {z for z, limits in capacity.items() if ask.resource in limits}
    zones = sorted(
        z
        for z in {*ask.allowed, *served, *listed}
        if z.rsplit("-", 1)[0] == region and z not in ask.denied
    )
    horizon = now + (TPU_HORIZON if ask.tpu else GPU_HORIZON)
    lower, upper = max(ask.earliest, now + lead), min(ask.latest, horizon)
    starts: dict[str, datetime] = {}
    others: dict[str, compute_v1.FutureResourcesRecommendationOtherLocation] = {}
    for zone in zones:
        why = _not_served(ask, zone, served)
        if why is not None:
            others[f"zones/{zone}"] = _other("NOT_SUPPORTED", why)
            continue
        limit = capacity.get(zone, {}).get(ask.resource)
        start = _first_start(ask, [b for b in held if b.zone == zone], limit, lower, upper)
        if start is None:
            others[f"zones/{zone}"] = _other(
                "NO_CAPACITY",
                f"no block of {ask.count} {ask.resource} for {_days(ask.duration)} can start "
                f"between {rfc3339.seconds(lower)} and {rfc3339.seconds(upper)}",
            )
        else:
            starts[zone] = start
    found = compute_v1.FutureResourcesRecommendation(other_locations=others)
    if starts:
        zone = min(starts, key=lambda z: (starts[z], z))
        start = starts.pop(zone)
        for later, at in starts.items():
            others[f"zones/{later}"] = _other(
                "CONDITIONS_NOT_MET",
                f"a block can start here at {rfc3339.seconds(at)}, after zones/{zone}",
            )
        found = compute_v1.FutureResourcesRecommendation(
            location=f"zones/{zone}",
            start_time=rfc3339.seconds(start),
            end_time=rfc3339.seconds(start + ask.duration),
            recommendation_id=str(
                uuid.uuid5(_ADVICE_IDS, f"{zone}/{ask.resource}/{ask.count}/{start.isoformat()}")
            ),
            recommendation_type="FUTURE_RESERVATION",
            other_locations=others,
        )
    return compute_v1.CalendarModeAdviceResponse(
        recommendations=[
            compute_v1.CalendarModeRecommendation(recommendations_per_spec={ask.key: found})
        ]
    )


def _not_served(ask: AdviceAsk, zone: str, served: tuple[str, ...]) -> str | None:
    if not ask.tpu:
        return None
    if zone not in served:
        return f"{ask.resource} is not served in {zone} in calendar mode"
    if zone in SERVING_ONLY.get(ask.resource, ()) and ask.workload_type != "SERVING":
        return f"{ask.resource} is served in {zone} for SERVING only"
    return None


def _first_start(
    ask: AdviceAsk, held: list[Booking], limit: int | None, lower: datetime, upper: datetime
) -> datetime | None:
    """The earliest start in [lower, upper] at which the block fits under `limit` beside
    the blocks `held` for its whole length; capacity frees only as a held block ends, so
    the candidates are `lower` and those ends."""
    if lower > upper or (limit is not None and ask.count > limit):
        return None
    if limit is None:
        return lower
    ends = sorted({b.window.end for b in held if lower < b.window.end <= upper})
    for start in (lower, *ends):
        end = start + ask.duration
        # Peak use over [start, end): at its start, or where a held block begins.
        points = [start] + [b.window.start for b in held if start < b.window.start < end]
        peak = max(
            sum(reserved_count(b.reservation) for b in held if b.window.start <= p < b.window.end)
            for p in points
        )
        if peak + ask.count <= limit:
            return start
    return None


def _resource(booking: Booking) -> str:
    reservation = booking.reservation
    if "specific_sku_properties" in reservation:
        return str(reservation.specific_sku_properties.instance_properties.machine_type)
    return str(reservation.aggregate_reservation.vm_family)


def _other(status: str, details: str) -> compute_v1.FutureResourcesRecommendationOtherLocation:
    return compute_v1.FutureResourcesRecommendationOtherLocation(status=status, details=details)


def _days(length: timedelta) -> str:
    return f"{length.total_seconds() / 86400:g} days"
