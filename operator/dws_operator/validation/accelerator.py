"""The accelerator's rules: a TPU topology, machine type and slice count, a GPU machine
type and count, as the catalog has them; and the modes that serve the accelerator."""

from __future__ import annotations

from dws_operator.api import GpuSpec, TpuSpec, TrainingRequestSpec
from dws_operator.catalog import (
    GPU_ACCELERATORS,
    MODE_SETTINGS,
    TPU_GENERATIONS,
    ProvisioningMode,
    default_machine_type,
    topology_chips,
)
from dws_operator.errors import SpecError
from dws_operator.validation.paths import GPU_PATH, PROVISIONING_PATH, TPU_PATH

#: Modes whose VMs are flex-start VMs (the two DWS modes): they serve only the
#: accelerators flex-start serves (the catalog's `flex_start` rows).
FLEX_START_MODES = tuple(m for m, settings in MODE_SETTINGS.items() if settings.flex_start)
#: TPU generations flex-start does not serve (TPU v3 and v4).
FLEX_START_UNSUPPORTED_TPUS = tuple(v for v, g in TPU_GENERATIONS.items() if not g.flex_start)
#: GPUs flex-start does not serve (A4X: GB200).
FLEX_START_UNSUPPORTED_GPUS = tuple(t for t, a in GPU_ACCELERATORS.items() if not a.flex_start)


def tpu_errors(tpu: TpuSpec) -> list[SpecError]:
    generation = TPU_GENERATIONS[tpu.version]
    hosts = generation.machine_types_for(tpu.topology)
    if not hosts:
        return [
            SpecError(
                f"{TPU_PATH}.topology",
                f"topology {tpu.topology} is not valid for TPU {tpu.version}; "
                f"expected {generation.describe_topologies()}",
            )
        ]
    if tpu.machine_type is None:
        return []
    machine = generation.machine_type(tpu.machine_type)
    field = f"{TPU_PATH}.machineType"
    if machine is None:
        return [
            SpecError(
                field,
                f"machine type {tpu.machine_type} does not carry TPU {tpu.version}",
                generation.machine_type_names,
            )
        ]
    chips = topology_chips(tpu.topology)
    if chips % machine.chips:
        return [
            SpecError(
                field,
                f"topology {tpu.topology} has {chips} chips, not a multiple of the "
                f"{machine.chips} chips of {machine.name}",
                hosts,
            )
        ]
    if machine.name not in hosts:
        return [SpecError(field, f"{machine.name} cannot host topology {tpu.topology}", hosts)]
    return []


def slice_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """Multislice: several identical multi-host slices (checked once the slice is valid)."""
    tpu = spec.accelerator.tpu
    if tpu is None or tpu.slices == 1:
        return []
    field = f"{TPU_PATH}.slices"
    generation = TPU_GENERATIONS[tpu.version]
    machine = generation.machine_type(
        tpu.machine_type or default_machine_type(generation, tpu.topology)
    )
    if machine is not None and topology_chips(tpu.topology) == machine.chips:
        return [
            SpecError(
                field,
                f"{tpu.slices} slices need a multi-host slice; topology {tpu.topology} on "
                f"{machine.name} is a single VM",
                ("1",),
            )
        ]
    if spec.provisioning.mode == ProvisioningMode.QUEUED_PROVISIONING:
        return [
            SpecError(
                field,
                f"{tpu.slices} slices are not available with QueuedProvisioning: GKE provisions "
                "one slice per ProvisioningRequest; use FlexStart, Spot, OnDemand or Reservation",
                ("1",),
            )
        ]
    return []


def queued_slices_errors(spec: TrainingRequestSpec, path: str) -> list[SpecError]:
    """A fallback step's QueuedProvisioning for several slices (the first step's is
    `slice_errors`', which names the slices)."""
    tpu = spec.accelerator.tpu
    if tpu is None or tpu.slices == 1:
        return []
    if spec.provisioning.mode != ProvisioningMode.QUEUED_PROVISIONING:
        return []
    return [
        SpecError(
            f"{path}.mode",
            f"QueuedProvisioning is not available for {tpu.slices} slices: GKE provisions one "
            "slice per ProvisioningRequest",
            tuple(m.value for m in ProvisioningMode if m != ProvisioningMode.QUEUED_PROVISIONING),
        )
    ]


def gpu_errors(gpu: GpuSpec) -> list[SpecError]:
    accelerator = GPU_ACCELERATORS[gpu.type]
    if gpu.machine_type is not None:
        machine = accelerator.machine_type(gpu.machine_type)
        if machine is None:
            return [
                SpecError(
                    f"{GPU_PATH}.machineType",
                    f"machine type {gpu.machine_type} does not carry {gpu.type}",
                    accelerator.machine_type_names,
                )
            ]
        if gpu.count is not None and gpu.count != machine.gpus:
            return [
                SpecError(
                    f"{GPU_PATH}.count",
                    f"{machine.name} has {machine.gpus} GPUs per VM, not {gpu.count}",
                    (str(machine.gpus),),
                )
            ]
    elif gpu.count is not None and gpu.count not in accelerator.gpu_counts:
        return [
            SpecError(
                f"{GPU_PATH}.count",
                f"no {gpu.type} machine type has {gpu.count} GPUs per VM",
                tuple(str(n) for n in accelerator.gpu_counts),
            )
        ]
    return []


def mode_errors(spec: TrainingRequestSpec, path: str = PROVISIONING_PATH) -> list[SpecError]:
    mode = spec.provisioning.mode
    if mode not in FLEX_START_MODES:
        return []
    tpu, gpu = spec.accelerator.tpu, spec.accelerator.gpu
    if tpu is not None and tpu.version in FLEX_START_UNSUPPORTED_TPUS:
        accelerator = f"TPU {tpu.version}"
    elif gpu is not None and gpu.type in FLEX_START_UNSUPPORTED_GPUS:
        accelerator = str(gpu.type)
    else:
        return []
    others = [m.value for m in ProvisioningMode if m not in FLEX_START_MODES]
    return [
        SpecError(
            f"{path}.mode",
            f"{mode} is not available for {accelerator}: flex-start VMs do not serve it",
            others,
        )
    ]
