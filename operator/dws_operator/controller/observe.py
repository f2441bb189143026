"""Reading the world into an `Observed`: the TrainingRequest, its pool, Job and Service."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.cloud import container_v1
from kubernetes.aio import client as k8s
from pydantic import ValidationError

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.catalog import GkeVersion
from dws_operator.controller.kube import KubeApi
from dws_operator.gke import NodePoolClient, owned_by
from dws_operator.multislice import JOBSET_KIND
from dws_operator.reconcile import JobView, Observed, PoolState, PoolView, RequestView
from dws_operator.reconcile.decide import pool_names_for, workload_kind
from dws_operator.workload import DISRUPTION_CONDITION, job_name, service_name

log = logging.getLogger(__name__)
_UNREADABLE: set[str] = set()

#: Phases in which a request holds nodes of its pool (seed 003's "used by other jobs").
HOLDING = (Phase.WAITING_FOR_CAPACITY, Phase.RUNNING)


def request_view(body: Mapping[str, Any]) -> RequestView:
    metadata = body.get("metadata", {})
    try:
        status = TrainingRequestStatus.model_validate(body.get("status") or {})
    except ValidationError:
        # A status we cannot read (hand-edited, older operator) is rebuilt from scratch.
        status = TrainingRequestStatus()
    return RequestView(
        name=metadata["name"],
        namespace=metadata["namespace"],
        uid=metadata["uid"],
        generation=int(metadata.get("generation", 1)),
        deleting=metadata.get("deletionTimestamp") is not None,
        spec=body.get("spec") or {},
        status=status,
    )


def pool_view(pool: container_v1.NodePool, uid: str) -> PoolView:
    scaling = pool.autoscaling
    if scaling.enabled and scaling.total_max_node_count:
        max_nodes = scaling.total_max_node_count
    elif scaling.enabled:
        # A per-zone maximum holds in each of the pool's zones (GKE lists them all).
        max_nodes = scaling.max_node_count * max(1, len(pool.locations))
    else:
        max_nodes = pool.initial_node_count
    accelerators = list(pool.config.accelerators)
    return PoolView(
        name=pool.name,
        state=PoolState(container_v1.NodePool.Status(pool.status).name),
        ours=owned_by(pool, uid),
        max_nodes=max_nodes,
        machine_type=pool.config.machine_type,
        accelerator_type=accelerators[0].accelerator_type if accelerators else None,
        message=pool.status_message,
    )


def job_view(job: k8s.V1Job, uid: str) -> JobView:
    metadata, status = job.metadata, job.status
    owners = (metadata.owner_references if metadata else None) or []
    conditions = (status.conditions if status else None) or []

    def true(kind: str) -> k8s.V1JobCondition | None:
        return next((c for c in conditions if c.type == kind and c.status == "True"), None)

    failed = true("Failed")
    disrupted = (
        failed is not None
        and failed.reason == "PodFailurePolicy"
        and DISRUPTION_CONDITION in (failed.message or "")
    )
    return JobView(
        name=(metadata.name if metadata else None) or "",
        ours=any(o.uid == uid for o in owners),
        complete=true("Complete") is not None,
        failed=failed is not None,
        failure_reason=(failed.reason if failed else None) or "",
        failure_message=(failed.message if failed else None) or "",
        disrupted=disrupted,
        suspended=bool(job.spec and job.spec.suspend),
        active=(status.active if status else None) or 0,
        ready=(status.ready if status else None) or 0,
        succeeded=(status.succeeded if status else None) or 0,
    )


def jobset_view(jobset: Mapping[str, Any], children: list[k8s.V1Job], uid: str) -> JobView:
    """A JobSet seen as one Job: complete or failed as the JobSet says, disrupted when a
    slice's Job failed because a node was lost, ready = pods ready over all slices."""
    metadata = jobset.get("metadata") or {}
    conditions = (jobset.get("status") or {}).get("conditions") or []

    def true(kind: str) -> Mapping[str, Any] | None:
        return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)

    failed = true("Failed")
    jobs = [job_view(child, "") for child in children]
    return JobView(
        name=metadata.get("name", ""),
        ours=any(o.get("uid") == uid for o in metadata.get("ownerReferences") or []),
        complete=true("Completed") is not None,
        failed=failed is not None,
        failure_reason=(failed or {}).get("reason", ""),
        failure_message=(failed or {}).get("message", ""),
        disrupted=failed is not None and any(j.disrupted for j in jobs),
        suspended=bool((jobset.get("spec") or {}).get("suspend")),
        active=sum(j.active for j in jobs),
        ready=sum(j.ready for j in jobs),
        succeeded=sum(j.succeeded for j in jobs),
    )


