"""The running operator's parts wired together: its Kubernetes and GKE clients, caches,
work queue, GKE snapshot, operation scheduler, idle-pool shelf and reconciler, built
once at start-up into a `Controller`."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable

from google.cloud.container_v1 import ClusterManagerAsyncClient

from dws_operator.controller.cache import Key, KubeCache
from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.dependents import Dependents
from dws_operator.controller.history import CapacityHistory
from dws_operator.controller.kube import Connection, KubeApi
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.observe import FactsMemo, Sources
from dws_operator.controller.operations import OperationScheduler
from dws_operator.controller.pools import PoolSnapshot
from dws_operator.controller.reconciler import Reconciler
from dws_operator.controller.reuse import PoolShelf
from dws_operator.controller.runtime import Controller
from dws_operator.gke import (
    BookingClient,
    ComputeApis,
    NodePoolClient,
    WorkloadPolicyClient,
    connect_compute,
)
from dws_operator.gke import connect as connect_gke
from dws_operator.gke.retry import RetryPolicy
from dws_operator.kubekit.fence import FENCE
from dws_operator.kubekit.workqueue import WorkQueue
from dws_operator.reconcile import ReconcileConfig

__all__ = ["build_controller"]


def build_controller(
    config: OperatorConfig,
    api: Connection,
    kube: KubeApi,
    kueue: bool,
    jobset: bool,
    metrics: OperatorMetrics | None = None,
    *,
    gke_api: ClusterManagerAsyncClient | None = None,
    compute_apis: ComputeApis | None = None,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
) -> Controller:
    """The operator's parts on `api` (the Kubernetes connection `kube` calls through),
    GKE (`gke_api`, or a client of `config.gke_endpoint`) and Compute (`compute_apis`,
    or, on first use, a client of `config.compute_endpoint`). `clock` is the monotonic
    time of every timer, pause and deadline, as `config.time` is the time decisions are
    made in: a test gives both a virtual clock and moves it. `rng` draws every jitter
    (retries' and resyncs'): a test gives a seeded one."""
    rng = rng or random.Random()
    metrics = metrics or OperatorMetrics()
    api.on_error = metrics.kube_error
    if gke_api is None:
        gke_api = connect_gke(config.gke_endpoint)
    # Every attempt of every GKE call asks the fence first: a replica that lost its
    # Lease sends nothing more, reads included (it is about to exit anyway).
    gke = NodePoolClient(
        gke_api,
        config.cluster_path,
        clock=clock,
        rng=rng.random,
        guard=FENCE.check,
        observer=metrics.gke_call,
    )
    mutations = NodePoolClient(
        gke_api,
        config.cluster_path,
        retry=RetryPolicy(attempts=1),
        clock=clock,
        rng=rng.random,
        guard=FENCE.check,
        observer=metrics.gke_call,
    )
    cache = KubeCache()
    if kueue:
        # Watched from the start: no pass runs before kopf's first listing of them.
        cache.know_local_queues()
    queue: WorkQueue[Key] = WorkQueue(clock)
    facts = FactsMemo()
    dependents = Dependents(facts)
    holder: list[Controller] = []

    def changed(pools: Iterable[str]) -> None:
        holder[0].wake_pools(pools)

    snapshot = PoolSnapshot(gke, changed, interval=config.gke_refresh_seconds, clock=clock)
    scheduler = OperationScheduler(
        mutations,
        snapshot,
        queue.add,
        slots=config.gke_operation_slots,
        clock=clock,
        now=config.time.now,
    )

    def compute() -> ComputeApis:
        # Connected on first use: only Ironwood slices and calendar-mode bookings need
        # Compute, and its credentials are looked for then.
        if holder[0].compute is None:
            holder[0].compute = (
                compute_apis
                if compute_apis is not None
                else connect_compute(config.compute_endpoint)
            )
        return holder[0].compute

    def policies() -> WorkloadPolicyClient:
        return WorkloadPolicyClient(
            compute(), config.project, guard=FENCE.check, clock=clock, rng=rng.random
        )

    def bookings() -> BookingClient:
        return BookingClient(compute(), config.project, guard=FENCE.check, rng=rng.random)

    shelf = PoolShelf(
        snapshot,
        cache,
        scheduler,
        idle_seconds=config.pool_idle_seconds,
        clock=lambda: config.time.now().timestamp(),
        namespaces=config.namespaces,
        orphan_grace_seconds=config.orphan_grace_seconds,
    )
    reconciler = Reconciler(
        Sources(
            kube, cache, gke, mutations, snapshot, scheduler, shelf, facts, config.time.now, clock
        ),
        ReconcileConfig(
            kueue=kueue,
            jobset=jobset,
            default_queue=config.default_queue,
            queued_queue=config.queued_queue,
            location=config.location,
            running_poll_seconds=config.running_poll_seconds,
            book_without_approval=config.book_without_approval,
            stuck_after_seconds=config.stuck_after_seconds,
            max_recoveries=config.max_recoveries,
        ),
        policies,
        metrics,
        pool_defaults=config.pool_defaults,
        bookings=bookings,
        history=(
            CapacityHistory(kube, config.operator_namespace, config.capacity_history, clock)
            if config.capacity_history
            else None
        ),
    )
    controller = Controller(
        api,
        gke_api,
        cache,
        queue,
        dependents,
        snapshot,
        scheduler,
        shelf,
        reconciler,
        namespaces=config.namespaces,
        jobset=jobset,
        clock=clock,
        time=config.time,
        rng=rng,
    )
    reconciler.ledger.wake = queue.add
    holder.append(controller)
    return controller
