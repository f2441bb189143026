"""GKE's checks on where a node pool's VMs go: TPU topology, compact placement, workload policy.

`NodePool.placement_policy` carries a TPU slice's topology (`tpu_topology`, with type
COMPACT for a compact placement GKE creates itself) or names a Compute resource policy
(`policy_name`) the caller made. What GKE does with them, and where it is documented:

- `policy_name` "refers to the name of a custom resource policy supplied by the user.
  The resource policy must be in the same project and region as the node pool. If not
  found, InvalidArgument error is returned." (google.container.v1 NodePool.PlacementPolicy).
- Ironwood (tpu7x) multi-host pools take a HIGH_THROUGHPUT workload policy carrying the
  accelerator topology "instead of --tpu-topology" (GKE concepts/tpu-ironwood). Given a
  compact placement instead, GKE accepts the pool and then fails building its instance
  group: "Creation of a managed instance group with tpu7x-standard-4t machine type with
  placement policy is not supported. Use workload policy instead."
  (vllm-project/ci-infra#547, against live GKE), hence `deferred_failure`.
- GKE takes the slice's topology from the workload policy: a policy-only request for a
  single-host shape is refused with the tpu_topology message below (AI-Hypercomputer/
  xpk#825), GKE reports tpuTopology back and labels the nodes with it (vllm-project/
  ci-infra, terraform/gcp_old/tpu-inference/k8s/workers.tf), hence `resolve_topology`.

Messages quoted above are GKE's; the others are the emulator's wording, marked "ours".
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from google.cloud import compute_v1, container_v1

from dws_operator.catalog import TPU_GENERATIONS, TpuGeneration, TpuMachineType, parse_topology
from dws_operator.catalog.tpu import TpuVersion
from dws_workshop.emulator.compute_rules import NAME_PATTERN
from dws_workshop.emulator.compute_state import READY, policy_path
from dws_workshop.emulator.config import ClusterConfig
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.emulator.status import invalid

#: (project, region, name) -> the resource policy as Compute holds it, or None.
PolicyLookup = Callable[[str, str, str], compute_v1.ResourcePolicy | None]

#: Generations whose multi-host slices must be placed by a workload policy.
WORKLOAD_POLICY_GENERATIONS = frozenset({TpuVersion.TPU7X})
#: GKE's answer to a topology that makes a single-host slice (typo included).
SINGLE_HOST_TOPOLOGY = (
    "TPU topology can't be specified with single-host TPU slice pool; please remove the "
    "tpu_topology from the node pool creation request if the node pool is intented to run "
    "with single-host TPU slice nodes."
)
_NAME_RE = re.compile(NAME_PATTERN)
_TOPOLOGY_FIELD = "node_pool.placement_policy.tpu_topology"
_POLICY_FIELD = "node_pool.placement_policy.policy_name"


def tpu_machine(machine_type: str) -> tuple[TpuGeneration, TpuMachineType] | None:
    for generation in TPU_GENERATIONS.values():
        machine = generation.machine_type(machine_type)
        if machine is not None:
            return generation, machine
    return None


def check_placement(
    pool: container_v1.NodePool, cluster: ClusterConfig, lookup: PolicyLookup
) -> None:
    """Raise the INVALID_ARGUMENT GKE answers CreateNodePool with for `pool`'s placement."""
    placement = pool.placement_policy
    if placement.policy_name:
        policy = _named_policy(placement.policy_name, cluster, lookup)
        if tpu_machine(pool.config.machine_type) is not None:
            _check_policy_topology(pool, placement.policy_name, policy)
    topology = placement.tpu_topology
    if topology:
        _check_topology(_TOPOLOGY_FIELD, topology, pool.config.machine_type, "topology")


@behaviour("GKE-TOPOLOGY-FROM-WORKLOAD-POLICY")
def resolve_topology(
    pool: container_v1.NodePool, cluster: ClusterConfig, lookup: PolicyLookup
) -> None:
    """Fill in the TPU topology GKE reads from a pool's workload policy (after the checks)."""
    placement = pool.placement_policy
    if not placement.policy_name or placement.tpu_topology:
        return
    if tpu_machine(pool.config.machine_type) is None:
        return
    policy = lookup(cluster.project, cluster.region, placement.policy_name)
    if policy is not None and policy.workload_policy.accelerator_topology:
        placement.tpu_topology = policy.workload_policy.accelerator_topology