async def _workload(
    kube: KubeApi, request: RequestView, kind: str, name: str
) -> tuple[JobView | None, list[str]]:
    """The current attempt's workload and the names of every attempt's."""
    if kind == JOBSET_KIND:
        jobset = await kube.jobset(request.namespace, name)
        view = None
        if jobset is not None:
            children = await kube.jobset_children(request.namespace, name)
            view = jobset_view(jobset, children, request.uid)
        return view, await kube.jobset_names(request.namespace, request.name, request.uid)
    job = await kube.job(request.namespace, name)
    names = await kube.job_names(request.namespace, request.name, request.uid)
    return (job_view(job, request.uid) if job is not None else None), names


async def cluster_version(gke: NodePoolClient) -> GkeVersion | None:
    """The cluster's GKE version (cached by the client); None if GKE answers something that
    is not a GKE version: the gates are skipped then, and GKE itself still judges the pool."""
    text = await gke.master_version()
    try:
        return GkeVersion.parse(text)
    except ValueError:
        if text not in _UNREADABLE:  # once, not on every pass
            _UNREADABLE.add(text)
            log.warning("cannot read the cluster's GKE version %r; version gates are off", text)
        return None


async def observe(body: Mapping[str, Any], kube: KubeApi, gke: NodePoolClient) -> Observed:
    request = request_view(body)
    # Deletion needs no version (and must not wait on GetCluster); a failed read raises
    # GkeError, which the daemon retries with backoff like any other GKE error.
    version = None if request.deleting else await cluster_version(gke)
    pool_names = pool_names_for(request)
    pools = [await gke.get(name) for name in pool_names]
    views = [pool_view(pool, request.uid) if pool is not None else None for pool in pools]
    # The current attempt's workload is named from the restart count, not from status.job,
    # which a restart interrupted midway may leave pointing at the previous attempt.
    current = job_name(request.name, request.status.restarts)
    kind = workload_kind(request.spec)
    job, ours = await _workload(kube, request, kind, current)
    existing = bool((request.spec.get("nodePool") or {}).get("existing", False))
    owners = await kube.service_owners(request.namespace, service_name(request.name))
    return Observed(
        request=request,
        now=datetime.now(UTC),
        pool=views[0],
        more_pools=tuple(views[1:]),
        job=job,
        nodes_by_pool=await kube.nodes_by_pool(pool_names),
        stale_jobs=tuple(name for name in ours if name != current),
        service_exists=owners is not None and request.uid in owners,
        service_taken=owners is not None and request.uid not in owners,
        nodes_used_by_others=(
            await _nodes_used_by_others(kube, pool_names[0], request.uid) if existing else 0
        ),
        cluster_version=version,
    )


async def _nodes_used_by_others(kube: KubeApi, pool: str, uid: str) -> int:
    used = 0
    for item in await kube.training_requests():
        status = item.get("status") or {}
        if item["metadata"]["uid"] == uid or status.get("phase") not in HOLDING:
            continue
        if (status.get("nodePool") or {}).get("name") == pool:
            used += int((status.get("plan") or {}).get("nodes", 0))
    return used
