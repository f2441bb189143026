"""One reconcile pass: observe (from the caches), decide, write status, act, post events.

The status is written before the actions run: a crash between the two leaves a
status that the next pass re-derives from what it observes, while a crash after an
action leaves an object the next pass finds (names are deterministic) instead of
making a second one. Node pool actions are handed to the cluster's operation
scheduler, which starts them within GKE's limits; the pass never waits on GKE.

The pass's parts: what it decides on (`controller.observer`), its status write
(`controller.status_write`), the finalizer (`controller.finalizers`) and the carrying
out of its actions (`controller.execute`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from dws_operator.controller.bookings import BookingConnector, Bookings
from dws_operator.controller.cache import Key
from dws_operator.controller.execute import HELD_BY_THEIR_OPERATION, Executor
from dws_operator.controller.finalizers import FINALIZER, Finalizers
from dws_operator.controller.history import CapacityHistory
from dws_operator.controller.kube import Conflict, WorkloadRejected
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.names import every_pool_name
from dws_operator.controller.observe import Sources, request_view
from dws_operator.controller.observer import PassObserver
from dws_operator.controller.status_write import StatusWriter, merge_patch
from dws_operator.controller.tenancy import PolicyLedger
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.kubekit.events import EventPoster
from dws_operator.reconcile import (
    AT_ONCE,
    CreateJob,
    CreateService,
    Decision,
    ReconcileConfig,
    RequestView,
    decide,
)

if TYPE_CHECKING:
    from dws_operator.gke.policies import WorkloadPolicyClient

#: The pass's finalizer and its status's merge patch are named from here too.
__all__ = ["FINALIZER", "Reconciler", "merge_patch"]

log = logging.getLogger(__name__)


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
        self.kube = sources.kube
        self.cache = sources.cache
        self.config = config
        #: Calendar-mode bookings in Compute, connected on first use as the policies are.
        self.bookings = Bookings(bookings)
        #: Waits for capacity, for the estimates; kept in this process only unless given.
        self.history = history or CapacityHistory.in_memory()
        self.passes = 0
        self.events = EventPoster(self.kube, clock=sources.monotonic, wall=sources.now)
        #: The namespaces' TrainingPolicies and what their requests hold.
        self.ledger = PolicyLedger(self.cache)
        self.finalizers = Finalizers(self.kube, self.cache)
        #: What each pass decides on, and what the shell alone knows of its request.
        self.observer = PassObserver(sources, config, self.bookings, self.history, pool_defaults)
        self.status_writer = StatusWriter(self.kube, self.cache, self.metrics, self.history)
        self.executor = Executor(
            sources, config, self.finalizers, self.bookings, policies, pool_defaults
        )

    async def reconcile(self, key: Key) -> Decision | None:
        """One pass over the request as the caches know it; None when there is nothing
        of it left to look after (gone, or deleted and released)."""
        body = self.cache.request(key)
        if body is None:
            self.metrics.request_gone(key)
            self.observer.refused.pop(key, None)
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
            self.call_off(key, every_pool_name(request))
            self.metrics.request_gone(key)
            self.observer.refused.pop(key, None)
            self.observer.absent.pop(request.uid, None)
            return None
        with self.status_writer.counting():
            return await self._decide_and_act(key, request, body, finalizers)

    async def _decide_and_act(
        self, key: Key, request: RequestView, body: Mapping[str, Any], finalizers: list[str]
    ) -> Decision:
        """Read, decide once, write the status once, then act."""
        try:
            observed = await self.observer.observe(key, request, body)
            # From here to the ledger's note, no await: no other pass counts meanwhile.
            created = str((body.get("metadata") or {}).get("creationTimestamp") or "")
            observed = self.ledger.observed(key, created, observed)
            decision = decide(observed, self.config)
            self.ledger.note(key, request.status, decision.status, request.facts.size)
            try:
                body = await self.status_writer.write(
                    body, observed, decision.status, decision.tally
                )
            except Conflict:
                self.ledger.forget(key)
                return await self.status_writer.changed_meanwhile(key, request)
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
        if any(not isinstance(a, HELD_BY_THEIR_OPERATION) for a in decision.actions):
            body = await self.finalizers.hold(body)
        try:
            for action in decision.actions:
                if not await self.executor.execute(observed.request, body, action):
                    # The cache held an object the API server no longer has: a deletion
                    # no watch reported (made while a watch was down and its kind
                    # listed again). Forgotten; looked at again.
                    decision.requeue_after = AT_ONCE
                elif isinstance(action, CreateJob | CreateService):
                    # Its status was written before it existed: looked at again at once
                    # (the cache has it already; its watch event changes nothing).
                    decision.requeue_after = AT_ONCE
        except WorkloadRejected as rejected:
            # The next pass's decision fails the request (it is looked at again at once).
            self.observer.refused[key] = (rejected.reason, rejected.message)
            decision.requeue_after = AT_ONCE
        if decision.released:
            self.metrics.request_gone(key)
            await self.finalizers.set_finalizers(body, [f for f in finalizers if f != FINALIZER])
            # Gone from the API once its last finalizer is: not kept in the cache (the
            # DELETED event may have come already and would not come again).
            self.cache.remove_request(key)
            self.sources.facts.forget(observed.request.uid)
            self.observer.absent.pop(observed.request.uid, None)
            self.sources.shelf.release(key)
        for event in decision.events:
            # Queued, not awaited: an Event is for people (see EventPoster).
            self.events.post(body, event.type, event.reason, event.message)
        return decision

    def call_off(self, key: Key, pools: Iterable[str]) -> None:
        """Drop the request's pool operations that have not started in GKE."""
        for pool in pools:
            self.sources.operations.cancel(pool, key)
