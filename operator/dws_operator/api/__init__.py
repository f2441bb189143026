"""The TrainingRequest API (dws-operator.dev/v1alpha1): pydantic models, the source of the CRD."""

from dws_operator.api.base import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
    ApiModel,
)
from dws_operator.api.spec import (
    AcceleratorSpec,
    CleanupPolicy,
    GpuSpec,
    NodePoolPolicy,
    ProvisioningSpec,
    TpuSpec,
    TrainingRequestSpec,
)
from dws_operator.api.status import (
    TERMINAL_PHASES,
    Condition,
    NodePoolStatus,
    ObjectReference,
    Phase,
    PlanSummary,
    SliceStatus,
    TrainingRequestStatus,
)
from dws_operator.api.template import ContainerTemplate, PodSpecTemplate, PodTemplate

__all__ = [
    "API_VERSION",
    "GROUP",
    "KIND",
    "PLURAL",
    "SHORT_NAMES",
    "SINGULAR",
    "TERMINAL_PHASES",
    "VERSION",
    "AcceleratorSpec",
    "ApiModel",
    "CleanupPolicy",
    "Condition",
    "ContainerTemplate",
    "GpuSpec",
    "NodePoolPolicy",
    "NodePoolStatus",
    "ObjectReference",
    "Phase",
    "PlanSummary",
    "PodSpecTemplate",
    "PodTemplate",
    "ProvisioningSpec",
    "SliceStatus",
    "TpuSpec",
    "TrainingRequestSpec",
    "TrainingRequestStatus",
]
