"""Node pools of one GKE cluster, through the google-cloud-container async client.

The library's own retry is off (`retry=None`): it retries reads for up to 20 s and
never retries writes, hiding faults and stalling a reconcile worker. Instead every
call goes through one `RetryPolicy`: retryable errors (UNAVAILABLE, rate limits, an
operation already running on the pool...) are retried a bounded number of times with
jittered exponential backoff; terminal ones are raised at once. What is still failing
after the last attempt surfaces as a classified `GkeError` and the reconciler requeues.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from google.api_core import exceptions as core_exceptions
from google.cloud import container_v1
from google.cloud.container_v1.services.cluster_manager.transports import (
    ClusterManagerGrpcAsyncIOTransport,
)

from dws_operator.gke.ceiling import holds_slice
from dws_operator.gke.cluster_ref import ClusterRef
from dws_operator.gke.errors import GkeError, classify, classify_status, status_code
from dws_operator.gke.labels import UID_LABEL, owned_by
from dws_operator.gke.retry import PollPolicy, RetryPolicy
from dws_operator.gke.slice_pool import create_node_pool_request
from dws_operator.zones import ClusterSite

ENDPOINT_ENV = "DWS_GKE_ENDPOINT"

NodePool = container_v1.NodePool
Operation = container_v1.Operation
T = TypeVar("T")

#: How long `NodePoolClient.master_version` trusts the version it read.
VERSION_TTL_SECONDS = 3600.0


def connect(endpoint: str | None = None) -> container_v1.ClusterManagerAsyncClient:
    """A ClusterManager client: GKE itself, or the API served at `endpoint` (host:port).

    Without an endpoint the library's defaults apply: container.googleapis.com over
    TLS with Application Default Credentials. With one, an insecure channel to it and
    no credentials at all (a transport built on a given channel never looks them up),
    which is what the emulator wants. Close the client with `async with` or
    `await client.transport.close()`.
    """
    if not endpoint:
        return container_v1.ClusterManagerAsyncClient()
    channel = grpc.aio.insecure_channel(endpoint)
    return container_v1.ClusterManagerAsyncClient(
        transport=ClusterManagerGrpcAsyncIOTransport(channel=channel)
    )


@dataclass(frozen=True)
class CreateResult:
    pool: NodePool
    #: The creation to wait for; None when an existing pool of ours was adopted.
    operation: Operation | None

    @property
    def adopted(self) -> bool:
        return self.operation is None


class NodePoolClient:
    """Create, inspect, scale to zero and delete the node pools of one cluster."""

    def __init__(
        self,
        api: container_v1.ClusterManagerAsyncClient,
        cluster: str,
        *,
        call_timeout: float = 30.0,
        poll: PollPolicy | None = None,
        retry: RetryPolicy | None = None,
        version_ttl: float = VERSION_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: Callable[[], float] = random.random,
        guard: Callable[[], None] | None = None,
        observer: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.api = api
        #: Time (deadlines, the version's age, call durations), pauses and jitter.
        self._sleep = sleep
        self._rng = rng
        #: Told every attempt's method, gRPC code name and seconds (the operator's metrics).
        self.observer = observer
        #: Called before every attempt of every call; raising stops the call (a replica
        #: that lost its leader Lease sends nothing more to GKE, retries included).
        self.guard = guard
        self.cluster = ClusterRef.parse(cluster)
        self.call_timeout = call_timeout
        self.poll = poll or PollPolicy()
        self.retry = retry or RetryPolicy()
        self.version_ttl = version_ttl
        self._clock = clock
        self._version: tuple[str, float] | None = None
        #: The cluster's node locations from the last GetCluster (empty before it).
        self._node_locations: tuple[str, ...] = ()
        self._version_lock = asyncio.Lock()

    async def master_version(self) -> str:
        """The cluster's control-plane version (GetCluster's `current_master_version`).

        Read once and kept for `version_ttl` seconds, so every request of the operator
        costs one GetCluster between them, not one per pass; the expiry lets a GKE upgrade
        show within the hour. Concurrent callers share one read. A failed read raises
        its `GkeError` (nothing is cached) and the next caller tries again.
        """
        async with self._version_lock:
            now = self._clock()
            if self._version is not None and now - self._version[1] < self.version_ttl:
                return self._version[0]
            cluster = await self.call(
                self.api.get_cluster, container_v1.GetClusterRequest(name=self.cluster.path)
            )
            self._version = (cluster.current_master_version, now)
            self._node_locations = tuple(cluster.locations)
            return cluster.current_master_version

    @property
    def site(self) -> ClusterSite:
        """Where the cluster is: its location from its path, and its node locations as
        the last GetCluster (`master_version`) read them, empty before that."""
        return ClusterSite(self.cluster.location, self._node_locations)

    async def create(self, pool: NodePool, uid: str) -> CreateResult:
        """Create `pool` for the owner `uid`, or adopt the pool of that name if it is ours.

        A restarted operator re-issues creates it cannot remember; finding its own pool
        (by the uid label) is success. A pool of that name owned by anything else is
        a terminal `NodePoolNameTaken`: the operator must never take over foreign pools.
        """
        if not owned_by(pool, uid):
            raise ValueError(f"pool {pool.name!r} must carry the {UID_LABEL} label of {uid!r}")
        try:
            operation = await self.call(
                self.api.create_node_pool,
                create_node_pool_request(self.cluster.path, pool),
            )
        except GkeError as error:
            if error.code != grpc.StatusCode.ALREADY_EXISTS:
                raise
        else:
            return CreateResult(pool=pool, operation=operation)
        existing = await self.get(pool.name)
        if existing is None:
            raise GkeError(
                retryable=True,
                reason="NodePoolConflict",
                message=f"node pool {self.cluster.pool(pool.name)} was deleted while "
                "being created again",
            )
        if not owned_by(existing, uid):
            owner = existing.config.resource_labels.get(UID_LABEL, "")
            raise GkeError(
                retryable=False,
                reason="NodePoolNameTaken",
                message=f"node pool {self.cluster.pool(pool.name)} already exists and is not "
                f"ours ({UID_LABEL}={owner!r}, want {uid!r})",
                code=grpc.StatusCode.ALREADY_EXISTS,
            )
        return CreateResult(pool=existing, operation=None)

    async def _on_pool(self, rpc: Callable[..., Awaitable[T]], request: Any) -> T | None:
        """`call` for an RPC on one pool: None when the pool does not exist (a missing
        cluster still raises)."""
        try:
            return await self.call(rpc, request)
        except GkeError as error:
            if _pool_missing(error):
                return None
            raise

    async def get(self, name: str) -> NodePool | None:
        """The pool, or None if it does not exist (a missing cluster still raises)."""
        return await self._on_pool(
            self.api.get_node_pool, container_v1.GetNodePoolRequest(name=self.cluster.pool(name))
        )

    async def list_pools(self) -> list[NodePool]:
        response = await self.call(
            self.api.list_node_pools, container_v1.ListNodePoolsRequest(parent=self.cluster.path)
        )
        return list(response.node_pools)

    async def delete(self, name: str) -> Operation | None:
        """Start deleting the pool; None when it is already gone (which is success)."""
        return await self._on_pool(
            self.api.delete_node_pool,
            container_v1.DeleteNodePoolRequest(name=self.cluster.pool(name)),
        )

    async def scale_to_zero(self, name: str) -> Operation | None:
        """Cap the pool's autoscaler at zero, then resize it to zero; wait for both.

        Two calls, in this order, because neither alone is enough: resizing alone
        leaves the autoscaler free to add nodes back for any pending pod, and capping
        alone leaves idle nodes until the autoscaler's scale-down delay (10 minutes by
        default) passes, billed all the while. GKE runs one operation per pool at a
        time, so the second call waits for the first. A TPU slice pool is only resized
        (`ceiling.holds_slice`: GKE checks its maximum against the slice size); no pod
        of its request is left to ask for nodes. None if the pool is gone.
        """
        pool = await self.get(name)
        if pool is None:
            return None
        try:
            capped = None if holds_slice(pool) else _capped(pool.autoscaling)
            capping = await self.set_autoscaling(name, capped) if capped else None
            if capping is not None:
                await self.wait(capping)
            resizing = await self.resize_to_zero(name)
            return await self.wait(resizing) if resizing is not None else None
        except GkeError as error:
            if _pool_missing(error):
                return None
            raise

    async def cap_autoscaling(self, name: str, known: NodePool | None = None) -> Operation | None:
        """Cap the pool's autoscaler at zero nodes (one operation); None when there is
        nothing to cap (no limits above zero) or the pool is gone.

        The first of scale-to-zero's two steps, for callers that schedule operations
        themselves (`scale_to_zero` runs both and waits). The location policy is kept:
        the request replaces the whole autoscaling block. `known`: the pool as the caller
        last listed it, which saves a read while the caller holds one of GKE's operation
        slots (the ceiling is set whole, so an older listing caps just the same)."""
        pool = known if known is not None else await self.get(name)
        if pool is None or holds_slice(pool):
            return None  # a TPU slice's bounds stay at its size (ceiling.holds_slice)
        capped = _capped(pool.autoscaling)
        return await self.set_autoscaling(name, capped) if capped is not None else None

    async def resize_to_zero(self, name: str) -> Operation | None:
        """Resize the pool to zero nodes (one operation); None when the pool is gone."""
        return await self._on_pool(
            self.api.set_node_pool_size,
            container_v1.SetNodePoolSizeRequest(name=self.cluster.pool(name), node_count=0),
        )

    async def relabel(self, name: str, labels: dict[str, str]) -> Operation | None:
        """Replace the pool's labels (GCE resource labels and Kubernetes node labels,
        which the operator keeps equal); one operation; None when the pool is gone."""
        return await self._on_pool(
            self.api.update_node_pool,
            container_v1.UpdateNodePoolRequest(
                name=self.cluster.pool(name),
                labels=container_v1.NodeLabels(labels=labels),
                resource_labels=container_v1.ResourceLabels(labels=labels),
            ),
        )

    async def set_autoscaling(
        self, name: str, autoscaling: container_v1.NodePoolAutoscaling
    ) -> Operation | None:
        """Set the pool's autoscaling block (one operation); None when the pool is gone."""
        return await self._on_pool(
            self.api.set_node_pool_autoscaling,
            container_v1.SetNodePoolAutoscalingRequest(
                name=self.cluster.pool(name), autoscaling=autoscaling
            ),
        )

    async def operation(self, name: str) -> Operation:
        return await self.call(
            self.api.get_operation,
            container_v1.GetOperationRequest(name=self.cluster.operation(name)),
        )

    async def wait(self, operation: Operation) -> Operation:
        """Poll until `operation` is DONE; raise its error, classified, if it failed.

        Transient errors while polling are ridden out; past `poll.timeout` a retryable
        `OperationTimeout` is raised and the operation keeps running in GKE.
        """
        policy = self.poll
        path = self.cluster.operation(operation.name)
        deadline = self._clock() + policy.timeout
        delay = policy.initial_delay
        current = operation
        while current.status != Operation.Status.DONE:
            remaining = deadline - self._clock()
            if remaining <= 0:
                raise GkeError(
                    retryable=True,
                    reason="OperationTimeout",
                    message=f"operation {operation.name} still {current.status.name} "
                    f"after {policy.timeout:g}s",
                )
            await self._sleep(min(delay, remaining))
            delay = min(delay * policy.multiplier, policy.max_delay)
            try:
                current = await self.call(
                    self.api.get_operation, container_v1.GetOperationRequest(name=path)
                )
            except GkeError as error:
                if not error.retryable:
                    raise
        if current.error.code:
            raise classify_status(status_code(current.error.code), current.error.message)
        return current

    def _observe(self, rpc: Callable[..., Any], code: grpc.StatusCode | None, began: float) -> None:
        if self.observer is not None:
            name = code.name if code is not None else "UNKNOWN"
            self.observer(method_name(rpc), name, self._clock() - began)

    async def call(self, rpc: Callable[..., Awaitable[T]], request: Any) -> T:
        """Any ClusterManager RPC of `api`: timeout, classification, bounded retries.

        Retrying a create is safe: if a lost reply hid a success, the retry gets
        ALREADY_EXISTS and `create` adopts the pool by its uid label.
        """
        pauses = self.retry.delays()
        for attempt in range(len(pauses) + 1):
            if self.guard is not None:
                self.guard()
            began = self._clock()
            try:
                answer = await rpc(request=request, retry=None, timeout=self.call_timeout)
            except (
                core_exceptions.GoogleAPICallError,
                grpc.aio.AioRpcError,
                TimeoutError,
            ) as error:
                classified = classify(error)
                self._observe(rpc, classified.code, began)
                if not classified.retryable or attempt == len(pauses):
                    raise classified from error
            else:
                self._observe(rpc, grpc.StatusCode.OK, began)
                return answer
            pause = pauses[attempt]
            await self._sleep(pause * (1 - self.retry.jitter * self._rng()))
        raise AssertionError("unreachable: the last attempt returns or raises")


def method_name(rpc: Callable[..., Any]) -> str:
    """GKE's name of the method `rpc` calls: create_node_pool -> CreateNodePool."""
    name = getattr(rpc, "__name__", "") or "Unknown"
    return "".join(part.capitalize() for part in name.split("_"))


def _capped(current: container_v1.NodePoolAutoscaling) -> container_v1.NodePoolAutoscaling | None:
    """The autoscaling block capped at zero (location policy kept: a request replaces
    the whole block); None when there is no limit above zero to cap."""
    limits = (
        current.min_node_count,
        current.max_node_count,
        current.total_min_node_count,
        current.total_max_node_count,
    )
    if not (current.enabled and any(limits)):
        return None
    return container_v1.NodePoolAutoscaling(enabled=True, location_policy=current.location_policy)


def _pool_missing(error: GkeError) -> bool:
    return error.code == grpc.StatusCode.NOT_FOUND and error.reason != "ClusterNotFound"
