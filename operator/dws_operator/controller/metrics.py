"""The operator's Prometheus metrics: one registry per operator, its `/metrics` endpoint,
and what the reconciler, the GKE client and the Kubernetes transport report to it.

Every label takes its values from a closed set (phases, modes, accelerators of the
catalog, GKE's zones and methods, gRPC codes, HTTP statuses): no request names or uids,
so the series stay as many with ten thousand requests as with ten.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dws_operator.api import AttemptOutcome, BookingState, TrainingRequestStatus
from dws_operator.catalog import GpuType, ProvisioningMode, TpuVersion
from dws_operator.reconcile import RequestFacts, Tally, written_step

#: Time to capacity: seconds (an on-demand VM) to days (flex-start's 7-day wait).
CAPACITY_BUCKETS = (
    5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0,
    43200.0, 86400.0, 259200.0, 604800.0,
)  # fmt: skip
#: The workload's end -> its pool at zero: seconds to GKE's own 10 minutes and beyond.
SCALE_DOWN_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
#: GKE calls and reconcile passes: milliseconds to a minute.
CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: A label for what a request does not say (no zones: the cluster's; no plan yet).
ANY = "any"
UNKNOWN = "unknown"
#: Every accelerator the catalog knows, as plans name them: the counters by accelerator
#: and mode start at 0 for each, so Prometheus sees their first increase too (a series
#: born at 1 has no increase to show).
ACCELERATORS = tuple(f"tpu-{v.value}" for v in TpuVersion) + tuple(t.value for t in GpuType)
MODES = tuple(m.value for m in ProvisioningMode)


@dataclass(frozen=True)
class RequestLabels:
    """The labels a request's series carry: its phase, mode, accelerator and zone."""

    phase: str
    mode: str
    accelerator: str
    zone: str
    #: Nodes and chips of the whole request (every slice), for node-seconds and chip-hours.
    nodes: int
    chips: int


def request_labels(facts: RequestFacts, status: TrainingRequestStatus) -> RequestLabels:
    """The labels of a request as its spec and status say (on its current ladder step)."""
    step = facts.step_words(written_step(status.ladder_order, status.step, facts.ladder_steps))
    zones = step.zones
    plan = status.plan
    slices = plan.slices if plan else 1
    return RequestLabels(
        phase=str(status.phase),
        mode=step.mode or UNKNOWN,
        accelerator=plan.accelerator if plan else UNKNOWN,
        zone=str(zones[0]) if len(zones) == 1 else (ANY if not zones else "several"),
        nodes=(plan.nodes * slices) if plan else 0,
        chips=(plan.total_chips * slices) if plan else 0,
    )


class _LatestByRequest(Collector):
    """A gauge counted at scrape time from the label values the reconciler last saw of
    each request (no series kept per request, so 10,000 requests make no more series
    than ten). Rows in `zeros` are reported even when nothing holds them."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labels: list[str],
        zeros: Iterable[tuple[str, ...]] = (),
    ) -> None:
        self._name, self._documentation, self._labels = name, documentation, labels
        self._zeros = list(zeros)
        self._lock = threading.Lock()
        self._by_key: dict[tuple[str, str], tuple[str, ...]] = {}

    def set(self, key: tuple[str, str], values: tuple[str, ...] | None) -> None:
        """The request's label values now; None: it counts no more."""
        with self._lock:
            if values is None:
                self._by_key.pop(key, None)
            else:
                self._by_key[key] = values

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._documentation, labels=self._labels)
        with self._lock:
            counts = collections.Counter(self._by_key.values())
        rows = self._zeros + sorted(row for row in counts if row not in self._zeros)
        for row in rows:
            family.add_metric(list(row), counts.get(row, 0))
        yield family


