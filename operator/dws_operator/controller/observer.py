"""What a reconcile pass decides on: the request and its world as the caches show them
(`observe`), and what the shell alone knows of it: an idle pool held for it (or a
binding to one no longer good), an action refused since its last pass, deletes held
back, its booking and Compute's advice, the estimates of its wait, and the
ProvisioningRequest Kueue made for its workload. A request being deleted is let go
only once GKE said which of its pools are absent."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

from dws_operator.api import Phase
from dws_operator.controller.bookings import Bookings
from dws_operator.controller.cache import Key
from dws_operator.controller.history import CapacityHistory
from dws_operator.controller.kube import NotFound
from dws_operator.controller.logs import about
from dws_operator.controller.names import every_pool_name, request_name
from dws_operator.controller.observe import Sources, observe
from dws_operator.controller.provreqs import PROVREQ_GROUP, provisioning_request_of
from dws_operator.errors import InvalidSpec
from dws_operator.gke import GkeError, owned_by
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.gke.slice_pool import handed_on_shape
from dws_operator.reconcile import (
    HELD_BACK_SECONDS,
    Observed,
    ProvisioningRequestView,
    ReconcileConfig,
    RequestView,
    estimate_key,
    ladder_keys,
    order_pending,
    planned,
    pool_name_for,
    pool_names_for,
    provisioning_request_wanted,
)

log = logging.getLogger(__name__)

#: Phases before a request's pool is asked for: the moments it may take an idle one.
_BEFORE_POOL = (None, Phase.PENDING, Phase.PROVISIONING)


class PassObserver:
    def __init__(
        self,
        sources: Sources,
        config: ReconcileConfig,
        bookings: Bookings,
        history: CapacityHistory,
        pool_defaults: PoolDefaults | None,
    ) -> None:
        self.sources = sources
        self.config = config
        self.bookings = bookings
        self.history = history
        self.pool_defaults = pool_defaults
        #: Pools of steps left behind, until when their delete is held back.
        self._held: dict[str, float] = {}
        #: Workloads the API server refused, by request, until its next pass decides.
        self.refused: dict[Key, tuple[str, str]] = {}
        #: Pool names GKE said are absent, by the uid of a request being deleted.
        self.absent: dict[str, set[str]] = {}

    async def observe(self, key: Key, request: RequestView, body: Mapping[str, Any]) -> Observed:
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
            listed = await self.sources.kube.call("GET", path)
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
        names = every_pool_name(request)
        # Once GKE said a name is absent it stays so: nothing of the request's starts once
        # it is being deleted (its creates not started are called off).
        absent = self.absent.setdefault(request.uid, set())
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
                    request_name(observed.request),
                    pool,
                    error,
                    HELD_BACK_SECONDS,
                    extra=about(request_name(observed.request), pool=pool, operation="Delete"),
                )
                self._held[pool] = now + HELD_BACK_SECONDS
        held = frozenset(p for p in observed.abandoned_names if self._held.get(p, 0.0) > now)
        for pool in [p for p, until in self._held.items() if until <= now]:
            del self._held[pool]
        return dataclasses.replace(observed, held_back=held) if held else observed

    def _refusal(self, key: Key, observed: Observed) -> tuple[str, str] | None:
        """An action of the request refused for good since its last pass: its workload
        (the API server said so), or a create GKE refused (quota, stockout, invalid)."""
        refused = self.refused.pop(key, None) or self.bookings.refusal(key)
        if refused is not None:
            return refused
        operations = self.sources.operations
        for pool in pool_names_for(observed.request):
            error = operations.take_error(pool, key)
            if error is not None and not observed.request.deleting:
                log.warning(
                    "%s: node pool %s: %s",
                    request_name(observed.request),
                    pool,
                    error,
                    extra=about(request_name(observed.request), pool=pool),
                )
                return error.reason, error.message
        return None
