"""How many nodes a node pool may have: the one reading of GKE's autoscaling limits
that the controller, the emulator and the load runs share.

An autoscaled pool's limit is either a total across its zones (`total_max_node_count`,
what location policy ANY pools use) or a per-zone maximum that holds in each of its
zones. A pool that is not autoscaled has the size it was given, and the autoscaler
adds nothing to it.
"""

from __future__ import annotations

from google.cloud import container_v1


def autoscaler_max(autoscaling: container_v1.NodePoolAutoscaling, zones: int) -> int:
    """The most nodes the autoscaler may give a pool across `zones` zones (0: the pool
    is not autoscaled)."""
    if not autoscaling.enabled:
        return 0
    if autoscaling.total_max_node_count:
        return int(autoscaling.total_max_node_count)
    return int(autoscaling.max_node_count) * max(1, zones)


def max_nodes(pool: container_v1.NodePool) -> int:
    """The most nodes the autoscaler may give `pool` (0: not autoscaled). GKE lists every
    zone of a pool in `locations`."""
    return autoscaler_max(pool.autoscaling, len(pool.locations))


def holds_slice(pool: container_v1.NodePool) -> bool:
    """Whether `pool` is a multi-host TPU slice pool (a compact placement with a TPU
    topology, or a workload policy): GKE checks its autoscaling maximum against the
    slice's size, so the operator never caps it at zero but resizes it to zero with its
    bounds left at the slice's size (what stops new nodes is that no pod asks for them)."""
    placement = pool.placement_policy
    return bool(placement.tpu_topology or placement.policy_name)


def ceiling(pool: container_v1.NodePool) -> int:
    """The most nodes `pool` may have: its autoscaling maximum, or its fixed size."""
    if not pool.autoscaling.enabled:
        return int(pool.initial_node_count)
    return max_nodes(pool)


def zone_limit(pool: container_v1.NodePool) -> int | None:
    """The most nodes one zone of `pool` may hold: its per-zone maximum; None when its
    limits are the pool's total (or it is not autoscaled: only resizes set its size)."""
    autoscaling = pool.autoscaling
    if not autoscaling.enabled or autoscaling.total_max_node_count:
        return None
    return int(autoscaling.max_node_count)
