"""The request's node pools: checked against the cluster before the first is asked for,
then created (or an idle one taken over) and followed until every slice's is ready.
Pure."""

from __future__ import annotations

from dws_operator.api import TERMINAL_PHASES, Phase, ProvisioningSpec, TrainingRequestSpec
from dws_operator.catalog import unmet_gates, version_gates
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import CreateNodePool, TakeOverNodePool
from dws_operator.reconcile.decision import (
    NODES_IN_USE_SECONDS,
    Decision,
    Draft,
    pool_list,
    until_timeout,
)
from dws_operator.reconcile.observed import Observed, PoolState
from dws_operator.reconcile.step import step_of
from dws_operator.zones import region_of


def zones_outside(
    run: Draft, ladder: tuple[ProvisioningSpec, ...], location: str | None
) -> Decision | None:
    """Failed at once when a step names a zone outside the cluster's region: GKE refuses
    such a pool, and finding out only when the ladder gets to that step wastes the
    steps before it."""
    if location is None or run.status.phase in TERMINAL_PHASES:
        return None
    region = region_of(location)
    for index, provisioning in enumerate(ladder):
        path = "spec.provisioning" if index == 0 else f"spec.provisioning.fallback[{index - 1}]"
        for zone in provisioning.zones or ():
            if region_of(zone) != region:
                return run.fail(
                    "ZoneOutsideCluster",
                    f"{path}.zones: {zone} is not in the cluster's region {region} (cluster "
                    f"location {location}); GKE makes node pools only in its cluster's region",
                )
    return None


def gke_too_old(
    run: Draft,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    ladder: tuple[ProvisioningSpec, ...],
) -> Decision | None:
    """Failed at once when the cluster's GKE is older than a feature of the request needs:
    GKE would refuse the pool, or accept settings it ignores. Checked only before the
    first pool is created (every step of a ladder then, not when the ladder reaches
    it); a pool GKE already made proves the version was enough."""
    observed = run.observed
    cluster = observed.cluster_version
    if cluster is None or any(p is not None for p in observed.slice_pools(plan.slices)):
        return None
    if len(ladder) > 1 and step_of(run.request) > 0:
        return None  # checked for every step on the first
    tpu = spec.accelerator.tpu
    gates = [
        gate
        for mode in dict.fromkeys(step.mode for step in ladder)
        for gate in version_gates(plan.kind, mode, tpu.version if tpu else None, plan.slices)
    ]
    unmet = list(dict.fromkeys(unmet_gates(cluster, gates)))
    if not unmet:
        return None
    needs = ", ".join(f"{g.feature} requires GKE {g.minimum} or later" for g in unmet)
    return run.fail("GkeVersionTooOld", f"{needs}; this cluster runs GKE {cluster}")


