"""GKE as a load run judges it: the emulator's pools and operations, and whether a
request has its capacity requested or its pool is back at zero.

Operation times are the emulator's RFC 3339 `start_time` / `end_time` (wall clock). The
emulator moves operations lazily, on its next call (the autoscaler calls it every 0.2
s), so `end_time` is when anyone could first have seen the operation DONE.

"Capacity requested" (`capacity_requested_at`): the request's Job exists (first seen by
the load run's watch), and each of its pools exists in GKE, RUNNING, with no operation
in flight and an autoscaling maximum that fits the request; it happened at the latest
of the Job's first sighting and the end of every operation on those pools since the
wave began (the CreateNodePool, or the update that readied a reused pool).
"""

from __future__ import annotations

from dataclasses import dataclass

from google.cloud import container_v1

from dws_operator import rfc3339 as rfc3339_time
from dws_operator.gke.ceiling import holds_slice, max_nodes
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator
from dws_workshop.sandbox.load import RequestRecord

POOL_RUNNING = container_v1.NodePool.Status.RUNNING


def wall_seconds(rfc3339: str) -> float | None:
    """`2026-11-02T10:00:00.123Z` as `time.time()` seconds; None for an empty field."""
    if not rfc3339:
        return None
    return rfc3339_time.parse(rfc3339).timestamp()


@dataclass(frozen=True)
class OperationTimes:
    pool: str
    started: float
    #: None while PENDING or RUNNING.
    ended: float | None


@dataclass(frozen=True)
class PoolNow:
    running: bool
    max_nodes: int
    nodes: int
    #: A multi-host TPU slice pool: resized to zero, never capped (its maximum stays the
    #: slice's), so no node is what "at zero" means for it.
    holds_slice: bool = False


@dataclass(frozen=True)
class GkeSnapshot:
    """One look at the emulated cluster: its pools and every pool operation."""

    pools: dict[str, PoolNow]
    operations: dict[str, list[OperationTimes]]

    def operations_since(self, pool: str, since: float) -> list[OperationTimes]:
        return [op for op in self.operations.get(pool, []) if op.started >= since]

    def capacity_requested_at(
        self, record: RequestRecord, needed: int, since: float
    ) -> float | None:
        """When `record` had its capacity requested (see the module doc); None: not yet."""
        if record.job_seen_at is None or not record.pools:
            return None
        times = [record.job_seen_at]
        for name in record.pools:
            pool = self.pools.get(name)
            if pool is None or not pool.running or pool.max_nodes < needed:
                return None
            for op in self.operations_since(name, since):
                if op.ended is None:
                    return None
                times.append(op.ended)
        return max(times)

    def at_zero_at(self, record: RequestRecord, since: float, now: float) -> float | None:
        """When every pool of `record` was back at zero (no nodes, and an autoscaling
        maximum of 0 unless it holds a TPU slice; or deleted) with no operation in
        flight: the end of its last operation since `since`, else `now`; None while it
        is not."""
        times: list[float] = []
        for name in record.pools:
            pool = self.pools.get(name)
            capped = pool is None or pool.holds_slice or pool.max_nodes == 0
            if pool is not None and (not capped or pool.nodes > 0):
                return None
            operations = self.operations_since(name, since)
            if any(op.ended is None for op in operations):
                return None
            times.extend(op.ended for op in operations if op.ended is not None)
        return max(times) if times else now


def snapshot(emulator: ClusterManagerEmulator, cluster: str = DEFAULT_CLUSTER) -> GkeSnapshot:
    pools = {
        str(pool.name): PoolNow(
            running=pool.status == POOL_RUNNING,
            max_nodes=max_nodes(pool),
            nodes=count,
            holds_slice=holds_slice(pool),
        )
        for pool, count in emulator.node_pools(cluster)
    }
    operations: dict[str, list[OperationTimes]] = {}
    for operation in emulator.operations():
        _, found, pool = str(operation.target_link).rpartition("/nodePools/")
        started = wall_seconds(str(operation.start_time))
        if not found or started is None:
            continue
        ended = wall_seconds(str(operation.end_time))
        operations.setdefault(pool, []).append(OperationTimes(pool, started, ended))
    return GkeSnapshot(pools, operations)
