"""The running operator: its parts (caches, work queue, GKE snapshot, operation
scheduler, reconciler) as one `Controller`, how watch events reach them, and the
background tasks that drive them. Wired together in `assembly`."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from dws_operator.api import PLURAL, TERMINAL_PHASES
from dws_operator.controller.background import return_freed_heap, supervised
from dws_operator.controller.cache import Key, KubeCache, key_of
from dws_operator.controller.config import OperatorTime
from dws_operator.controller.dependents import Dependents
from dws_operator.controller.history import FLUSH_SECONDS
from dws_operator.controller.kube import (
    LOCAL_QUEUES,
    POLICIES,
    WORKLOADS,
    ApiError,
    Connection,
)
from dws_operator.controller.operations import OperationScheduler
from dws_operator.controller.pool_operation import PoolOperation, Priority
from dws_operator.controller.pools import PoolSnapshot
from dws_operator.controller.reconciler import Reconciler
from dws_operator.controller.reuse import PoolShelf
from dws_operator.controller.watched import watched
from dws_operator.controller.workloads import workload_owner
from dws_operator.gke import (
    ComputeApis,
    GkeError,
)
from dws_operator.kubekit.fence import LeaseLost
from dws_operator.kubekit.login import LoginError
from dws_operator.kubekit.workqueue import WorkQueue, run_workers
from dws_operator.multislice import JOBSET_NAME_LABEL, JOBSET_PLURAL
from dws_operator.workload import REQUEST_LABEL

log = logging.getLogger(__name__)

#: Reconcile passes that may run at once (a pass waits only on the Kubernetes API).
WORKERS = 16
#: Every request not yet finished is looked at this often even if nothing changed.
RESYNC_SECONDS = 300.0
#: How often everything watched is listed again, to forget what was deleted unseen.
RELIST_SECONDS = 120.0


@dataclass
class Controller:
    """Everything a running operator holds, built at start-up and closed at exit."""

    api: Connection
    gke_api: Any
    cache: KubeCache
    queue: WorkQueue[Key]
    dependents: Dependents
    snapshot: PoolSnapshot
    scheduler: OperationScheduler
    shelf: PoolShelf
    reconciler: Reconciler
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    compute: ComputeApis | None = None
    #: What is watched (and `relist` lists again): namespaces, and JobSets or not.
    namespaces: tuple[str, ...] = ()
    jobset: bool = False
    #: A monotonic clock (how long a pass took) and the randomness that spreads timers.
    clock: Callable[[], float] = time.monotonic
    rng: random.Random = field(default_factory=random.Random)
    #: The time decisions are made in (their timers are in its seconds).
    time: OperatorTime = field(default_factory=OperatorTime)
    #: Orphaned pools already logged (each is logged once, counted every sweep).
    _orphans_said: set[str] = field(default_factory=set)

    @property
    def uses_kueue(self) -> bool:
        return self.reconciler.config.kueue

    def wake_pools(self, pools: Iterable[str]) -> None:
        names = list(pools)
        for key in self.dependents.of(names):
            self.queue.add(key)
        for name in names:
            # A request on a pool it took over names it in its status, not in its spec.
            for key in self.cache.bound_to(name):
                self.queue.add(key)

    async def handle(self, key: Key) -> None:
        """One pass over `key`, and when to look at it again."""
        if not self.snapshot.listed:
            await self.snapshot.refresh()  # GKE must answer before any pool is judged absent
        metrics = self.reconciler.metrics
        began = self.clock()
        try:
            decision = await self.reconciler.reconcile(key)
        except (
            ApiError,
            LoginError,
            GkeError,
            OSError,
            aiohttp.ClientError,
            TimeoutError,
        ) as error:
            metrics.reconciled(self.clock() - began, ok=False)
            # Never crash or hot-loop: say what failed, wait longer each time.
            delay = self.queue.backoff(key)
            log.warning("%s/%s: pass failed, again in %.0fs: %s", *key, delay, error)
            return
        metrics.reconciled(self.clock() - began, ok=True)
        self.queue.succeeded(key)
        if decision is None or decision.released:
            self.queue.forget(key)
            return
        settled = decision.status.phase in TERMINAL_PHASES and not decision.actions
        if decision.requeue_after is not None:
            # The decision's seconds are the operator's time's (simulated in a sandbox).
            wait = self.time.real_seconds(decision.requeue_after)
            self.queue.add_after(key, min(wait, RESYNC_SECONDS))
        elif not settled:
            # The safety net for an event lost: spread, so a thousand requests that were
            # created together are not all looked at in the same second.
            self.queue.add_after(key, RESYNC_SECONDS * (0.75 + 0.5 * self.rng.random()))

    def listed(self) -> None:
        """kopf's first listing of every watched kind is in the cache: the workers start
        (at the first call; later calls do nothing)."""
        if not self.tasks:
            log.info(
                "caches filled from the first listing (%d requests): workers started",
                len(self.cache.request_keys()),
            )
            self.start()

    def on_event(self, kind: str, deleted: bool, body: Mapping[str, Any]) -> None:
        """A watch event: the cache updated, and the requests it concerns woken."""
        cache = self.cache
        key = key_of(body)
        labels = (body.get("metadata") or {}).get("labels") or {}
        if deleted and self._another_holds(kind, key, body):
            # The delete of an older object of that name, come after the new one's
            # event (kopf held the delete back until its first listings were in).
            return
        if kind == PLURAL:
            if deleted:
                self.remove_request(key)
            else:
                self.put_request(body)
            return
        if kind == LOCAL_QUEUES:
            namespace, name = key
            if deleted:
                cache.remove_local_queue(namespace, name)
            elif cache.put_local_queue(namespace, name):
                # Requests waiting for it (few: a queue is made once) go on.
                for waiting in cache.request_keys():
                    if waiting[0] == namespace:
                        self.queue.add(waiting)
            return
        if kind == WORKLOADS:
            self._on_workload(key[0], deleted, body)
            return
        if kind == POLICIES:
            if deleted:
                cache.remove_policy(key)
            elif not cache.put_policy(body):
                return
            # Requests of the namespace not yet past their policies are looked at again.
            for other, summary in cache.in_namespace(key[0]):
                if not (summary.admitted or summary.ended):
                    self.queue.add(other)
            return
        if kind == "nodes":
            name = str((body.get("metadata") or {}).get("name"))
            pool = cache.remove_node(name) if deleted else cache.put_node(body)
            if pool is not None:
                self.wake_pools([pool])
            return
        remove, put = {
            "jobs": (cache.remove_job, cache.put_job),
            JOBSET_PLURAL: (cache.remove_jobset, cache.put_jobset),
            "services": (cache.remove_service, cache.put_service),
        }[kind]
        if deleted:
            remove(key)
        elif not put(body):
            return  # what the cache knew already (an echo of our own write, a relist)
        request = labels.get(REQUEST_LABEL)
        if request is None and JOBSET_NAME_LABEL in labels:
            # A JobSet's Job: its JobSet says whose it is.
            jobset = cache.jobset(key[0], labels[JOBSET_NAME_LABEL]) or {}
            request = ((jobset.get("metadata") or {}).get("labels") or {}).get(REQUEST_LABEL)
        if request is not None:
            self.queue.add((key[0], request))

    def _another_holds(self, kind: str, key: Key, body: Mapping[str, Any]) -> bool:
        """Whether the cache holds, under `key`, an object other than `body` (another uid)."""
        uid = (body.get("metadata") or {}).get("uid")
        if not uid:
            return False
        if kind == PLURAL:
            summary = self.cache.summary(key)
            return summary is not None and summary.uid != uid
        held = self.cache.uid(kind, key)
        return held is not None and held != uid

    def _on_workload(self, namespace: str, deleted: bool, body: Mapping[str, Any]) -> None:
        """A Kueue Workload's event: whether Kueue deactivated a Job's or JobSet's, its
        request (when the owner is one of ours) woken when that changed. Kept whether or
        not the owner is known yet: kopf lists the kinds side by side, and a Workload may
        come before its Job."""
        owner = workload_owner(body)
        if owner is None:
            return
        # One being deleted (it goes after its owner) no longer says anything of it.
        going = deleted or bool((body.get("metadata") or {}).get("deletionTimestamp"))
        why = None if going else owner.deactivated
        if self.cache.put_workload(owner.kind, namespace, owner.name, why):
            request = self.cache.owner_of(owner.kind, (namespace, owner.name))
            if request is not None:
                self.queue.add(request)

    async def relist(self) -> int:
        """List again what the watches follow (not Kueue's kinds: a LocalQueue deleted
        unseen only delays a clear condition, a Workload goes with its Job), take in
        updates they missed, and forget what was deleted unseen. kopf goes on from the
        last version it saw when a watch reconnects; when the server no longer has that
        version (410 Gone: an API server restart, a long break) it lists again and
        reports what is there, never what went meanwhile (its per-object memories of
        such objects are kept too). Without this a Job deleted then would be waited for,
        and a Node removed then would keep its pool from counting as scaled down, for
        ever. The number of objects forgotten."""
        kube = self.reconciler.kube
        sources = [(w.kind, w.label or "") for w in watched(kueue=False, jobset=self.jobset)]
        # A kind listed twice (Jobs by two labels) is judged on both lists together,
        # at the older of their versions.
        seen: dict[tuple[str, str | None], tuple[set[Key], int | None]] = {}
        for kind, label in sources:
            async for listed in kube.snapshots(kind, label, self.namespaces):
                for item in listed.items:
                    # Updates missed to what the cache holds; nothing new: a listing is
                    # older than the watch events that came while it was taken (one
                    # may have reported the object deleted), and a restarted watch
                    # reports what is there itself.
                    if self.cache.holds(kind, key_of(item)):
                        self.on_event(kind, False, item)
                keys, version = seen.get((kind, listed.namespace), (set(), listed.version))
                keys |= {key_of(item) for item in listed.items}
                if version is not None and listed.version is not None:
                    version = min(version, listed.version)
                else:
                    version = None
                seen[kind, listed.namespace] = (keys, version)
        forgotten = 0
        for (kind, namespace), (keys, version) in seen.items():
            if version is None:
                continue  # versions not comparable: nothing can be judged gone
            for key in self.cache.stale(kind, namespace, keys, version):
                log.info("%s %s/%s was deleted unseen: forgotten", kind, *key)
                self._forget(kind, key)
                forgotten += 1
        return forgotten

    def _forget(self, kind: str, key: Key) -> None:
        if kind == PLURAL:
            self.remove_request(key)
            return
        if kind == POLICIES:
            self.on_event(POLICIES, True, {"metadata": {"namespace": key[0], "name": key[1]}})
            return
        if kind == "nodes":
            pool = self.cache.remove_node(key[1])
            if pool is not None:
                self.wake_pools([pool])
            return
        owner = self.cache.owner_of(kind, key)
        {
            "jobs": self.cache.remove_job,
            JOBSET_PLURAL: self.cache.remove_jobset,
            "services": self.cache.remove_service,
        }[kind](key)
        if owner is not None:
            self.queue.add(owner)

    async def relisting(self) -> None:
        """`relist` now and then (spread: replicas and restarts do not line up). Not at
        the start: the caches hold kopf's first listing, and its watches go on from it."""
        while True:
            await asyncio.sleep(RELIST_SECONDS * (0.75 + 0.5 * self.rng.random()))
            await self.relist()

    def put_request(self, body: Mapping[str, Any]) -> None:
        key = key_of(body)
        before = self.cache.summary(key)
        if self.cache.put_request(body):
            self.dependents.update(key, body)
            self.queue.add(key)
            after = self.cache.summary(key)
            if after is not None and after.ended and (before is None or not before.ended):
                # Ended (written by a replica that was the leader, or seen at start):
                # its namespace's in-flight limits have room again.
                self.reconciler.ledger.wake_next(key)

    def remove_request(self, key: Key) -> None:
        # Gone before anything was made for it (no finalizer held it): a create or a
        # takeover still waiting in line is called off.
        summary = self.cache.summary(key)
        pools = {*self.dependents.pools_of(key), summary.pool if summary else ""} - {""}
        self.reconciler.call_off(key, pools)
        self.cache.remove_request(key)
        self.dependents.remove(key)
        self.queue.forget(key)
        self.reconciler.ledger.forget(key)
        self.reconciler.ledger.wake_next(key)

    def start(self) -> None:
        for key in self.cache.request_keys():
            self.queue.add(key)
        loops: dict[str, Callable[[], Awaitable[None]]] = {
            "dws-pool-snapshot": self.snapshot.run,
            "dws-operations": self.scheduler.run,
            "dws-workers": lambda: run_workers(self.queue, self.handle, WORKERS),
            "dws-idle-pools": self.sweep,
            "dws-relist": self.relisting,
            "dws-events": self.reconciler.events.run,
            "dws-heap": return_freed_heap,
            "dws-capacity-history": self.write_history,
        }
        self.tasks = [
            asyncio.create_task(supervised(name, loop), name=name) for name, loop in loops.items()
        ]

    async def write_history(self) -> None:
        """Waits added since the last write reach the ConfigMap within FLUSH_SECONDS
        even when no other wait ends to carry them."""
        while True:
            await asyncio.sleep(FLUSH_SECONDS)
            with contextlib.suppress(LeaseLost):
                await self.reconciler.history.flush(force=False)

    async def sweep(self) -> None:
        """Idle pools that no request of their shape took in time are deleted; orphaned
        pools (`PoolShelf.orphans`) are counted, and deleted once Node-free for their grace."""
        while True:
            await asyncio.sleep(self.snapshot.interval)
            for name, holder in self.shelf.expired():
                log.info("deleting node pool %s: idle for %.0fs", name, self.shelf.idle_seconds)
                self._delete_pool(name, holder)
            orphans = self.shelf.orphans()
            self.reconciler.metrics.orphaned_pools.set(len(orphans))
            for name in sorted(set(orphans) - self._orphans_said):
                log.warning(
                    "node pool %s is orphaned: the operator made it, its request is gone", name
                )
            self._orphans_said = set(orphans)
            for name in self.shelf.orphans_due(orphans):
                log.warning(
                    "deleting orphaned node pool %s: no Node on it for %.0fs",
                    name,
                    self.shelf.orphan_grace_seconds,
                )
                self._delete_pool(name, ("", name))

    def _delete_pool(self, name: str, holder: Key) -> None:
        """A pool the sweep found nobody needs, deleted in one of GKE's operation slots."""
        delete = functools.partial(self.reconciler.sources.mutations.delete, name)
        self.scheduler.submit(
            PoolOperation(name, "Delete", holder, Priority.RELEASE, "", (delete,))
        )

    async def stop(self) -> None:
        self.queue.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        # The waits not written yet, while the connection is still there (a replica that
        # lost its Lease is refused by the fence, and loses them: an estimate's loss).
        with contextlib.suppress(LeaseLost):
            await self.reconciler.history.flush()
        await self.api.close()
        await self.gke_api.transport.close()
        if self.compute is not None:
            self.compute.close()
