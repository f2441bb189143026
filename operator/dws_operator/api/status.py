"""TrainingRequest status: where the run is, what was planned and what exists in GKE."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import Field

from dws_operator.api.accelerator import MAX_SLICES
from dws_operator.api.base import ApiModel
from dws_operator.api.provisioning import MAX_FALLBACK_STEPS
from dws_operator.api.spec import MAX_SEGMENTS


class Phase(StrEnum):
    PENDING = "Pending"
    PROVISIONING = "Provisioning"
    WAITING_FOR_CAPACITY = "WaitingForCapacity"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    DELETING = "Deleting"


#: The phases a request ends in: its work is over (strings compare equal to them).
TERMINAL_PHASES: frozenset[Phase] = frozenset({Phase.SUCCEEDED, Phase.FAILED})


class Condition(ApiModel):
    """A Kubernetes condition (metav1.Condition)."""

    type: str = Field(max_length=316, description="Condition type, e.g. NodePoolReady.")
    status: Literal["True", "False", "Unknown"] = Field(description="True, False or Unknown.")
    reason: str = Field(
        pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$",
        max_length=1024,
        description="CamelCase reason for the last transition.",
    )
    message: str = Field("", max_length=32768, description="Human-readable details.")
    last_transition_time: datetime = Field(description="When status last changed.")
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation this condition was set for."
    )


class PlanSummary(ApiModel):
    """The resolved slice: what the operator asks GKE for."""

    accelerator: str = Field(description="TPU generation (tpu-v6e) or GPU model.")
    accelerator_label: str = Field(description="Value of the node's accelerator label.")
    shape: str = Field(description="TPU topology, or GPUs in all for GPU requests.")
    machine_type: str = Field(description="Machine type of every node.")
    nodes: int = Field(description="Nodes (VMs) in one slice.")
    slices: int = Field(1, description="Identical slices, each on its own node pool.")
    total_nodes: int | None = Field(None, description="nodes x slices.")
    chips_per_node: int = Field(description="TPU chips or GPUs per node.")
    total_chips: int = Field(description="Chips of one slice: nodes x chipsPerNode.")
    single_host: bool = Field(description="True when the slice is one VM.")
    resource_name: str = Field(description="Extended resource each pod requests.")
    node_selector: dict[str, str] = Field(description="Node labels the pods select.")


class NodePoolStatus(ApiModel):
    name: str = Field(description="GKE node pool name.")
    managed: bool = Field(
        description="True when the operator created the pool and so scales or deletes it."
    )
    location: str | None = Field(None, description="Cluster location of the pool.")
    reused: bool | None = Field(
        None,
        description="The pool was another request's, idle at zero nodes, and was taken "
        "over instead of a new one being created.",
    )


class SliceStatus(ApiModel):
    """One slice: its node pool and how many Nodes that pool has now."""

    index: int = Field(ge=0, description="Index of the slice's node pool (-s<index>).")
    node_pool: str = Field(description="GKE node pool of the slice.")
    nodes: int = Field(ge=0, description="Kubernetes Nodes of the pool when last observed.")


class AttemptOutcome(StrEnum):
    """How a step of the capacity ladder ended."""

    #: Every node was ready: the workload ran on this step.
    PROVISIONED = "Provisioned"
    #: Its maxWaitDuration ran out before the capacity came.
    TIMED_OUT = "TimedOut"
    #: GKE said the zone has no capacity for it.
    STOCKOUT = "Stockout"
    #: GKE said the project's quota does not cover it.
    QUOTA_EXCEEDED = "QuotaExceeded"
    #: Its nodes were taken back more often than maxRestarts allows on one step.
    PREEMPTED = "Preempted"
    #: It stopped making progress (a ProvisioningRequest stuck, a workload Kueue gave up
    #: on) and asking again did not help: its recoveries were used up.
    STUCK = "Stuck"
    #: The request failed on it for another reason (the request's message says which).
    FAILED = "Failed"
    #: The request was deleted during it.
    CANCELLED = "Cancelled"


class Attempt(ApiModel):
    """One step of the capacity ladder as it went: where the time went."""

    step: int = Field(
        ge=1,
        description="1 is spec.provisioning; 2 its first fallback step (in the order tried: "
        "status.ladderOrder, when set, says which step as written).",
    )
    mode: str = Field(description="Provisioning mode of the step.")
    zones: list[str] | None = Field(None, description="Zones of the step's node pool.")
    node_pool: str | None = Field(None, description="The step's node pool (the first slice's).")
    started_at: datetime = Field(description="When the step began asking for capacity.")
    ended_at: datetime | None = Field(None, description="When the step ended.")
    outcome: AttemptOutcome | None = Field(
        None, description="Provisioned, TimedOut, Stockout, QuotaExceeded, Preempted..."
    )
    restarts: int = Field(0, ge=0, description="Restarts after preemption on this step.")
    recoveries: int = Field(
        0, ge=0, description="Requests for capacity made again on this step after they stuck."
    )
    message: str | None = Field(None, max_length=4096, description="Why the step ended.")


class SegmentOutcome(StrEnum):
    """How one segment of a long run (`spec.run`) ended."""

    #: Stopped before its capacity ended (planned); the next segment goes on.
    ROLLED_OVER = "RolledOver"
    #: Its capacity went under it (Spot preemption, a window cut short, node loss): the
    #: same segment restarts from the checkpoint (an unplanned restart).
    INTERRUPTED = "Interrupted"
    #: The workload finished in it.
    SUCCEEDED = "Succeeded"
    #: The request failed in it (the request's message says why).
    FAILED = "Failed"


class Segment(ApiModel):
    """One run of the workload on one window of capacity, in a long run (`spec.run`)."""

    segment: int = Field(
        ge=1, description="The segment (DWS_SEGMENT): 1 first, one more per rollover."
    )
    attempt: int = Field(ge=0, description="The workload attempt that ran it (DWS_ATTEMPT).")
    node_pool: str = Field(description="Its node pool (the first slice's).")
    requested_at: datetime = Field(description="When its capacity was asked for.")
    started_at: datetime | None = Field(None, description="When its workload was running.")
    ends_at: datetime | None = Field(
        None,
        description="When its capacity ends: its VMs' end (GKE's node annotation "
        "node.gke.io/machine-termination-datetime), else its start plus maxRunDuration.",
    )
    stopped_at: datetime | None = Field(None, description="When it ended.")
    outcome: SegmentOutcome | None = Field(
        None, description="RolledOver, Interrupted, Succeeded or Failed; unset while it runs."
    )


class BookingState(StrEnum):
    """Where a Calendar-mode booking is."""

    #: Worked out, waiting for spec.approveBooking before it is submitted.
    AWAITING_APPROVAL = "AwaitingApproval"
    #: Sent to Compute (once per request: its requestId is derived from the uid).
    SUBMITTED = "Submitted"
    #: Compute says Google is reviewing it (PENDING_APPROVAL).
    UNDER_REVIEW = "UnderReview"
    #: Approved: the block is booked and will be delivered at its start.
    APPROVED = "Approved"
    #: The reservation is there: the block is on.
    DELIVERED = "Delivered"
    #: The block's end time has passed.
    ENDED = "Ended"
    #: Google declined it, or Compute failed or cancelled it.
    DECLINED = "Declined"
    #: The request was deleted before Google's answer and the booking was cancelled.
    CANCELLED = "Cancelled"


class BookingStatus(ApiModel):
    """The Calendar-mode block the request books (a Compute future reservation)."""

    name: str = Field(description="The future reservation (and the reservation it delivers).")
    zone: str = Field(description="Its zone.")
    start_time: datetime = Field(description="When the block starts.")
    end_time: datetime = Field(description="When the block ends and Compute takes the VMs back.")
    count: int = Field(ge=1, description="What it reserves: VMs (GPU) or chips (TPU).")
    unit: Literal["VMs", "chips"] = Field(description="VMs or chips.")
    machine_type: str = Field(description="Machine type of the reserved VMs.")
    state: BookingState = Field(description="AwaitingApproval, Submitted, UnderReview...")
    procurement_status: str | None = Field(
        None, description="Compute's procurementStatus when last read."
    )
    submitted_at: datetime | None = Field(None, description="When it was submitted.")
    last_submitted_at: datetime | None = Field(
        None, description="When its insert was last sent (again while Compute showed nothing)."
    )
    approved_at: datetime | None = Field(None, description="When it was seen approved.")
    recommendation_id: str | None = Field(
        None,
        description=(
            "With calendar.earliest and latest: the Compute calendar-mode advice the window "
            "came from (its recommendationId)."
        ),
    )
    approval_generation: int | None = Field(
        None,
        description=(
            "This window replaced one that started before it was booked: "
            "spec.approveBooking counts only from a later generation of the request (set it "
            "to false and back to true), so a window is never booked on an approval given "
            "for another."
        ),
    )


class EstimateStatus(ApiModel):
    """How long the capacity asked for took for earlier requests of its kind, from the
    operator's history (asks that ended without capacity counted too)."""

    key: str = Field(description="The kind of capacity: accelerator.shape.slices.mode.zone.")
    observations: int = Field(ge=0, description="Asks the estimate rests on.")
    censored: int = Field(ge=0, description="Of those, asks that ended without capacity.")
    p50_seconds: float | None = Field(
        None, description="Half the asks had their capacity within this; unset: unknown."
    )
    p90_seconds: float | None = Field(
        None, description="Nine in ten had it within this; unset: unknown."
    )
    expected_by: datetime | None = Field(
        None, description="When this ask reaches the p50, counted from when it began."
    )
    message: str = Field(description="The estimate in words, or 'no data' before any.")


