"""The Nodes the operator watches, kept as their pool's name (and when GKE says their VM
ends): counted by pool, which is all a pass needs of them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller.records import termination_of, version_of

__all__ = ["NodeCounts"]


class NodeCounts:
    """Nodes by pool: `KubeCache`'s part for GKE's Nodes."""

    def __init__(self) -> None:
        self._node_pools: dict[str, str] = {}
        self._node_versions: dict[str, int | None] = {}
        #: When each Node's VM ends, as GKE's annotation says (flex-start VMs).
        self._node_ends: dict[str, datetime] = {}
        self.node_counts: Counter[str] = Counter()

    def put_node(self, body: Mapping[str, Any]) -> str | None:
        """Count the Node under its pool; the pool whose count changed, if any."""
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name") or "")
        pool = (metadata.get("labels") or {}).get(NODE_POOL_LABEL_KEY)
        before = self._node_pools.get(name)
        known, incoming = self._node_versions.get(name), version_of(body)
        if known is not None and incoming is not None and incoming < known:
            return None  # older than what is known (a listing taken before an event)
        self._node_versions[name] = incoming
        ends = termination_of(metadata)
        if before == pool:
            self._set_end(name, ends)
            return None
        self.remove_node(name)
        self._node_versions[name] = incoming
        self._set_end(name, ends)
        if pool is not None:
            self._node_pools[name] = pool
            self.node_counts[pool] += 1
        return pool or before

    def _set_end(self, name: str, ends: datetime | None) -> None:
        if ends is None:
            self._node_ends.pop(name, None)
        else:
            self._node_ends[name] = ends

    def capacity_end(self, pools: Iterable[str]) -> datetime | None:
        """The earliest end of a VM of `pools` as GKE annotates its Node; None when none
        of their Nodes says."""
        wanted = set(pools)
        ends = [
            end for node, end in self._node_ends.items() if self._node_pools.get(node) in wanted
        ]
        return min(ends, default=None)

    def remove_node(self, name: str) -> str | None:
        self._node_ends.pop(name, None)
        self._node_versions.pop(name, None)
        pool = self._node_pools.pop(name, None)
        if pool is not None:
            self.node_counts[pool] -= 1
            if self.node_counts[pool] <= 0:
                del self.node_counts[pool]
        return pool

    def nodes_of(self, pools: Iterable[str]) -> dict[str, int]:
        return {pool: self.node_counts.get(pool, 0) for pool in pools}
