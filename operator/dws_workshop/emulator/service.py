"""The ClusterManager methods the emulator serves, as GKE answers them.

Each method takes the request message and returns the response message or raises
`ApiError`. Long-running methods also take the error their operation is to end with
(fault injection decides that); everything they change happens when the operation
completes, never at the call.

UpdateNodePool applies labels, resource labels and locations; other fields of the
request are accepted and ignored. Every method that starts an operation first checks
the cluster's concurrent-operations quota (`ClusterConfig.concurrent_operations_quota`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc
import proto  # type: ignore[import-untyped]  # proto-plus ships no type information
from google.cloud import container_v1

# googleapis-common-protos ships no type information.
from google.rpc import status_pb2  # type: ignore[import-untyped]

from dws_operator.gke.ceiling import autoscaler_max
from dws_workshop.emulator.config import EmulatorConfig
from dws_workshop.emulator.placement import deferred_failure, resolve_topology
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.emulator.rules import (
    accelerator_per_node,
    check_slice_maximum,
    slice_topology,
    validate_autoscaling,
    validate_new_pool,
)
from dws_workshop.emulator.state import (
    API_ROOT,
    POOL_ERROR,
    POOL_RUNNING,
    PROVISIONING,
    RECONCILING,
    STOPPING,
    ClusterManagerState,
    ClusterRecord,
    PoolRecord,
)
from dws_workshop.emulator.status import already_exists, invalid

Message = TypeVar("Message", bound=proto.Message)
OpType = container_v1.Operation.Type

_CLUSTER_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/clusters/[^/]+$")
_POOL_RE = re.compile(r"^(projects/[^/]+/locations/[^/]+/clusters/[^/]+)/nodePools/([^/]+)$")
_OPERATION_RE = re.compile(r"^projects/[^/]+/locations/[^/]+/operations/[^/]+$")
_PARENT_RE = re.compile(r"^projects/([^/]+)/locations/([^/]+)$")


def clone(message: Message) -> Message:
    """A deep copy, so callers never share mutable state with the emulator."""
    kind = type(message)
    return cast("Message", kind.deserialize(kind.serialize(message)))


@dataclass(frozen=True)
class Method:
    name: str
    request_type: type[Any]
    response_type: type[Any]
    handler: Callable[[Any, Any], Any]
    long_running: bool = False


def _cluster_path(name: str, project: str, zone: str, cluster: str, field: str) -> str:
    # The v1 API still accepts the deprecated project_id/zone/cluster_id triple.
    if not name and project and zone and cluster:
        name = f"projects/{project}/locations/{zone}/clusters/{cluster}"
    if not _CLUSTER_RE.match(name):
        raise invalid(
            field,
            f"{name!r} is not of the form projects/*/locations/*/clusters/*",
            rule="GKE-RESOURCE-NAME",
        )
    return name


def _pool_path(request: Any) -> tuple[str, str]:
    name = request.name
    if not name and request.node_pool_id:
        cluster = _cluster_path("", request.project_id, request.zone, request.cluster_id, "name")
        name = f"{cluster}/nodePools/{request.node_pool_id}"
    match = _POOL_RE.match(name)
    if match is None:
        raise invalid(
            "name",
            f"{name!r} is not of the form projects/*/locations/*/clusters/*/nodePools/*",
            rule="GKE-RESOURCE-NAME",
        )
    return match.group(1), match.group(2)


@behaviour("GKE-AUTOSCALING-CAP-KEEPS-NODES")
def _raised_to_minimum(
    count: int, autoscaling: container_v1.NodePoolAutoscaling, zones: int
) -> int:
    """The node count after new autoscaling limits apply. A raised minimum adds nodes; a
    lowered maximum removes none: the cluster autoscaler only stops adding above it and
    takes nodes away as they turn idle, so capping the autoscaler at 0 leaves a busy
    pool's billed nodes up until a resize (or idleness) removes them."""
    if not autoscaling.enabled:
        return count
    low = autoscaling.total_min_node_count or autoscaling.min_node_count * zones
    return max(low, count)