class ObjectReference(ApiModel):
    name: str = Field(description="Object name in the TrainingRequest's namespace.")


class TrainingRequestStatus(ApiModel):
    phase: Phase = Field(Phase.PENDING, description="Where the run is in its lifecycle.")
    conditions: list[Condition] = Field(
        default_factory=list,
        description="Latest observations (NodePoolReady, WorkloadCreated, CapacityProvisioned...).",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    plan: PlanSummary | None = Field(None, description="The resolved slice.")
    node_pool: NodePoolStatus | None = Field(
        None, description="The GKE node pool used (the first slice's, for several slices)."
    )
    slices: list[SliceStatus] | None = Field(
        None,
        description="Every slice's node pool and its node count.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    job: ObjectReference | None = Field(
        None, description="The batch/v1 Job (a JobSet for several slices) of the current attempt."
    )
    service: ObjectReference | None = Field(
        None, description="The headless Service giving multi-host pods stable hostnames."
    )
    booking: BookingStatus | None = Field(
        None, description="The Calendar-mode block booked for the request (mode Calendar)."
    )
    estimate: EstimateStatus | None = Field(
        None,
        description="While waiting for capacity: how long it took earlier requests of the "
        "same kind (the last estimate given stays once the capacity came).",
    )
    phase_since: datetime | None = Field(None, description="When the request entered its phase.")
    phase_seconds: dict[str, float] | None = Field(
        None,
        description=(
            "Where the time went: seconds spent in each phase the request has left, added up "
            "over every visit (the current phase's so far is now - phaseSince)."
        ),
    )
    lost_seconds: float | None = Field(
        None,
        ge=0,
        description=(
            "Time lost: seconds of waiting for capacity that were given up, each ask's from "
            "when it was made (or last made again) to when it was given up: a ladder step that "
            "ended without capacity, a recovery that asked again, a wait that ran out."
        ),
    )
    requested_at: datetime | None = Field(None, description="When capacity was requested.")
    provisioned_at: datetime | None = Field(None, description="When all nodes were ready.")
    started_at: datetime | None = Field(None, description="When the workload started running.")
    finished_at: datetime | None = Field(None, description="When the workload ended.")
    scaled_down_at: datetime | None = Field(None, description="When the pool went back to zero.")
    restarts: int = Field(0, ge=0, description="Restarts after preemption or node loss so far.")
    recoveries: int = Field(
        0,
        ge=0,
        description="Requests for capacity made again because the last one stuck (a "
        "ProvisioningRequest Accepted and not provisioned for too long): a new workload "
        "attempt each, not counted as restarts.",
    )
    recovered_at: datetime | None = Field(
        None, description="When the last recovery asked for the capacity again."
    )
    pools_to_remake: list[str] | None = Field(
        None,
        max_length=MAX_SLICES,
        description="Pools a recovery deletes to make them again: each is deleted until it "
        "is seen gone, and only then made again.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    step: int | None = Field(
        None,
        ge=1,
        description="The capacity ladder's step in use (1: spec.provisioning itself, or the "
        "first of ladderOrder); set for requests with spec.provisioning.fallback.",
    )
    ladder_order: list[int] | None = Field(
        None,
        max_length=MAX_FALLBACK_STEPS + 1,
        description="With spec.provisioning.fallbackOrder Estimated: the ladder's steps in "
        "the order they are tried, each by its place as written (1: spec.provisioning, "
        "2: its first fallback step, ...); set once, before the first step. step and "
        "attempts[].step count in this order.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    attempts: list[Attempt] | None = Field(
        None,
        description="Every step of the capacity ladder tried so far, in order.",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    segment: int | None = Field(
        None,
        ge=1,
        description="A long run's current segment (spec.run); unset for one window.",
    )
    segments: list[Segment] | None = Field(
        None,
        max_length=4 * MAX_SEGMENTS,
        description="A long run's segments so far, in order: each window of capacity "
        "its workload ran on (the latest ones, when there are very many).",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    trained_seconds: float | None = Field(
        None,
        ge=0,
        description="A long run's workload running time over every segment ended so far.",
    )
    rollover_seconds: float | None = Field(
        None,
        ge=0,
        description="A long run's time between segments: from each segment's stop to the "
        "next one's workload running.",
    )
    observed_generation: int | None = Field(
        None, ge=0, description="The .metadata.generation last reconciled."
    )
    message: str | None = Field(None, max_length=32768, description="Human-readable summary.")
