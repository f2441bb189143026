"""Carrying out a reconcile pass's actions: node pool operations handed to the cluster's
operation scheduler (a create made when its turn comes, with the workload policy
placing its slice), Kubernetes objects made and deleted (written through to the
cache), and bookings submitted to Compute and cancelled."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from dws_operator.controller.bookings import Bookings
from dws_operator.controller.cache import Key
from dws_operator.controller.finalizers import FINALIZER, Finalizers
from dws_operator.controller.kube import WorkloadRejected
from dws_operator.controller.lazy import OnFirstUse
from dws_operator.controller.logs import about
from dws_operator.controller.names import pool_of, request_name
from dws_operator.controller.observe import Sources
from dws_operator.controller.pool_operation import PoolOperation, Priority, Step
from dws_operator.gke import GkeError, render_node_pool
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.gke.slice_pool import (
    slice_node_pool,
    slice_pool_labels,
    workload_policy_topology,
)
from dws_operator.multislice import JOBSET_KIND, JOBSET_PLURAL
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import (
    Action,
    CancelBooking,
    CancelPoolOperation,
    CreateHolder,
    CreateJob,
    CreateNodePool,
    CreateService,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    ReconcileConfig,
    RequestView,
    ScaleNodePoolToZero,
    SubmitBooking,
    TakeOverNodePool,
)
from dws_operator.zones import region_of

if TYPE_CHECKING:
    from dws_operator.gke.policies import WorkloadPolicyClient

log = logging.getLogger(__name__)

#: Actions whose pool operation adds the finalizer itself, when its turn comes.
HELD_BY_THEIR_OPERATION = (CreateNodePool, TakeOverNodePool, CancelPoolOperation)


class Executor:
    def __init__(
        self,
        sources: Sources,
        config: ReconcileConfig,
        finalizers: Finalizers,
        bookings: Bookings,
        policies: Callable[[], WorkloadPolicyClient] | None,
        pool_defaults: PoolDefaults | None,
    ) -> None:
        self.sources = sources
        self.kube = sources.kube
        self.cache = sources.cache
        self.config = config
        self.finalizers = finalizers
        self.bookings = bookings
        # Connected on first use: only Ironwood multi-host slices need Compute, and an
        # operator that never serves one must not need Compute credentials to start.
        self._policies = OnFirstUse(policies)
        #: The operator's node settings, on every pool it renders.
        self.pool_defaults = pool_defaults
        #: Capacity holders the API server refused, by (request uid, holder): said once.
        self._holders_refused: set[tuple[str, str]] = set()

    async def execute(self, request: RequestView, body: Mapping[str, Any], action: Action) -> bool:
        """Carry the action out; False when it found the cache out of date (and mended it)."""
        log.info(
            "%s: %s",
            request_name(request),
            type(action).__name__,
            extra=about(
                request_name(request), pool=pool_of(action), operation=type(action).__name__
            ),
        )
        key = (request.namespace, request.name)
        created = str((body.get("metadata") or {}).get("creationTimestamp") or "")
        operations = self.sources.operations
        match action:
            case CreateNodePool(name=name, plan=plan):
                making = (self._create_step(key, request.uid, name, plan),)
                operations.submit(
                    PoolOperation(
                        name,
                        "Create",
                        key,
                        Priority.CREATE,
                        created,
                        making,
                        self.finalizers.holding(key),
                    )
                )
            case TakeOverNodePool(name=name, plan=plan):
                gke = self.sources.mutations
                rendered = render_node_pool(
                    plan,
                    name=name,
                    labels=self._labels(key, request.uid, plan),
                    defaults=self.pool_defaults,
                )
                # The labels a new pool would get (the configured extra ones included):
                # the update replaces the pool's labels wholesale.
                labels = dict(rendered.config.resource_labels)
                ceiling = rendered.autoscaling
                takeover: tuple[Step, ...] = (
                    lambda: gke.relabel(name, labels),
                    lambda: gke.set_autoscaling(name, ceiling),
                )
                operations.submit(
                    PoolOperation(
                        name,
                        "TakeOver",
                        key,
                        Priority.CREATE,
                        created,
                        takeover,
                        self.finalizers.holding(key),
                    )
                )
            case CancelPoolOperation(name=name):
                operations.cancel(name, key)
            case ScaleNodePoolToZero(name=name):
                gke = self.sources.mutations
                steps: tuple[Step, ...] = (
                    lambda: gke.cap_autoscaling(name, self.sources.pools.get(name)),
                    lambda: gke.resize_to_zero(name),
                )
                # Releases are served as they come (the bill stops in the order work
                # ended); creates by request age.
                operations.submit(
                    PoolOperation(name, "ScaleDown", key, Priority.RELEASE, "", steps)
                )
            case DeleteNodePool(name=name):
                gke = self.sources.mutations
                operations.submit(
                    PoolOperation(
                        name, "Delete", key, Priority.RELEASE, "", (lambda: gke.delete(name),)
                    )
                )
            # Written through to the cache (as status writes are): a pass before the watch
            # brings the object sees it made, and creates it no second time.
            case CreateService(manifest=manifest):
                if (service := await self.kube.create("services", manifest)) is not None:
                    self.cache.put_service(service)
            case CreateHolder(manifest=manifest):
                await self._create_holder(request, manifest)
            case CreateJob(manifest=manifest):
                await self._create_workload(manifest)
            # Deletes name the object the decision saw (its uid, from the cache): one
            # made since under the same name, by anyone, is left alone.
            case DeleteJob(name=name, kind=kind, foreground=foreground):
                at = (request.namespace, name)
                if kind == JOBSET_KIND:
                    uid = self.cache.uid(JOBSET_PLURAL, at)
                    if not await self.kube.delete(JOBSET_PLURAL, *at, uid, foreground=foreground):
                        self.cache.remove_jobset(at)
                        return False
                elif not await self.kube.delete(
                    "jobs", *at, self.cache.uid("jobs", at), foreground=foreground
                ):
                    self.cache.remove_job(at)
                    return False
            case DeleteService(name=name):
                at = (request.namespace, name)
                if not await self.kube.delete("services", *at, self.cache.uid("services", at)):
                    self.cache.remove_service(at)
                    return False
            case SubmitBooking(booking=booking):
                return await self.bookings.submit(key, body, booking, FINALIZER)
            case CancelBooking(name=name, zone=zone):
                await self.bookings.cancel(key, zone, name)
        return True

    def _create_step(self, key: Key, uid: str, name: str, plan: SlicePlan) -> Step:
        """The create call, made when the operation's turn comes. It holds the request's
        identity and plan only, not its decoded spec and status: a thousand creates may
        wait in line for GKE's operation slots."""

        async def create() -> Any:
            labels = self._labels(key, uid, plan)
            policy = await self._workload_policy(plan)
            pool = slice_node_pool(
                plan, name=name, labels=labels, workload_policy=policy, defaults=self.pool_defaults
            )
            return (await self.sources.mutations.create(pool, uid)).operation

        return create

    def _labels(self, key: Key, uid: str, plan: SlicePlan) -> dict[str, str]:
        """The request's labels, and the shape of a pool it can hand on when done (one
        slice placed without a workload policy, whose name depends on the topology)."""
        return slice_pool_labels(key[0], key[1], uid, plan, self.pool_defaults)

    async def _workload_policy(self, plan: SlicePlan) -> str | None:
        """The workload policy placing the slice (made or reused), when it needs one."""
        topology = workload_policy_topology(plan)
        if topology is None:
            return None
        policies = self._policies.get()
        if policies is None or self.config.location is None:
            raise GkeError(
                retryable=False,
                reason="WorkloadPolicyUnavailable",
                message=f"{plan.accelerator} slices need a Compute workload policy, and this "
                "operator has no Compute client",
            )
        region = region_of(self.config.location)
        return await policies.ensure_workload_policy(region, topology)

    async def _create_workload(self, manifest: Mapping[str, Any]) -> None:
        if manifest["kind"] == JOBSET_KIND:
            if (made := await self.kube.create(JOBSET_PLURAL, manifest)) is not None:
                self.cache.put_jobset(made)
        elif (made := await self.kube.create("jobs", manifest)) is not None:
            self.cache.put_job(made)

    async def _create_holder(self, request: RequestView, manifest: Mapping[str, Any]) -> None:
        """A long run's capacity holder, best effort: refused (say, by a policy on images
        or queues), the segment runs on and the next one asks for its capacity when it
        starts, as without a holder; said once per holder."""
        try:
            if (made := await self.kube.create("jobs", manifest)) is not None:
                self.cache.put_job(made)
        except WorkloadRejected as rejected:
            name = str(manifest["metadata"]["name"])
            if (request.uid, name) not in self._holders_refused:
                self._holders_refused.add((request.uid, name))
                log.warning(
                    "%s: capacity holder %s refused (the next segment asks for its capacity "
                    "when it starts instead): %s",
                    request_name(request),
                    name,
                    rejected.message,
                    extra=about(request_name(request)),
                )
