"""Which requests depend on which node pool: a pool's change (in GKE's snapshot, or a
Node on it) wakes the requests that may use it, and no other."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from dws_operator.controller.cache import Key
from dws_operator.controller.observe import FactsMemo
from dws_operator.reconcile import step_pool_names


class Dependents:
    """Which requests depend on which node pool (for snapshot and Node changes)."""

    def __init__(self, facts: FactsMemo) -> None:
        self._facts = facts
        self._by_pool: dict[str, set[Key]] = {}
        self._pools: dict[Key, tuple[str, ...]] = {}

    def update(self, key: Key, body: Mapping[str, Any]) -> None:
        # The request's spec is read here, as it enters the cache; its passes reuse it.
        pools = step_pool_names(self._facts.of(body))
        if self._pools.get(key) == pools:
            return
        self.remove(key)
        self._pools[key] = pools
        for pool in pools:
            self._by_pool.setdefault(pool, set()).add(key)

    def remove(self, key: Key) -> None:
        for pool in self._pools.pop(key, ()):
            keys = self._by_pool.get(pool, set())
            keys.discard(key)
            if not keys:
                self._by_pool.pop(pool, None)

    def pools_of(self, key: Key) -> tuple[str, ...]:
        return self._pools.get(key, ())

    def of(self, pools: Iterable[str]) -> set[Key]:
        found: set[Key] = set()
        for pool in pools:
            found |= self._by_pool.get(pool, set())
        return found