def ensure_pools(
    run: Draft, spec: TrainingRequestSpec, plan: SlicePlan, managed: bool
) -> Decision | None:
    """Ensure the pool; a Decision while it is not ready, None once work can run on it."""
    pool = run.observed.pool
    name = plan.node_pool.name or ""
    if not managed:
        if pool is None:
            return run.fail("NodePoolNotFound", f"existing node pool {name} does not exist")
        if pool.machine_type != plan.machine_type:
            return run.fail(
                "NodePoolMismatch",
                f"node pool {name} runs {pool.machine_type}, the request needs {plan.machine_type}",
            )
        if plan.kind == "gpu" and pool.accelerator_type not in (None, plan.accelerator_label):
            return run.fail(
                "NodePoolMismatch",
                f"node pool {name} carries {pool.accelerator_type}, not {plan.accelerator_label}",
            )
        if pool.max_nodes < plan.nodes:
            return run.fail(
                "NodePoolTooSmall",
                f"node pool {name} has at most {pool.max_nodes} nodes; the slice needs "
                f"{plan.nodes}",
            )
        free = pool.max_nodes - run.observed.nodes_used_by_others
        if run.observed.job is None and free < plan.nodes:
            message = f"{free} of {pool.max_nodes} nodes of {name} free, {plan.nodes} needed"
            run.condition(cond.NODE_POOL_READY, "False", "NodesInUse", message)
            waiting = f"Waiting for nodes of {name}: {message}"
            return run.phase(Phase.PENDING, waiting, NODES_IN_USE_SECONDS)
        run.condition(cond.NODE_POOL_READY, "True", "Existing", f"using existing node pool {name}")
        return None
    pools = run.observed.slice_pools(plan.slices)
    missing = [n for n, p in zip(plan.pool_names, pools, strict=True) if p is None]
    busy: list[tuple[str, PoolState]] = []
    operations = run.observed.operations
    for pool_name, slice_pool in zip(plan.pool_names, pools, strict=True):
        if slice_pool is None:
            continue
        if not slice_pool.ours and run.observed.takeover:
            return _take_over(run, plan, pool_name)
        if not slice_pool.ours:
            return run.fail(
                "NodePoolNameTaken", f"node pool {pool_name} exists and belongs to something else"
            )
        if (
            slice_pool.max_nodes == 0
            and slice_pool.state in (PoolState.RUNNING, PoolState.RECONCILING)
            and run.observed.job is None
        ):
            # Ours but capped at zero before the work began: an interrupted takeover
            # (labels set, ceiling not yet: RECONCILING while GKE still works on it, and
            # an operator started since knows of no operation) or a pool someone capped.
            # Its ceiling back; never ready while capped.
            return _take_over(run, plan, pool_name)
        taking = operations.get(pool_name)
        if taking is not None and taking.mine and taking.kind == "TakeOver":
            # Ours once relabelled, while GKE still sets its ceiling (the pool shows
            # RECONCILING, still capped at zero): not ready until the takeover ends.
            return _take_over(run, plan, pool_name)
        if slice_pool.state == PoolState.ERROR:
            return run.fail(
                "NodePoolError", slice_pool.message or f"node pool {pool_name} is in error"
            )
        if slice_pool.state in (PoolState.PROVISIONING, PoolState.STOPPING):
            busy.append((pool_name, slice_pool.state))
    if missing:
        # Every missing pool at once: a multi-slice request waits for the slowest anyway.
        for pool_name in missing:
            if pool_name not in operations:
                run.act(CreateNodePool(name=pool_name, plan=plan))
        names = pool_list(missing)
        queued = _queued(run.observed, missing)
        if queued is not None:
            run.condition(cond.NODE_POOL_READY, "False", "WaitingForOperationSlot", queued)
            return run.phase(
                Phase.PROVISIONING, f"Creating {names}: {queued}", until_timeout(run, plan)
            )
        retrying = next((operations[n].retrying for n in missing if n in operations), "")
        detail = f" ({retrying}; retrying)" if retrying else ""
        run.condition(cond.NODE_POOL_READY, "False", "Creating", f"creating {names}{detail}")
        return run.phase(Phase.PROVISIONING, f"Creating {names}{detail}", until_timeout(run, plan))
    if busy:
        states = "; ".join(f"node pool {n} {state}" for n, state in busy)
        run.condition(cond.NODE_POOL_READY, "False", "Provisioning", states)
        message = "; ".join(f"Node pool {n} is {state.lower()}" for n, state in busy)
        return run.phase(Phase.PROVISIONING, message, until_timeout(run, plan))
    ready = pool_list(list(plan.pool_names))
    run.condition(cond.NODE_POOL_READY, "True", "Created", f"{ready} {_are(plan)} ready")
    return None


def _take_over(run: Draft, plan: SlicePlan, name: str) -> Decision:
    """An idle pool of this request's shape becomes its own (one pool serves one request
    at a time): its labels, then its ceiling, in one of the cluster's operation slots."""
    if name not in run.observed.operations:
        run.act(TakeOverNodePool(name=name, plan=plan))
    queued = _queued(run.observed, [name])
    detail = f": {queued}" if queued else ""
    message = f"taking over idle node pool {name} (same shape){detail}"
    run.condition(cond.NODE_POOL_READY, "False", "Reusing", message)
    return run.phase(Phase.PROVISIONING, message[0].upper() + message[1:], until_timeout(run, plan))


def _queued(observed: Observed, pools: list[str]) -> str | None:
    """Why a pool's operation has not started yet (the cluster's operation slots are
    taken), with its place in line; None when it runs or can start at once."""
    views = [observed.operations[p] for p in pools if p in observed.operations]
    waiting = [v for v in views if not v.running]
    if views and not waiting:
        return None
    if waiting:
        first = min(waiting, key=lambda v: v.position)
        position, slots = first.position, first.slots
    elif observed.create_position > 0:
        position, slots = observed.create_position, 0
    else:
        return None
    limit = (
        f"GKE runs {slots} node pool operations at a time in this cluster"
        if slots
        else ("the cluster's GKE operation slots are taken")
    )
    return f"waiting for a GKE operation slot, position {position} in line ({limit})"


def _are(plan: SlicePlan) -> str:
    return "is" if plan.slices == 1 else "are"
