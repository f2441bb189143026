"""Compute Engine's checks on a `futureReservations.insert` in calendar mode (DWS
Calendar mode), applied before any state changes.

Each broken rule is an HTTP 400 with Compute's JSON error body; the first broken rule
wins. Sources: the `FutureReservation` message of Compute's discovery document and
google-cloud-compute (field names, enum values, the oneof of SKU and aggregate
properties, `requestId` a non-zero UUID), Compute's calendar-mode pages (1 to 90 days;
up to 80 GPU VMs per request; TPU chip counts 1, 4, 8, ... 1,024 in listed zones). The
wording of the messages is the emulator's: Google's own is not published.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

from google.cloud import compute_v1

from dws_operator import rfc3339
from dws_workshop.emulator.compute_api import ComputeApiError
from dws_workshop.emulator.compute_rules import invalid, required, validate_name
from dws_workshop.emulator.ruleids import behaviour

CALENDAR = "CALENDAR"
SUBMITTED = "SUBMITTED"
DRAFT = "DRAFT"
MIN_DAYS = 1
MAX_DAYS = 90
MAX_GPU_VMS = 80
TPU_CHIP_COUNTS = (1, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: The TPU families calendar mode serves and the zones it serves them in (Cloud TPU's
#: calendar-mode page, updated 2025-12-18; v5e's last zone for SERVING only).
TPU_ZONES: dict[str, tuple[str, ...]] = {
    "VM_FAMILY_CLOUD_TPU_POD_SLICE_TPU7X": ("us-central1-c",),
    "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT6E": (
        "asia-northeast1-b",
        "europe-west4-a",
        "us-east5-a",
        "us-east5-b",
    ),
    "VM_FAMILY_CLOUD_TPU_POD_SLICE_CT5P": ("us-east5-a",),
    "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP": ("europe-west4-b", "us-west4-b", "us-south1-a"),
}
#: Zones of `TPU_ZONES` where a family is served for inference (SERVING) only.
SERVING_ONLY: dict[str, tuple[str, ...]] = {
    "VM_FAMILY_CLOUD_TPU_LITE_POD_SLICE_CT5LP": ("us-south1-a",),
}
_ZONE_RE = re.compile(r"^[a-z]+-[a-z]+[0-9]+-[a-z]$")


@dataclass(frozen=True)
class Window:
    """A calendar block's start and end, as Compute reads its `timeWindow`."""

    start: datetime
    end: datetime


def validate_zone(zone: str) -> None:
    if not _ZONE_RE.match(zone):
        raise invalid("zone", zone, "Unknown zone.", rule="CE-ZONE")


@behaviour("CE-REQUEST-ID")
def validate_request_id(value: str) -> None:
    """`requestId` is a UUID other than the all-zero one."""
    try:
        parsed = uuid.UUID(value)
    except ValueError:
        parsed = None
    if parsed is None or parsed.int == 0:
        raise invalid(
            "requestId",
            value,
            "Must be a valid UUID other than 00000000-0000-0000-0000-000000000000.",
            rule="CE-REQUEST-ID",
        )


@behaviour("CE-FR-CALENDAR-ONLY", "CE-FR-RESERVATION-NAME", "CE-FR-PLANNING-STATUS")
def validate_future_reservation(
    reservation: compute_v1.FutureReservation, zone: str, now: datetime
) -> Window:
    """Raise the 400 Compute would answer the insert of `reservation` in `zone` with;
    else its block's window."""
    validate_name("resource.name", reservation.name)
    if reservation.reservation_mode != CALENDAR:
        # The emulator serves calendar mode only: a DEFAULT-mode request is a capacity
        # request reviewed by Google's sales, which nothing here models.
        raise ComputeApiError(
            501,
            "notImplemented",
            "The emulator serves future reservations in calendar mode only "
            "(reservationMode: CALENDAR).",
            rule="CE-FR-CALENDAR-ONLY",
        )
    if reservation.planning_status not in (SUBMITTED, DRAFT):
        raise invalid(
            "resource.planningStatus",
            reservation.planning_status,
            "Must be DRAFT or SUBMITTED.",
            rule="CE-FR-PLANNING-STATUS",
        )
    if bool(reservation.reservation_name) == bool(reservation.name_prefix):
        raise invalid(
            "resource.reservationName",
            reservation.reservation_name,
            "Exactly one of reservationName and namePrefix must be set.",
            rule="CE-FR-RESERVATION-NAME",
        )
    if reservation.reservation_name:
        validate_name("resource.reservationName", reservation.reservation_name)
    window = _window(reservation, now)
    _what(reservation, zone)
    return window


