"""Reading the world into an `Observed`: the TrainingRequest, its pool, Job and Service."""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.cloud import container_v1
from pydantic import ValidationError

from dws_operator import rfc3339
from dws_operator.api import TERMINAL_PHASES, Phase, TrainingRequestStatus
from dws_operator.catalog import GkeVersion
from dws_operator.controller.cache import JobRecord, Key, KubeCache
from dws_operator.controller.kube import KubeApi
from dws_operator.controller.operations import OperationScheduler
from dws_operator.controller.pool_operation import Priority
from dws_operator.controller.pools import PoolSnapshot
from dws_operator.controller.records import workload_deleting
from dws_operator.controller.reuse import PoolShelf
from dws_operator.errors import InvalidSpec
from dws_operator.gke import NodePoolClient, owned_by
from dws_operator.gke.ceiling import ceiling, holds_slice
from dws_operator.holder import holder_segment
from dws_operator.multislice import JOBSET_KIND, JOBSET_PLURAL
from dws_operator.reconcile import (
    DRAIN_SECONDS,
    JobView,
    Observed,
    PoolState,
    PoolView,
    RequestFacts,
    RequestView,
    abandoned_pool_names,
    attempt_number,
    next_pool_names_for,
    planned,
    pool_names_for,
    read_spec,
)
from dws_operator.workload import DISRUPTION_CONDITION, job_name, needs_service, service_name
from dws_operator.zones import ClusterSite

log = logging.getLogger(__name__)
_UNREADABLE: set[str] = set()

#: Phases in which a request holds nodes of its pool: other requests cannot use them.
HOLDING = (Phase.WAITING_FOR_CAPACITY, Phase.RUNNING)
HOLDING_TEXT = tuple(phase.value for phase in HOLDING)
#: Phases in which no Service will be made any more: a foreign one cannot matter.
HOLDING_DONE = TERMINAL_PHASES | {Phase.DELETING}


#: The facts of this many requests are kept (see `FactsMemo`). A request's facts hold
#: its validated spec (a few KB of pydantic models), so requests that only wait are read
#: again when woken rather than kept read: the passes that follow one change to a
#: request (its status write, the watch event echoing it) come within a second.
FACTS_MEMORY = 64


class FactsMemo:
    """Each request's spec read once per generation (`read_spec`): a status write gives
    the cache a new object with the same spec, and the same generation says so (the API
    server raises it on every change to the spec, and only then)."""

    def __init__(self, size: int = FACTS_MEMORY) -> None:
        self._size = size
        self._kept: OrderedDict[str, tuple[int, RequestFacts]] = OrderedDict()
        #: Specs read (a test counts them).
        self.reads = 0

    def of(self, body: Mapping[str, Any]) -> RequestFacts:
        metadata = body.get("metadata") or {}
        uid, name = str(metadata.get("uid") or ""), str(metadata.get("name") or "")
        generation = metadata.get("generation")
        kept = self._kept.get(uid)
        if kept is not None and isinstance(generation, int) and kept[0] == generation:
            self._kept.move_to_end(uid)
            return kept[1]
        self.reads += 1
        facts = read_spec(name, uid, body.get("spec") or {})
        if isinstance(generation, int) and uid:
            self._kept[uid] = (generation, facts)
            self._kept.move_to_end(uid)
            if len(self._kept) > self._size:
                self._kept.popitem(last=False)
        return facts

    def forget(self, uid: str) -> None:
        self._kept.pop(uid, None)


def request_view(
    body: Mapping[str, Any], site: ClusterSite | None = None, facts: RequestFacts | None = None
) -> RequestView:
    """The request as the decision sees it: `facts` if already read, else read now."""
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
        facts=facts or read_spec(metadata["name"], metadata["uid"], body.get("spec") or {}),
        status=status,
        site=site,
        created=_created(metadata.get("creationTimestamp")),
    )


def _created(stamp: object) -> datetime | None:
    try:
        return rfc3339.parse(str(stamp)) if stamp else None
    except ValueError:
        return None


def pool_view(pool: container_v1.NodePool, uid: str) -> PoolView:
    accelerators = list(pool.config.accelerators)
    return PoolView(
        name=pool.name,
        state=PoolState(container_v1.NodePool.Status(pool.status).name),
        ours=owned_by(pool, uid),
        max_nodes=ceiling(pool),
        machine_type=pool.config.machine_type,
        accelerator_type=accelerators[0].accelerator_type if accelerators else None,
        message=pool.status_message,
        keeps_ceiling=holds_slice(pool),
    )


