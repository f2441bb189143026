"""A long run's rules (`spec.run`), and its segments: whether the run goes in segments,
and the most it may take."""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import MAX_RUN_HOURS, MAX_SEGMENTS, TrainingRequestSpec
from dws_operator.catalog import ProvisioningMode
from dws_operator.durations import parse_duration
from dws_operator.errors import SpecError
from dws_operator.naming import max_pool_name
from dws_operator.validation.paths import NODE_POOL_PATH, RUN_PATH

#: Why a long run cannot use mode Calendar or an existing pool.
SEGMENTS_NOT_CALENDAR = (
    "longer than provisioning.maxRunDuration is not available with mode Calendar: the "
    "block is one window; book a longer block (up to 2160h) instead"
)
SEGMENTS_NOT_EXISTING = (
    "longer than provisioning.maxRunDuration is not available with nodePool.existing: "
    "every segment gets a node pool of its own"
)


def segmented(spec: TrainingRequestSpec) -> bool:
    """The run is longer than one window: it goes in segments."""
    run = spec.run
    if run is None or run.duration is None:
        return False
    window = parse_duration(spec.provisioning.max_run_duration)
    return parse_duration(run.duration) > window


#: Segments a long run may take beyond its duration over what one window trains: a
#: window also holds the wait for its VMs and the workload's start, so it trains less.
SPARE_SEGMENTS = 2
#: The most segments a run's duration may plan for at admission (the rest are spare).
PLANNED_SEGMENTS = MAX_SEGMENTS - SPARE_SEGMENTS
#: The minute a segment's stop comes before `stopBefore` (`reconcile.decision`'s
#: STOP_LEAD_SECONDS): a window trains at most maxRunDuration less both.
SEGMENT_LEAD_SECONDS = 60


def most_segments(spec: TrainingRequestSpec) -> int:
    """The most segments the run may take: its duration over what one window trains
    (maxRunDuration less stopBefore), rounded up, and `SPARE_SEGMENTS` more (at most
    `MAX_SEGMENTS`); 1 for a run of one window."""
    run = spec.run
    if run is None or run.duration is None or not segmented(spec):
        return 1
    window = parse_duration(spec.provisioning.max_run_duration)
    trains = (window - parse_duration(run.stop_before)).total_seconds()
    if trains <= 0:
        return 1
    needed = -int(-parse_duration(run.duration).total_seconds() // trains)
    return min(MAX_SEGMENTS, needed + SPARE_SEGMENTS)


def run_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """A long run's rules: bounded durations, a stop inside the window, segments that GKE
    can serve one pool at a time, and room in the pool name for the segment suffix."""
    run = spec.run
    if run is None:
        return []
    found: list[SpecError] = []
    stop = parse_duration(run.stop_before)
    window = parse_duration(spec.provisioning.max_run_duration)
    if not timedelta(0) < stop <= timedelta(hours=24):
        found.append(SpecError(f"{RUN_PATH}.stopBefore", "must be more than 0s and at most 24h"))
    elif stop >= window:
        found.append(
            SpecError(
                f"{RUN_PATH}.stopBefore",
                "must be shorter than provisioning.maxRunDuration "
                f"({spec.provisioning.max_run_duration})",
            )
        )
    if parse_duration(run.request_ahead) > timedelta(hours=24):
        found.append(SpecError(f"{RUN_PATH}.requestAhead", "must be at most 24h"))
    if run.duration is None:
        return found
    duration = parse_duration(run.duration)
    if not timedelta(0) < duration <= timedelta(hours=MAX_RUN_HOURS):
        found.append(
            SpecError(f"{RUN_PATH}.duration", f"must be more than 0s and at most {MAX_RUN_HOURS}h")
        )
    slices = spec.accelerator.tpu.slices if spec.accelerator.tpu else 1
    longest = max_pool_name(slices, spec.ladder_steps > 1, segments=True)
    if spec.node_pool.name is not None and len(spec.node_pool.name) > longest:
        found.append(
            SpecError(
                f"{NODE_POOL_PATH}.name",
                f"at most {longest} characters with run.duration (each segment's pool adds "
                "-r<segment>)",
            )
        )
    if not segmented(spec):
        return found
    if spec.provisioning.mode == ProvisioningMode.CALENDAR:
        found.append(SpecError(f"{RUN_PATH}.duration", SEGMENTS_NOT_CALENDAR))
    if spec.node_pool.existing:
        found.append(SpecError(f"{RUN_PATH}.duration", SEGMENTS_NOT_EXISTING))
    trains = window - stop - timedelta(seconds=SEGMENT_LEAD_SECONDS)
    if stop < window and duration > PLANNED_SEGMENTS * trains:
        found.append(
            SpecError(
                f"{RUN_PATH}.duration",
                f"needs more than {PLANNED_SEGMENTS} segments of provisioning.maxRunDuration "
                "less run.stopBefore and a minute; raise maxRunDuration",
            )
        )
    return found