@behaviour("CE-FR-CALENDAR-DURATION")
def _window(reservation: compute_v1.FutureReservation, now: datetime) -> Window:
    time_window = reservation.time_window
    if not time_window.start_time:
        raise required("resource.timeWindow.startTime", rule="CE-FR-CALENDAR-DURATION")
    start = parse_instant(
        "resource.timeWindow.startTime", time_window.start_time, rule="CE-FR-CALENDAR-DURATION"
    )
    has_end = bool(time_window.end_time)
    has_duration = "duration" in time_window
    if has_end == has_duration:
        raise invalid(
            "resource.timeWindow",
            "",
            "Exactly one of endTime and duration must be set.",
            rule="CE-FR-CALENDAR-DURATION",
        )
    if has_end:
        end = parse_instant(
            "resource.timeWindow.endTime", time_window.end_time, rule="CE-FR-CALENDAR-DURATION"
        )
    else:
        end = start + timedelta(seconds=time_window.duration.seconds)
    if start <= now:
        raise invalid(
            "resource.timeWindow.startTime",
            time_window.start_time,
            "The start time must be in the future.",
            rule="CE-FR-CALENDAR-DURATION",
        )
    if not timedelta(days=MIN_DAYS) <= end - start <= timedelta(days=MAX_DAYS):
        raise invalid(
            "resource.timeWindow",
            f"{rfc3339.seconds(start)}/{rfc3339.seconds(end)}",
            f"A calendar-mode reservation lasts {MIN_DAYS} to {MAX_DAYS} days.",
            rule="CE-FR-CALENDAR-DURATION",
        )
    return Window(start, end)


@behaviour("CE-FR-GPU-COUNT", "CE-FR-TPU-CHIPS", "CE-FR-TPU-ZONES")
def _what(reservation: compute_v1.FutureReservation, zone: str) -> None:
    sku = "specific_sku_properties" in reservation
    aggregate = "aggregate_reservation" in reservation
    if sku == aggregate:
        raise invalid(
            "resource",
            reservation.name,
            "Exactly one of specificSkuProperties and aggregateReservation must be set.",
            rule="CE-FR-GPU-COUNT",
        )
    if sku:
        properties = reservation.specific_sku_properties
        if not properties.instance_properties.machine_type:
            raise required(
                "resource.specificSkuProperties.instanceProperties.machineType",
                rule="CE-FR-GPU-COUNT",
            )
        count = properties.total_count
        if not 1 <= count <= MAX_GPU_VMS:
            raise invalid(
                "resource.specificSkuProperties.totalCount",
                str(count),
                f"A calendar-mode request reserves 1 to {MAX_GPU_VMS} VMs.",
                rule="CE-FR-GPU-COUNT",
            )
        return
    family = reservation.aggregate_reservation.vm_family
    zones = TPU_ZONES.get(family)
    if zones is None:
        raise invalid(
            "resource.aggregateReservation.vmFamily",
            family,
            f"Calendar mode serves {', '.join(TPU_ZONES)}.",
            rule="CE-FR-TPU-ZONES",
        )
    if zone not in zones:
        raise invalid(
            "zone", zone, f"{family} is served in {', '.join(zones)}.", rule="CE-FR-TPU-ZONES"
        )
    if zone in SERVING_ONLY.get(family, ()) and (
        reservation.aggregate_reservation.workload_type != "SERVING"
    ):
        raise invalid(
            "resource.aggregateReservation.workloadType",
            reservation.aggregate_reservation.workload_type,
            f"{family} is served in {zone} for SERVING only.",
            rule="CE-FR-TPU-ZONES",
        )
    resources = reservation.aggregate_reservation.reserved_resources
    chips = [r.accelerator.accelerator_count for r in resources if "accelerator" in r]
    if len(chips) != 1 or chips[0] not in TPU_CHIP_COUNTS:
        raise invalid(
            "resource.aggregateReservation.reservedResources",
            ",".join(str(c) for c in chips),
            "One accelerator entry of 1, 4, 8, 16, 32, 64, 128, 256, 512 or 1024 chips.",
            rule="CE-FR-TPU-CHIPS",
        )


def reserved_count(reservation: compute_v1.FutureReservation) -> int:
    """VMs (GPU) or chips (TPU) the request reserves."""
    if "specific_sku_properties" in reservation:
        return int(reservation.specific_sku_properties.total_count)
    resources = reservation.aggregate_reservation.reserved_resources
    return sum(r.accelerator.accelerator_count for r in resources)


def parse_instant(field: str, value: str, *, rule: str) -> datetime:
    """An RFC 3339 time of a request's `field`, or Compute's 400 naming it (under `rule`)."""
    try:
        return rfc3339.parse(value)
    except ValueError as error:
        raise invalid(field, value, "Must be an RFC 3339 time.", rule=rule) from error