class ClusterManagerService:
    def __init__(self, state: ClusterManagerState, config: EmulatorConfig) -> None:
        self.state = state
        self.config = config

    def methods(self) -> dict[str, Method]:
        c = container_v1
        return {
            m.name: m
            for m in (
                Method("GetCluster", c.GetClusterRequest, c.Cluster, self.get_cluster),
                Method(
                    "ListNodePools",
                    c.ListNodePoolsRequest,
                    c.ListNodePoolsResponse,
                    self.list_node_pools,
                ),
                Method("GetNodePool", c.GetNodePoolRequest, c.NodePool, self.get_node_pool),
                Method(
                    "CreateNodePool",
                    c.CreateNodePoolRequest,
                    c.Operation,
                    self.create_node_pool,
                    long_running=True,
                ),
                Method(
                    "DeleteNodePool",
                    c.DeleteNodePoolRequest,
                    c.Operation,
                    self.delete_node_pool,
                    long_running=True,
                ),
                Method(
                    "SetNodePoolAutoscaling",
                    c.SetNodePoolAutoscalingRequest,
                    c.Operation,
                    self.set_node_pool_autoscaling,
                    long_running=True,
                ),
                Method(
                    "SetNodePoolSize",
                    c.SetNodePoolSizeRequest,
                    c.Operation,
                    self.set_node_pool_size,
                    long_running=True,
                ),
                Method(
                    "UpdateNodePool",
                    c.UpdateNodePoolRequest,
                    c.Operation,
                    self.update_node_pool,
                    long_running=True,
                ),
                Method("GetOperation", c.GetOperationRequest, c.Operation, self.get_operation),
                Method(
                    "ListOperations",
                    c.ListOperationsRequest,
                    c.ListOperationsResponse,
                    self.list_operations,
                ),
            )
        }

    def latency(self, method: str) -> float:
        return self.config.operation_seconds(method)

    # Reads ------------------------------------------------------------------

    def get_cluster(self, request: container_v1.GetClusterRequest, _: Any) -> container_v1.Cluster:
        path = _cluster_path(
            request.name, request.project_id, request.zone, request.cluster_id, "name"
        )
        cluster = self.state.cluster(path)
        version = cluster.config.version
        return container_v1.Cluster(
            name=cluster.short_name,
            location=cluster.config.location,
            zone=cluster.config.location,
            locations=cluster.config.node_zones,
            self_link=f"{API_ROOT}/{path}",
            status=container_v1.Cluster.Status.RUNNING,
            current_master_version=version,
            current_node_version=version,
            endpoint="127.0.0.1",
            node_pools=[clone(p.pool) for p in cluster.pools.values()],
            workload_identity_config=container_v1.WorkloadIdentityConfig(
                workload_pool=cluster.config.workload_pool
            ),
        )

    def list_node_pools(
        self, request: container_v1.ListNodePoolsRequest, _: Any
    ) -> container_v1.ListNodePoolsResponse:
        path = _cluster_path(
            request.parent, request.project_id, request.zone, request.cluster_id, "parent"
        )
        pools = self.state.cluster(path).pools.values()
        return container_v1.ListNodePoolsResponse(node_pools=[clone(p.pool) for p in pools])

    def get_node_pool(
        self, request: container_v1.GetNodePoolRequest, _: Any
    ) -> container_v1.NodePool:
        return clone(self.state.pool(*_pool_path(request)).pool)

    def get_operation(
        self, request: container_v1.GetOperationRequest, _: Any
    ) -> container_v1.Operation:
        name = request.name
        if not name and request.operation_id:
            parent = f"projects/{request.project_id}/locations/{request.zone}"
            name = f"{parent}/operations/{request.operation_id}"
        if not _OPERATION_RE.match(name):
            raise invalid(
                "name",
                f"{name!r} is not of the form projects/*/locations/*/operations/*",
                rule="GKE-RESOURCE-NAME",
            )
        return clone(self.state.operation(name).operation)

    def list_operations(
        self, request: container_v1.ListOperationsRequest, _: Any
    ) -> container_v1.ListOperationsResponse:
        parent = request.parent or f"projects/{request.project_id}/locations/{request.zone}"
        match = _PARENT_RE.match(parent)
        if match is None:
            raise invalid(
                "parent",
                f"{parent!r} is not of the form projects/*/locations/*",
                rule="GKE-RESOURCE-NAME",
            )
        project, location = match.groups()
        found = [
            clone(r.operation)
            for r in self.state.operations
            if r.parent.split("/")[1] == project
            and (location == "-" or r.parent.split("/")[3] == location)
        ]
        return container_v1.ListOperationsResponse(operations=found)

    # Changes ----------------------------------------------------------------

    @behaviour("GKE-POOL-DEFAULT-LOCATIONS", "GKE-FAILED-CREATE-KEEPS-POOL")
    def create_node_pool(
        self, request: container_v1.CreateNodePoolRequest, error: Any
    ) -> container_v1.Operation:
        path = _cluster_path(
            request.parent, request.project_id, request.zone, request.cluster_id, "parent"
        )
        cluster = self.state.cluster(path)
        pool = clone(request.node_pool)
        policies = self.state.resource_policy
        validate_new_pool(pool, cluster.config, policies)
        if pool.name in cluster.pools:
            raise already_exists(f"{path}/nodePools/{pool.name}")
        self.state.ensure_operation_slot(cluster)
        resolve_topology(pool, cluster.config, policies)
        failure = deferred_failure(pool)
        if failure is not None and error is None:
            # Accepted, then refused while GKE builds the instance group (placement.py).
            error = status_pb2.Status(
                code=grpc.StatusCode.INVALID_ARGUMENT.value[0], message=failure
            )
        if not pool.locations:
            pool.locations = cluster.config.node_zones
        zones = len(pool.locations)
        record = PoolRecord(cluster=cluster, pool=pool, usage=accelerator_per_node(pool))
        initial = pool.initial_node_count * zones
        self.state.reserve(record, max(initial, autoscaler_max(pool.autoscaling, zones)))
        pool.self_link = f"{API_ROOT}/{record.path}"
        pool.version = cluster.config.version
        pool.status = PROVISIONING
        cluster.pools[pool.name] = record

        def created() -> None:
            pool.status = POOL_RUNNING
            record.node_count = initial

        def failed() -> None:
            # GKE keeps a pool whose creation failed, in ERROR, until it is deleted.
            pool.status = POOL_ERROR
            pool.status_message = error.message
            record.reserved_nodes = 0

        return self._start(
            "CreateNodePool",
            OpType.CREATE_NODE_POOL,
            "creating a node pool",
            cluster,
            record,
            created,
            failed,
            error,
        )

    def delete_node_pool(
        self, request: container_v1.DeleteNodePoolRequest, error: Any
    ) -> container_v1.Operation:
        record = self.state.pool(*_pool_path(request))
        self.state.ensure_idle(record)
        self.state.ensure_operation_slot(record.cluster)
        pool, before = record.pool, record.pool.status
        pool.status = STOPPING

        def deleted() -> None:
            record.cluster.pools.pop(pool.name, None)

        def failed() -> None:
            pool.status = before
            pool.status_message = error.message

        return self._start(
            "DeleteNodePool",
            OpType.DELETE_NODE_POOL,
            f"deleting node pool {pool.name}",
            record.cluster,
            record,
            deleted,
            failed,
            error,
        )

    def set_node_pool_autoscaling(
        self, request: container_v1.SetNodePoolAutoscalingRequest, error: Any
    ) -> container_v1.Operation:
        record = self.state.pool(*_pool_path(request))
        self.state.ensure_idle(record)
        self.state.ensure_operation_slot(record.cluster)
        autoscaling = clone(request.autoscaling)
        validate_autoscaling("autoscaling", autoscaling)
        pool = record.pool
        if pool.config.flex_start and not autoscaling.enabled:
            raise invalid(
                "autoscaling.enabled",
                "flex-start node pools need autoscaling",
                rule="GKE-FLEX-AUTOSCALING",
            )
        if pool.config.flex_start and (
            autoscaling.min_node_count or autoscaling.total_min_node_count
        ):
            raise invalid(
                "autoscaling.min_node_count",
                "flex-start node pools need 0",
                rule="GKE-FLEX-AUTOSCALING",
            )
        topology = slice_topology(pool, record.cluster.config, self.state.resource_policy)
        if topology is not None:
            check_slice_maximum("autoscaling", pool, topology, autoscaling)
        zones = len(pool.locations)
        reserved = record.reserved_nodes
        self.state.reserve(record, max(record.node_count, autoscaler_max(autoscaling, zones)))

        def applied() -> None:
            pool.autoscaling = autoscaling
            record.node_count = _raised_to_minimum(record.node_count, autoscaling, zones)

        return self._reconcile(
            "SetNodePoolAutoscaling",
            OpType.UPDATE_CLUSTER,
            f"updating autoscaling of node pool {pool.name}",
            record,
            applied,
            error,
            reserved,
        )

    @behaviour("GKE-SIZE-PER-ZONE")
    def set_node_pool_size(
        self, request: container_v1.SetNodePoolSizeRequest, error: Any
    ) -> container_v1.Operation:
        record = self.state.pool(*_pool_path(request))
        self.state.ensure_idle(record)
        self.state.ensure_operation_slot(record.cluster)
        if request.node_count < 0:
            raise invalid(
                "node_count",
                f"must be >= 0, got {request.node_count}",
                rule="GKE-NODE-COUNT-NEGATIVE",
            )
        pool = record.pool
        zones = len(pool.locations)
        # Like gcloud's --num-nodes, node_count is per zone.
        total = request.node_count * zones
        reserved = record.reserved_nodes
        self.state.reserve(record, max(total, autoscaler_max(pool.autoscaling, zones)))

        def applied() -> None:
            record.node_count = total

        return self._reconcile(
            "SetNodePoolSize",
            OpType.SET_NODE_POOL_SIZE,
            f"resizing node pool {pool.name}",
            record,
            applied,
            error,
            reserved,
        )

    @behaviour("EMU-UPDATE-NODE-POOL-FIELDS")
    def update_node_pool(
        self, request: container_v1.UpdateNodePoolRequest, error: Any
    ) -> container_v1.Operation:
        record = self.state.pool(*_pool_path(request))
        self.state.ensure_idle(record)
        self.state.ensure_operation_slot(record.cluster)
        pool = record.pool
        cluster = record.cluster.config
        for index, zone in enumerate(request.locations):
            if not cluster.in_region(zone):
                raise invalid(
                    f"locations[{index}]",
                    f"{zone!r} is not a zone of the cluster's region {cluster.region}",
                    rule="GKE-POOL-LOCATIONS",
                )
        labels = dict(request.labels.labels) if "labels" in request else None
        resource_labels = (
            dict(request.resource_labels.labels) if "resource_labels" in request else None
        )
        locations = list(request.locations)

        def applied() -> None:
            if labels is not None:
                pool.config.labels = labels
            if resource_labels is not None:
                pool.config.resource_labels = resource_labels
            if locations:
                pool.locations = locations

        return self._reconcile(
            "UpdateNodePool",
            OpType.UPDATE_CLUSTER,
            f"updating node pool {pool.name}",
            record,
            applied,
            error,
            record.reserved_nodes,
        )

    # Helpers ----------------------------------------------------------------

    def _reconcile(
        self,
        method: str,
        kind: int,
        doing: str,
        record: PoolRecord,
        applied: Callable[[], None],
        error: Any,
        reserved_before: int,
    ) -> container_v1.Operation:
        """Run a change to an existing pool: RECONCILING until it is done."""
        pool = record.pool
        pool.status = RECONCILING

        def succeeded() -> None:
            applied()
            pool.status = POOL_RUNNING

        def failed() -> None:
            record.reserved_nodes = reserved_before
            pool.status = POOL_RUNNING

        return self._start(method, kind, doing, record.cluster, record, succeeded, failed, error)

    def _start(
        self,
        method: str,
        kind: int,
        doing: str,
        cluster: ClusterRecord,
        record: PoolRecord,
        succeeded: Callable[[], None],
        failed: Callable[[], None],
        error: Any,
    ) -> container_v1.Operation:
        # A copy already, as the operation was made: the record moves on apart.
        return self.state.start(
            kind=kind,
            doing=doing,
            cluster=cluster,
            pool=record,
            latency=self.latency(method),
            on_success=succeeded,
            on_failure=failed,
            error=error,
        )
