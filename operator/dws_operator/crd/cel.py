"""CEL rules (`x-kubernetes-validations`) generated from the catalog.

These make the API server reject, at admission, every TrainingRequest that
`dws_operator.validation` would reject, with a message naming the field. They are
generated, never hand-written, so a new TPU topology or GPU machine type reaches
the CRD by regenerating it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import timedelta

from dws_operator.api.spec import (
    MAX_FALLBACK_STEPS,
    MAX_RUN_HOURS,
    FallbackOrder,
)
from dws_operator.catalog import (
    CALENDAR_ADVICE_TPU_DAYS,
    CALENDAR_MAX_DAYS,
    CALENDAR_MAX_GPU_VMS,
    CALENDAR_MIN_DAYS,
    CALENDAR_TPU_CHIPS,
    GPU_ACCELERATORS,
    MAX_RUN_DURATION_SECONDS,
    TOPOLOGY_PATTERN,
    TPU_GENERATIONS,
    CubeRule,
    ProvisioningMode,
    TpuGeneration,
    default_machine_type,
    topology_chips,
)
from dws_operator.durations import DURATION_PATTERN, format_duration
from dws_operator.multislice import MAX_MULTISLICE_NAME
from dws_operator.naming import (
    MAX_NODE_POOL_NAME,
    MAX_SLICED_POOL_NAME,
    SEGMENT_SUFFIX_ROOM,
    SLICE_SUFFIX_ROOM,
    STEP_SUFFIX_ROOM,
    max_pool_name,
)
from dws_operator.validation import (
    ESTIMATED_NEEDS_FALLBACK,
    ESTIMATED_NOT_CALENDAR,
    FLEX_START_MODES,
    FLEX_START_UNSUPPORTED_GPUS,
    FLEX_START_UNSUPPORTED_TPUS,
    PLANNED_SEGMENTS,
    SEGMENT_LEAD_SECONDS,
    SEGMENTS_NOT_CALENDAR,
    SEGMENTS_NOT_EXISTING,
    TPU_ONE_ZONE,
)

#: Job, Service and pod hostnames (`<job>-<index>`, a DNS label) are built from the
#: object's name, so it must leave room for suffixes.
MAX_NAME_LENGTH = 48
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


@dataclass(frozen=True)
class Rule:
    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None
    #: Required fields the rule reads. The API server runs CEL even when a required
    #: field is missing; the guard keeps that case to the one clear "Required value"
    #: error instead of adding a "no such key" evaluation error.
    needs: tuple[str, ...] = ()

    def expression(self) -> str:
        if not self.needs:
            return self.rule
        present = " && ".join(_has_chain(path) for path in self.needs)
        return f"!({present}) || ({self.rule})"

    def to_schema(self) -> dict[str, str]:
        out = {"rule": self.expression(), "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


def _has_chain(path: str) -> str:
    """`provisioning.mode` -> `has(self.provisioning) && has(self.provisioning.mode)`."""
    parts = path.split(".")
    return " && ".join(f"has(self.{'.'.join(parts[: i + 1])})" for i in range(len(parts)))


def lit(value: str) -> str:
    """A CEL string literal (CEL accepts JSON's double-quoted escapes)."""
    return json.dumps(value)


def lits(values: Iterable[str | int]) -> str:
    return "[" + ", ".join(lit(v) if isinstance(v, str) else str(v) for v in values) + "]"


def _cube_expression(rule: CubeRule) -> str:
    dims = 'self.topology.split("x")'
    sides = [f"int({dims}[{i}])" for i in range(3)]
    checks = [
        f"self.topology.matches({lit(TOPOLOGY_PATTERN)})",
        f"size({dims}) == 3",
        f"{dims}.all(d, int(d) % {rule.side_step} == 0 && int(d) >= {rule.side_min}"
        + (f" && int(d) <= {rule.side_max})" if rule.side_max else ")"),
        f"{' * '.join(sides)} / 64 <= {rule.max_cubes}",
    ]
    if rule.sorted_sides:
        checks.append(f"{sides[0]} <= {sides[1]} && {sides[1]} <= {sides[2]}")
    return "(" + " && ".join(checks) + ")"


def _tpu_generation_rules(g: TpuGeneration) -> list[Rule]:
    version = f"self.version != {lit(g.version)}"
    names = g.machine_type_names
    topology = f"self.topology in {lits(g.topologies)}"
    if g.cube_rule is not None:
        topology += " || " + _cube_expression(g.cube_rule)
    rules = [
        Rule(
            f"{version} || {topology}",
            f"topology is not valid for TPU {g.version}; expected {g.describe_topologies()}",
            ".topology",
        ),
        Rule(
            f"!has(self.machineType) || {version} || self.machineType in {lits(names)}",
            f"machineType does not carry TPU {g.version}; allowed: {', '.join(names)}",
            ".machineType",
        ),
    ]
    for machine in g.machine_types:
        hosted = [t for t, hosts in g.topologies.items() if machine.name in hosts]
        if g.cube_rule is not None and g.cube_rule.machine_type == machine.name:
            not_hosted = [t for t in g.topologies if t not in hosted]
            if not not_hosted:
                continue
            fits = f"!(self.topology in {lits(not_hosted)})"
            text = f"{machine.name} cannot host topology {', '.join(not_hosted)}"
        else:
            fits = f"self.topology in {lits(hosted)}"
            text = f"{machine.name} hosts only topology {', '.join(hosted)}"
        rules.append(
            Rule(
                f"!has(self.machineType) || {version} || self.machineType != {lit(machine.name)}"
                f" || {fits}",
                f"machineType {text} (chips per VM must divide the slice)",
                ".machineType",
            )
        )
    single = _single_host_expression(g)
    if single:
        rules.append(
            Rule(
                f"{version} || !has(self.slices) || self.slices == 1 || !({single})",
                "slices above 1 need a multi-host slice (a topology of more than one VM); "
                f"single-VM slices of TPU {g.version}: {_single_host_text(g)}",
                ".slices",
            )
        )
    return rules


def _single_hosts(g: TpuGeneration) -> list[tuple[str, str, bool]]:
    """(topology, machine type, is the default machine type) of every one-VM slice."""
    chips = {m.name: m.chips for m in g.machine_types}
    return [
        (topology, host, host == default_machine_type(g, topology))
        for topology, hosts in g.topologies.items()
        for host in hosts
        if topology_chips(topology) == chips[host]
    ]


def _single_host_expression(g: TpuGeneration) -> str:
    terms = []
    for topology, host, default in _single_hosts(g):
        machine = f"self.machineType == {lit(host)}"
        if default:
            machine = f"!has(self.machineType) || {machine}"
        terms.append(f"(self.topology == {lit(topology)} && ({machine}))")
    return " || ".join(terms)


def _single_host_text(g: TpuGeneration) -> str:
    return ", ".join(f"{topology} on {host}" for topology, host, _ in _single_hosts(g))


def tpu_rules() -> list[Rule]:
    return [rule for g in TPU_GENERATIONS.values() for rule in _tpu_generation_rules(g)]


def gpu_rules() -> list[Rule]:
    gpus_per_machine = {m.name: m.gpus for a in GPU_ACCELERATORS.values() for m in a.machine_types}
    per_machine = "{" + ", ".join(f"{lit(k)}: {v}" for k, v in gpus_per_machine.items()) + "}"
    known = f"self.machineType in {per_machine}"
    rules = [
        Rule(
            "!has(self.machineType) || !has(self.count) || "
            f"!({known}) || {per_machine}[self.machineType] == self.count",
            "count must equal the GPUs per VM of machineType",
            ".count",
        )
    ]
    for a in GPU_ACCELERATORS.values():
        not_type = f"self.type != {lit(a.type)}"
        names = a.machine_type_names
        rules.append(
            Rule(
                f"!has(self.machineType) || {not_type} || self.machineType in {lits(names)}",
                f"machineType does not carry {a.type}; allowed: {', '.join(names)}",
                ".machineType",
            )
        )
        counts = ", ".join(str(n) for n in a.gpu_counts)
        rules.append(
            Rule(
                f"has(self.machineType) || !has(self.count) || {not_type} || "
                f"self.count in {lits(a.gpu_counts)}",
                f"count must be GPUs per VM of a {a.type} machine type: {counts}",
                ".count",
            )
        )
    return rules


def accelerator_rules() -> list[Rule]:
    return [
        Rule("has(self.tpu) != has(self.gpu)", "exactly one of tpu or gpu must be set"),
        Rule(
            "self == oldSelf",
            "spec.accelerator is immutable; create a new TrainingRequest instead",
        ),
    ]


def _duration_bounds(field: str, low_exclusive: str, high: str) -> str:
    value = f"self.{field}"
    parses = f"size({value}) >= 2 && {value}.matches({lit(DURATION_PATTERN)})"
    return (
        f"!({parses}) || (duration({value}) > duration({lit(low_exclusive)}) && "
        f"duration({value}) <= duration({lit(high)}))"
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
            _duration_bounds("maxRunDuration", "0s", most),
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


_FALLBACK = "self.provisioning.fallback"
_HAS_FALLBACK = f"has({_FALLBACK}) && size({_FALLBACK}) > 0"


def _step_rules(bad: str, field: str, text: str) -> list[Rule]:
    """One rule per possible fallback step, each naming its step: `bad` is a CEL
    condition on `{s}`, the step. (A rule per index rather than one over the list: the
    API server can name the step only in a fixed message, and a message computed by CEL
    over the list costs more than its budget allows.)"""
    rules = []
    for index in range(MAX_FALLBACK_STEPS):
        step = f"{_FALLBACK}[{index}]"
        rules.append(
            Rule(
                f"!has({_FALLBACK}) || size({_FALLBACK}) <= {index} || !({bad.format(s=step)})",
                f"spec.provisioning.fallback[{index}].{field}: {text}",
                ".provisioning.fallback",
            )
        )
    return rules


def ladder_rules() -> list[Rule]:
    """Each fallback step valid for the accelerator, as the first step must be."""
    flex_modes = lits(m.value for m in FLEX_START_MODES)
    no_flex_tpus = [v.value for v in FLEX_START_UNSUPPORTED_TPUS]
    no_flex_gpus = [t.value for t in FLEX_START_UNSUPPORTED_GPUS]
    others = ", ".join(m.value for m in ProvisioningMode if m not in FLEX_START_MODES)
    queued = lit(ProvisioningMode.QUEUED_PROVISIONING)
    several = "has(self.accelerator.tpu) && has(self.accelerator.tpu.slices) && " + (
        "self.accelerator.tpu.slices > 1"
    )
    longest = max_pool_name(ladder=True)
    longest_sliced = max_pool_name(2, ladder=True)
    return [
        *_step_rules(
            f"has(self.accelerator.tpu) && {{s}}.mode in {flex_modes} && "
            f"self.accelerator.tpu.version in {lits(no_flex_tpus)}",
            "mode",
            f"flex-start modes are not available for TPU {', '.join(no_flex_tpus)}: flex-start "
            f"VMs do not serve it; use {others}",
        ),
        *_step_rules(
            f"has(self.accelerator.gpu) && {{s}}.mode in {flex_modes} && "
            f"self.accelerator.gpu.type in {lits(no_flex_gpus)}",
            "mode",
            f"flex-start modes are not available for {', '.join(no_flex_gpus)}: flex-start VMs "
            f"do not serve it; use {others}",
        ),
        *_step_rules(
            "has(self.accelerator.tpu) && has({s}.zones) && size({s}.zones) > 1",
            "zones",
            TPU_ONE_ZONE,
        ),
        *_step_rules(
            f"{several} && {{s}}.mode == {queued}",
            "mode",
            "QueuedProvisioning is not available for several slices: GKE provisions one slice "
            "per ProvisioningRequest",
        ),
        Rule(
            f"!({_HAS_FALLBACK}) || !has(self.nodePool.existing) || !self.nodePool.existing",
            "spec.provisioning.fallback is not available with nodePool.existing: every step "
            "gets a node pool of its own",
            ".provisioning.fallback",
        ),
        Rule(
            f"!({_HAS_FALLBACK}) || !has(self.nodePool.name) || "
            f"size(self.nodePool.name) <= ({several} ? {longest_sliced} : {longest})",
            f"nodePool.name has at most {longest} characters with fallback steps, "
            f"{longest_sliced} with several slices too (each step's pool adds -f<step>)",
            ".nodePool.name",
        ),
    ]


def _waits_forever(value: str) -> str:
    parses = f"size({value}) >= 2 && {value}.matches({lit(DURATION_PATTERN)})"
    return f"({parses} && duration({value}) == duration('0s'))"


def ladder_wait_rules() -> list[Rule]:
    """On `spec.provisioning`: every step but the last has a wait that ends."""
    fallback = "self.fallback"
    text = (
        "0s waits forever, so the steps after this one would never be tried; give it a limit "
        "(only the last step may wait forever)"
    )
    rules = [
        Rule(
            f"!has({fallback}) || size({fallback}) == 0 || !has(self.maxWaitDuration) || "
            f"!{_waits_forever('self.maxWaitDuration')}",
            f"maxWaitDuration: {text}",
            ".maxWaitDuration",
        )
    ]
    for index in range(MAX_FALLBACK_STEPS - 1):
        step = f"{fallback}[{index}]"
        rules.append(
            Rule(
                f"!has({fallback}) || size({fallback}) <= {index + 1} || "
                f"!has({step}.maxWaitDuration) || !{_waits_forever(step + '.maxWaitDuration')}",
                f"spec.provisioning.fallback[{index}].maxWaitDuration: {text}",
                ".fallback",
            )
        )
    return rules


def fallback_step_rules() -> list[Rule]:
    """On each fallback step (the API server names its index)."""
    return [
        Rule(
            f"self.mode != {lit(ProvisioningMode.CALENDAR)}",
            "Calendar is only the first step of a capacity ladder (its block is booked ahead); "
            "fall back from it to other modes",
            ".mode",
            needs=("mode",),
        ),
        Rule(
            f"(self.mode == {lit(ProvisioningMode.RESERVATION)}) == has(self.reservation)",
            "reservation is required when mode is Reservation and not allowed otherwise",
            ".reservation",
            needs=("mode",),
        ),
    ]


def node_pool_rules() -> list[Rule]:
    return [
        Rule("!self.existing || has(self.name)", "name is required when existing is true", ".name"),
        Rule(
            '!self.existing || self.cleanup != "Delete"',
            "cleanup Delete is not allowed for an existing pool: the operator never deletes a "
            "pool it did not create; use ScaleToZero or Keep",
            ".cleanup",
        ),
        Rule(
            "has(self.name) == has(oldSelf.name) && (!has(self.name) || self.name == oldSelf.name)"
            " && self.existing == oldSelf.existing",
            "spec.nodePool.name and spec.nodePool.existing are immutable",
        ),
    ]


def root_rules() -> list[Rule]:
    return [
        Rule(
            f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
            f"self.metadata.name.matches({lit(NAME_PATTERN)})",
            f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters that "
            "starts with a letter (the Job, Service and pod hostnames are derived from it)",
        ),
        Rule(
            "!has(self.spec) || !has(self.spec.accelerator) || !has(self.spec.accelerator.tpu) "
            "|| !has(self.spec.accelerator.tpu.slices) || self.spec.accelerator.tpu.slices == 1 "
            f"|| size(self.metadata.name) <= {MAX_MULTISLICE_NAME}",
            f"metadata.name has at most {MAX_MULTISLICE_NAME} characters with several slices "
            "(the JobSet's pod names are built from it)",
        ),
    ]


def _seconds(value: str) -> str:
    return f"duration({value}).getSeconds()"


def run_field_rules() -> list[Rule]:
    """On `spec.run`: bounded durations, and immutable."""
    ahead = "self.requestAhead"
    ahead_parses = f"size({ahead}) >= 2 && {ahead}.matches({lit(DURATION_PATTERN)})"
    return [
        Rule(
            "!has(self.duration) || " + _duration_bounds("duration", "0s", f"{MAX_RUN_HOURS}h"),
            f"duration must be more than 0s and at most {MAX_RUN_HOURS}h",
            ".duration",
        ),
        Rule(
            "!has(self.stopBefore) || " + _duration_bounds("stopBefore", "0s", "24h"),
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
        f"({_HAS_FALLBACK} ? {STEP_SUFFIX_ROOM} : 0)"
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


#: Where each group of rules is attached, by field path below the root schema.
def _needing(rules: list[Rule], *fields: str) -> list[Rule]:
    return [replace(rule, needs=fields) for rule in rules]


RULES_BY_PATH: dict[tuple[str, ...], list[Rule]] = {
    (): root_rules(),
    ("spec",): _needing(
        spec_rules() + ladder_rules() + calendar_rules() + run_rules(),
        "accelerator",
        "provisioning.mode",
    ),
    ("spec", "run"): run_field_rules(),
    ("spec", "accelerator"): accelerator_rules(),
    ("spec", "accelerator", "tpu"): _needing(tpu_rules(), "version", "topology"),
    ("spec", "accelerator", "gpu"): _needing(gpu_rules(), "type"),
    ("spec", "provisioning"): provisioning_rules() + ladder_wait_rules(),
    ("spec", "provisioning", "fallback", "[]"): fallback_step_rules(),
    ("spec", "provisioning", "calendar"): calendar_block_rules(),
    ("spec", "nodePool"): node_pool_rules(),
}
