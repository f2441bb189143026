"""GKE's rules for a TrainingRequest, checked against the catalog.

The same rules are compiled to CEL for the CRD (`dws_operator.crd.cel`) so the API
server rejects bad objects at admission; this module is what the operator and the
`plan` command run, and what the CEL rules are tested against.
"""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import (
    MAX_RUN_HOURS,
    MAX_SEGMENTS,
    CalendarBlock,
    CleanupPolicy,
    FallbackOrder,
    GpuSpec,
    TpuSpec,
    TrainingRequestSpec,
)
from dws_operator.catalog import (
    CALENDAR_ADVICE_TPU_DAYS,
    CALENDAR_MAX_DAYS,
    CALENDAR_MAX_GPU_VMS,
    CALENDAR_MIN_DAYS,
    CALENDAR_TPU_CHIPS,
    GPU_ACCELERATORS,
    MAX_RUN_DURATION_SECONDS,
    MODE_SETTINGS,
    TPU_GENERATIONS,
    ProvisioningMode,
    default_machine_type,
    topology_chips,
)
from dws_operator.durations import parse_duration
from dws_operator.errors import SpecError
from dws_operator.naming import MAX_SLICED_POOL_NAME, max_pool_name

TPU_PATH = "spec.accelerator.tpu"
GPU_PATH = "spec.accelerator.gpu"
PROVISIONING_PATH = "spec.provisioning"
FALLBACK_PATH = "spec.provisioning.fallback"
NODE_POOL_PATH = "spec.nodePool"
RUN_PATH = "spec.run"

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


def _queued_slices_errors(spec: TrainingRequestSpec, path: str) -> list[SpecError]:
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


def _reservation_errors(spec: TrainingRequestSpec, path: str) -> list[SpecError]:
    provisioning = spec.provisioning
    is_reservation = provisioning.mode == ProvisioningMode.RESERVATION
    if is_reservation and provisioning.reservation is None:
        return [SpecError(f"{path}.reservation", "required when mode is Reservation")]
    if not is_reservation and provisioning.reservation is not None:
        return [
            SpecError(
                f"{path}.reservation",
                f"only allowed when mode is Reservation, not {provisioning.mode}",
            )
        ]
    return []


#: A TPU node pool lives in one zone: xpk creates each with `--node-locations=ZONE`, and
#: GKE checks a multi-host slice against the per-zone limits of its pool (zones.py).
TPU_ONE_ZONE = "a TPU node pool lives in one zone: name at most one"


def tpu_zone_errors(spec: TrainingRequestSpec, path: str) -> list[SpecError]:
    zones = spec.provisioning.zones or ()
    if spec.accelerator.tpu is not None and len(zones) > 1:
        return [SpecError(f"{path}.zones", f"{TPU_ONE_ZONE}, got {len(zones)}")]
    return []


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


def provisioning_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    provisioning = spec.provisioning
    found = tpu_zone_errors(spec, PROVISIONING_PATH)
    found += _reservation_errors(spec, PROVISIONING_PATH)
    found += calendar_errors(spec)
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
    tpu = spec.accelerator.tpu
    if tpu is not None and tpu.slices > 1:
        if pool.existing:
            found.append(
                SpecError(
                    f"{NODE_POOL_PATH}.existing",
                    "not available with several slices: each slice gets a node pool of its own",
                )
            )
        elif pool.name is not None and len(pool.name) > MAX_SLICED_POOL_NAME:
            found.append(
                SpecError(
                    f"{NODE_POOL_PATH}.name",
                    f"at most {MAX_SLICED_POOL_NAME} characters with several slices (each "
                    "slice's pool adds -s<index>)",
                )
            )
    return found


#: Why fallbackOrder Estimated is refused without fallback steps, or with a Calendar step.
ESTIMATED_NEEDS_FALLBACK = "Estimated orders the ladder's steps: it needs fallback steps"
ESTIMATED_NOT_CALENDAR = (
    "Estimated is not available with mode Calendar: its block is booked ahead, so it is "
    "always the first step"
)


def ladder_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """The capacity ladder's rules: each fallback step valid for the accelerator as the
    first step must be, a pool of its own for every step, and a wait that ends on every
    step but the last (else the steps after it are never reached)."""
    steps = spec.provisioning.steps
    estimated = spec.provisioning.fallback_order == FallbackOrder.ESTIMATED
    if len(steps) == 1:
        if not estimated:
            return []
        return [SpecError(f"{PROVISIONING_PATH}.fallbackOrder", ESTIMATED_NEEDS_FALLBACK)]
    found: list[SpecError] = []
    if estimated and spec.provisioning.mode == ProvisioningMode.CALENDAR:
        found.append(SpecError(f"{PROVISIONING_PATH}.fallbackOrder", ESTIMATED_NOT_CALENDAR))
    if spec.node_pool.existing:
        found.append(
            SpecError(
                FALLBACK_PATH,
                "not available with nodePool.existing: every step gets a node pool of its own",
            )
        )
    slices = spec.accelerator.tpu.slices if spec.accelerator.tpu else 1
    longest = max_pool_name(slices, ladder=True)
    if spec.node_pool.name is not None and len(spec.node_pool.name) > longest:
        found.append(
            SpecError(
                f"{NODE_POOL_PATH}.name",
                f"at most {longest} characters with fallback steps (each step's pool adds "
                "-f<step>)",
            )
        )
    for index, provisioning in enumerate(steps):
        path = PROVISIONING_PATH if index == 0 else f"{FALLBACK_PATH}[{index - 1}]"
        last = index == len(steps) - 1
        if not last and not parse_duration(provisioning.max_wait_duration):
            found.append(
                SpecError(
                    f"{path}.maxWaitDuration",
                    "0s waits forever, so the steps after this one would never be tried; "
                    "give it a limit (only the last step may wait forever)",
                )
            )
        if index == 0:
            continue  # the first step's own rules are the spec's
        if provisioning.mode == ProvisioningMode.CALENDAR:
            found.append(
                SpecError(
                    f"{path}.mode",
                    "Calendar is only the first step of a capacity ladder (its block is "
                    "booked ahead)",
                )
            )
            continue
        step = spec.at_step(index)
        found += mode_errors(step, path)
        found += _queued_slices_errors(step, path)
        found += tpu_zone_errors(step, path)
        found += _reservation_errors(step, path)
    return found


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


def spec_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """Every rule the spec breaks, in field order; empty when GKE would accept it."""
    found: list[SpecError] = []
    if spec.accelerator.tpu is not None:
        tpu_found = tpu_errors(spec.accelerator.tpu)
        found += tpu_found or slice_errors(spec)
    if spec.accelerator.gpu is not None:
        found += gpu_errors(spec.accelerator.gpu)
    found += mode_errors(spec)
    found += provisioning_errors(spec)
    found += ladder_errors(spec)
    found += node_pool_errors(spec)
    found += run_errors(spec)
    return found
