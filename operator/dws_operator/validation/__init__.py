"""GKE's rules for a TrainingRequest, checked against the catalog.

The same rules are compiled to CEL for the CRD (`dws_operator.crd.cel`) so the API
server rejects bad objects at admission; this package is what the operator and the
`plan` command run, and what the CEL rules are tested against. Each group of rules is a
module of its own; what the rest of the operator uses is exported here.
"""

from dws_operator.validation.accelerator import (
    FLEX_START_MODES,
    FLEX_START_UNSUPPORTED_GPUS,
    FLEX_START_UNSUPPORTED_TPUS,
    gpu_errors,
    mode_errors,
    slice_errors,
    tpu_errors,
)
from dws_operator.validation.calendar import calendar_errors
from dws_operator.validation.ladder import (
    ESTIMATED_NEEDS_FALLBACK,
    ESTIMATED_NOT_CALENDAR,
    ladder_errors,
)
from dws_operator.validation.long_run import (
    PLANNED_SEGMENTS,
    SEGMENT_LEAD_SECONDS,
    SEGMENTS_NOT_CALENDAR,
    SEGMENTS_NOT_EXISTING,
    SPARE_SEGMENTS,
    most_segments,
    run_errors,
    segmented,
)
from dws_operator.validation.node_pool import node_pool_errors
from dws_operator.validation.paths import (
    FALLBACK_PATH,
    GPU_PATH,
    NODE_POOL_PATH,
    PROVISIONING_PATH,
    RUN_PATH,
    TPU_PATH,
)
from dws_operator.validation.provisioning import (
    TPU_ONE_ZONE,
    provisioning_errors,
    tpu_zone_errors,
)
from dws_operator.validation.spec import spec_errors

__all__ = [
    "ESTIMATED_NEEDS_FALLBACK",
    "ESTIMATED_NOT_CALENDAR",
    "FALLBACK_PATH",
    "FLEX_START_MODES",
    "FLEX_START_UNSUPPORTED_GPUS",
    "FLEX_START_UNSUPPORTED_TPUS",
    "GPU_PATH",
    "NODE_POOL_PATH",
    "PLANNED_SEGMENTS",
    "PROVISIONING_PATH",
    "RUN_PATH",
    "SEGMENTS_NOT_CALENDAR",
    "SEGMENTS_NOT_EXISTING",
    "SEGMENT_LEAD_SECONDS",
    "SPARE_SEGMENTS",
    "TPU_ONE_ZONE",
    "TPU_PATH",
    "calendar_errors",
    "gpu_errors",
    "ladder_errors",
    "mode_errors",
    "most_segments",
    "node_pool_errors",
    "provisioning_errors",
    "run_errors",
    "segmented",
    "slice_errors",
    "spec_errors",
    "tpu_errors",
    "tpu_zone_errors",
]
