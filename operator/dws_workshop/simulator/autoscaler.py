"""The emulator's cluster autoscaler: Nodes in a real API server for the emulated pools.

    with EmulatorThread(config) as emulator, DevCluster(options) as cluster:
        with Autoscaler(emulator, cluster.kubeconfig, SimScenario(clock_factor=60)):
            ...

A background thread reconciles, every `interval` seconds, the Nodes of each pool of
one emulated cluster (named `gke-<cluster>-<pool>-<n>`, rendered by `nodes`, managed
by kwok) with the pool as the emulator holds it:

- The pool's node count (`ClusterManagerEmulator.node_count`) is what the nodes must
  be: a resize or a lower autoscaling maximum removes nodes, a larger count adds them
  once there is capacity. Nodes of a pool that is deleted (or being deleted) go.
- Scale-up (RUNNING pools with autoscaling max > 0, not queued): unschedulable pending
  pods that select the pool (a `cloud.google.com/gke-nodepool` node selector; a pool
  picked by scheduling for a pod with a node affinity list of pools and pod
  (anti-)affinity on the pool label, as a multi-slice JobSet's leaders have: one of the
  pools it allows that no other child Job occupies or has claimed in this pass, see
  `autoscaler_view.pending_by_pool` and `pool_affinity`; or, without either, the first
  pool by name whose nodes they fit, see `nodes.accepts`) raise the count by one node
  per pending pod beyond the pool's empty nodes (a multi-host TPU slice comes whole: all
  its VMs at once), never above the pool's maximum. The nodes
  appear when the scenario's capacity model says so, in the first of the pool's zones
  with capacity; a pool with per-zone limits (`max_node_count`) holds at most that many
  in each zone, so a regional pool's maximum is the per-zone one times its zones.
- Scale-down: a node without non-terminal pods for `scale_down_unneeded_seconds`
  (simulated; a multi-host slice only as a whole) is removed and the count lowered;
  no node is removed in a pass where a pod the scheduler turned down fits a node
  already there (`schedulable_pending`): it is about to be bound.
- Flex-start VMs end at the pool's max run duration; Spot VMs are preempted at the
  scenario's times. Either way the node's pods are first marked Failed with a
  `DisruptionTarget` condition (reason `TerminationByKubelet`, as the kubelet's
  graceful node shutdown does), then the node is deleted and the count lowered.
- A cluster with more than the scenario's `many_pools_threshold` node pools (GKE's
  200) scales up later, by `many_pools_scale_up_delay_seconds`, both ways.
- Queued pools scale up only through ProvisioningRequests (see `queued`; a TPU pool
  only by whole slices, see `whole_slices`): their pending pods never scale them.
- Pods with `dws-operator.dev/sim-work` run a simulated checkpointing workload
  (`workload`; its progress in `workloads`).

Time is simulated seconds on `clock`: the autoscaler's own (`scenario.clock_factor`,
from `start`) or the one given (the emulator's `sim_clock`, which the operator decides
on: the scenario's factor is then unused), whose calendar the flex-start nodes'
termination annotations are then written in, so the operator and the nodes agree.

What it reads is judged in `observed` (pure); what it writes goes through `fleet`.

Errors in a pass are logged and kept in `errors`; the next pass starts afresh.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import TracebackType

from kubernetes import config as k8s_config

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.gke.ceiling import max_nodes
from dws_workshop.emulator.clock import SimClock
from dws_workshop.emulator.config import DEFAULT_CLUSTER
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.emulator.server import ClusterManagerEmulator
from dws_workshop.simulator.autoscaler_view import (
    Obj,
    PoolStatus,
    ScalingPool,
    accelerator_of,
    busy_nodes,
    labels_of,
    name_of,
    node_index,
    pending_by_pool,
    place_nodes,
    schedulable_pending,
    slice_of,
)
from dws_workshop.simulator.fleet import Fleet
from dws_workshop.simulator.nodes import ZONE_LABEL_KEY, pool_shape
from dws_workshop.simulator.queued import QueuedCapacity
from dws_workshop.simulator.scenario import Preemption, SimScenario
from dws_workshop.simulator.workload import Workloads

log = logging.getLogger(__name__)

MAX_ERRORS = 100


class Autoscaler:
    """Nodes for the pools of `cluster` in `emulator`, in the API server of `kubeconfig`."""

    def __init__(
        self,
        emulator: ClusterManagerEmulator,
        kubeconfig: Path | str,
        scenario: SimScenario | None = None,
        *,
        cluster: str = DEFAULT_CLUSTER,
        interval: float = 0.2,
        cleanup: bool = True,
        clock: SimClock | None = None,
    ) -> None:
        self.emulator = emulator
        self.kubeconfig = Path(kubeconfig)
        self.scenario = scenario or SimScenario()
        self.cluster = cluster
        self.interval = interval
        self.cleanup = cleanup
        #: Whether `clock` is the caller's (shared with the operator) or this one's own.
        self._shared_clock = clock is not None
        self.clock = clock or SimClock(self.scenario.clock_factor)
        #: The simulated training runs of `sim-work` pods (thread-safe to read).
        self.workloads = Workloads()
        self.errors: list[str] = []
        self._fleet: Fleet | None = None
        self._queued: QueuedCapacity | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        #: Passes finished (failed ones too): how a watcher knows the autoscaler has
        #: looked again since some moment, rather than sleeping and hoping it did.
        self.passes = 0
        self._preemptions: list[Preemption] = sorted(
            self.scenario.preemptions, key=lambda p: p.at_seconds
        )
        self._waiting_since: dict[str, float] = {}
        self._idle_since: dict[str, float] = {}
        #: Flex-start pools running at the last pass, those of them that stick, and how
        #: many were picked to (`SimScenario.stuck_flex_start_pools`).
        self._flex_seen: set[str] = set()
        self._flex_stuck: set[str] = set()
        self._flex_picked = 0

    def preempt(self, pool: str | None = None, zone: str | None = None) -> None:
        """Reclaim a Spot node (of `pool`, in `zone`) on the next pass: at a moment the
        caller picks (a test, once it sees the work running), not at a simulated time the
        work may not have reached yet, or may have passed."""
        with self._lock:
            self._preemptions.insert(0, Preemption(at_seconds=0, pool=pool, zone=zone))

    # Lifecycle --------------------------------------------------------------

    def __enter__(self) -> Autoscaler:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is not None:
            raise RuntimeError("an Autoscaler runs only once")
        api = k8s_config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        if not self._shared_clock:
            # Its own clock starts with it, so the scenario's times count from the start.
            self.clock = SimClock(self.scenario.clock_factor)
        self._fleet = Fleet(
            api,
            self.emulator,
            self.cluster,
            self.clock,
            calendar=self._shared_clock,
            on_disrupted=lambda pod: self.workloads.disrupted(pod, self.clock.now()),
        )
        self._queued = QueuedCapacity(self._fleet, self.scenario)
        self._thread = threading.Thread(target=self._run, name="gke-autoscaler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        fleet, self._fleet = self._fleet, None
        if fleet is not None:
            try:
                if self.cleanup:
                    fleet.delete_nodes([name_of(n) for n in fleet.nodes()])
            finally:
                fleet.api.close()  # type: ignore[no-untyped-call]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as error:
                log.exception("autoscaler pass failed")
                with self._lock:
                    self.errors.append(f"{type(error).__name__}: {error}")
                    del self.errors[:-MAX_ERRORS]
            with self._lock:
                self.passes += 1
            self._stop.wait(self.interval)

    @property
    def fleet(self) -> Fleet:
        if self._fleet is None:
            raise RuntimeError("the autoscaler is not running")
        return self._fleet

    @property
    def queued(self) -> QueuedCapacity:
        if self._queued is None:
            raise RuntimeError("the autoscaler is not running")
        return self._queued

    # One pass ---------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass over every pool, node and ProvisioningRequest."""
        fleet, queued = self.fleet, self.queued
        now = self.clock.now()
        pools = {
            str(pool.name): ScalingPool(
                pool=pool,
                count=count,
                shape=pool_shape(pool),
                path=f"{self.cluster}/nodePools/{pool.name}",
            )
            for pool, count in self.emulator.node_pools(self.cluster)
        }
        orphans: list[str] = []
        for node in fleet.nodes():
            pool = pools.get(labels_of(node).get(NODE_POOL_LABEL_KEY, ""))
            if pool is None or pool.pool.status == PoolStatus.STOPPING:
                orphans.append(name_of(node))
            else:
                pool.nodes.append(node)
        fleet.delete_nodes(orphans)
        existing = {name_of(n) for p in pools.values() for n in p.nodes}
        self._idle_since = {n: t for n, t in self._idle_since.items() if n in existing}
        pods = fleet.pods()
        # Before the disruptions below: the runs they end have been moved on to `now`.
        fleet.finish_pods(self.workloads.observe(now, pods))
        busy = busy_nodes(pods)
        self._preempt_due(now, pools, busy)
        self._expire_flex_start(now, pools, busy)
        self._end_calendar_blocks(pools, busy)
        queued.reconcile(now, pools, pods, busy)
        self._pick_stuck_flex_start(pools)
        pending = pending_by_pool(pools, pods)
        booked = queued.booked_nodes()
        scale_down = not schedulable_pending(pools, pending, busy)
        for pool in pools.values():
            if pool.running:
                self._scale(
                    now, pool, pending.get(pool.name, []), busy, booked, len(pools), scale_down
                )

    @behaviour("SIM-SCALE-UP-WHOLE-SLICE", "SIM-QP-NO-POD-SCALE-UP")
    def _scale(
        self,
        now: float,
        pool: ScalingPool,
        pending: list[Obj],
        busy: dict[str, list[Obj]],
        booked: set[str],
        pool_count: int,
        scale_down: bool,
    ) -> None:
        nodes = sorted(pool.nodes, key=lambda n: node_index(name_of(n)))
        if len(nodes) > pool.count:
            # Resized down (a lowered autoscaling maximum removes none): idle first.
            doomed = sorted(nodes, key=lambda n: (name_of(n) in busy, -node_index(name_of(n))))
            doomed = doomed[: len(nodes) - pool.count]
            self.fleet.delete_nodes([name_of(n) for n in doomed])
            nodes = [n for n in nodes if n not in doomed]
        ceiling = max_nodes(pool.pool)
        want = pool.count
        if pool.outside_block:
            # A calendar block's reservation holds no VMs before its start or after its end.
            ceiling = 0
        if not pool.shape.queued and ceiling > 0 and pending:
            # One pod per node: pending pods land on empty nodes first (the scheduler
            # may not have retried them yet); only the rest need new nodes.
            short = len(pending) - sum(1 for n in nodes if name_of(n) not in busy)
            if short > 0:
                # A multi-host TPU slice comes whole: all its VMs at once.
                size = pool.shape.slice_nodes
                want = max(want, min(ceiling, len(nodes) + -(-short // size) * size))
        if want > len(nodes) and pool.path in self._flex_stuck:
            return  # SIM-FLEX-STUCK: no node comes to this pool
        if want > len(nodes):
            waited = now - self._waiting_since.setdefault(pool.path, now)
            accelerator = accelerator_of(pool.shape)
            zones = place_nodes(
                pool,
                want - len(nodes),
                lambda room: self.scenario.capacity_zone(
                    room, accelerator, waited, pool_count, pool.shape.mode, now
                ),
            )
            if not zones:
                return
            # Zones short of room (a per-zone maximum) or of capacity hold the rest back.
            want = max(pool.count, len(nodes) + len(zones))
            if want != pool.count:
                if not self.emulator.set_node_count(pool.path, want, expected=pool.count):
                    return
                pool.count = want
            for zone in zones:
                nodes.append(self.fleet.create_node(now, pool, zone))
            self._waiting_since.pop(pool.path, None)
            return
        self._waiting_since.pop(pool.path, None)
        if scale_down:
            self._scale_down_idle(now, pool, nodes, busy, booked)

    @behaviour("SIM-FLEX-STUCK")
    def _pick_stuck_flex_start(self, pools: dict[str, ScalingPool]) -> None:
        """The first `stuck_flex_start_pools` flex-start pools seen running stick; a pool
        that went (deleted, or being deleted) and is made again under its name is a new
        one."""
        running = {p.path for p in pools.values() if p.running and p.shape.mode == "FlexStart"}
        for path in sorted(running - self._flex_seen):
            if self._flex_picked < self.scenario.stuck_flex_start_pools:
                self._flex_picked += 1
                self._flex_stuck.add(path)
        present = {p.path for p in pools.values() if p.pool.status != PoolStatus.STOPPING}
        self._flex_stuck &= present
        self._flex_seen = running | (self._flex_seen & present)

    @behaviour("SIM-SCALE-DOWN-UNNEEDED", "SIM-SCALE-DOWN-SCHEDULABLE-PENDING")
    def _scale_down_idle(
        self,
        now: float,
        pool: ScalingPool,
        nodes: list[Obj],
        busy: dict[str, list[Obj]],
        booked: set[str],
    ) -> None:
        idle: list[Obj] = []
        for node in nodes:
            name = name_of(node)
            if name in busy or name in booked:
                self._idle_since.pop(name, None)
                continue
            since = self._idle_since.setdefault(name, now)
            if now - since >= self.scenario.scale_down_unneeded_seconds:
                idle.append(node)
        if not idle or (pool.shape.multi_host and len(idle) < len(nodes)):
            return
        remaining = pool.count - len(idle)
        if not self.emulator.set_node_count(pool.path, max(remaining, 0), expected=pool.count):
            return
        pool.count = max(remaining, 0)
        self.fleet.delete_nodes([name_of(n) for n in idle])

    # Disruptions ------------------------------------------------------------

    @behaviour("SIM-SPOT-PREEMPTION")
    def _preempt_due(
        self, now: float, pools: dict[str, ScalingPool], busy: dict[str, list[Obj]]
    ) -> None:
        with self._lock:
            due = [p for p in self._preemptions if p.at_seconds <= now]
        for preemption in due:
            for pool in pools.values():
                if not pool.shape.spot or preemption.pool not in (None, pool.name):
                    continue
                node = next(
                    (
                        n
                        for n in pool.nodes
                        if preemption.zone in (None, labels_of(n).get(ZONE_LABEL_KEY))
                    ),
                    None,
                )
                if node is not None:
                    # A multi-host slice's VMs are rescheduled together, never one by
                    # one: reclaiming one VM takes its whole slice.
                    for lost in slice_of(pool, node):
                        log.info("preempting Spot node %s", name_of(lost))
                        self.fleet.remove(
                            pool,
                            lost,
                            busy,
                            "Pod was terminated in response to imminent node shutdown "
                            "(Spot VM preempted).",
                        )
                    with self._lock:
                        self._preemptions.remove(preemption)
                    break

    @behaviour("SIM-CALENDAR-BLOCK")
    def _outside_its_block(self, pool: ScalingPool) -> bool:
        """Whether the pool consumes the reservation of a calendar block (one the
        emulator's Compute side delivers) that is not on now."""
        name = pool.shape.reservation
        zones = list(pool.pool.locations)
        if name is None or not zones:
            return False
        compute = self.emulator.compute
        project = self.cluster.split("/")[1]
        if compute.reservation_window(project, zones[0], name) is None:
            return False
        return not compute.reservation_active(project, zones[0], name)

    @behaviour("SIM-CALENDAR-BLOCK")
    def _end_calendar_blocks(
        self, pools: dict[str, ScalingPool], busy: dict[str, list[Obj]]
    ) -> None:
        """Marks each pool outside its calendar block or not (asked of the emulator once
        a pass; scaling reads the mark), and takes the nodes of those that are."""
        for pool in pools.values():
            pool.outside_block = self._outside_its_block(pool)
            if pool.nodes and pool.outside_block:
                for node in list(pool.nodes):
                    self.fleet.remove(
                        pool,
                        node,
                        busy,
                        "Pod was terminated in response to imminent node shutdown "
                        "(the calendar-mode reservation reached its end time).",
                    )

    @behaviour("SIM-FLEX-MAX-RUN")
    def _expire_flex_start(
        self, now: float, pools: dict[str, ScalingPool], busy: dict[str, list[Obj]]
    ) -> None:
        for pool in pools.values():
            limit = pool.shape.max_run_duration_seconds
            if not pool.shape.flex_start or not limit:
                continue
            for node in list(pool.nodes):
                created = self.fleet.created_at(name_of(node))
                if created is not None and now - created >= limit:
                    self.fleet.remove(
                        pool,
                        node,
                        busy,
                        "Pod was terminated in response to imminent node shutdown "
                        "(flex-start VM reached its max run duration).",
                    )
