"""One reconcile pass: observe (from the caches), decide, write status, act, post events.

The status is written before the actions run: a crash between the two leaves a
status that the next pass re-derives from what it observes, while a crash after an
action leaves an object the next pass finds (names are deterministic) instead of
making a second one. Node pool actions are handed to the cluster's operation
scheduler, which starts them within GKE's limits; the pass never waits on GKE.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.controller.bookings import BookingConnector, Bookings
from dws_operator.controller.cache import Key
from dws_operator.controller.history import CapacityHistory
from dws_operator.controller.kube import Conflict, Invalid, NotFound, WorkloadRejected
from dws_operator.controller.lazy import OnFirstUse
from dws_operator.controller.logs import about
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.observe import Sources, observe, request_view
from dws_operator.controller.pool_operation import (
    CalledOff,
    PoolOperation,
    Preparation,
    Priority,
    Step,
)
from dws_operator.controller.provreqs import PROVREQ_GROUP, provisioning_request_of
from dws_operator.controller.tenancy import PolicyLedger
from dws_operator.errors import InvalidSpec
from dws_operator.gke import (
    GkeError,
    owned_by,
    render_node_pool,
)
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.gke.slice_pool import (
    handed_on_shape,
    slice_node_pool,
    slice_pool_labels,
    workload_policy_topology,
)
from dws_operator.kubekit.events import EventPoster
from dws_operator.multislice import JOBSET_KIND, JOBSET_PLURAL
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import (
    AT_ONCE,
    HELD_BACK_SECONDS,
    Action,
    CancelBooking,
    CancelPoolOperation,
    CreateHolder,
    CreateJob,
    CreateNodePool,
    CreateService,
    Decision,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    Observed,
    ProvisioningRequestView,
    ReconcileConfig,
    RequestView,
    ScaleNodePoolToZero,
    SubmitBooking,
    TakeOverNodePool,
    Tally,
    abandoned_pool_names,
    decide,
    estimate_key,
    ladder_keys,
    next_pool_names_for,
    order_pending,
    planned,
    pool_name_for,
    pool_names_for,
    provisioning_request_wanted,
)
from dws_operator.zones import region_of

if TYPE_CHECKING:
    from dws_operator.gke.policies import WorkloadPolicyClient

log = logging.getLogger(__name__)

FINALIZER = "dws-operator.dev/cleanup"
#: Phases before a request's pool is asked for: the moments it may take an idle one.
_BEFORE_POOL = (None, Phase.PENDING, Phase.PROVISIONING)


def _dump(status: TrainingRequestStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: a field `new` no
    longer has is sent as null, which removes it (left out, it would stay as it was:
    a cleared `startedAt` would still say the work had started)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


class Reconciler:
    def __init__(
        self,
        sources: Sources,
        config: ReconcileConfig,
        policies: Callable[[], WorkloadPolicyClient] | None = None,
        metrics: OperatorMetrics | None = None,
        *,
        pool_defaults: PoolDefaults | None = None,
        bookings: BookingConnector | None = None,
        history: CapacityHistory | None = None,
    ) -> None:
        self.sources = sources
        #: The operator's node settings, on every pool it renders (and so in each shape:
        #: a pool made with other settings, another service account, is not reused).
        self.pool_defaults = pool_defaults
        self.metrics = metrics or OperatorMetrics()
        #: Pools of steps left behind, until when their delete is held back.
        self._held: dict[str, float] = {}
        self.kube = sources.kube
        self.cache = sources.cache
        self.config = config
        # Connected on first use: only Ironwood multi-host slices need Compute, and an
        # operator that never serves one must not need Compute credentials to start.
        self._policies = OnFirstUse(policies)
        #: Calendar-mode bookings in Compute, connected on first use as the policies are.
        self.bookings = Bookings(bookings)
        #: Waits for capacity, for the estimates; kept in this process only unless given.
        self.history = history or CapacityHistory.in_memory()
        #: Workloads the API server refused, by request, until its next pass decides.
        self._refused: dict[Key, tuple[str, str]] = {}
        #: Capacity holders the API server refused, by (request uid, holder): said once.
        self._holders_refused: set[tuple[str, str]] = set()
        #: Pool names GKE said are absent, by the uid of a request being deleted.
        self._absent: dict[str, set[str]] = {}
        self.passes = 0
        self.events = EventPoster(self.kube)
        #: The namespaces' TrainingPolicies and what their requests hold.
        self.ledger = PolicyLedger(self.cache)

    async def reconcile(self, key: Key) -> Decision | None:
        """One pass over the request as the caches know it; None when there is nothing
        of it left to look after (gone, or deleted and released)."""
        body = self.cache.request(key)
        if body is None:
            self.metrics.request_gone(key)
            self._refused.pop(key, None)
            return None
        self.passes += 1
        metadata = body.get("metadata") or {}
        finalizers = list(metadata.get("finalizers") or [])
        deleting = metadata.get("deletionTimestamp") is not None
        # The object is read into its typed view once: its spec's facts (kept while its
        # generation stands) and its status.
        request = request_view(body, facts=self.sources.facts.of(body))
        if deleting and FINALIZER not in finalizers:
            # Released already, or deleted before anything was made for it: a pool
            # create still waiting for its turn is called off.
            self.call_off(key, _every_pool_name(request))
            self.metrics.request_gone(key)
            self._refused.pop(key, None)
            self._absent.pop(request.uid, None)
            return None
        writes = [0]
        counting = _PASS_WRITES.set(writes)
        try:
            return await self._decide_and_act(key, request, body, finalizers)
        finally:
            self.metrics.pass_status_writes.observe(writes[0])
            _PASS_WRITES.reset(counting)

    async def _decide_and_act(
        self, key: Key, request: RequestView, body: Mapping[str, Any], finalizers: list[str]
    ) -> Decision:
        """Read, decide once, write the status once, then act."""
        try:
            observed = await self._observe(key, request, body)
            # From here to the ledger's note, no await: no other pass counts meanwhile.
            created = str((body.get("metadata") or {}).get("creationTimestamp") or "")
            observed = self.ledger.observed(key, created, observed)
            decision = decide(observed, self.config)
            self.ledger.note(key, request.status, decision.status, request.facts.size)
            try:
                body = await self._write_status(body, observed, decision.status, decision.tally)
            except Conflict:
                self.ledger.forget(key)
                return await self._changed_meanwhile(key, request)
            except BaseException:
                self.ledger.forget(key)  # an admission not written is not counted
                raise
            self.ledger.written(key, request.status, decision.status)
            binding = decision.status.node_pool
            if observed.offer is not None and binding is not None and binding.reused:
                # Counted once the status names it: the takeover follows on the next pass.
                log.info("%s/%s: reusing idle node pool %s", *key, observed.offer)
                self.sources.shelf.taken_over += 1
        finally:
            # The status names a pool it claimed (or the write failed): the claim ends.
            self.sources.shelf.release(key)
        if any(not isinstance(a, _HELD_BY_THEIR_OPERATION) for a in decision.actions):
            body = await self._hold(body)
        try:
            for action in decision.actions:
                if not await self._execute(observed.request, body, action):
                    # The cache held an object the API server no longer has: a deletion
                    # no watch reported (made while a watch was down, or between the
                    # start-up listing and the watch's). Forgotten; looked at again.
                    decision.requeue_after = AT_ONCE
                elif isinstance(action, CreateJob | CreateService):
                    # Its status was written before it existed: looked at again at once
                    # (the cache has it already; its watch event changes nothing).
                    decision.requeue_after = AT_ONCE
        except WorkloadRejected as rejected:
            # The next pass's decision fails the request (it is looked at again at once).
            self._refused[key] = (rejected.reason, rejected.message)
            decision.requeue_after = AT_ONCE
        if decision.released:
            self.metrics.request_gone(key)
            await self._set_finalizers(body, [f for f in finalizers if f != FINALIZER])
            # Gone from the API once its last finalizer is: not kept in the cache (the
            # DELETED event may have come already and would not come again).
            self.cache.remove_request(key)
            self.sources.facts.forget(observed.request.uid)
            self._absent.pop(observed.request.uid, None)
            self.sources.shelf.release(key)
        for event in decision.events:
            # Queued, not awaited: an Event is for people (see EventPoster).
            self.events.post(body, event.type, event.reason, event.message)
        return decision

    async def _patch_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Every status write of the reconciler, counted for the pass it is made in."""
        counted = _PASS_WRITES.get()
        if counted is not None:
            counted[0] += 1
        return await self.kube.patch_status(namespace, name, patch, resource_version)

    async def _changed_meanwhile(self, key: Key, request: RequestView) -> Decision:
        """The request changed since the copy the pass decided on (a replica that took
        over wrote it, its owner edited it, the watch had not said so yet): nothing of
        the decision is done, and the pass is made again at once on the object as it
        is now. A deposed leader's last pass cannot overwrite its successor's status."""
        log.info("%s/%s: changed since read; deciding again", *key)
        fresh = await self.kube.training_request(*key)
        if fresh is not None:
            self.cache.put_request(fresh)
        return Decision(status=request.status, requeue_after=AT_ONCE)

    def call_off(self, key: Key, pools: Iterable[str]) -> None:
        """Drop the request's pool operations that have not started in GKE."""
        for pool in pools:
            self.sources.operations.cancel(pool, key)

    async def _hold(self, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """The request with our finalizer, so that its deletion waits for the cleanup.
        Added only before something is made for it (a pool, a Job): a request that
        waits in line for a GKE operation slot costs the API server no write for it, and
        one deleted while it waits simply goes."""
        metadata = body.get("metadata") or {}
        finalizers = list(metadata.get("finalizers") or [])
        if FINALIZER in finalizers or metadata.get("deletionTimestamp") is not None:
            return body
        return await self._set_finalizers(body, [*finalizers, FINALIZER])

    def _holding(self, key: Key) -> Preparation:
        """The preparation of a pool operation made for a request: the finalizer, from
        the request as the cache knows it then; the operation is called off when the
        request is gone or being deleted (nothing was made for it yet)."""

        async def hold() -> None:
            body = self.cache.request(key)
            if body is None:
                raise CalledOff(f"{key[0]}/{key[1]} is gone")
            try:
                held = await self._hold(body)
            except Invalid as refused:
                # "no new finalizers can be added if the object is being deleted"
                raise CalledOff(f"{key[0]}/{key[1]}: {refused.reason}") from None
            except Conflict:
                # Changed since the cache saw it: read it as it is and try once more.
                fresh = await self.kube.training_request(*key)
                if fresh is None:
                    raise CalledOff(f"{key[0]}/{key[1]} is gone") from None
                self.cache.put_request(fresh)
                held = await self._hold(fresh)
            if FINALIZER not in ((held.get("metadata") or {}).get("finalizers") or []):
                raise CalledOff(f"{key[0]}/{key[1]} could not be held (gone or being deleted)")

        return hold

    async def _observe(self, key: Key, request: RequestView, body: Mapping[str, Any]) -> Observed:
        """What the pass decides on: the request and its world (`observe`), and what the
        shell alone knows of it: an idle pool held for it, a binding no longer good,
        an action refused since its last pass, deletes held back."""
        lost = self._binding_lost(key, request)
        offer = None
        if not lost:
            request, offer = await self._offer(key, request)
        if request.deleting:
            await self._ask_gke_for_unseen_pools(request)
        created = str((body.get("metadata") or {}).get("creationTimestamp") or "")
        observed = self._held_back(key, await observe(request, created, self.sources))
        refusal = self._refusal(key, observed)
        booking = await self.bookings.read(request)
        advice = await self.bookings.advise(key, request, observed.now)
        waits_for = estimate_key(request)
        estimate = await self.history.estimate(waits_for) if waits_for else None
        keys = ladder_keys(request)
        step_estimates = (
            tuple([await self.history.estimate(k) if k else None for k in keys])
            if keys is not None
            else None
        )
        if step_estimates is not None and not self.history.read:
            step_estimates = None  # no order from a history not read: the pass waits
        workload = provisioning_request_wanted(request, observed.now, self.config)
        queued = (
            await self._provisioning_request(request, workload) if workload is not None else None
        )
        return dataclasses.replace(
            observed,
            offer=offer,
            binding_lost=lost,
            refusal=refusal,
            booking=booking,
            advice=advice,
            estimate=estimate,
            step_estimates=step_estimates,
            provisioning_request=queued,
        )

    async def _provisioning_request(
        self, request: RequestView, workload: str
    ) -> ProvisioningRequestView | None:
        """The newest ProvisioningRequest Kueue made for the workload `workload` (a Job or
        JobSet of the request): Kueue names it `<kind>-<workload>-<hash>-<check>-<try>`
        after its Workload. None when there is none (or ProvisioningRequests are not
        served: nothing to recover)."""
        path = f"/apis/{PROVREQ_GROUP}/v1/namespaces/{request.namespace}/provisioningrequests"
        try:
            listed = await self.kube.call("GET", path)
        except NotFound:
            return None
        items = (listed or {}).get("items") or []
        return provisioning_request_of(items, request.facts.workload_kind, workload)

    async def _ask_gke_for_unseen_pools(self, request: RequestView) -> None:
        """A deleted request is let go only on GKE's own word about each pool it may have
        made: those the snapshot does not show, with no operation of ours on them, are
        read from GKE directly (into the snapshot). A create GKE carried out but whose
        answer was lost made a pool no listing may have shown yet; letting go on the
        snapshot's word would leave it behind, billed, with nobody to delete it. A read
        that fails fails the pass, which is tried again: nothing is let go unasked."""
        if request.facts.existing:
            return  # the pool is not the operator's to make or delete
        pools, operations = self.sources.pools, self.sources.operations
        names = _every_pool_name(request)
        # Once GKE said a name is absent it stays so: nothing of the request's starts once
        # it is being deleted (its creates not started are called off).
        absent = self._absent.setdefault(request.uid, set())
        while True:
            # Again after each round: an operation that ended while another name was
            # being read may have left its pool unseen (its own read failed).
            unseen = [
                n
                for n in names
                if n not in absent and pools.get(n) is None and operations.owner(n) is None
            ]
            if not unseen:
                return
            for name in unseen:
                await pools.refresh_pool(name)
                if pools.get(name) is None:
                    absent.add(name)

    async def _offer(self, key: Key, request: RequestView) -> tuple[RequestView, str | None]:
        """Before a request's pool is created: an idle pool of its shape, if there is
        one, claimed for it until this pass's status write (which names it, so the
        shelf then sees it taken). With the view it was planned from (the cluster's
        site in it), which the rest of the pass goes on with."""
        if not self.sources.shelf.enabled:
            return request, None
        try:
            # The cluster's node locations (a TPU slice's zone, so its shape) come with
            # its first read; cached, so this is no call on later passes.
            await self.sources.gke.master_version()
        except GkeError:
            return request, None  # no reuse this pass; observing reports the error
        if request.site != self.sources.gke.site:
            request = dataclasses.replace(request, site=self.sources.gke.site)
        shape = self._shape_to_reuse(request)
        if shape is None:
            return request, None
        return request, self.sources.shelf.claim(shape, key)

    def _binding_lost(self, key: Key, request: RequestView) -> bool:
        """A pool the status says this request took over, that is neither its own yet
        nor free to take (another request holds it now): the binding goes, and the
        request goes on as if it had never found an idle pool."""
        binding = request.status.node_pool
        if binding is None or not binding.reused or request.status.phase not in _BEFORE_POOL:
            return False
        name = binding.name
        pool = self.sources.pools.get(name)
        if (
            pool is None
            or owned_by(pool, request.uid)
            or self.sources.operations.owner(name) == key
        ):
            return False  # ours, or being made ours (GKE shows it RECONCILING meanwhile)
        if pool.status != pool.Status.RUNNING:
            return False  # an operation on it (ours, before a restart?): wait it out
        if self.sources.shelf.free_for(name, key):
            return False
        log.warning("%s/%s: node pool %s is no longer free to take over", *key, name)
        return True

    def _shape_to_reuse(self, request: RequestView) -> str | None:
        """The shape of the pool the request is about to need, when it could take an idle
        one: one managed slice, not named by the user, no pool asked for yet, not a long
        run (each of its segments has pools of its own, made ahead)."""
        if request.deleting or request.status.phase not in _BEFORE_POOL:
            return None
        if request.status.node_pool is not None and request.status.node_pool.reused:
            return None
        facts = request.facts
        if facts.named_pool or facts.existing or facts.slices != 1 or facts.segments > 1:
            return None
        if order_pending(request):
            return None  # its first step is not known yet (the pass fixes the order first)
        own = pool_name_for(request)
        if self.sources.pools.get(own) is not None or self.sources.operations.view(own):
            return None
        result = planned(request)
        if isinstance(result, InvalidSpec):
            return None
        return handed_on_shape(result[1], self.pool_defaults)

    def _held_back(self, key: Key, observed: Observed) -> Observed:
        """Pools of steps left behind whose delete GKE refused for good: said in the log,
        and not asked again for `HELD_BACK_SECONDS` (GKE would refuse at once again)."""
        now = self.sources.monotonic()
        for pool in observed.abandoned_names:
            error = self.sources.operations.take_error(pool, key)
            if error is not None:
                log.warning(
                    "%s: deleting node pool %s of a step left behind: %s (again in %.0fs)",
                    _name(observed.request),
                    pool,
                    error,
                    HELD_BACK_SECONDS,
                    extra=about(_name(observed.request), pool=pool, operation="Delete"),
                )
                self._held[pool] = now + HELD_BACK_SECONDS
        held = frozenset(p for p in observed.abandoned_names if self._held.get(p, 0.0) > now)
        for pool in [p for p, until in self._held.items() if until <= now]:
            del self._held[pool]
        return dataclasses.replace(observed, held_back=held) if held else observed

    def _refusal(self, key: Key, observed: Observed) -> tuple[str, str] | None:
        """An action of the request refused for good since its last pass: its workload
        (the API server said so), or a create GKE refused (quota, stockout, invalid)."""
        refused = self._refused.pop(key, None) or self.bookings.refusal(key)
        if refused is not None:
            return refused
        operations = self.sources.operations
        for pool in pool_names_for(observed.request):
            error = operations.take_error(pool, key)
            if error is not None and not observed.request.deleting:
                log.warning(
                    "%s: node pool %s: %s",
                    _name(observed.request),
                    pool,
                    error,
                    extra=about(_name(observed.request), pool=pool),
                )
                return error.reason, error.message
        return None

    async def _set_finalizers(
        self, body: Mapping[str, Any], finalizers: list[str]
    ) -> Mapping[str, Any]:
        metadata = body.get("metadata") or {}
        updated = await self.kube.patch_metadata(
            str(metadata["namespace"]),
            str(metadata["name"]),
            # The resourceVersion makes the patch fail (409) rather than overwrite
            # finalizers someone added since this body was read.
            {"finalizers": finalizers, "resourceVersion": metadata.get("resourceVersion")},
        )
        if updated is None:
            return body
        self.cache.put_request(updated)
        return updated

    async def _write_status(
        self,
        body: Mapping[str, Any],
        observed: Observed,
        status: TrainingRequestStatus,
        tally: Tally,
    ) -> Mapping[str, Any]:
        """The pass's one status write: the merge patch from the status as observed."""
        request = observed.request
        key = (request.namespace, request.name)
        patch = merge_patch(_dump(request.status), _dump(status))
        if not patch:
            # Nothing new to count; the request's phase gauge is kept (after a restart of
            # the operator it is not there yet).
            self.metrics.request_seen(key, request.facts, status)
            return body
        # Only over the version decided on: a newer one (another writer's) is not undone.
        version = (body.get("metadata") or {}).get("resourceVersion")
        updated = await self._patch_status(request.namespace, request.name, patch, version)
        if updated is not None:
            # Counted once written: a pass that fails later has still made this change.
            self.metrics.request_seen(key, request.facts, status, tally)
            await self.history.add(tally.waits)
        if status.phase != request.status.phase:
            log.info(
                "%s: %s -> %s: %s",
                _name(request),
                request.status.phase,
                status.phase,
                status.message or "",
                extra=about(_name(request), phase=str(status.phase)),
            )
        if updated is None:
            return body
        self.cache.put_request(updated)
        return updated

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
                    _name(request),
                    name,
                    rejected.message,
                    extra=about(_name(request)),
                )

    async def _execute(self, request: RequestView, body: Mapping[str, Any], action: Action) -> bool:
        """Carry the action out; False when it found the cache out of date (and mended it)."""
        log.info(
            "%s: %s",
            _name(request),
            type(action).__name__,
            extra=about(_name(request), pool=_pool_of(action), operation=type(action).__name__),
        )
        key = (request.namespace, request.name)
        created = str((body.get("metadata") or {}).get("creationTimestamp") or "")
        operations = self.sources.operations
        match action:
            case CreateNodePool(name=name, plan=plan):
                making = (self._create_step(key, request.uid, name, plan),)
                operations.submit(
                    PoolOperation(
                        name, "Create", key, Priority.CREATE, created, making, self._holding(key)
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
                        self._holding(key),
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


#: The status writes of the pass running in this task (one decision: at most one).
_PASS_WRITES: ContextVar[list[int] | None] = ContextVar("pass_writes", default=None)
#: Actions whose pool operation adds the finalizer itself, when its turn comes.
_HELD_BY_THEIR_OPERATION = (CreateNodePool, TakeOverNodePool, CancelPoolOperation)


def _pool_of(action: Action) -> str | None:
    """The node pool an action is about, for the log line's `pool` field."""
    pools = CreateNodePool | TakeOverNodePool | ScaleNodePoolToZero | DeleteNodePool
    return action.name if isinstance(action, pools | CancelPoolOperation) else None


def _every_pool_name(request: RequestView) -> tuple[str, ...]:
    """Every pool a request may have made: each slice's of its current step, and those
    of the steps it left (and pools it took over, then left)."""
    return (
        *pool_names_for(request),
        *next_pool_names_for(request),
        *abandoned_pool_names(request),
    )


def _name(request: RequestView) -> str:
    return f"{request.namespace}/{request.name}"
