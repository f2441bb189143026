"""TrainingRequest spec: what to run, on which accelerator, provisioned how."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from dws_operator.api.base import DNS_LABEL_PATTERN, NODE_POOL_NAME_PATTERN, ApiModel
from dws_operator.api.template import PodTemplate
from dws_operator.catalog import (
    TOPOLOGY_PATTERN,
    GpuDriver,
    GpuType,
    ProvisioningMode,
    TpuVersion,
)
from dws_operator.durations import DURATION_PATTERN

MACHINE_TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"
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
MAX_GPU_NODES = 1000
#: Slices of one multi-slice request. Each slice is its own node pool, and GKE's
#: autoscaling slows down in clusters with more than 200 node pools: 64 slices (16,384
#: chips of v5p at 4x4x4) keeps one request well inside that.
MAX_SLICES = 64
MAX_RESTARTS = 100
#: A capacity ladder: `spec.provisioning` itself and at most this many fallback steps.
#: Each step is a node pool of its own (and a GKE create and delete): eight steps are
#: every DWS zone of a TPU generation in both flex-start modes, then Spot and OnDemand.
MAX_FALLBACK_STEPS = 7
#: Segments of one long run (`spec.run`): each is a node pool of its own, made and
#: deleted in turn, so this bounds the GKE operations a run costs, not the run itself
#: (90 days in 7-day windows is 13 segments).
MAX_SEGMENTS = 32
#: The longest run: 90 days, as long as a calendar-mode block.
MAX_RUN_HOURS = 2160

#: What a pattern-checked field looks like, for error messages better than a regex.
FORMAT_HINTS = {
    "topology": "sides joined by x without leading zeros, e.g. 4x4 or 2x2x4",
    "machineType": "a GCE machine type such as ct6e-standard-4t or a3-highgpu-8g",
    "maxWaitDuration": "hours, minutes and seconds, e.g. 24h, 90m, 1h30m or 0s",
    "maxRunDuration": "hours, minutes and seconds, e.g. 168h, 90m or 1h30m",
    "reservation": (
        "a reservation name or projects/PROJECT/reservations/NAME, optionally followed by "
        "/reservationBlocks/BLOCK and then /reservationSubBlocks/SUB_BLOCK"
    ),
    "name": "lowercase letters, digits and hyphens, starting with a letter",
    "queueName": "a DNS label: lowercase letters, digits and hyphens",
    "zones": "a zone such as us-east5-a",
    "mode": "FlexStart, QueuedProvisioning, Spot, OnDemand, Reservation or Calendar",
    "duration": "hours, minutes and seconds, e.g. 72h or 2160h",
    "stopBefore": "hours, minutes and seconds, e.g. 10m or 1h",
    "requestAhead": "hours, minutes and seconds, e.g. 30m, 2h or 0s",
}

Zone = Annotated[str, StringConstraints(pattern=ZONE_PATTERN, max_length=63)]


class TpuSpec(ApiModel):
    """A TPU slice: one generation and one topology; the operator works out the VMs."""

    version: TpuVersion = Field(
        description="TPU generation: v4, v5e, v5p, v6e (Trillium) or tpu7x (Ironwood)."
    )
    topology: str = Field(
        pattern=TOPOLOGY_PATTERN,
        max_length=16,
        description=(
            "Chip topology of the slice, e.g. 2x4 or 4x4 (v5e, v6e) and 2x2x1 or 4x4x8 "
            "(v4, v5p, tpu7x). Nodes = chips in the topology / chips per VM."
        ),
    )
    machine_type: str | None = Field(
        None,
        pattern=MACHINE_TYPE_PATTERN,
        max_length=64,
        description=(
            "TPU VM machine type, e.g. ct6e-standard-4t. Default: the 1t type for a single chip, "
            "otherwise the 4t type; 8t types only when named here."
        ),
    )
    slices: int = Field(
        1,
        ge=1,
        le=MAX_SLICES,
        description=(
            "Identical slices joined over the data-center network (Multislice): one node pool "
            "per slice, run as one JobSet. Multi-host slices only; not with QueuedProvisioning."
        ),
    )


class GpuSpec(ApiModel):
    """A set of identical GPU VMs."""

    type: GpuType = Field(
        description=(
            "GPU model as GKE's cloud.google.com/gke-accelerator label, e.g. nvidia-h100-80gb."
        )
    )
    nodes: int = Field(ge=1, le=MAX_GPU_NODES, description="Number of VMs (one pod runs on each).")
    machine_type: str | None = Field(
        None,
        pattern=MACHINE_TYPE_PATTERN,
        max_length=64,
        description=(
            "Machine type carrying the GPUs, e.g. a3-highgpu-8g. Default: the type with "
            "`count` GPUs, or the 8-GPU type of the model."
        ),
    )
    count: int | None = Field(
        None,
        ge=1,
        le=16,
        description="GPUs per VM; must match the machine type when both are given.",
    )
    driver: GpuDriver = Field(
        GpuDriver.DEFAULT,
        description=(
            "NVIDIA driver GKE installs on each node: Default (the version GKE pairs with "
            "the node's GKE version), Latest (the newest version GKE offers for it), or "
            "Disabled (none: you install drivers yourself, e.g. with NVIDIA's GPU Operator; "
            "until then the nodes advertise no nvidia.com/gpu and the pods wait)."
        ),
    )


class AcceleratorSpec(ApiModel):
    """Exactly one of tpu or gpu. Immutable after creation."""

    tpu: TpuSpec | None = Field(None, description="A TPU slice.")
    gpu: GpuSpec | None = Field(None, description="GPU VMs.")

    @model_validator(mode="after")
    def _exactly_one(self) -> AcceleratorSpec:
        if (self.tpu is None) == (self.gpu is None):
            raise ValueError("exactly one of tpu or gpu must be set")
        return self


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


class RunSpec(ApiModel):
    """How long the training runs in all, when that is longer than one capacity window
    (`provisioning.maxRunDuration`: a flex-start VM's life). Immutable after creation."""

    duration: str | None = Field(
        None,
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description=(
            "How long the training needs in all, up to 2160h (90 days). Longer than "
            "provisioning.maxRunDuration, the run goes in segments: before a window's "
            "capacity ends, the operator stops the workload (SIGTERM, stopBefore ahead) "
            "and starts it again, as the next segment, on new capacity asked for "
            "requestAhead earlier; the code resumes from DWS_CHECKPOINT_DIR. The run "
            "fails RunDurationExceeded if the workload has not finished when this much "
            "run time is used. Default: one window (no segments)."
        ),
    )
    stop_before: str = Field(
        "10m",
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description=(
            "How long before a segment's capacity ends its workload is told to stop "
            "(SIGTERM): its pods' terminationGracePeriodSeconds (unless the template "
            "sets one), the time to write a checkpoint. More than 0s, at most 24h."
        ),
    )
    request_ahead: str = Field(
        "30m",
        pattern=DURATION_PATTERN,
        min_length=2,
        max_length=32,
        description=(
            "How long before a segment is stopped the next segment's node pools are "
            "made, so the next segment waits only for its VMs. At most 24h; 0s makes "
            "them at the stop."
        ),
    )


class CleanupPolicy(StrEnum):
    SCALE_TO_ZERO = "ScaleToZero"
    DELETE = "Delete"
    KEEP = "Keep"


class NodePoolPolicy(ApiModel):
    """Which GKE node pool runs the work and what happens to it afterwards."""

    name: str | None = Field(
        None,
        pattern=NODE_POOL_NAME_PATTERN,
        max_length=40,
        description=(
            "Node pool name. Default: derived from the TrainingRequest's name and uid. "
            "Required when existing is true. Immutable."
        ),
    )
    existing: bool = Field(
        False,
        description=(
            "Run on a node pool that already exists (its machine type and accelerator must "
            "match). The operator never creates, resizes or deletes such a pool. Immutable."
        ),
    )
    cleanup: CleanupPolicy = Field(
        CleanupPolicy.SCALE_TO_ZERO,
        description=(
            "What happens to a pool the operator created once the work ends: ScaleToZero "
            "(keep the pool, no nodes), Delete, or Keep (leave nodes running)."
        ),
    )


class TrainingRequestSpec(ApiModel):
    """One training run on GKE accelerators provisioned by the Dynamic Workload Scheduler."""

    accelerator: AcceleratorSpec = Field(description="The TPU slice or GPU VMs. Immutable.")
    provisioning: ProvisioningSpec = Field(description="How capacity is obtained. Immutable.")
    node_pool: NodePoolPolicy = Field(
        default_factory=NodePoolPolicy,
        description="The GKE node pool and its clean-up.",
        # default_factory leaves no default in the JSON schema. The API server checks a
        # default against the CEL rules without applying the defaults nested in it, so
        # the default is spelled out in full.
        json_schema_extra={"default": {"existing": False, "cleanup": "ScaleToZero"}},
    )
    queue_name: str | None = Field(
        None,
        pattern=DNS_LABEL_PATTERN,
        max_length=63,
        description="Kueue LocalQueue for the Job. Default: the operator's configured queue.",
    )
    max_restarts: int | None = Field(
        None,
        ge=0,
        le=MAX_RESTARTS,
        description=(
            "Restarts after preemption or node loss. Default: 6 for Spot (as Vertex AI), "
            "0 otherwise."
        ),
    )
    approve_booking: bool = Field(
        False,
        description=(
            "Approve the Calendar-mode booking the request shows in status.booking: only then "
            "is it submitted to Compute (a submitted booking is reviewed by Google and, once "
            "approved, cannot be cancelled). Setting it back to false does not withdraw a "
            "booking already submitted."
        ),
    )
    checkpoint_dir: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description=(
            "Where the training code keeps its checkpoints (e.g. gs://bucket/run or a mounted "
            "path). Given to the pods as DWS_CHECKPOINT_DIR, with DWS_ATTEMPT, so a restarted "
            "attempt resumes instead of starting over."
        ),
    )
    run: RunSpec | None = Field(
        None,
        description=(
            "A run longer than one capacity window, in segments (see run.duration). Immutable."
        ),
    )
    template: PodTemplate = Field(description="Pod template for the training pods.")

    @property
    def ladder_steps(self) -> int:
        """Steps of the capacity ladder: 1 without fallback."""
        return 1 + len(self.provisioning.fallback or ())

    def at_step(self, index: int) -> TrainingRequestSpec:
        """This spec as its ladder's step `index` (0-based) provisions it: the step's
        mode, zones, reservation and wait, and no fallback."""
        return self.model_copy(update={"provisioning": self.provisioning.steps[index]})
