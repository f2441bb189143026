"""Calendar mode's rules: what Compute books (DWS Calendar) for the accelerator asked
for, and the block's start, length and stop."""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import CalendarBlock, TrainingRequestSpec
from dws_operator.catalog import (
    CALENDAR_ADVICE_TPU_DAYS,
    CALENDAR_MAX_DAYS,
    CALENDAR_MAX_GPU_VMS,
    CALENDAR_MIN_DAYS,
    CALENDAR_TPU_CHIPS,
    TPU_GENERATIONS,
    ProvisioningMode,
    topology_chips,
)
from dws_operator.durations import parse_duration
from dws_operator.errors import SpecError
from dws_operator.validation.paths import PROVISIONING_PATH


def calendar_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """What Compute books in calendar mode (DWS Calendar): one zone, 1 to 90 days, at
    most 80 GPU VMs, TPU chips in the counts and zones it serves; one slice on a pool
    of the request's own; a stop before the end that fits in the block."""
    provisioning, path = spec.provisioning, PROVISIONING_PATH
    block = provisioning.calendar
    if (provisioning.mode == ProvisioningMode.CALENDAR) != (block is not None):
        why = "required when mode is Calendar, not allowed otherwise"
        return [SpecError(f"{path}.calendar", why)]
    if block is None:
        return []
    found = _block_start_errors(block, f"{path}.calendar")
    zones = provisioning.zones or []
    if len(zones) != 1:
        found.append(SpecError(f"{path}.zones", "must name exactly one zone with mode Calendar"))
    length = parse_duration(block.duration)
    if not timedelta(days=CALENDAR_MIN_DAYS) <= length <= timedelta(days=CALENDAR_MAX_DAYS):
        found.append(
            SpecError(
                f"{path}.calendar.duration",
                f"{block.duration}: a calendar-mode block lasts {CALENDAR_MIN_DAYS} to "
                f"{CALENDAR_MAX_DAYS} days (24h to 2160h)",
            )
        )
    stop = parse_duration(block.stop_before)
    if not timedelta(0) < stop <= timedelta(hours=24) or stop >= length:
        found.append(
            SpecError(
                f"{path}.calendar.stopBefore",
                "must be more than 0s, at most 24h and shorter than the block",
            )
        )
    gpu, tpu = spec.accelerator.gpu, spec.accelerator.tpu
    if gpu is not None and gpu.nodes > CALENDAR_MAX_GPU_VMS:
        found.append(
            SpecError(
                "spec.accelerator.gpu.nodes",
                f"at most {CALENDAR_MAX_GPU_VMS} with mode Calendar (one calendar-mode request)",
            )
        )
    if tpu is not None:
        generation = TPU_GENERATIONS[tpu.version]
        if len(zones) == 1 and zones[0] not in generation.calendar_zones:
            found.append(
                SpecError(
                    f"{path}.zones",
                    f"with mode Calendar, Compute books TPU {tpu.version} in "
                    f"{', '.join(generation.calendar_zones) or 'no zone'}",
                    generation.calendar_zones,
                )
            )
        chips = topology_chips(tpu.topology)
        if chips not in CALENDAR_TPU_CHIPS:
            found.append(
                SpecError(
                    "spec.accelerator.tpu.topology",
                    f"{tpu.topology} is {chips} chips; with mode Calendar the chips must be one "
                    f"of {', '.join(str(c) for c in CALENDAR_TPU_CHIPS)}",
                )
            )
    if (tpu is not None and tpu.slices > 1) or spec.node_pool.existing:
        found.append(
            SpecError(
                f"{path}.mode",
                "mode Calendar runs one slice on a node pool of its own (no tpu.slices above "
                "1, no nodePool.existing)",
            )
        )
    return found


def _block_start_errors(block: CalendarBlock, path: str) -> list[SpecError]:
    """A block starts at startTime, or in the window between earliest and latest that
    Compute's advice finds (it looks at most 120 days ahead)."""
    if (block.start_time is None) == (block.earliest is None):
        return [SpecError(f"{path}.startTime", "set startTime, or earliest and latest")]
    if (block.earliest is None) != (block.latest is None):
        return [SpecError(f"{path}.latest", "earliest and latest go together")]
    if block.earliest is None or block.latest is None:
        return []
    span = block.latest - block.earliest
    if not timedelta(0) <= span <= timedelta(days=CALENDAR_ADVICE_TPU_DAYS):
        return [
            SpecError(
                f"{path}.latest",
                f"must be at or after earliest, and at most {CALENDAR_ADVICE_TPU_DAYS} days "
                "after it (how far ahead Compute's calendar-mode advice looks)",
            )
        ]
    return []
