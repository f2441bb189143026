"""GKE's rules for a TrainingRequest, checked against the catalog.

The same rules are compiled to CEL for the CRD (`dws_operator.crd.cel`) so the API
server rejects bad objects at admission; this module is what the operator and the
`plan` command run, and what the CEL rules are tested against.
"""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import CleanupPolicy, GpuSpec, TpuSpec, TrainingRequestSpec
from dws_operator.catalog import (
    GPU_ACCELERATORS,
    MAX_RUN_DURATION_SECONDS,
    TPU_GENERATIONS,
    ProvisioningMode,
    TpuVersion,
    topology_chips,
)
from dws_operator.durations import parse_duration
from dws_operator.errors import SpecError

TPU_PATH = "spec.accelerator.tpu"
GPU_PATH = "spec.accelerator.gpu"
PROVISIONING_PATH = "spec.provisioning"
NODE_POOL_PATH = "spec.nodePool"

#: Generations GKE does not serve with flex-start (facts sheet: TPU v3 and v4).
FLEX_START_UNSUPPORTED_TPUS = (TpuVersion.V4,)
#: Modes that cannot run TPUs. GKE: "Flex start node pools don't support TPUs with queued
#: provisioning".
TPU_UNSUPPORTED_MODES = (ProvisioningMode.QUEUED_PROVISIONING,)


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


def mode_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    mode = spec.provisioning.mode
    field = f"{PROVISIONING_PATH}.mode"
    tpu, gpu = spec.accelerator.tpu, spec.accelerator.gpu
    allowed = [m.value for m in ProvisioningMode]
    if tpu is not None and mode in TPU_UNSUPPORTED_MODES:
        modes = [m for m in allowed if m not in TPU_UNSUPPORTED_MODES]
        return [SpecError(field, f"{mode} is not available for TPUs", modes)]
    if (
        tpu is not None
        and mode == ProvisioningMode.FLEX_START
        and (tpu.version in FLEX_START_UNSUPPORTED_TPUS)
    ):
        modes = [
            m for m in allowed if m not in (*TPU_UNSUPPORTED_MODES, ProvisioningMode.FLEX_START)
        ]
        return [SpecError(field, f"FlexStart is not available for TPU {tpu.version}", modes)]
    if (
        gpu is not None
        and mode == ProvisioningMode.FLEX_START
        and (not GPU_ACCELERATORS[gpu.type].flex_start)
    ):
        modes = [m for m in allowed if m != ProvisioningMode.FLEX_START]
        return [SpecError(field, f"FlexStart is not available for {gpu.type}", modes)]
    return []


def provisioning_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    provisioning = spec.provisioning
    found: list[SpecError] = []
    is_reservation = provisioning.mode == ProvisioningMode.RESERVATION
    if is_reservation and provisioning.reservation is None:
        found.append(
            SpecError(f"{PROVISIONING_PATH}.reservation", "required when mode is Reservation")
        )
    if not is_reservation and provisioning.reservation is not None:
        found.append(
            SpecError(
                f"{PROVISIONING_PATH}.reservation",
                f"only allowed when mode is Reservation, not {provisioning.mode}",
            )
        )
    run = parse_duration(provisioning.max_run_duration)
    if not timedelta(0) < run <= timedelta(seconds=MAX_RUN_DURATION_SECONDS):
        found.append(
            SpecError(
                f"{PROVISIONING_PATH}.maxRunDuration",
                f"{provisioning.max_run_duration} is out of range; must be more than 0s and "
                "at most 168h (7 days)",
            )
        )
    return found


def node_pool_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    pool = spec.node_pool
    found: list[SpecError] = []
    if pool.existing and pool.name is None:
        found.append(SpecError(f"{NODE_POOL_PATH}.name", "required when existing is true"))
    if pool.existing and pool.cleanup == CleanupPolicy.DELETE:
        found.append(
            SpecError(
                f"{NODE_POOL_PATH}.cleanup",
                "Delete is not allowed for an existing pool: the operator never deletes a pool "
                "it did not create",
                (CleanupPolicy.SCALE_TO_ZERO.value, CleanupPolicy.KEEP.value),
            )
        )
    return found


def spec_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """Every rule the spec breaks, in field order; empty when GKE would accept it."""
    found: list[SpecError] = []
    if spec.accelerator.tpu is not None:
        found += tpu_errors(spec.accelerator.tpu)
    if spec.accelerator.gpu is not None:
        found += gpu_errors(spec.accelerator.gpu)
    found += mode_errors(spec)
    found += provisioning_errors(spec)
    found += node_pool_errors(spec)
    return found
