"""CEL rules of a long run (`spec.run`): bounded durations, segments that fit their
window and that GKE can serve, and room in the pool names for the segment suffix."""

from __future__ import annotations

from dws_operator.api.spec import MAX_RUN_HOURS
from dws_operator.catalog import MAX_RUN_DURATION_SECONDS, ProvisioningMode
from dws_operator.crd.ladder_rules import HAS_FALLBACK
from dws_operator.crd.rule import Rule, duration_bounds, lit
from dws_operator.durations import DURATION_PATTERN
from dws_operator.naming import (
    MAX_NODE_POOL_NAME,
    SEGMENT_SUFFIX_ROOM,
    SLICE_SUFFIX_ROOM,
    STEP_SUFFIX_ROOM,
)
from dws_operator.validation import (
    PLANNED_SEGMENTS,
    SEGMENT_LEAD_SECONDS,
    SEGMENTS_NOT_CALENDAR,
    SEGMENTS_NOT_EXISTING,
)


def _seconds(value: str) -> str:
    return f"duration({value}).getSeconds()"


def run_field_rules() -> list[Rule]:
    """On `spec.run`: bounded durations, and immutable."""
    ahead = "self.requestAhead"
    ahead_parses = f"size({ahead}) >= 2 && {ahead}.matches({lit(DURATION_PATTERN)})"
    return [
        Rule(
            "!has(self.duration) || " + duration_bounds("duration", "0s", f"{MAX_RUN_HOURS}h"),
            f"duration must be more than 0s and at most {MAX_RUN_HOURS}h",
            ".duration",
        ),
        Rule(
            "!has(self.stopBefore) || " + duration_bounds("stopBefore", "0s", "24h"),
            "stopBefore must be more than 0s and at most 24h",
            ".stopBefore",
        ),
        Rule(
            f"!has({ahead}) || !({ahead_parses}) || duration({ahead}) <= duration('24h')",
            "requestAhead must be at most 24h",
            ".requestAhead",
        ),
        Rule("self == oldSelf", "spec.run is immutable; create a new TrainingRequest instead"),
    ]


def run_rules() -> list[Rule]:
    """On `spec`: a long run's segments fit its window, GKE can serve them, and its pool
    names keep room for the segment suffix (`validation.run_errors`)."""
    parses = f"matches({lit(DURATION_PATTERN)})"
    run = "self.run"
    window = "self.provisioning.maxRunDuration"
    readable = (
        f"has({run}) && has({run}.duration) && {run}.duration.{parses} && "
        f"{run}.stopBefore.{parses} && (!has({window}) || {window}.{parses})"
    )
    window_seconds = f"(has({window}) ? {_seconds(window)} : {MAX_RUN_DURATION_SECONDS})"
    longer = f"{_seconds(run + '.duration')} > {window_seconds}"
    several = "has(self.accelerator.tpu) && has(self.accelerator.tpu.slices) && " + (
        "self.accelerator.tpu.slices > 1"
    )
    room = (
        f"{MAX_NODE_POOL_NAME - SEGMENT_SUFFIX_ROOM} - ({several} ? {SLICE_SUFFIX_ROOM} : 0) - "
        f"({HAS_FALLBACK} ? {STEP_SUFFIX_ROOM} : 0)"
    )
    return [
        Rule(
            f"!({readable}) || !({longer}) || self.provisioning.mode != "
            f"{lit(ProvisioningMode.CALENDAR)}",
            f"run.duration: {SEGMENTS_NOT_CALENDAR}",
            ".run.duration",
        ),
        Rule(
            f"!({readable}) || !({longer}) || !has(self.nodePool.existing) || "
            "!self.nodePool.existing",
            f"run.duration: {SEGMENTS_NOT_EXISTING}",
            ".run.duration",
        ),
        Rule(
            f"!({readable}) || !({longer}) || "
            f"{_seconds(run + '.stopBefore')} >= {window_seconds} || "
            f"{_seconds(run + '.duration')} <= {PLANNED_SEGMENTS} * "
            f"({window_seconds} - {_seconds(run + '.stopBefore')} - {SEGMENT_LEAD_SECONDS})",
            f"run.duration needs more than {PLANNED_SEGMENTS} segments of "
            "provisioning.maxRunDuration less run.stopBefore and a minute; raise "
            "maxRunDuration",
            ".run.duration",
        ),
        Rule(
            f"!has({run}) || !has({run}.stopBefore) || !{run}.stopBefore.{parses} || "
            f"(has({window}) && !{window}.{parses}) || "
            f"{_seconds(run + '.stopBefore')} < {window_seconds}",
            "run.stopBefore must be shorter than provisioning.maxRunDuration",
            ".run.stopBefore",
        ),
        Rule(
            f"!has({run}) || !has({run}.duration) || !has(self.nodePool.name) || "
            f"size(self.nodePool.name) <= {room}",
            "nodePool.name is too long with run.duration (each segment's pool adds "
            "-r<segment>): at most "
            f"{MAX_NODE_POOL_NAME - SEGMENT_SUFFIX_ROOM} characters, less 4 with several "
            "slices and 3 with fallback steps",
            ".nodePool.name",
        ),
        Rule(
            "has(self.run) == has(oldSelf.run)",
            "spec.run is immutable; create a new TrainingRequest instead",
            ".run",
        ),
    ]
