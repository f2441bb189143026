"""TrainingRequest accelerator: a TPU slice (or several) or a set of GPU VMs."""

from __future__ import annotations

from pydantic import Field, model_validator

from dws_operator.api.base import ApiModel
from dws_operator.catalog import TOPOLOGY_PATTERN, GpuDriver, GpuType, TpuVersion

MACHINE_TYPE_PATTERN = r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$"
MAX_GPU_NODES = 1000
#: Slices of one multi-slice request. Each slice is its own node pool, and GKE's
#: autoscaling slows down in clusters with more than 200 node pools: 64 slices (16,384
#: chips of v5p at 4x4x4) keeps one request well inside that.
MAX_SLICES = 64


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
