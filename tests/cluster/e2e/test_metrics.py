"""The operator's metrics as Prometheus sees them: /metrics moving through a lifecycle,
and every Grafana dashboard panel's query answered with data by a real Prometheus."""

from __future__ import annotations

import dataclasses
import math
import urllib.request
from pathlib import Path
from typing import Any

from kubernetes import client as k8s
from prometheus_client.parser import text_string_to_metric_families

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller import OperatorThread
from dws_operator.dashboard import PANELS
from dws_workshop.devcluster.prometheus import PrometheusServer
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu, manifest, spec_body, tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, sim
from tests.polling import eventually

#: What Grafana puts for its interval variables, for a test that lasts minutes.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$__range": "15m"}
#: Panels whose quantiles must be numbers once two requests of a shape have run.
QUANTILES = ("dws_time_to_capacity_seconds_bucket", "dws_scale_down_seconds_bucket")


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def total(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **want: str
) -> float:
    return sum(
        v
        for (n, labels), v in samples.items()
        if n == name and all(dict(labels).get(k) == x for k, x in want.items())
    )


def test_metrics_through_a_lifecycle_and_every_dashboard_query(
    stack: Stack, tmp_path: Path
) -> None:
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK, capacity=[CapacityRule(accelerator="nvidia-l4", stockout=True)]
        ),
        operator=False,
    )
    objects = k8s.CustomObjectsApi(scenario.api)
    namespace = scenario.namespace

    def create(name: str, spec: dict[str, Any]) -> None:
        objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest(name, spec)
        )

    def status(name: str) -> dict[str, Any]:
        body: Any = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        found: dict[str, Any] = body.get("status") or {}
        return found

    config = dataclasses.replace(
        scenario.operator_config, metrics_port=0, metrics_address="127.0.0.1"
    )
    slice_2x2 = spec_body(tpu("v6e", "2x2"), template=sim("5s"))
    with OperatorThread(config, kubeconfig=scenario.operator_kubeconfig) as operator:
        port = operator.metrics.port
        assert port is not None
        with PrometheusServer([f"127.0.0.1:{port}"], tmp_path / "prometheus") as prometheus:
            prometheus.wait_for('up{job="dws"} == 1')
            # One request through its lifecycle, /metrics read as it goes.
            create("first", slice_2x2)
            seen: set[str] = set()

            def phases_seen() -> bool:
                samples = scrape(port)
                for phase in ("Provisioning", "WaitingForCapacity", "Running", "Succeeded"):
                    if total(samples, "dws_requests", phase=phase) == 1:
                        seen.add(phase)
                return "Succeeded" in seen and bool(status("first").get("scaledDownAt"))

            eventually(phases_seen, timeout=90, what="the first request succeeded, at zero")
            assert {"Running", "Succeeded"} <= seen, seen
            samples = scrape(port)
            kind = {"accelerator": "tpu-v6e", "mode": "FlexStart"}
            assert total(samples, "dws_time_to_capacity_seconds_count", **kind) == 1
            assert total(samples, "dws_idle_node_seconds_avoided_total", **kind) > 0
            assert total(samples, "dws_chip_hours_total", **kind) > 0
            assert total(samples, "dws_requests", phase="Succeeded") == 1
            assert total(samples, "dws_gke_requests_total", method="CreateNodePool", code="OK") >= 1
            assert total(samples, "dws_reconcile_passes_total", result="ok") > 0
            assert total(samples, "dws_leader") == 1
            # Prometheus holds the first request's series before the second adds to them,
            # so increase() sees the second one.
            prometheus.wait_for("dws_time_to_capacity_seconds_count > 0")
            prometheus.wait_for("dws_scale_down_seconds_count > 0")
            create("second", slice_2x2)
            create(
                "never",
                spec_body(
                    gpu("nvidia-l4"), provisioning={"maxWaitDuration": "3s"}, template=sim("5s")
                ),
            )
            eventually(
                lambda: (
                    status("second").get("scaledDownAt")
                    and status("never").get("phase") == "Failed"
                ),
                timeout=90,
                what="the second request at zero and the third timed out",
            )
            prometheus.wait_for("dws_time_to_capacity_seconds_count >= 2")
            prometheus.wait_for("dws_scale_down_seconds_count >= 2")
            prometheus.wait_for("dws_capacity_timeouts_total >= 1")
            # Counters start at 0, so the first event of a kind shows as an increase.
            [timeouts] = prometheus.query("sum(increase(dws_capacity_timeouts_total[15m]))")
            assert float(timeouts["value"][1]) > 0
            for panel in PANELS:
                for query in panel.queries:
                    expr = query.expr
                    for variable, value in GRAFANA_VARIABLES.items():
                        expr = expr.replace(variable, value)
                    result = prometheus.wait_for(expr, timeout=30)
                    values = [float(r["value"][1]) for r in result]
                    if any(metric in expr for metric in QUANTILES):
                        assert not any(math.isnan(v) for v in values), (panel.title, result)
