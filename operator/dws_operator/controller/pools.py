"""The cluster's node pools as GKE last listed them: one ListNodePools for every request.

A thousand requests waiting for capacity share this one snapshot instead of asking GKE
about their pools one by one; it is refreshed on a timer, and at once when an operation
the operator started is done. Whoever depends on a pool is told when it changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from dws_operator.gke import GkeError, NodePoolClient
from dws_operator.gke.client import NodePool

log = logging.getLogger(__name__)

#: Between two listings when nothing the operator did is in flight. GKE's own changes
#: (autoscaler, repairs, someone's edit) show within this; at one call per interval the
#: operator's GKE cost does not grow with the number of requests.
REFRESH_SECONDS = 10.0


class PoolSnapshot:
    def __init__(
        self,
        gke: NodePoolClient,
        on_change: Callable[[Iterable[str]], None],
        interval: float = REFRESH_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.gke = gke
        self.on_change = on_change
        self.interval = interval
        self._clock = clock
        self._pools: dict[str, NodePool] = {}
        self._listed_at: float | None = None
        #: Pools read one by one, and when: a listing begun before must not undo them.
        self._read_at: dict[str, float] = {}
        self._lock = asyncio.Lock()
        self.listings = 0
        #: Goes up whenever any pool changed (by a listing or a single read).
        self.version = 0

    @property
    def listed(self) -> bool:
        """Whether GKE answered at least once: before that, no pool may be judged absent."""
        return self._listed_at is not None

    def get(self, name: str) -> NodePool | None:
        return self._pools.get(name)

    def names(self) -> list[str]:
        return list(self._pools)

    async def refresh(self, since: float | None = None) -> None:
        """List the pools again, unless a listing started after `since` already has
        (callers that need 'fresh as of now' share one call)."""
        async with self._lock:
            if since is not None and self._listed_at is not None and self._listed_at >= since:
                return
            started = self._clock()
            listed = {pool.name: pool for pool in await self.gke.list_pools()}
            self.listings += 1
            for name, read_at in self._read_at.items():
                if read_at > started:
                    # Read on its own after this listing began: the newer word stands.
                    if name in self._pools:
                        listed[name] = self._pools[name]
                    else:
                        listed.pop(name, None)
            changed = [
                name
                for name in self._pools.keys() | listed.keys()
                if self._pools.get(name) != listed.get(name)
            ]
            self._pools = listed
            self._listed_at = started
            self._read_at = {n: t for n, t in self._read_at.items() if t > started}
        if changed:
            self.version += 1
            self.on_change(changed)

    async def refresh_pool(self, name: str) -> None:
        """Read one pool again (after an operation on it is done): cheaper than a listing,
        and what the pool's request waits for."""
        started = self._clock()
        pool = await self.gke.get(name)
        self._read_at[name] = started
        before = self._pools.get(name)
        if pool is None:
            self._pools.pop(name, None)
        else:
            self._pools[name] = pool
        if before != pool:
            self.version += 1
            self.on_change([name])

    async def run(self) -> None:
        """Refresh every `interval` seconds, riding out GKE errors (with a log line)."""
        while True:
            try:
                await self.refresh()
            except GkeError as error:
                log.warning("listing node pools failed, again in %.0fs: %s", self.interval, error)
            await asyncio.sleep(self.interval)
