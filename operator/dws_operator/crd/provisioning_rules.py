"""CEL rules on `spec.provisioning` (reservation, calendar block, window, fallback
order), and on `spec` for the first step: its mode and zones for the accelerator, and
the pools of several slices."""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api.provisioning import FallbackOrder
from dws_operator.catalog import MAX_RUN_DURATION_SECONDS, ProvisioningMode
from dws_operator.crd.rule import Rule, duration_bounds, lit, lits
from dws_operator.durations import format_duration
from dws_operator.naming import MAX_SLICED_POOL_NAME
from dws_operator.validation import (
    ESTIMATED_NEEDS_FALLBACK,
    ESTIMATED_NOT_CALENDAR,
    FLEX_START_MODES,
    FLEX_START_UNSUPPORTED_GPUS,
    FLEX_START_UNSUPPORTED_TPUS,
    TPU_ONE_ZONE,
)


def provisioning_rules() -> list[Rule]:
    most = format_duration(timedelta(seconds=MAX_RUN_DURATION_SECONDS))
    return [
        Rule(
            f"(self.mode == {lit(ProvisioningMode.RESERVATION)}) == has(self.reservation)",
            "reservation is required when mode is Reservation and not allowed otherwise",
            ".reservation",
            needs=("mode",),
        ),
        Rule(
            f"(self.mode == {lit(ProvisioningMode.CALENDAR)}) == has(self.calendar)",
            "calendar is required when mode is Calendar and not allowed otherwise",
            ".calendar",
            needs=("mode",),
        ),
        Rule(
            duration_bounds("maxRunDuration", "0s", most),
            f"maxRunDuration must be more than 0s and at most {most} (7 days)",
            ".maxRunDuration",
        ),
        Rule(
            "self == oldSelf",
            "spec.provisioning is immutable; create a new TrainingRequest instead",
        ),
        Rule(
            f"!has(self.fallbackOrder) || self.fallbackOrder != {lit(FallbackOrder.ESTIMATED)} "
            "|| (has(self.fallback) && size(self.fallback) > 0)",
            f"fallbackOrder: {ESTIMATED_NEEDS_FALLBACK}",
            ".fallbackOrder",
        ),
        Rule(
            f"!has(self.fallbackOrder) || self.fallbackOrder != {lit(FallbackOrder.ESTIMATED)} "
            f"|| self.mode != {lit(ProvisioningMode.CALENDAR)}",
            f"fallbackOrder: {ESTIMATED_NOT_CALENDAR}",
            ".fallbackOrder",
            needs=("mode",),
        ),
    ]


def spec_rules() -> list[Rule]:
    flex_modes = [m.value for m in FLEX_START_MODES]
    no_flex_tpus = [v.value for v in FLEX_START_UNSUPPORTED_TPUS]
    no_flex_gpus = [t.value for t in FLEX_START_UNSUPPORTED_GPUS]
    others = ", ".join(m.value for m in ProvisioningMode if m not in FLEX_START_MODES)
    in_flex_mode = f"self.provisioning.mode in {lits(flex_modes)}"
    modes = " and ".join(flex_modes)
    queued = ProvisioningMode.QUEUED_PROVISIONING
    not_queued = ", ".join(m.value for m in ProvisioningMode if m != queued)
    several = (
        "!has(self.accelerator.tpu) || !has(self.accelerator.tpu.slices) || "
        "self.accelerator.tpu.slices == 1"
    )
    return [
        Rule(
            f"!has(self.accelerator.tpu) || !({in_flex_mode}) || "
            f"!(self.accelerator.tpu.version in {lits(no_flex_tpus)})",
            f"modes {modes} are not available for TPU {', '.join(no_flex_tpus)}: flex-start "
            f"VMs do not serve it; use {others}",
            ".provisioning.mode",
        ),
        Rule(
            f"!has(self.accelerator.gpu) || !({in_flex_mode}) || "
            f"!(self.accelerator.gpu.type in {lits(no_flex_gpus)})",
            f"modes {modes} are not available for {', '.join(no_flex_gpus)}: flex-start VMs "
            f"do not serve it; use {others}",
            ".provisioning.mode",
        ),
        Rule(
            "!has(self.accelerator.tpu) || !has(self.accelerator.tpu.slices) || "
            f"self.accelerator.tpu.slices == 1 || self.provisioning.mode != "
            f"{lit(ProvisioningMode.QUEUED_PROVISIONING)}",
            "slices above 1 are not available with QueuedProvisioning: GKE provisions one "
            f"slice per ProvisioningRequest; use {not_queued}",
            ".accelerator.tpu.slices",
        ),
        Rule(
            "!has(self.accelerator.tpu) || !has(self.provisioning.zones) || "
            "size(self.provisioning.zones) <= 1",
            f"provisioning.zones: {TPU_ONE_ZONE}",
            ".provisioning.zones",
        ),
        Rule(
            f"{several} || !has(self.nodePool.existing) || !self.nodePool.existing",
            "nodePool.existing is not available with several slices: each slice gets a node "
            "pool of its own",
            ".nodePool.existing",
        ),
        Rule(
            f"{several} || !has(self.nodePool.name) || "
            f"size(self.nodePool.name) <= {MAX_SLICED_POOL_NAME}",
            f"nodePool.name has at most {MAX_SLICED_POOL_NAME} characters with several slices "
            "(each slice's pool adds -s<index>)",
            ".nodePool.name",
        ),
    ]
