"""Idle node pools, kept for the next request of their shape, and deleted when unused.

A pool is idle when the operator made it (it carries a shape label), it is at zero (its
autoscaling ceiling and its Nodes; a TPU slice pool, never capped, by its Nodes and its
holder's scale-down), no operation is queued or running on it, and the request holding
it (its uid label) is gone or finished. A new request of the same shape
takes it over instead of creating a pool: its status names the pool first (so a crash
after that finds the binding), then the pool's labels and ceiling are set for it.

One pool serves one request at a time. A pool is never handed to two requests: a claim
in memory covers the moment between choosing a pool and writing the status, and the
statuses (kept in the watches' cache) cover everything after, across restarts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from dws_operator import rfc3339
from dws_operator.api import TERMINAL_PHASES
from dws_operator.controller.cache import Key, KubeCache
from dws_operator.controller.config import IDLE_SECONDS, ORPHAN_GRACE_SECONDS
from dws_operator.controller.operations import OperationScheduler
from dws_operator.controller.pools import PoolSnapshot
from dws_operator.gke.ceiling import ceiling, holds_slice
from dws_operator.gke.client import NodePool
from dws_operator.gke.labels import NAMESPACE_LABEL, UID_LABEL
from dws_operator.gke.shapes import shape_label

log = logging.getLogger(__name__)


class PoolShelf:
    def __init__(
        self,
        snapshot: PoolSnapshot,
        cache: KubeCache,
        scheduler: OperationScheduler,
        idle_seconds: float = IDLE_SECONDS,
        clock: Callable[[], float] = time.time,
        namespaces: tuple[str, ...] = (),
        orphan_grace_seconds: float = ORPHAN_GRACE_SECONDS,
    ) -> None:
        #: The namespaces this operator serves (empty: all). A pool of a request in any
        #: other is another operator's business: never taken over nor swept from here.
        self.namespaces = namespaces
        self.snapshot = snapshot
        self.cache = cache
        self.scheduler = scheduler
        self.idle_seconds = idle_seconds
        self._clock = clock
        self._claims: dict[str, Key] = {}
        self._by_shape: dict[str, list[str]] = {}
        self._indexed_at = -1
        #: When a pool without a holder request was first seen idle (memory only: after
        #: a restart the wait starts again, which only ever keeps a pool longer).
        self._orphaned_since: dict[str, float] = {}
        self.orphan_grace_seconds = orphan_grace_seconds
        #: When each orphan (see `orphans`) was first seen with no Node (memory only).
        self._empty_orphan_since: dict[str, float] = {}
        self.taken_over = 0

    @property
    def enabled(self) -> bool:
        return self.idle_seconds > 0

    def holder(self, pool: NodePool) -> Key | None:
        """The request the pool's labels name, if it still exists."""
        return self.cache.key_by_uid(pool.config.resource_labels.get(UID_LABEL, ""))

    def taken_by_other(self, name: str, key: Key) -> bool:
        """Whether another request is taking `name` over (claimed, or named in its status
        while not finished): its old holder must then leave it alone."""
        claimant = self._claims.get(name)
        if claimant is not None and claimant != key:
            return True
        for other in self.cache.bound_to(name):
            if other != key and not self._finished(other):
                return True
        return False

    def free_for(self, name: str, key: Key) -> bool:
        """Whether `key` may take over the pool `name` (idle, and not someone else's)."""
        pool = self.snapshot.get(name)
        return pool is not None and self._idle(name, pool, key)

    def claim(self, shape: str, key: Key) -> str | None:
        """An idle pool of `shape` for `key`, claimed; None when there is none."""
        if not self.enabled:
            return None
        self._index()
        for name in self._by_shape.get(shape, ()):
            pool = self.snapshot.get(name)
            if pool is not None and self._idle(name, pool, key):
                self._claims[name] = key
                return name
        return None

    def release(self, key: Key) -> None:
        """Claims of `key` end (its status now says which pool it holds, or it is gone)."""
        for name in [n for n, k in self._claims.items() if k == key]:
            del self._claims[name]

    def expired(self) -> list[tuple[str, Key]]:
        """Idle pools past `idle_seconds`, with the request they were last held by (or
        a key naming the pool, when that request is gone): to be deleted."""
        if not self.enabled:
            return []
        now = self._clock()
        found: list[tuple[str, Key]] = []
        seen: set[str] = set()
        for name in self.snapshot.names():
            pool = self.snapshot.get(name)
            if pool is None or shape_label(pool) is None or not self._idle(name, pool, None):
                continue
            seen.add(name)
            holder = self.holder(pool)
            since = self._idle_since(name, holder, now)
            if now - since >= self.idle_seconds:
                found.append((name, holder or ("", name)))
        for name in set(self._orphaned_since) - seen:
            del self._orphaned_since[name]
        return found

    def orphans(self) -> list[str]:
        """Pools the operator made (its request's uid label) whose request is gone and
        that nobody looks after: not named by any request, no operation on them, not
        claimed, and not idle (an idle one is the idle sweep's, when reuse is on). Their
        ceiling is above zero or Nodes are on them: billed, with no request to end them.
        A request lets go only after its pools are gone, so each is a fault's leftover."""
        found: list[str] = []
        for name in self.snapshot.names():
            pool = self.snapshot.get(name)
            if pool is None:
                continue
            # Made by the operator: it carries its request's uid (a multislice or an
            # Ironwood pool has no shape label: it is never reused, but may be orphaned).
            labels = pool.config.resource_labels
            if not labels.get(UID_LABEL):
                continue
            if self.namespaces and labels.get(NAMESPACE_LABEL) not in self.namespaces:
                continue
            if self.holder(pool) is not None or self.cache.bound_to(name):
                continue
            if self.scheduler.owner(name) is not None or name in self._claims:
                continue
            if self.enabled and self._idle(name, pool, None):
                continue
            found.append(name)
        return found

    def orphans_due(self, orphans: list[str]) -> list[str]:
        """Of `orphans`, those with no Node on them, in GKE's RUNNING state, for
        `orphan_grace_seconds`: to be deleted."""
        now = self._clock()
        due: list[str] = []
        empty: dict[str, float] = {}
        for name in orphans:
            pool = self.snapshot.get(name)
            if pool is None or pool.status != NodePool.Status.RUNNING:
                continue
            if self.cache.node_counts.get(name, 0) > 0:
                continue
            empty[name] = since = self._empty_orphan_since.get(name, now)
            if now - since >= self.orphan_grace_seconds:
                due.append(name)
        self._empty_orphan_since = empty
        return due

    def _idle_since(self, name: str, holder: Key | None, now: float) -> float:
        summary = self.cache.summary(holder) if holder is not None else None
        stamp = summary.released_at if summary is not None else None
        if stamp is not None:
            try:
                return rfc3339.parse(stamp).timestamp()
            except ValueError:
                pass
        return self._orphaned_since.setdefault(name, now)

    def _idle(self, name: str, pool: NodePool, key: Key | None) -> bool:
        if shape_label(pool) is None or pool.status != NodePool.Status.RUNNING:
            return False
        labels = pool.config.resource_labels
        if self.namespaces and labels.get(NAMESPACE_LABEL) not in self.namespaces:
            return False
        # A TPU slice pool keeps its ceiling when released (ceiling.holds_slice): its
        # Nodes, and its holder being done (below), say it is idle.
        capped = holds_slice(pool) or ceiling(pool) == 0
        if not capped or self.cache.node_counts.get(name, 0) > 0:
            return False
        owner = self.scheduler.owner(name)
        if owner is not None and (key is None or owner != key):
            return False  # an operation of someone else's (or a deletion) is on it
        claimant = self._claims.get(name)
        if claimant is not None and claimant != key:
            return False
        holder = self.holder(pool)
        if holder is not None and holder != key and not self._finished(holder):
            return False
        if holds_slice(pool) and holder is not None and holder != key:
            # No ceiling says so: only its holder's scale-down hands a slice pool on (a
            # `cleanup: Keep` request's pool stays its own, Nodes or none).
            summary = self.cache.summary(holder)
            if summary is not None and not summary.scaled_down:
                return False
        return not any(
            other not in (key, holder) and not self._finished(other)
            for other in self.cache.bound_to(name)
        )

    def _finished(self, key: Key) -> bool:
        summary = self.cache.summary(key)
        if summary is None:
            return True
        if summary.deleting:
            return False  # its deletion is still cleaning up
        return summary.phase in TERMINAL_PHASES

    def _index(self) -> None:
        """Pools by shape, rebuilt when the snapshot changed."""
        if self._indexed_at == self.snapshot.version:
            return
        by_shape: dict[str, list[str]] = {}
        for name in sorted(self.snapshot.names()):
            pool = self.snapshot.get(name)
            shape = shape_label(pool) if pool is not None else None
            if shape is not None:
                by_shape.setdefault(shape, []).append(name)
        self._by_shape = by_shape
        self._indexed_at = self.snapshot.version
