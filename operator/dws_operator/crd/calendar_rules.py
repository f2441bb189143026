"""CEL rules of calendar mode: the block Compute books (`spec.provisioning.calendar`),
and what it books for the accelerator asked for (`spec`)."""

from __future__ import annotations

from dws_operator.catalog import (
    CALENDAR_ADVICE_TPU_DAYS,
    CALENDAR_MAX_DAYS,
    CALENDAR_MAX_GPU_VMS,
    CALENDAR_MIN_DAYS,
    CALENDAR_TPU_CHIPS,
    TOPOLOGY_PATTERN,
    TPU_GENERATIONS,
)
from dws_operator.crd.rule import Rule, lit, lits
from dws_operator.durations import DURATION_PATTERN

_IN_CALENDAR = "has(self.provisioning.calendar)"


def calendar_block_rules() -> list[Rule]:
    """On `spec.provisioning.calendar`: the block's length Compute books and the stop."""
    shortest = f"{CALENDAR_MIN_DAYS * 24}h"
    longest = f"{CALENDAR_MAX_DAYS * 24}h"
    parses = f"self.duration.matches({lit(DURATION_PATTERN)})"
    stop_parses = f"self.stopBefore.matches({lit(DURATION_PATTERN)})"
    span = f"{CALENDAR_ADVICE_TPU_DAYS * 24}h"
    return [
        Rule(
            "has(self.startTime) != has(self.earliest)",
            "set startTime, or earliest and latest",
            ".startTime",
        ),
        Rule(
            "has(self.earliest) == has(self.latest)",
            "earliest and latest go together",
            ".latest",
        ),
        Rule(
            "!has(self.earliest) || !has(self.latest) || (self.latest >= self.earliest && "
            f"self.latest - self.earliest <= duration({lit(span)}))",
            f"latest must be at or after earliest, and at most {CALENDAR_ADVICE_TPU_DAYS} days "
            "after it (how far ahead Compute's calendar-mode advice looks)",
            ".latest",
        ),
        Rule(
            f"!({parses}) || (duration(self.duration) >= duration({lit(shortest)}) && "
            f"duration(self.duration) <= duration({lit(longest)}))",
            f"duration must be {shortest} to {longest}: a calendar-mode block lasts "
            f"{CALENDAR_MIN_DAYS} to {CALENDAR_MAX_DAYS} days",
            ".duration",
            needs=("duration",),
        ),
        Rule(
            f"!has(self.stopBefore) || !({stop_parses}) || !({parses}) || "
            "(duration(self.stopBefore) > duration('0s') && "
            "duration(self.stopBefore) <= duration('24h') && "
            "duration(self.stopBefore) < duration(self.duration))",
            "stopBefore must be more than 0s, at most 24h and shorter than the block",
            ".stopBefore",
            needs=("duration",),
        ),
    ]


def calendar_rules() -> list[Rule]:
    """On `spec`: what Compute books in calendar mode for the accelerator asked for."""
    sides = 'self.accelerator.tpu.topology.split("x")'
    chips = f"int({sides}[0]) * int({sides}[1]) * (size({sides}) == 3 ? int({sides}[2]) : 1)"
    served = [g for g in TPU_GENERATIONS.values() if g.calendar_family]
    zone = "self.provisioning.zones[0]"
    by_version = " || ".join(
        f"(self.accelerator.tpu.version == {lit(g.version)} && {zone} in {lits(g.calendar_zones)})"
        for g in served
    )
    where = "; ".join(f"{g.version} in {', '.join(g.calendar_zones)}" for g in served)
    return [
        Rule(
            f"!{_IN_CALENDAR} || (has(self.provisioning.zones) && "
            "size(self.provisioning.zones) == 1)",
            "provisioning.zones must name exactly one zone with mode Calendar: a block is "
            "booked in one zone",
            ".provisioning.zones",
        ),
        Rule(
            f"!{_IN_CALENDAR} || !has(self.accelerator.gpu) || "
            f"self.accelerator.gpu.nodes <= {CALENDAR_MAX_GPU_VMS}",
            f"accelerator.gpu.nodes is at most {CALENDAR_MAX_GPU_VMS} with mode Calendar: "
            "Compute books at most that many VMs in one calendar-mode request",
            ".accelerator.gpu.nodes",
        ),
        Rule(
            f"!{_IN_CALENDAR} || !has(self.accelerator.tpu) || "
            "!has(self.provisioning.zones) || size(self.provisioning.zones) != 1 || "
            f"{by_version}",
            f"with mode Calendar, Compute books TPU {where}",
            ".provisioning.zones",
        ),
        Rule(
            f"!{_IN_CALENDAR} || !has(self.accelerator.tpu) || "
            f"!self.accelerator.tpu.topology.matches({lit(TOPOLOGY_PATTERN)}) || "
            f"{chips} in {lits(CALENDAR_TPU_CHIPS)}",
            "with mode Calendar the slice's chips (the topology's product) must be one of "
            f"{', '.join(str(c) for c in CALENDAR_TPU_CHIPS)}: what one calendar-mode "
            "request reserves",
            ".accelerator.tpu.topology",
        ),
        Rule(
            f"!{_IN_CALENDAR} || ((!has(self.accelerator.tpu) || "
            "!has(self.accelerator.tpu.slices) || self.accelerator.tpu.slices == 1) && "
            "(!has(self.nodePool.existing) || !self.nodePool.existing))",
            "mode Calendar runs one slice on a node pool of its own (no tpu.slices above 1, "
            "no nodePool.existing)",
            ".provisioning.mode",
        ),
    ]
