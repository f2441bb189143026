"""What a namespace's TrainingPolicies allow a request. Pure: the policies, the
request's spec and size, and what the namespace has in flight in; violations out.

The same rules are generated as CEL for the API server (`admission`); the
contract test runs one corpus through both.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dws_operator.api import TrainingRequestSpec
from dws_operator.api.policy import TrainingPolicy
from dws_operator.planning import machines_of

#: The reason a request fails with when a policy forbids it.
POLICY_VIOLATION = "PolicyViolation"
#: The reason a request waits with while its namespace's in-flight limit is reached.
POLICY_LIMIT = "PolicyLimit"


@dataclass(frozen=True)
class Size:
    """Chips (TPU chips or GPUs) and nodes (VMs) of a request, every slice."""

    chips: int = 0
    nodes: int = 0

    def __add__(self, other: Size) -> Size:
        return Size(self.chips + other.chips, self.nodes + other.nodes)


def request_size(spec: TrainingRequestSpec) -> Size | None:
    """The request's size by the chip math (its accelerator alone: the same on every
    step); None when its machine type does not fit its accelerator."""
    machines = machines_of(spec.accelerator)
    if machines is None:
        return None
    tpu = spec.accelerator.tpu
    slices = tpu.slices if tpu is not None else 1
    nodes = machines.nodes * slices
    return Size(chips=nodes * machines.chips_per_node, nodes=nodes)


@dataclass(frozen=True)
class Violation:
    policy: str
    #: The request's field the rule is about.
    field: str
    message: str

    def __str__(self) -> str:
        return f"TrainingPolicy {self.policy}: {self.field}: {self.message}"


def accelerator_of(spec: TrainingRequestSpec) -> tuple[str, str]:
    """The request's accelerator as a policy names it, and the field that says so."""
    tpu, gpu = spec.accelerator.tpu, spec.accelerator.gpu
    if tpu is not None:
        return tpu.version.value, "spec.accelerator.tpu.version"
    assert gpu is not None
    return gpu.type.value, "spec.accelerator.gpu.type"


def _step_field(step: int, name: str) -> str:
    where = "" if step == 0 else f"fallback[{step - 1}]."
    return f"spec.provisioning.{where}{name}"


def reservation_allowed(written: str, allowed: Iterable[str]) -> bool:
    """Whether a request's reservation (with or without a block and sub-block) is one a
    policy allows: the same name as written, or any of a project's by
    projects/PROJECT/reservations/*."""
    parts = written.split("/")
    base = "/".join(parts[:4]) if written.startswith("projects/") else parts[0]
    for entry in allowed:
        if entry == base:
            return True
        if entry.endswith("/*") and base.startswith("projects/") and base.startswith(entry[:-1]):
            return True
    return False


def violations(policy: TrainingPolicy, spec: TrainingRequestSpec, size: Size) -> list[Violation]:
    """Every rule of `policy` the request breaks on its own (not counting the others in
    flight): what the admission policy refuses, and a request larger than an in-flight
    limit (it could never start)."""
    rules = policy.spec
    name = f"{policy.namespace}/{policy.name}"
    found: list[Violation] = []
    accelerator, field = accelerator_of(spec)
    if rules.accelerators is not None and accelerator not in rules.accelerators:
        found.append(
            Violation(name, field, f"{accelerator} is not allowed ({_allowed(rules.accelerators)})")
        )
    steps = spec.provisioning.steps
    for index, step in enumerate(steps):
        if rules.modes is not None and step.mode not in rules.modes:
            modes = [m.value for m in rules.modes]
            found.append(
                Violation(
                    name,
                    _step_field(index, "mode"),
                    f"{step.mode.value} is not allowed ({_allowed(modes)})",
                )
            )
        if (
            rules.reservations is not None
            and step.reservation is not None
            and not reservation_allowed(step.reservation, rules.reservations)
        ):
            found.append(
                Violation(
                    name,
                    _step_field(index, "reservation"),
                    f"{step.reservation} is not allowed ({_allowed(rules.reservations)})",
                )
            )
    limits = (
        ("chips", size.chips, rules.max_chips_per_request, "maxChipsPerRequest"),
        ("nodes", size.nodes, rules.max_nodes_per_request, "maxNodesPerRequest"),
        ("chips", size.chips, rules.max_chips_in_flight, "maxChipsInFlight"),
        ("nodes", size.nodes, rules.max_nodes_in_flight, "maxNodesInFlight"),
    )
    for unit, value, limit, rule in limits:
        if limit is not None and value > limit:
            found.append(
                Violation(name, "spec.accelerator", f"{value} {unit}, over {rule} ({limit})")
            )
    return found


def over_in_flight(policy: TrainingPolicy, size: Size, in_flight: Size) -> str | None:
    """Why the request must wait: with what its namespace has in flight, it would go
    over one of `policy`'s in-flight limits. None when it fits."""
    rules = policy.spec
    for unit, used, value, limit, rule in (
        ("chips", in_flight.chips, size.chips, rules.max_chips_in_flight, "maxChipsInFlight"),
        ("nodes", in_flight.nodes, size.nodes, rules.max_nodes_in_flight, "maxNodesInFlight"),
    ):
        if limit is not None and used + value > limit:
            return (
                f"TrainingPolicy {policy.namespace}/{policy.name}: {rule} is {limit} {unit}; "
                f"the namespace's requests hold or ask for {used}, this one needs {value}"
            )
    return None


def _allowed(values: Iterable[str]) -> str:
    listed = ", ".join(values)
    return f"allowed: {listed}" if listed else "none is allowed"
