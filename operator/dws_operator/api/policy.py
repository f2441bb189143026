"""TrainingPolicy: a platform team's limits on the TrainingRequests of one namespace.

A TrainingRequest spends the cloud budget of the operator's Google account: whoever may
create one may ask for any accelerator, any mode and any reservation that account can
use. A TrainingPolicy, created in a tenant's namespace by whoever administers it (the
tenant needs no right to it), bounds that: which accelerators, modes and reservations,
and how many chips and nodes per request and in flight at once. Every policy of the
namespace applies; a namespace without one is not limited. The API server refuses a
request over a per-request limit at admission (the ValidatingAdmissionPolicy generated
in `dws_operator.admission`), and the operator checks every limit again
before anything is asked for, so a request admitted before the policy existed, or on a
cluster without the admission policy, still fails `PolicyViolation`.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, StringConstraints

from dws_operator.api.base import GROUP, VERSION, ApiModel
from dws_operator.catalog import GpuType, ProvisioningMode, TpuVersion

POLICY_KIND = "TrainingPolicy"
POLICY_PLURAL = "trainingpolicies"
POLICY_SINGULAR = "trainingpolicy"
POLICY_API_VERSION = f"{GROUP}/{VERSION}"

#: The accelerators a policy may name: TPU generations as `spec.accelerator.tpu.version`
#: writes them and GPU models as `spec.accelerator.gpu.type` does.
ACCELERATOR_NAMES: tuple[str, ...] = (
    *(v.value for v in TpuVersion),
    *(g.value for g in GpuType),
)
_PROJECT = r"[a-z][-a-z0-9]{4,28}[a-z0-9]"
_NAME = r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?"
#: A reservation a policy allows: one of the cluster's project by name, a shared one as
#: projects/PROJECT/reservations/NAME, or every reservation of PROJECT as
#: projects/PROJECT/reservations/*.
ALLOWED_RESERVATION_PATTERN = rf"^({_NAME}|projects/{_PROJECT}/reservations/({_NAME}|\*))$"

AllowedReservation = Annotated[
    str, StringConstraints(pattern=ALLOWED_RESERVATION_PATTERN, max_length=200)
]


def _enum_items(values: tuple[str, ...]) -> dict[str, Any]:
    return {"items": {"type": "string", "enum": list(values)}}


class TrainingPolicySpec(ApiModel):
    """Limits on the TrainingRequests of the policy's namespace. A field left out does
    not limit; an empty list allows nothing."""

    accelerators: list[str] | None = Field(
        None,
        max_length=len(ACCELERATOR_NAMES),
        json_schema_extra=_enum_items(ACCELERATOR_NAMES),
        description=(
            "Accelerators requests may use: TPU generations (v5p, v6e, tpu7x...) and GPU "
            "models (nvidia-h100-80gb...), as spec.accelerator writes them."
        ),
    )
    modes: list[ProvisioningMode] | None = Field(
        None,
        max_length=len(ProvisioningMode),
        description=(
            "Provisioning modes every step of a request's capacity ladder may use "
            "(FlexStart, QueuedProvisioning, Spot, OnDemand, Reservation, Calendar)."
        ),
    )
    reservations: list[AllowedReservation] | None = Field(
        None,
        max_length=64,
        description=(
            "Reservations a Reservation step may consume: NAME (the cluster's project, "
            "written as NAME in the request), projects/PROJECT/reservations/NAME, or "
            "projects/PROJECT/reservations/* for every reservation of PROJECT."
        ),
    )
    max_chips_per_request: int | None = Field(
        None, ge=0, description="Most chips (TPU chips or GPUs, every slice) of one request."
    )
    max_nodes_per_request: int | None = Field(
        None, ge=0, description="Most nodes (VMs, every slice) of one request."
    )
    max_chips_in_flight: int | None = Field(
        None,
        ge=0,
        description=(
            "Most chips the namespace's requests hold or ask for at once: a request that "
            "would go over waits (PolicyLimit) until others end; one larger than this "
            "alone fails."
        ),
    )
    max_nodes_in_flight: int | None = Field(
        None, ge=0, description="Most nodes the namespace's requests hold or ask for at once."
    )


class TrainingPolicy(ApiModel):
    """One TrainingPolicy object as the operator reads it."""

    name: str
    namespace: str
    spec: TrainingPolicySpec
