"""TrainingRequest provisioning: how capacity is obtained, as a capacity ladder of steps
(the first one, a Calendar-mode block booked ahead, and the steps to fall back on)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints

from dws_operator.api.base import ApiModel
from dws_operator.catalog import ProvisioningMode
from dws_operator.durations import DURATION_PATTERN

ZONE_PATTERN = r"^[a-z]+(-[a-z]+)*[0-9]+-[a-z]$"
#: A Compute Engine resource name (RFC 1035): reservations, their blocks and sub-blocks.
_RESOURCE_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
#: A reservation in this project, or a shared one as projects/PROJECT/reservations/NAME;
#: either may go on to one block (/reservationBlocks/BLOCK) and one of its sub-blocks
#: (/reservationSubBlocks/SUB_BLOCK), the forms gcloud's --reservation and GKE's
#: reservation affinity take (AI Hypercomputer's A4/A3 Ultra guide; xpk).
RESERVATION_PATTERN = (
    rf"^(projects/[a-z][-a-z0-9]{{4,28}}[a-z0-9]/reservations/)?{_RESOURCE_NAME}"
    rf"(/reservationBlocks/{_RESOURCE_NAME}(/reservationSubBlocks/{_RESOURCE_NAME})?)?$"
)
#: A capacity ladder: `spec.provisioning` itself and at most this many fallback steps.
#: Each step is a node pool of its own (and a GKE create and delete): eight steps are
#: every DWS zone of a TPU generation in both flex-start modes, then Spot and OnDemand.
MAX_FALLBACK_STEPS = 7

Zone = Annotated[str, StringConstraints(pattern=ZONE_PATTERN, max_length=63)]


class FallbackStep(ApiModel):
    """A further step of the capacity ladder: tried when the one before it ran out of
    time, or GKE said it has no capacity (a stockout) or quota for it."""

    mode: ProvisioningMode = Field(
        description="FlexStart, QueuedProvisioning, Spot, OnDemand or Reservation."
    )
    zones: list[Zone] | None = Field(
        None,
        max_length=16,
        description="Zones of this step's node pool. Default: the cluster's.",
    )
    reservation: str | None = Field(
        None,
        pattern=RESERVATION_PATTERN,
        max_length=300,
        description="The reservation of a Reservation step (required with it, not allowed "
        "otherwise).",
    )
    max_wait_duration: str | None = Field(
        None,
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description=(
            "How long this step waits for capacity before the next one is tried (the last "
            "step: before the request fails CapacityTimeout). Default: the first step's "
            "maxWaitDuration. 0s waits forever, so only the last step may have it."
        ),
    )


class CalendarBlock(ApiModel):
    """A DWS Calendar-mode block: capacity booked ahead for a fixed window (a Compute
    future reservation in calendar mode, in the one zone of `provisioning.zones`)."""

    start_time: datetime | None = Field(
        None,
        description=(
            "When the block starts (RFC 3339, e.g. 2026-12-01T08:00:00Z). The nodes come "
            "then and the workload starts on them. Either this, or earliest and latest."
        ),
    )
    earliest: datetime | None = Field(
        None,
        description=(
            "With latest, instead of startTime: the block may start no earlier than this. "
            "The operator asks Compute's calendar-mode advice when, between earliest and "
            "latest, a block of this size and duration can start in the zone, and shows "
            "that window (status.booking) before booking it."
        ),
    )
    latest: datetime | None = Field(
        None,
        description=(
            "With earliest: the block may start no later than this. Past it with no "
            "window found, the request fails (or moves down its ladder)."
        ),
    )
    duration: str = Field(
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description="How long the block lasts: 24h to 2160h (1 to 90 days), e.g. 72h.",
    )
    stop_before: str = Field(
        "10m",
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description=(
            "How long before the block ends the workload is told to stop (SIGTERM): its "
            "pods get this long to checkpoint and exit (their terminationGracePeriodSeconds) "
            "before Compute takes the VMs back at the end. More than 0s, at most 24h."
        ),
    )

    @property
    def first_start(self) -> datetime | None:
        """The earliest the block may start: its startTime, or earliest (one is set
        once validated)."""
        return self.start_time or self.earliest


class FallbackOrder(StrEnum):
    """The order a capacity ladder's steps are tried in."""

    #: As written: spec.provisioning, then each fallback step.
    AS_WRITTEN = "AsWritten"
    #: By the estimated wait of each step's kind of capacity (its p50 in the operator's
    #: history, soonest first), fixed once before the first step.
    ESTIMATED = "Estimated"


