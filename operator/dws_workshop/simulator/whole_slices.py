"""Queued TPU pools give a ProvisioningRequest whole slices or nothing.

Cluster Toolkit's dws-flex-start-queued-provisioning TPU blueprints (gke-tpu-v6e,
gke-tpu-7x) size a multi-host pool to one slice (autoscaling max = nodes of the slice)
and queue JobSets whose ProvisioningRequests ask for all of it, naming the slice in
`spec.parameters["tpu-topology"]`. So, for a pool of TPUs:

- multi-host: the request's count must be the slice's nodes (`4x4` on
  `ct6e-standard-4t`: 4), all provisioned at once;
- single-host: each VM is a slice, so any count is whole slices (the pool's maximum
  still bounds it, as for GPUs);
- a `tpu-topology` parameter, when given, must be the pool's topology. A multi-host
  pool's is `placement_policy.tpu_topology`; a single-host pool has none, so it is
  derived from the machine type: the catalog's topology that fills one VM of it
  (`ct6e-standard-4t` -> `2x2`, `ct6e-standard-8t` -> `2x4`, `ct5p-hightpu-4t` ->
  `2x2x1`; see `nodes.pool_shape`).

GPU pools take any count up to their maximum. A request that no matching pool can serve
whole is answered Provisioned=False with reason `NotProvisioned`, the closest of GKE's
documented reasons (its message is ours: GKE's own wording for this case is not
published), and gets no nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.simulator.autoscaler_view import ScalingPool


@dataclass(frozen=True)
class Choice:
    """The pool a request draws from, and why it cannot be served, if it cannot."""

    pool: ScalingPool
    refusal: str | None = None


@behaviour("SIM-QP-WHOLE-SLICES")
def refusal(pool: ScalingPool, count: int, topology: str | None) -> str | None:
    """Why `pool` cannot give `count` nodes of `topology` as whole slices; None if it can."""
    shape = pool.shape
    if shape.tpu_topology is None:
        return None
    if topology is not None and topology != shape.tpu_topology:
        return (
            f"Node pool {pool.name} provisions TPU slices of topology {shape.tpu_topology}; "
            f"the request asks for tpu-topology {topology}."
        )
    if shape.multi_host and count != shape.slice_nodes:
        return (
            f"Node pool {pool.name} provisions its {shape.tpu_topology} TPU slice whole "
            f"({shape.slice_nodes} nodes); the request asks for {count}."
        )
    return None


def choose(candidates: list[ScalingPool], count: int, topology: str | None) -> Choice | None:
    """The first candidate that serves the request whole; else the first candidate, with
    its refusal; None without candidates."""
    if not candidates:
        return None
    for pool in candidates:
        if refusal(pool, count, topology) is None:
            return Choice(pool)
    first = candidates[0]
    return Choice(first, refusal(first, count, topology))
