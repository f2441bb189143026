"""GKE's checks on a node pool, applied before any state changes.

Each broken rule is an INVALID_ARGUMENT whose message starts with the request field
at fault. The first broken rule wins, as with GKE. TPU and GPU shapes come from the
operator's catalog, so the emulator and the planner agree on what a slice is.
"""

from __future__ import annotations

import re

from google.cloud import container_v1

from dws_operator.api.base import NODE_POOL_NAME_PATTERN
from dws_operator.catalog import GPU_ACCELERATORS, MAX_RUN_DURATION_SECONDS, topology_chips
from dws_operator.catalog.modes import RESERVATION_NAME_KEY
from dws_workshop.emulator.config import ClusterConfig
from dws_workshop.emulator.node_config_rules import check_node_config
from dws_workshop.emulator.placement import PolicyLookup, check_placement, tpu_machine
from dws_workshop.emulator.status import invalid

__all__ = [
    "accelerator_per_node",
    "tpu_machine",
    "validate_autoscaling",
    "validate_name",
    "validate_new_pool",
]

#: GKE's answer to an autoscaling block with both a per-zone and a total maximum
#: (an update GKE rejected, as a 2026 GKE fleet-audit runbook quotes it; secondary).
BOTH_LIMITS = (
    "node_pool_autoscaling.max_node_count and node_pool_autoscaling.total_max_node_count "
    "cannot be both greater than zero"
)
#: GKE's answer to creating an autoscaled pool with neither maximum (a CreateNodePool in
#: terraform-google-modules/terraform-google-kubernetes-engine#1554, 2023).
NO_LIMIT = (
    "Node_pool_autoscaling.max_node_count and node_pool_autoscaling.total_max_node_count "
    "cannot be both set to zero."
)
_NAME_RE = re.compile(NODE_POOL_NAME_PATTERN)
#: TPU generations flex-start does not serve: v3 and v4.
_NO_FLEX_START_TPU_PREFIXES = ("ct4p-", "ct3-", "ct3p-")
#: GPU machine types flex-start does not serve (the catalog's A4X row): "A4X Max and A4X
#: compute instances can't be provisioned by flex-start" (AI Hypercomputer's GKE guide).
_NO_FLEX_START_GPU_MACHINES = {
    m.name: a.type.value
    for a in GPU_ACCELERATORS.values()
    if not a.flex_start
    for m in a.machine_types
}

Autoscaling = container_v1.NodePoolAutoscaling | None
_NO_RESERVATION = container_v1.ReservationAffinity.Type.NO_RESERVATION
_SPECIFIC_RESERVATION = container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION


def accelerator_per_node(pool: container_v1.NodePool) -> tuple[str, int] | None:
    """(accelerator, chips or GPUs per VM) for quota accounting; None for plain VMs."""
    found = tpu_machine(pool.config.machine_type)
    if found is not None:
        generation, machine = found
        return generation.accelerator_label, machine.chips
    if pool.config.accelerators:
        accelerator = pool.config.accelerators[0]
        return accelerator.accelerator_type, accelerator.accelerator_count
    return None


def validate_name(name: str) -> None:
    if not _NAME_RE.match(name):
        raise invalid(
            "node_pool.name",
            f"{name!r} is not a valid node pool name: use at most 40 lowercase letters, "
            "digits and hyphens, starting with a letter and ending with a letter or digit",
            rule="GKE-POOL-NAME",
        )


def validate_autoscaling(field: str, autoscaling: container_v1.NodePoolAutoscaling) -> None:
    if not autoscaling.enabled:
        return
    per_zone = (autoscaling.min_node_count, autoscaling.max_node_count)
    total = (autoscaling.total_min_node_count, autoscaling.total_max_node_count)
    for suffix, (low, high) in (("", per_zone), ("total_", total)):
        if low < 0:
            raise invalid(
                f"{field}.{suffix}min_node_count",
                f"must be >= 0, got {low}",
                rule="GKE-AUTOSCALING-MIN-NEGATIVE",
            )
        if high < low:
            raise invalid(
                f"{field}.{suffix}max_node_count",
                f"must be >= {suffix}min_node_count ({low}), got {high}",
                rule="GKE-AUTOSCALING-MAX-BELOW-MIN",
            )
    # The two families are mutually exclusive. With each minimum at most its maximum,
    # both maximums set is the only way to set both.
    if per_zone[1] and total[1]:
        raise invalid(field, BOTH_LIMITS, rule="GKE-AUTOSCALING-BOTH-MAXIMA")


def validate_new_autoscaling(field: str, autoscaling: container_v1.NodePoolAutoscaling) -> None:
    """CreateNodePool's extra rule: an autoscaled pool needs a maximum of some kind."""
    validate_autoscaling(field, autoscaling)
    if autoscaling.enabled and not (autoscaling.max_node_count or autoscaling.total_max_node_count):
        raise invalid(field, NO_LIMIT, rule="GKE-AUTOSCALING-NO-MAXIMUM")