class ProvisioningSpec(ApiModel):
    """How capacity is obtained: the first step of the capacity ladder, and the steps to
    fall back on. Immutable after creation."""

    mode: ProvisioningMode = Field(
        description=(
            "FlexStart (DWS flex-start: wait for capacity, up to 7 days of run time), "
            "QueuedProvisioning (DWS flex-start with queued provisioning: the whole slice or "
            "nothing, through a ProvisioningRequest and Kueue), "
            "Spot (preemptible, restarted up to maxRestarts), OnDemand, Reservation "
            "(a specific reservation you made), or Calendar (DWS Calendar mode: the operator "
            "books a block for `calendar` and runs on it)."
        )
    )
    calendar: CalendarBlock | None = Field(
        None,
        description=(
            "The block to book: required with mode Calendar, not allowed otherwise. "
            "Booking commits the project to pay for the block, so it is submitted only "
            "once spec.approveBooking is true (unless the operator books without approval)."
        ),
    )
    max_wait_duration: str = Field(
        "24h",
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description=(
            "How long to wait for capacity before giving up (phase Failed, reason "
            "CapacityTimeout), e.g. 24h, 90m. 0s waits forever."
        ),
    )
    max_run_duration: str = Field(
        "168h",
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description="Longest run time once started; more than 0s and at most 168h (7 days).",
    )
    reservation: str | None = Field(
        None,
        pattern=RESERVATION_PATTERN,
        max_length=300,
        description=(
            "Reservation name, or projects/PROJECT/reservations/NAME for a shared one; "
            "add /reservationBlocks/BLOCK to place the nodes in one block of it, and "
            "/reservationSubBlocks/SUB_BLOCK for one sub-block of that block. "
            "Required with mode Reservation, not allowed otherwise."
        ),
    )
    zones: list[Zone] | None = Field(
        None,
        max_length=16,
        description="Zones the node pool may use (e.g. us-east5-a). Default: the cluster's.",
    )
    fallback: list[FallbackStep] | None = Field(
        None,
        max_length=MAX_FALLBACK_STEPS,
        description=(
            "The capacity ladder: steps tried in order after this one, each with its own "
            "node pool. A step ends when its maxWaitDuration runs out or GKE answers with a "
            "stockout or quota error for it; its pool and workload are removed and the next "
            "step starts. The request fails CapacityTimeout only after the last step. "
            "maxRunDuration is the first step's for every step."
        ),
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    fallback_order: FallbackOrder = Field(
        FallbackOrder.AS_WRITTEN,
        description=(
            "The order the ladder's steps are tried in: AsWritten, or Estimated: soonest "
            "expected first by the p50 wait the operator's history gives each step's kind "
            "of capacity (steps with no estimate after those with one, as written; a step "
            "that waits forever stays last). Fixed once, before the first step, in "
            "status.ladderOrder. Needs fallback steps; not with mode Calendar (its block "
            "is booked ahead, so it is always the first step)."
        ),
    )

    @property
    def steps(self) -> list[ProvisioningSpec]:
        """Every step of the ladder as a provisioning of its own (no fallback): this one
        first, then each fallback step with the first step's run and default wait."""
        first = self.model_copy(
            update={"fallback": None, "fallback_order": FallbackOrder.AS_WRITTEN}
        )
        return [first] + [
            self.model_copy(
                update={
                    "mode": step.mode,
                    "zones": step.zones,
                    "reservation": step.reservation,
                    "calendar": None,
                    "max_wait_duration": step.max_wait_duration or self.max_wait_duration,
                    "fallback": None,
                    "fallback_order": FallbackOrder.AS_WRITTEN,
                }
            )
            for step in self.fallback or ()
        ]
