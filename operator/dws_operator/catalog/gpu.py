"""GPU accelerators and the machine types that carry them, as data."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

GPU_RESOURCE = "nvidia.com/gpu"
GPU_ACCELERATOR_LABEL_KEY = "cloud.google.com/gke-accelerator"
GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
#: GKE labels a GPU node with the driver version it installed (`default` or `latest`).
GPU_DRIVER_LABEL_KEY = "cloud.google.com/gke-gpu-driver-version"


class GpuType(StrEnum):
    """The `cloud.google.com/gke-accelerator` node label value of each GPU."""

    L4 = "nvidia-l4"
    A100_40GB = "nvidia-tesla-a100"
    A100_80GB = "nvidia-a100-80gb"
    H100_80GB = "nvidia-h100-80gb"
    H100_MEGA_80GB = "nvidia-h100-mega-80gb"
    H200_141GB = "nvidia-h200-141gb"
    B200 = "nvidia-b200"
    GB200 = "nvidia-gb200"


class GpuDriver(StrEnum):
    """Which NVIDIA driver GKE installs on the pool's nodes."""

    DEFAULT = "Default"
    LATEST = "Latest"
    DISABLED = "Disabled"


#: `AcceleratorConfig.gpu_driver_installation_config.gpu_driver_version` for each choice.
#: The API's unset value installs no driver at all (gcloud sends `default` for it on GKE
#: 1.30.1-gke.1156000 and later; a raw API call does not), so the operator always sends one.
GPU_DRIVER_VERSIONS: dict[GpuDriver, str] = {
    GpuDriver.DEFAULT: "DEFAULT",
    GpuDriver.LATEST: "LATEST",
    GpuDriver.DISABLED: "INSTALLATION_DISABLED",
}


@dataclass(frozen=True)
class GpuMachineType:
    name: str
    gpus: int


@dataclass(frozen=True)
class GpuAccelerator:
    type: GpuType
    machine_types: tuple[GpuMachineType, ...]
    #: Used when the user names neither a machine type nor a GPU count: the
    #: full 8-GPU host where one exists, the shape multi-node training uses.
    default_machine_type: str
    #: Flex-start VMs (and so both DWS modes, flex-start and flex-start with queued
    #: provisioning) serve every accelerator-optimized machine type except A4X (GB200)
    #: and G4 (Compute Engine's flex-start page; Vertex AI's DWS serves a shorter list:
    #: L4, A100, H100, H200 and B200).
    flex_start: bool

    def machine_type(self, name: str) -> GpuMachineType | None:
        return next((m for m in self.machine_types if m.name == name), None)

    @property
    def machine_type_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.machine_types)

    @property
    def gpu_counts(self) -> tuple[int, ...]:
        return tuple(sorted({m.gpus for m in self.machine_types}))

    def machine_type_for_count(self, gpus: int) -> str | None:
        """The first (smallest) machine type with exactly `gpus` GPUs per VM."""
        return next((m.name for m in self.machine_types if m.gpus == gpus), None)


def _family(prefix: str, gpus: dict[str, int]) -> tuple[GpuMachineType, ...]:
    return tuple(GpuMachineType(f"{prefix}-{suffix}", n) for suffix, n in gpus.items())


GPU_ACCELERATORS: dict[GpuType, GpuAccelerator] = {
    a.type: a
    for a in (
        GpuAccelerator(
            type=GpuType.L4,
            machine_types=_family(
                "g2-standard",
                {"4": 1, "8": 1, "12": 1, "16": 1, "32": 1, "24": 2, "48": 4, "96": 8},
            ),
            default_machine_type="g2-standard-96",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.A100_40GB,
            machine_types=(
                *_family("a2-highgpu", {"1g": 1, "2g": 2, "4g": 4, "8g": 8}),
                GpuMachineType("a2-megagpu-16g", 16),
            ),
            default_machine_type="a2-highgpu-8g",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.A100_80GB,
            machine_types=_family("a2-ultragpu", {"1g": 1, "2g": 2, "4g": 4, "8g": 8}),
            default_machine_type="a2-ultragpu-8g",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.H100_80GB,
            machine_types=_family("a3-highgpu", {"1g": 1, "2g": 2, "4g": 4, "8g": 8}),
            default_machine_type="a3-highgpu-8g",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.H100_MEGA_80GB,
            machine_types=(GpuMachineType("a3-megagpu-8g", 8),),
            default_machine_type="a3-megagpu-8g",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.H200_141GB,
            machine_types=(GpuMachineType("a3-ultragpu-8g", 8),),
            default_machine_type="a3-ultragpu-8g",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.B200,
            machine_types=(GpuMachineType("a4-highgpu-8g", 8),),
            default_machine_type="a4-highgpu-8g",
            flex_start=True,
        ),
        GpuAccelerator(
            type=GpuType.GB200,
            machine_types=(GpuMachineType("a4x-highgpu-4g", 4),),
            default_machine_type="a4x-highgpu-4g",
            flex_start=False,
        ),
    )
}