def validate_new_pool(
    pool: container_v1.NodePool, cluster: ClusterConfig, policies: PolicyLookup
) -> None:
    """Raise the INVALID_ARGUMENT GKE would answer a CreateNodePool for `pool` with.

    `policies` finds the Compute resource policies a pool's placement may name.
    """
    validate_name(pool.name)
    config = pool.config
    for index, zone in enumerate(pool.locations):
        if not cluster.in_region(zone):
            raise invalid(
                f"node_pool.locations[{index}]",
                f"{zone!r} is not a zone of cluster {cluster.name}'s region {cluster.region}",
                rule="GKE-POOL-LOCATIONS",
            )
    if pool.initial_node_count < 0:
        raise invalid("node_pool.initial_node_count", "must be >= 0", rule="GKE-INITIAL-NODE-COUNT")
    validate_new_autoscaling("node_pool.autoscaling", pool.autoscaling)
    # Queued provisioning first: its pools are flex-start pools with stricter rules,
    # and its own messages say more than flex-start's would.
    if pool.queued_provisioning.enabled:
        _check_queued_provisioning(pool)
    if config.flex_start:
        _check_flex_start(pool)
    _check_reservation(config.reservation_affinity)
    check_placement(pool, cluster, policies)
    _check_one_zone(pool, cluster)
    topology = slice_topology(pool, cluster, policies)
    if topology is not None:
        check_slice_maximum("node_pool.autoscaling", pool, topology)
    _check_gpus(config)
    check_node_config(config, cluster)


def _check_one_zone(pool: container_v1.NodePool, cluster: ClusterConfig) -> None:
    """A TPU slice and a compact placement live in one zone (a pool without locations
    takes the cluster's: one for a zonal cluster, several for a regional one)."""
    placement = pool.placement_policy
    zones = list(pool.locations) or cluster.node_zones
    if len(zones) == 1:
        return
    named = ", ".join(zones)
    if tpu_machine(pool.config.machine_type) and (placement.tpu_topology or placement.policy_name):
        raise invalid(
            "node_pool.locations",
            f"a multi-host TPU slice node pool must be in exactly one zone, got {named}",
            rule="GKE-TPU-SLICE-ONE-ZONE",
        )
    if placement.type_ == container_v1.NodePool.PlacementPolicy.Type.COMPACT:
        raise invalid(
            "node_pool.placement_policy",
            f"compact placement is only available in a single zone, got {named}",
            rule="GKE-COMPACT-ONE-ZONE",
        )


def slice_topology(
    pool: container_v1.NodePool, cluster: ClusterConfig, policies: PolicyLookup
) -> str | None:
    """The TPU topology of a multi-host slice pool (its own, or its workload policy's);
    None for any other pool."""
    if tpu_machine(pool.config.machine_type) is None:
        return None
    placement = pool.placement_policy
    if placement.tpu_topology:
        return str(placement.tpu_topology)
    if placement.policy_name:
        policy = policies(cluster.project, cluster.region, placement.policy_name)
        if policy is not None and policy.workload_policy.accelerator_topology:
            return str(policy.workload_policy.accelerator_topology)
    return None


