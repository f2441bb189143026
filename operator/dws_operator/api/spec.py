"""TrainingRequest spec: what to run, on which accelerator (`api.accelerator`),
provisioned how (`api.provisioning`), for how long and on which node pool."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from dws_operator.api.accelerator import AcceleratorSpec
from dws_operator.api.base import DNS_LABEL_PATTERN, NODE_POOL_NAME_PATTERN, ApiModel
from dws_operator.api.provisioning import ProvisioningSpec
from dws_operator.api.template import PodTemplate
from dws_operator.durations import DURATION_PATTERN

MAX_RESTARTS = 100
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