@behaviour("GKE-TPU7X-NEEDS-WORKLOAD-POLICY")
def deferred_failure(pool: container_v1.NodePool) -> str | None:
    """The error a valid-looking create ends with once GKE builds the instance group."""
    found = tpu_machine(pool.config.machine_type)
    placement = pool.placement_policy
    if found is None or placement.policy_name or not placement.tpu_topology:
        return None
    generation, machine = found
    if generation.version not in WORKLOAD_POLICY_GENERATIONS:
        return None
    if _vms(placement.tpu_topology, machine) <= 1:
        return None
    return (
        f"Creation of a managed instance group with {machine.name} machine type with "
        "placement policy is not supported. Use workload policy instead."
    )


def _named_policy(
    name: str, cluster: ClusterConfig, lookup: PolicyLookup
) -> compute_v1.ResourcePolicy:
    path = policy_path(cluster.project, cluster.region, name)
    if not _NAME_RE.match(name):
        raise invalid(
            _POLICY_FIELD,
            f"{name!r} is not a resource policy name; give the name (not the path) of a "
            f"policy in project {cluster.project}, region {cluster.region}",  # ours
            rule="GKE-POLICY-NAME",
        )
    policy = lookup(cluster.project, cluster.region, name)
    if policy is None:
        raise invalid(
            _POLICY_FIELD,
            f"resource policy {path} not found; it must be in the same project and region "
            "as the node pool",  # ours
            rule="GKE-POLICY-NOT-FOUND",
        )
    if policy.status != READY:
        raise invalid(
            _POLICY_FIELD,
            f"resource policy {path} is {policy.status}, not READY",
            rule="GKE-POLICY-NOT-READY",
        )
    return policy


def _check_policy_topology(
    pool: container_v1.NodePool, name: str, policy: compute_v1.ResourcePolicy
) -> None:
    # Ours: GKE's wording for these is not documented.
    workload = policy.workload_policy
    if "workload_policy" not in policy or workload.type_ != "HIGH_THROUGHPUT":
        kind = f"a {workload.type_} workload policy" if workload.type_ else "not a workload policy"
        raise invalid(
            _POLICY_FIELD,
            f"resource policy {name!r} is {kind}; TPU slices need a HIGH_THROUGHPUT "
            "workload policy with an accelerator topology",
            rule="GKE-POLICY-WORKLOAD-TYPE",
        )
    topology = workload.accelerator_topology
    if not topology:
        raise invalid(
            _POLICY_FIELD,
            f"workload policy {name!r} has no accelerator topology; TPU slices need one",
            rule="GKE-POLICY-NO-TOPOLOGY",
        )
    given = pool.placement_policy.tpu_topology
    if given and given != topology:
        raise invalid(
            _TOPOLOGY_FIELD,
            f"{given!r} differs from the accelerator topology {topology} of workload "
            f"policy {name!r}",
            rule="GKE-POLICY-TOPOLOGY-MISMATCH",
        )
    _check_topology(
        _POLICY_FIELD, topology, pool.config.machine_type, f"workload policy {name!r} topology"
    )


def _check_topology(field: str, topology: str, machine_type: str, what: str) -> None:
    found = tpu_machine(machine_type)
    if found is None:
        raise invalid(
            field,
            f"machine type {machine_type!r} is not a TPU machine type",
            rule="GKE-TOPOLOGY-NOT-TPU",
        )
    generation, machine = found
    sides = parse_topology(topology)
    if sides is None or len(sides) != generation.dimensions:
        raise invalid(
            field,
            f"{topology!r} is not a {generation.dimensions}-D topology of TPU "
            f"{generation.version.value}",
            rule="GKE-TOPOLOGY-SHAPE",
        )
    chips = math.prod(sides)
    hosts = generation.machine_types_for(topology)
    if chips % machine.chips or machine.name not in hosts:
        allowed = ", ".join(hosts) if hosts else "none"
        raise invalid(
            field,
            f"{what} {topology} ({chips} chips) does not fit machine type {machine.name} "
            f"({machine.chips} chips per VM); machine types for {topology}: {allowed}",
            rule="GKE-TOPOLOGY-MACHINE",
        )
    if chips // machine.chips == 1:
        raise invalid(field, SINGLE_HOST_TOPOLOGY, rule="GKE-TOPOLOGY-SINGLE-HOST")


def _vms(topology: str, machine: TpuMachineType) -> int:
    return math.prod(parse_topology(topology) or (0,)) // machine.chips