def check_slice_maximum(
    field: str, pool: container_v1.NodePool, topology: str, autoscaling: Autoscaling = None
) -> None:
    """GKE checks a multi-host slice against the pool's per-zone maximum, which must be
    a whole number of slices: whole-pool (total) limits leave it 0."""
    scaling = autoscaling if autoscaling is not None else pool.autoscaling
    if not scaling.enabled:
        return
    found = tpu_machine(pool.config.machine_type)
    assert found is not None
    nodes = max(1, topology_chips(topology) // found[1].chips)
    maximum = int(scaling.max_node_count)
    if maximum <= 0 or maximum % nodes:
        raise invalid(
            field,
            f"Maximum node count {maximum} is not a valid size of TPU pod slice with "
            f"topology {topology}",
            rule="GKE-TPU-SLICE-MAX-NODES",
        )


def _check_flex_start(pool: container_v1.NodePool) -> None:
    config, autoscaling = pool.config, pool.autoscaling
    if not autoscaling.enabled or autoscaling.min_node_count or autoscaling.total_min_node_count:
        raise invalid(
            "node_pool.autoscaling",
            "flex-start node pools need autoscaling enabled with min_node_count 0",
            rule="GKE-FLEX-AUTOSCALING",
        )
    if config.reservation_affinity.consume_reservation_type != _NO_RESERVATION:
        raise invalid(
            "node_pool.config.reservation_affinity.consume_reservation_type",
            "flex-start node pools cannot consume reservations; set NO_RESERVATION",
            rule="GKE-FLEX-NO-RESERVATION",
        )
    if config.spot:
        raise invalid(
            "node_pool.config.spot",
            "flex-start node pools cannot use Spot VMs",
            rule="GKE-FLEX-NO-SPOT",
        )
    if config.machine_type.startswith(_NO_FLEX_START_TPU_PREFIXES):
        raise invalid(
            "node_pool.config.machine_type",
            f"flex-start does not support TPU v3 or v4 ({config.machine_type})",
            rule="GKE-FLEX-TPU-V3-V4",
        )
    gpu = _NO_FLEX_START_GPU_MACHINES.get(config.machine_type)
    if gpu is not None:
        # Ours: GKE's own wording for this refusal was not found.
        queued = pool.queued_provisioning.enabled
        kind = "flex-start with queued provisioning" if queued else "flex-start"
        raise invalid(
            "node_pool.config.machine_type",
            f"{kind} does not support machine type {config.machine_type} ({gpu}): A4X "
            "VMs are not provisioned by flex-start; use a reservation",
            rule="GKE-FLEX-A4X",
        )
    # Read the raw protobuf: proto-plus would hand back a timedelta the stubs don't know.
    seconds = int(container_v1.NodeConfig.pb(config).max_run_duration.seconds)
    if seconds < 0 or seconds > MAX_RUN_DURATION_SECONDS:
        raise invalid(
            "node_pool.config.max_run_duration",
            f"must be between 0 and {MAX_RUN_DURATION_SECONDS}s (7 days), got {seconds:g}s",
            rule="GKE-FLEX-MAX-RUN-DURATION",
        )


def _check_queued_provisioning(pool: container_v1.NodePool) -> None:
    """GKE's rules for a flex-start-with-queued-provisioning pool: GPUs and the TPUs
    flex-start serves (v4 is refused by flex-start's own rule)."""
    config, autoscaling = pool.config, pool.autoscaling
    if not config.flex_start:
        # Our wording: GKE's how-to requires --flex-start with --enable-queued-provisioning,
        # but no published error text for a pool without it was found.
        raise invalid(
            "node_pool.config.flex_start",
            "queued provisioning node pools must use flex-start: set config.flex_start "
            "(gcloud --flex-start) together with queued_provisioning.enabled",
            rule="GKE-QP-NEEDS-FLEX-START",
        )
    if not autoscaling.enabled:
        raise invalid(
            "node_pool.autoscaling.enabled",
            "queued provisioning node pools need autoscaling enabled",
            rule="GKE-QP-AUTOSCALING",
        )
    for field in ("min_node_count", "total_min_node_count"):
        low = int(getattr(autoscaling, field))
        if low:
            raise invalid(
                f"node_pool.autoscaling.{field}",
                f"queued provisioning node pools scale from zero: must be 0, got {low}",
                rule="GKE-QP-MIN-ZERO",
            )
    if pool.initial_node_count:
        raise invalid(
            "node_pool.initial_node_count",
            "queued provisioning node pools start empty: nodes come only from ProvisioningRequests",
            rule="GKE-QP-INITIAL-ZERO",
        )
    if config.reservation_affinity.consume_reservation_type != _NO_RESERVATION:
        raise invalid(
            "node_pool.config.reservation_affinity.consume_reservation_type",
            "queued provisioning node pools cannot consume reservations; set NO_RESERVATION",
            rule="GKE-QP-NO-RESERVATION",
        )


def _check_reservation(affinity: container_v1.ReservationAffinity) -> None:
    if affinity.consume_reservation_type != _SPECIFIC_RESERVATION:
        return
    if affinity.key != RESERVATION_NAME_KEY:
        raise invalid(
            "node_pool.config.reservation_affinity.key",
            f"SPECIFIC_RESERVATION needs key {RESERVATION_NAME_KEY!r}, got {affinity.key!r}",
            rule="GKE-RESERVATION-KEY",
        )
    if len(affinity.values) != 1 or not affinity.values[0]:
        raise invalid(
            "node_pool.config.reservation_affinity.values",
            "SPECIFIC_RESERVATION needs exactly one reservation name",
            rule="GKE-RESERVATION-NAME",
        )


def _check_gpus(config: container_v1.NodeConfig) -> None:
    for accelerator in GPU_ACCELERATORS.values():
        machine = accelerator.machine_type(config.machine_type)
        if machine is None:
            continue
        for index, given in enumerate(config.accelerators):
            if (given.accelerator_type, given.accelerator_count) != (
                accelerator.type.value,
                machine.gpus,
            ):
                raise invalid(
                    f"node_pool.config.accelerators[{index}]",
                    f"machine type {machine.name} carries {machine.gpus} "
                    f"{accelerator.type.value}; got {given.accelerator_count} "
                    f"{given.accelerator_type or 'unspecified'}",
                    rule="GKE-GPU-ACCELERATORS",
                )
        return
