"""The emulated clusters: node pools, long-running operations and accelerator quota.

Time moves lazily: nothing runs in the background. Every RPC first calls `advance`,
which moves operations whose time has come from PENDING to RUNNING to DONE and only
then applies their change (a pool appears, resizes or disappears), the order GKE
reports them in. A caller that polls sees exactly what it would see against GKE, and
a test can drive the clock by hand.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import grpc
from google.cloud import container_v1

# googleapis-common-protos ships no type information.
from google.rpc import status_pb2  # type: ignore[import-untyped]

from dws_operator import rfc3339
from dws_workshop.emulator.clock import PENDING_SHARE
from dws_workshop.emulator.config import ClusterConfig, EmulatorConfig
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.emulator.status import (
    ApiError,
    not_found,
    operation_in_progress,
    too_many_operations,
)

if TYPE_CHECKING:
    from google.cloud import compute_v1

    from dws_workshop.emulator.compute_state import ComputeState

Operation = container_v1.Operation
PoolStatus = container_v1.NodePool.Status
# mypy reads proto-plus enum members as plain ints; calling the enum gives typed members.
PENDING = Operation.Status(Operation.Status.PENDING)
RUNNING = Operation.Status(Operation.Status.RUNNING)
DONE = Operation.Status(Operation.Status.DONE)
PROVISIONING = PoolStatus(PoolStatus.PROVISIONING)
POOL_RUNNING = PoolStatus(PoolStatus.RUNNING)
RECONCILING = PoolStatus(PoolStatus.RECONCILING)
STOPPING = PoolStatus(PoolStatus.STOPPING)
POOL_ERROR = PoolStatus(PoolStatus.ERROR)
API_ROOT = "https://container.googleapis.com/v1"


@dataclass
class PoolRecord:
    cluster: ClusterRecord
    #: What GetNodePool answers: the pool as created, plus the fields GKE fills in.
    pool: container_v1.NodePool
    node_count: int = 0
    #: (accelerator, chips or GPUs per VM) counted against quota; None for plain VMs.
    usage: tuple[str, int] | None = None
    #: Nodes held against quota: the pool's maximum size, not its current one.
    reserved_nodes: int = 0
    #: The operation in flight on this pool; GKE runs one at a time per pool.
    operation: OperationRecord | None = None

    @property
    def path(self) -> str:
        return f"{self.cluster.path}/nodePools/{self.pool.name}"


@dataclass
class ClusterRecord:
    config: ClusterConfig
    pools: dict[str, PoolRecord] = field(default_factory=dict)
    #: Operations not yet DONE, kept by `start` and `_finish`.
    in_flight: int = 0
    #: The most operations ever in flight at once, for benchmarks against the quota.
    max_in_flight: int = 0

    @property
    def path(self) -> str:
        return self.config.name

    @property
    def short_name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def parent(self) -> str:
        """`projects/P/locations/L`: where the cluster's operations live."""
        return self.path.rsplit("/clusters/", 1)[0]


@dataclass
class OperationRecord:
    operation: Operation
    parent: str
    #: What the operation is doing, for the "operation in progress" message.
    doing: str
    cluster: ClusterRecord
    pool: PoolRecord | None
    running_at: float
    done_at: float
    on_success: Callable[[], None]
    on_failure: Callable[[], None]
    error: status_pb2.Status | None = None
    #: When the operation ends, as GKE reports it (`end_time`): its start plus its
    #: duration, not the moment a caller happened to look (time here moves lazily).
    ends: str = ""

    @property
    def path(self) -> str:
        return f"{self.parent}/operations/{self.operation.name}"

    @property
    def done(self) -> bool:
        return self.operation.status == DONE


