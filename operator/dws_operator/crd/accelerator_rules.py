"""CEL rules on `spec.accelerator`: one of TPU or GPU, and each TPU topology, machine
type and slice count, and each GPU machine type and count, as the catalog has them."""

from __future__ import annotations

from dws_operator.catalog import (
    GPU_ACCELERATORS,
    TOPOLOGY_PATTERN,
    TPU_GENERATIONS,
    CubeRule,
    TpuGeneration,
    default_machine_type,
    topology_chips,
)
from dws_operator.crd.rule import Rule, lit, lits


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
