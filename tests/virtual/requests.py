"""Several TrainingRequests served by one virtual operator, and what the pool-reuse,
restart and orphan tests read of it: the request's pool as its status names it, a
pool's autoscaling ceiling, GKE's calls on a pool, and the operator's own metrics."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from google.cloud import container_v1

from dws_operator.api import GROUP, PLURAL, VERSION
from tests.virtual.harness import VirtualOperator


def another(op: VirtualOperator) -> VirtualOperator:
    """Another request's view of the same API server, GKE and operator: its own name;
    the operator is started, killed and stopped through `op` only (the view's
    `controller` is the one running when it was made)."""
    view = dataclasses.replace(op, name=f"tr-{uuid.uuid4().hex[:6]}")
    view.controller = op.controller
    return view


async def pool_of(op: VirtualOperator) -> str:
    """The pool the request's status names, once it names one."""
    name: str = await op.until(
        lambda: (op.status().get("nodePool") or {}).get("name"), f"{op.name}: status.nodePool"
    )
    return name


async def patch(op: VirtualOperator, body: dict[str, Any], *, status: bool = False) -> None:
    """A JSON merge patch of the request (of its /status with `status`), as a person or
    another client writes it."""
    path = f"/apis/{GROUP}/{VERSION}/namespaces/{op.namespace}/{PLURAL}/{op.name}"
    await op.call(
        "PATCH",
        f"{path}/status" if status else path,
        body,
        content_type="application/merge-patch+json",
    )


def reused(op: VirtualOperator) -> bool:
    return bool((op.status().get("nodePool") or {}).get("reused"))


def pool_max(op: VirtualOperator, name: str) -> int:
    """The pool's autoscaling ceiling (per zone or in total, whichever is set); -1 when
    GKE has no such pool."""
    pool = op.pool(name)
    if pool is None:
        return -1
    return int(max(pool.autoscaling.max_node_count, pool.autoscaling.total_max_node_count))


def updates(op: VirtualOperator, pool: str) -> list[str]:
    """The relabelling and ceiling calls GKE carried out on `pool`, in order."""
    path = f"{op.cluster}/nodePools/{pool}"
    return [
        c.method
        for c in op.emulator.calls
        if c.ok
        and c.method in ("UpdateNodePool", "SetNodePoolAutoscaling")
        and c.request.name == path
    ]


def creates(op: VirtualOperator) -> int:
    """CreateNodePool calls GKE carried out."""
    return len(op.created_pools())


async def finish(op: VirtualOperator) -> None:
    """Stand in for the Job controller: the request's Job succeeds; then wait until the
    operator has scaled its pool down (scaledDownAt) and GKE has no operation left on
    it. A GPU pool is ScaledToZero once its ceiling is 0 and no Node is on it, while
    its resize to zero may still run; a pool under an operation is not idle, and a
    request of its shape coming meanwhile makes a pool of its own."""
    await op.job_succeeded()
    await op.wait_phase("Succeeded")
    await op.until(lambda: op.status().get("scaledDownAt"), f"{op.name}: scaledDownAt")
    pool = await pool_of(op)
    await op.until(lambda: settled(op, pool), f"{pool}: GKE's operations on it done")


def settled(op: VirtualOperator, name: str) -> bool:
    """Whether GKE has the pool with no operation on it (RUNNING)."""
    pool = op.pool(name)
    return pool is not None and pool.status == container_v1.NodePool.Status.RUNNING


async def make_pool(op: VirtualOperator, pool: container_v1.NodePool) -> None:
    """A pool made in GKE directly, as a platform team would, waited for until done."""
    operation = await op.gke.create_node_pool(
        container_v1.CreateNodePoolRequest(parent=op.cluster, node_pool=pool)
    )
    location = op.cluster.rsplit("/clusters/", 1)[0]
    path = f"{location}/operations/{operation.name}"
    done = container_v1.Operation.Status.DONE

    async def finished() -> bool:
        answer = await op.gke.get_operation(container_v1.GetOperationRequest(name=path))
        return bool(answer.status == done)

    await op.until(finished, f"the pool {pool.name} made")


def metric(op: VirtualOperator, name: str) -> dict[tuple[str, tuple[Any, ...]], float]:
    """The samples of the running operator's metric `name` in one collection, by sample
    name and label values."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in op.controller.reconciler.metrics.registry.collect()
        if family.name == name
        for sample in family.samples
    }


def writes_per_pass(op: VirtualOperator) -> tuple[float, float, float]:
    """Passes that wrote no status, one status and more than one, as the running
    operator's `dws_reconcile_status_writes` histogram counts them."""
    buckets = {
        dict(labels)["le"]: value
        for (sample, labels), value in metric(op, "dws_reconcile_status_writes").items()
        if sample.endswith("_bucket")
    }
    none, at_most_one, total = buckets["0.0"], buckets["1.0"], buckets["+Inf"]
    return none, at_most_one - none, total - at_most_one


def orphaned_pools(op: VirtualOperator) -> float:
    """The running operator's `dws_orphaned_node_pools` gauge."""
    [value] = metric(op, "dws_orphaned_node_pools").values()
    return value