class ClusterManagerState:
    """The clusters, beside the Compute resource policies (`compute`) pools may name."""

    def __init__(
        self, config: EmulatorConfig, clock: Callable[[], float], compute: ComputeState
    ) -> None:
        self.clock = clock
        self.clusters = {c.name: ClusterRecord(c) for c in config.clusters}
        self.quotas: dict[str, int] = dict(config.quotas)
        self.operations: list[OperationRecord] = []
        # Of `operations`: by path (GetOperation), and those not DONE yet (what `advance`
        # moves). Both keep a call's cost flat as GKE's history grows: a load run leaves
        # thousands of operations behind.
        self._by_path: dict[str, OperationRecord] = {}
        self._unfinished: list[OperationRecord] = []
        self.compute = compute
        # Compute asks before deleting a policy; a pool that names it still uses it.
        compute.users = self.policy_users
        self._ids = itertools.count(1)

    def resource_policy(
        self, project: str, region: str, name: str
    ) -> compute_v1.ResourcePolicy | None:
        """A Compute resource policy as it stands now (any status), for placement checks."""
        self.compute.advance()
        record = self.compute.policies.get((project, region, name))
        return record.policy if record else None

    def policy_users(self, project: str, region: str, name: str) -> list[str]:
        """The instance groups (one per pool, as GKE builds them) that use the policy."""
        users = []
        for cluster in self.clusters.values():
            config = cluster.config
            if (config.project, config.region) != (project, region):
                continue
            for pool in cluster.pools.values():
                if pool.pool.placement_policy.policy_name == name:
                    zone = (list(pool.pool.locations) or config.node_zones)[0]
                    group = f"gke-{cluster.short_name}-{pool.pool.name}-grp"
                    users.append(f"projects/{project}/zones/{zone}/instanceGroupManagers/{group}")
        return users

    def cluster(self, path: str) -> ClusterRecord:
        record = self.clusters.get(path)
        if record is None:
            raise not_found(path)
        return record

    def pool(self, cluster_path: str, name: str) -> PoolRecord:
        cluster = self.cluster(cluster_path)
        record = cluster.pools.get(name)
        if record is None:
            raise not_found(f"{cluster_path}/nodePools/{name}")
        return record

    def operation(self, path: str) -> OperationRecord:
        record = self._by_path.get(path)
        if record is None:
            raise not_found(path)
        return record

    def ensure_idle(self, pool: PoolRecord) -> None:
        busy = pool.operation
        if busy is not None and not busy.done:
            raise operation_in_progress(busy.operation.name, busy.doing, pool.cluster.short_name)

    def ensure_operation_slot(self, cluster: ClusterRecord) -> None:
        """RESOURCE_EXHAUSTED if the cluster already runs as many operations as its quota.

        Call after `advance` (every RPC does) and before changing anything: a refused
        call leaves the cluster as it was.
        """
        quota = cluster.config.concurrent_operations_quota
        if cluster.in_flight >= quota:
            raise too_many_operations(cluster.short_name, quota)

    def reserve(self, pool: PoolRecord, nodes: int) -> None:
        """Hold `nodes` of the pool's accelerator against quota, or RESOURCE_EXHAUSTED.

        Only growth is checked: shrinking or deleting a pool must always be possible.
        """
        if pool.usage is None or nodes <= pool.reserved_nodes:
            pool.reserved_nodes = nodes
            return
        resource, per_node = pool.usage
        quota = self.quotas.get(resource)
        if quota is not None:
            used = sum(
                p.reserved_nodes * p.usage[1]
                for c in self.clusters.values()
                for p in c.pools.values()
                if p is not pool and p.usage is not None and p.usage[0] == resource
            )
            wanted = nodes * per_node
            if used + wanted > quota:
                available = max(quota - used, 0)
                raise ApiError(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f'Insufficient quota to satisfy request: resource "{resource}": request '
                    f"requires '{wanted}' and is short '{wanted - available}'. Project has a "
                    f"quota of '{quota}' with '{available}' available.",
                    rule="GKE-ACCELERATOR-QUOTA",
                )
        pool.reserved_nodes = nodes

    def start(
        self,
        *,
        kind: int,
        doing: str,
        cluster: ClusterRecord,
        pool: PoolRecord | None,
        latency: float,
        on_success: Callable[[], None],
        on_failure: Callable[[], None],
        error: status_pb2.Status | None = None,
    ) -> Operation:
        started = self.clock()
        wall = datetime.now(UTC)
        location = cluster.config.location
        op_id = f"operation-{int(datetime.now(UTC).timestamp() * 1000)}-{next(self._ids):08x}"
        target = f"{API_ROOT}/{cluster.path}" + (f"/nodePools/{pool.pool.name}" if pool else "")
        operation = Operation(
            name=op_id,
            zone=location,
            location=location,
            operation_type=kind,
            status=PENDING,
            self_link=f"{API_ROOT}/{cluster.parent}/operations/{op_id}",
            target_link=target,
            start_time=rfc3339.milliseconds(wall),
        )
        record = OperationRecord(
            operation=operation,
            parent=cluster.parent,
            doing=doing,
            cluster=cluster,
            pool=pool,
            running_at=started + latency * PENDING_SHARE,
            done_at=started + latency,
            on_success=on_success,
            on_failure=on_failure,
            error=error,
            ends=rfc3339.milliseconds(wall + timedelta(seconds=latency)),
        )
        self.operations.append(record)
        self._by_path[record.path] = record
        self._unfinished.append(record)
        cluster.in_flight += 1
        cluster.max_in_flight = max(cluster.max_in_flight, cluster.in_flight)
        if pool is not None:
            pool.operation = record
        # The operation as it was when made: GKE answers the call with it PENDING. A
        # copy taken before `advance`, which may already move the record on (this thread
        # can lose the CPU for longer than the PENDING share since `started` was read).
        made: Operation = type(operation).deserialize(type(operation).serialize(operation))
        self.advance()
        return made

    @behaviour("GKE-OPERATION-LIFECYCLE")
    def advance(self) -> None:
        """Move every operation whose time has come, oldest first."""
        now = self.clock()
        # Whatever a finished operation starts (on_success) is appended meanwhile: newer.
        pending, self._unfinished = self._unfinished, []
        still: list[OperationRecord] = []
        for record in pending:
            if record.done:
                continue
            if now >= record.done_at:
                self._finish(record)
                continue
            if now >= record.running_at:
                record.operation.status = RUNNING
            still.append(record)
        self._unfinished = still + self._unfinished

    def _finish(self, record: OperationRecord) -> None:
        operation = record.operation
        operation.status = DONE
        operation.end_time = record.ends
        record.cluster.in_flight -= 1
        if record.error is None:
            record.on_success()
        else:
            operation.error = record.error
            # Deprecated by GKE in favour of `error`, but older clients still read it.
            operation.status_message = record.error.message
            record.on_failure()
        if record.pool is not None and record.pool.operation is record:
            record.pool.operation = None