class OperatorMetrics:
    """Every metric of one operator, in a registry of its own (tests run several)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = _LatestByRequest(
            "dws_requests",
            "TrainingRequests by phase, provisioning mode (of the current ladder step) and "
            "accelerator.",
            ["phase", "mode", "accelerator"],
        )
        r.register(self.requests)
        self.bookings = _LatestByRequest(
            "dws_bookings",
            "Calendar-mode bookings (DWS Calendar) of the TrainingRequests, by state.",
            ["state"],
            zeros=[(state.value,) for state in BookingState],
        )
        r.register(self.bookings)
        self.booking_approval = Histogram(
            "dws_booking_approval_seconds",
            "Seconds from a Calendar-mode booking's submit to Google's approval, as seen.",
            buckets=(60, 300, 900, 3600, 4 * 3600, 24 * 3600, 3 * 24 * 3600),
            registry=r,
        )
        self.block_utilisation = Histogram(
            "dws_block_utilisation_ratio",
            "Node-hours a finished Calendar-mode request used over those its block reserved.",
            buckets=(0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 1.0),
            registry=r,
        )
        self.recoveries = Counter(
            "dws_stuck_recoveries",
            "Requests for capacity made again because the last one stuck (a "
            "ProvisioningRequest Accepted and not provisioned for DWS_STUCK_AFTER_SECONDS).",
            registry=r,
        )
        self.estimate_accuracy = Histogram(
            "dws_estimate_accuracy_ratio",
            "A wait for capacity, once the capacity came, over the p50 its request was shown "
            "while it waited (status.estimate): 1 is spot on.",
            buckets=(0.25, 0.5, 0.8, 1.0, 1.25, 2.0, 4.0),
            registry=r,
        )
        self.transitions = Counter(
            "dws_request_phase_transitions",
            "Phase changes of TrainingRequests.",
            ["from_phase", "to_phase"],
            registry=r,
        )
        self.time_to_capacity = Histogram(
            "dws_time_to_capacity_seconds",
            "A request's creation (after a restart: its new capacity request) to every "
            "node ready; the labels are those of the ladder step that got the capacity.",
            ["accelerator", "mode", "zone"],
            buckets=CAPACITY_BUCKETS,
            registry=r,
        )
        self.scale_down = Histogram(
            "dws_scale_down_seconds",
            "The workload's end to its node pool at zero nodes.",
            ["accelerator", "mode"],
            buckets=SCALE_DOWN_BUCKETS,
            registry=r,
        )
        self.avoided = Counter(
            "dws_idle_node_seconds_avoided",
            "Node-seconds not billed after the work ended, against GKE's autoscaler "
            "removing the idle nodes after its default 10 minutes.",
            ["accelerator", "mode"],
            registry=r,
        )
        self.chip_hours = Counter(
            "dws_chip_hours",
            "TPU chip-hours or GPU-hours held by requests from every node ready to the "
            "workload's end.",
            ["accelerator", "mode"],
            registry=r,
        )
        self.restarts = Counter(
            "dws_restarts",
            "Workload restarts after preemption or node loss.",
            ["accelerator", "mode"],
            registry=r,
        )
        self.rollovers = Counter(
            "dws_rollovers",
            "Long runs' planned rollovers: a segment stopped before its capacity ended, "
            "for the next on new capacity.",
            ["accelerator", "mode"],
            registry=r,
        )
        # Unlabelled: few runs are long, and a histogram per accelerator and mode would
        # add its buckets for each.
        self.rollover_gap = Histogram(
            "dws_rollover_gap_seconds",
            "A long run's segment stopped (or lost) to the next segment's workload running.",
            buckets=CAPACITY_BUCKETS,
            registry=r,
        )
        self.requested_ahead = Histogram(
            "dws_capacity_requested_ahead_seconds",
            "How long before a long run's segment's capacity ended the next segment's "
            "capacity was asked for (its node pools made).",
            buckets=CAPACITY_BUCKETS,
            registry=r,
        )
        self.capacity_timeouts = Counter(
            "dws_capacity_timeouts",
            "Requests that failed CapacityTimeout (every ladder step ran out of time).",
            ["accelerator", "mode"],
            registry=r,
        )
        self.ladder_steps = Counter(
            "dws_ladder_steps",
            "Capacity ladder steps that ended, by their mode and outcome.",
            ["mode", "outcome"],
            registry=r,
        )
        self.gke_calls = Counter(
            "dws_gke_requests",
            "GKE API calls (every attempt) by method and gRPC status code.",
            ["method", "code"],
            registry=r,
        )
        self.gke_latency = Histogram(
            "dws_gke_request_duration_seconds",
            "GKE API call latency by method.",
            ["method"],
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.kube_errors = Counter(
            "dws_kubernetes_api_errors",
            "Kubernetes API answers that were errors, by HTTP status.",
            ["code"],
            registry=r,
        )
        self.passes = Counter(
            "dws_reconcile_passes",
            "Reconcile passes over TrainingRequests, by result (ok, error).",
            ["result"],
            registry=r,
        )
        self.pass_seconds = Histogram(
            "dws_reconcile_duration_seconds",
            "Duration of one reconcile pass.",
            buckets=CALL_BUCKETS,
            registry=r,
        )
        self.pass_status_writes = Histogram(
            "dws_reconcile_status_writes",
            "Status writes of one reconcile pass (one decision, written at most once).",
            buckets=(0, 1, 2),
            registry=r,
        )
        self.orphaned_pools = Gauge(
            "dws_orphaned_node_pools",
            "Node pools the operator made whose TrainingRequest is gone and that nothing "
            "looks after (deleted once they have had no Node for a grace period).",
            registry=r,
        )
        self.leader = Gauge(
            "dws_leader",
            "1 while this replica acts (holds the Lease, or runs without leader election).",
            registry=r,
        )
        self._server: Any = None
        self.port: int | None = None
        for accelerator in ACCELERATORS:
            for mode in MODES:
                for counter in (
                    self.avoided,
                    self.chip_hours,
                    self.restarts,
                    self.capacity_timeouts,
                    self.rollovers,
                ):
                    counter.labels(accelerator, mode)
        for mode in MODES:
            for outcome in AttemptOutcome:
                self.ladder_steps.labels(mode, outcome.value)

    # -- what the shell reports -----------------------------------------------------

    def request_seen(
        self,
        key: tuple[str, str],
        facts: RequestFacts,
        status: TrainingRequestStatus,
        counted: Tally | None = None,
    ) -> None:
        """A pass left the request at `status`; `counted`: what its decision changed,
        once written (None: it wrote nothing new)."""
        labels = request_labels(facts, status)
        self.requests.set(key, (labels.phase, labels.mode, labels.accelerator))
        self.bookings.set(key, (status.booking.state.value,) if status.booking else None)
        if counted is None:
            return
        if counted.approval_seconds is not None:
            self.booking_approval.observe(counted.approval_seconds)
        if counted.block_utilisation is not None:
            self.block_utilisation.observe(counted.block_utilisation)
        if counted.estimate_ratio is not None:
            self.estimate_accuracy.observe(counted.estimate_ratio)
        if counted.transition is not None:
            self.transitions.labels(*counted.transition).inc()
        kind = (labels.accelerator, labels.mode)
        if counted.waited_seconds is not None:
            self.time_to_capacity.labels(*kind, labels.zone).observe(counted.waited_seconds)
        if counted.restarts:
            self.restarts.labels(*kind).inc(counted.restarts)
        if counted.recoveries:
            self.recoveries.inc(counted.recoveries)
        if counted.chip_seconds:
            self.chip_hours.labels(*kind).inc(counted.chip_seconds / 3600.0)
        if counted.capacity_timeout:
            self.capacity_timeouts.labels(*kind).inc()
        if counted.rollovers:
            self.rollovers.labels(*kind).inc(counted.rollovers)
        if counted.rollover_gap is not None:
            self.rollover_gap.observe(counted.rollover_gap)
        if counted.requested_ahead is not None:
            self.requested_ahead.observe(counted.requested_ahead)
        if counted.emptied_seconds is not None:
            self.scale_down.labels(*kind).observe(counted.emptied_seconds)
            self.avoided.labels(*kind).inc(counted.spared_node_seconds)
        for mode, outcome in counted.attempts_ended:
            self.ladder_steps.labels(mode, outcome).inc()

    def request_gone(self, key: tuple[str, str]) -> None:
        self.requests.set(key, None)
        self.bookings.set(key, None)

    def reconciled(self, seconds: float, ok: bool) -> None:
        self.passes.labels("ok" if ok else "error").inc()
        self.pass_seconds.observe(seconds)

    def gke_call(self, method: str, code: str, seconds: float) -> None:
        self.gke_calls.labels(method, code).inc()
        self.gke_latency.labels(method).observe(seconds)

    def kube_error(self, status: int) -> None:
        self.kube_errors.labels(str(status)).inc()

    # -- the endpoint ---------------------------------------------------------------

    def serve(self, port: int, address: str = "0.0.0.0") -> int:
        """Serve `/metrics` on `port` (0: a free one); the port it listens on."""
        server, _thread = start_http_server(port, address, registry=self.registry)
        self._server = server
        self.port = int(server.server_port)
        return self.port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
            self.port = None


def metric_names(metrics: OperatorMetrics) -> Iterable[str]:
    """The names of every metric family the operator exports (for docs and tests)."""
    for family in metrics.registry.collect():
        yield family.name