def _true(conditions: Iterable[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    return next(
        (c for c in conditions if c.get("type") == kind and c.get("status") == "True"), None
    )


def job_view(job: JobRecord, uid: str) -> JobView:
    failed = _true(job.conditions, "Failed")
    disrupted = (
        failed is not None
        and failed.get("reason") == "PodFailurePolicy"
        and DISRUPTION_CONDITION in (failed.get("message") or "")
    )
    return JobView(
        name=job.name,
        ours=uid in job.owners,
        complete=_true(job.conditions, "Complete") is not None,
        failed=failed is not None,
        failure_reason=(failed or {}).get("reason") or "",
        failure_message=(failed or {}).get("message") or "",
        disrupted=disrupted,
        ready=job.ready,
        deleting=job.deleting,
    )


def jobset_view(jobset: Mapping[str, Any], children: list[JobRecord], uid: str) -> JobView:
    """A JobSet seen as one Job: complete or failed as the JobSet says, disrupted when a
    slice's Job failed because a node was lost, ready = pods ready over all slices."""
    metadata = jobset.get("metadata") or {}
    conditions = (jobset.get("status") or {}).get("conditions") or []
    failed = _true(conditions, "Failed")
    jobs = [job_view(child, "") for child in children]
    return JobView(
        name=metadata.get("name", ""),
        ours=any(o.get("uid") == uid for o in metadata.get("ownerReferences") or []),
        complete=_true(conditions, "Completed") is not None,
        failed=failed is not None,
        failure_reason=(failed or {}).get("reason", ""),
        failure_message=(failed or {}).get("message", ""),
        disrupted=failed is not None and any(j.disrupted for j in jobs),
        ready=sum(j.ready for j in jobs),
        deleting=workload_deleting(metadata),
    )


def _workload(
    cache: KubeCache, request: RequestView, kind: str, name: str
) -> tuple[JobView | None, list[str], frozenset[str]]:
    """The current attempt's workload, the names of every attempt's, and of those the
    ones being deleted."""
    if kind == JOBSET_KIND:
        jobset = cache.jobset(request.namespace, name)
        view = None
        if jobset is not None:
            children = cache.jobset_children(request.namespace, name)
            view = jobset_view(jobset, children, request.uid)
        jobsets = [
            j
            for j in cache.jobsets_of(request.namespace, request.name)
            if any(o.get("uid") == request.uid for o in j["metadata"].get("ownerReferences") or [])
        ]
        going = frozenset(
            str(j["metadata"]["name"]) for j in jobsets if workload_deleting(j["metadata"])
        )
        return view, [str(j["metadata"]["name"]) for j in jobsets], going
    job = cache.job(request.namespace, name)
    jobs = [j for j in cache.jobs_of(request.namespace, request.name) if request.uid in j.owners]
    going = frozenset(j.name for j in jobs if j.deleting)
    return (job_view(job, request.uid) if job is not None else None), [j.name for j in jobs], going


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


@dataclass(frozen=True)
class Sources:
    """Where a pass reads the world from: the watches' cache, GKE's pool snapshot, the
    operation scheduler. Only a Service not yet seen and the cluster version (cached
    for an hour) may cost a call."""

    kube: KubeApi
    cache: KubeCache
    #: Reads, retried within the call.
    gke: NodePoolClient
    #: Node pool operations, one attempt each: the scheduler decides when to try again.
    mutations: NodePoolClient
    pools: PoolSnapshot
    operations: OperationScheduler
    shelf: PoolShelf
    facts: FactsMemo = dataclasses.field(default_factory=FactsMemo)
    #: The time a pass sees (observations are stamped with it).
    now: Callable[[], datetime] = lambda: datetime.now(UTC)
    #: A monotonic clock, for how long something is held back.
    monotonic: Callable[[], float] = time.monotonic


async def observe(request: RequestView, created: str, sources: Sources) -> Observed:
    """The request's world as the caches know it (`created`: its creationTimestamp)."""
    cache = sources.cache
    # Deletion needs no version (and must not wait on GetCluster); a failed read raises
    # GkeError, which the pass backs off from like any other GKE error.
    version = None if request.deleting else await cluster_version(sources.gke)
    # The cluster's node locations come with the version's GetCluster. The same view
    # when it has them already: what the pass worked out from it (its plan) stands.
    if request.site != sources.gke.site:
        request = dataclasses.replace(request, site=sources.gke.site)
    pool_names = pool_names_for(request)
    key = (request.namespace, request.name)
    owners = await _service_owners(sources, request)
    # From here to the Observed, what GKE's snapshot, the scheduler and the shelf say is
    # read with no await between (but a pool `existing` names, not ours in any case): an
    # operation ending meanwhile would pair a pool as it was before with the scheduler as
    # it is after (a takeover done, its pool read before it: "someone else's pool").
    views = [_pool(sources, name, request.uid, key) for name in pool_names]
    ahead = next_pool_names_for(request)
    next_views = tuple(_pool(sources, name, request.uid, key) for name in ahead)
    left = abandoned_pool_names(request)
    abandoned = tuple(
        pool for name in left if (pool := _pool(sources, name, request.uid, key)) is not None
    )
    takeover = bool(
        request.status.node_pool
        and request.status.node_pool.reused
        and views[0] is not None
        and not views[0].ours
        and (
            sources.operations.owner(pool_names[0]) == key
            or sources.shelf.free_for(pool_names[0], key)
        )
    )
    operations = {
        name: dataclasses.replace(view, mine=sources.operations.owner(name) == key)
        for name in (*pool_names, *ahead, *left)
        if (view := sources.operations.view(name)) is not None
    }
    # The current attempt's workload is named from the attempt count, not from status.job,
    # which a restart interrupted midway may leave pointing at the previous attempt.
    current = job_name(request.name, attempt_number(request.status))
    kind = request.facts.workload_kind
    job, ours, going = _workload(cache, request, kind, current)
    if job is not None and job.ours:
        plural = JOBSET_PLURAL if kind == JOBSET_KIND else "jobs"
        why = cache.deactivated(plural, request.namespace, job.name)
        job = dataclasses.replace(job, deactivated=why)
    holders = tuple(name for name in ours if holder_segment(request.name, name) is not None)
    existing = request.facts.existing
    if existing and views[0] is None and not request.deleting:
        # Someone else's pool, possibly made after the last listing: a missing pool fails
        # the request, so that is asked of GKE itself before it is believed.
        pool = await sources.gke.get(pool_names[0])
        views[0] = pool_view(pool, request.uid) if pool is not None else None
    return Observed(
        request=request,
        now=sources.now(),
        pool=views[0],
        more_pools=tuple(views[1:]),
        job=job,
        nodes_by_pool=cache.nodes_of(pool_names),
        next_pools=next_views,
        capacity_ends=cache.capacity_end(pool_names) if request.facts.segments > 1 else None,
        stale_jobs=tuple(name for name in ours if name != current and name not in holders),
        stale_going=going,
        holders=holders,
        service_exists=owners is not None and request.uid in owners,
        service_taken=owners is not None and request.uid not in owners,
        nodes_used_by_others=(
            _nodes_used_by_others(cache, pool_names[0], request.uid) if existing else 0
        ),
        cluster_version=version,
        operations=operations,
        local_queues=cache.local_queues(request.namespace),
        draining=frozenset(
            name
            for name in pool_names
            if sources.operations.done_lately(name, "ScaleDown", DRAIN_SECONDS)
        ),
        takeover=takeover,
        abandoned=abandoned,
        abandoned_names=frozenset(left),
        create_position=(
            sources.operations.position_for(Priority.CREATE, created, request.namespace)
            if any(v is None for v in views)
            else 0
        ),
    )


def _pool(sources: Sources, name: str, uid: str, key: Key) -> PoolView | None:
    pool = sources.pools.get(name)
    if pool is None:
        return None
    view = pool_view(pool, uid)
    if view.ours and sources.shelf.taken_by_other(name, key):
        # Still labelled ours, but the next request of its shape is taking it over: it
        # is not this request's to scale or delete any more.
        return dataclasses.replace(view, ours=False)
    return view


async def _service_owners(sources: Sources, request: RequestView) -> tuple[str, ...] | None:
    """Owners of the request's Service: from the cache (ours carry the request label);
    when none is cached, a Service of that name may still exist without our label
    (someone else's), which only a read can tell: made while the Service matters."""
    name = service_name(request.name)
    owners = sources.cache.service_owners(request.namespace, name)
    if owners is not None or request.status.phase in HOLDING_DONE or request.deleting:
        return owners
    plan = planned(request)
    if isinstance(plan, InvalidSpec) or not needs_service(plan[1]):
        return owners
    found = await sources.kube.service_owners(request.namespace, name)
    return tuple(found) if found is not None else None


def _nodes_used_by_others(cache: KubeCache, pool: str, uid: str) -> int:
    used = 0
    for key in cache.bound_to(pool):
        other = cache.summary(key)
        if other is not None and other.uid != uid and other.phase in HOLDING_TEXT:
            used += other.nodes
    return used
