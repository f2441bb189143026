"""The Grafana dashboard of the operator's metrics: its panels, their PromQL, and the
dashboard JSON the chart ships (`hack/gen_manifests.py` writes it; a test fails when
the committed copy drifts, and another when a query names a metric the operator does
not export).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

UID = "dws-operator"
TITLE = "dws-operator: DWS training requests"
#: Grafana's sidecar loads ConfigMaps carrying this label (kube-prometheus-stack's default).
SIDECAR_LABEL = "grafana_dashboard"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"


PANELS: tuple[Panel, ...] = (
    Panel(
        "Requests by phase",
        "TrainingRequests the operator looks after, by phase.",
        (Query("sum by (phase) (dws_requests)", "{{phase}}"),),
    ),
    Panel(
        "Requests by mode and accelerator",
        "TrainingRequests by provisioning mode (of their current ladder step) and accelerator.",
        (Query("sum by (mode, accelerator) (dws_requests)", "{{mode}} {{accelerator}}"),),
    ),
    Panel(
        "Phase changes",
        "Phase transitions per second, by the phase entered.",
        (
            Query(
                "sum by (to_phase) (rate(dws_request_phase_transitions_total[$__rate_interval]))",
                "{{to_phase}}",
            ),
        ),
        unit="ops",
    ),
    Panel(
        "Time to capacity (p50, p90)",
        "Request created to every node ready, by accelerator, mode and zone, over the "
        "dashboard's time range.",
        (
            Query(
                "histogram_quantile(0.5, sum by (le, accelerator, mode, zone) "
                "(increase(dws_time_to_capacity_seconds_bucket[$__range])))",
                "p50 {{accelerator}} {{mode}} {{zone}}",
            ),
            Query(
                "histogram_quantile(0.9, sum by (le, accelerator, mode, zone) "
                "(increase(dws_time_to_capacity_seconds_bucket[$__range])))",
                "p90 {{accelerator}} {{mode}} {{zone}}",
            ),
        ),
        unit="s",
    ),
    Panel(
        "Work ended -> pool at zero (p90)",
        "How long nodes stayed after the workload ended, by accelerator and mode.",
        (
            Query(
                "histogram_quantile(0.9, sum by (le, accelerator, mode) "
                "(increase(dws_scale_down_seconds_bucket[$__range])))",
                "{{accelerator}} {{mode}}",
            ),
        ),
        unit="s",
    ),
    Panel(
        "Idle node-hours avoided",
        "Node time not billed after the work ended, against GKE's autoscaler removing "
        "idle nodes after 10 minutes.",
        (
            Query(
                "sum(increase(dws_idle_node_seconds_avoided_total[$__range])) / 3600",
                "node-hours",
            ),
        ),
        kind="stat",
    ),
    Panel(
        "Chip-hours held",
        "TPU chip-hours and GPU-hours of finished work, by accelerator and mode.",
        (
            Query(
                "sum by (accelerator, mode) (increase(dws_chip_hours_total[$__range]))",
                "{{accelerator}} {{mode}}",
            ),
        ),
    ),
    Panel(
        "Restarts, recoveries, capacity timeouts, ladder steps given up",
        "Restarts after preemption, queued requests asked for again after they stuck, "
        "requests that never got capacity, and capacity ladder steps that ended without it.",
        (
            Query("sum(increase(dws_restarts_total[$__range]))", "restarts"),
            Query("sum(increase(dws_stuck_recoveries_total[$__range]))", "stuck, asked again"),
            Query("sum(increase(dws_capacity_timeouts_total[$__range]))", "capacity timeouts"),
            Query(
                'sum(increase(dws_ladder_steps_total{outcome!="Provisioned"}[$__range]))',
                "ladder steps given up",
            ),
        ),
        kind="stat",
    ),
    Panel(
        "Long runs: rollovers, the gap between segments, capacity asked ahead",
        "Planned rollovers of runs longer than one window, the p90 time from a segment's "
        "stop to the next one running, and the p50 of how long before a window's end the "
        "next segment's capacity was asked for.",
        (
            Query("sum(increase(dws_rollovers_total[$__range]))", "rollovers"),
            Query(
                "histogram_quantile(0.9, sum by (le) "
                "(rate(dws_rollover_gap_seconds_bucket[$__range])))",
                "gap p90 (s)",
            ),
            Query(
                "histogram_quantile(0.5, sum by (le) "
                "(rate(dws_capacity_requested_ahead_seconds_bucket[$__range])))",
                "asked ahead p50 (s)",
            ),
        ),
        kind="stat",
    ),
    Panel(
        "GKE calls by method and code",
        "Calls to GKE's API per second (every attempt), by method and gRPC code.",
        (
            Query(
                "sum by (method, code) (rate(dws_gke_requests_total[$__rate_interval]))",
                "{{method}} {{code}}",
            ),
        ),
        unit="reqps",
    ),
    Panel(
        "GKE call latency (p90)",
        "By method.",
        (
            Query(
                "histogram_quantile(0.9, sum by (le, method) "
                "(rate(dws_gke_request_duration_seconds_bucket[$__rate_interval])))",
                "{{method}}",
            ),
        ),
        unit="s",
    ),
    Panel(
        "Kubernetes API errors",
        "Error answers of the Kubernetes API per second, by HTTP status (0 when none).",
        (
            Query(
                "sum by (code) (rate(dws_kubernetes_api_errors_total[$__rate_interval])) "
                "or vector(0)",
                "{{code}}",
            ),
        ),
        unit="reqps",
    ),
    Panel(
        "Reconcile passes and p90 duration",
        "Passes per second by result, and how long one takes.",
        (
            Query(
                "sum by (result) (rate(dws_reconcile_passes_total[$__rate_interval]))",
                "{{result}}",
            ),
            Query(
                "histogram_quantile(0.9, sum by (le) "
                "(rate(dws_reconcile_duration_seconds_bucket[$__rate_interval])))",
                "p90 seconds",
            ),
            Query(
                "sum(rate(dws_reconcile_status_writes_sum[$__rate_interval])) / "
                "sum(rate(dws_reconcile_status_writes_count[$__rate_interval]))",
                "status writes per pass",
            ),
        ),
    ),
    Panel(
        "Calendar-mode bookings",
        "Bookings by state; how long Google's review took (p90); how much of each "
        "finished block its request used (median).",
        (
            Query("sum by (state) (dws_bookings)", "{{state}}"),
            Query(
                "histogram_quantile(0.9, sum by (le) "
                "(rate(dws_booking_approval_seconds_bucket[$__rate_interval])))",
                "p90 seconds to approval",
            ),
            Query(
                "histogram_quantile(0.5, sum by (le) "
                "(rate(dws_block_utilisation_ratio_bucket[$__rate_interval])))",
                "median block utilisation",
            ),
        ),
    ),
    Panel(
        "Time-to-capacity estimates",
        "Each wait that got its capacity over the p50 its request was shown "
        "(status.estimate): the median near 1 means the estimates hold; p10 and p90 how far "
        "they miss.",
        (
            Query(
                "histogram_quantile(0.5, sum by (le) "
                "(rate(dws_estimate_accuracy_ratio_bucket[$__rate_interval])))",
                "median actual / estimated",
            ),
            Query(
                "histogram_quantile(0.1, sum by (le) "
                "(rate(dws_estimate_accuracy_ratio_bucket[$__rate_interval])))",
                "p10",
            ),
            Query(
                "histogram_quantile(0.9, sum by (le) "
                "(rate(dws_estimate_accuracy_ratio_bucket[$__rate_interval])))",
                "p90",
            ),
        ),
    ),
    Panel(
        "Orphaned node pools",
        "Pools the operator made whose request is gone (deleted once Node-free for "
        "DWS_ORPHAN_GRACE_SECONDS); anything above 0 is a fault's leftover.",
        (Query("max(dws_orphaned_node_pools)", "orphaned pools"),),
        kind="stat",
    ),
    Panel(
        "Leader",
        "1 for the replica that acts (holds the Lease).",
        (Query("max by (pod, instance) (dws_leader)", "{{pod}} {{instance}}"),),
        kind="stat",
    ),
)

_METRIC = re.compile(r"\b(dws_[a-z_]+)\b")
#: Suffixes Prometheus adds to a metric family's samples.
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def queries() -> list[str]:
    return [q.expr for panel in PANELS for q in panel.queries]


def metrics_used() -> set[str]:
    """The metric families the panels query (sample suffixes taken off)."""
    used = set()
    for expr in queries():
        for sample in _METRIC.findall(expr):
            suffix = next((s for s in SUFFIXES if sample.endswith(s)), "")
            used.add(sample[: len(sample) - len(suffix)])
    return used


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard (schema 39), its datasource a variable users pick."""
    panels = []
    for index, panel in enumerate(PANELS):
        width = 12
        panels.append(
            {
                "id": index + 1,
                "type": panel.kind,
                "title": panel.title,
                "description": panel.description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": width, "x": (index % 2) * width, "y": (index // 2) * 8},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "targets": [
                    {
                        "datasource": {"type": "prometheus", "uid": "${datasource}"},
                        "expr": query.expr,
                        "legendFormat": query.legend,
                        "refId": chr(ord("A") + n),
                    }
                    for n, query in enumerate(panel.queries)
                ],
            }
        )
    return {
        "uid": UID,
        "title": TITLE,
        "tags": ["dws-operator", "gke", "dws"],
        "schemaVersion": 39,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Prometheus",
                    "type": "datasource",
                    "query": "prometheus",
                }
            ]
        },
        "panels": panels,
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"
