"""The operator's metrics from status transitions, and its JSON log lines."""

from __future__ import annotations

import io
import json
import logging
import urllib.request
from datetime import UTC, datetime, timedelta

from dws_operator import rfc3339
from dws_operator.api import (
    Attempt,
    AttemptOutcome,
    BookingState,
    BookingStatus,
    Condition,
    Phase,
    PlanSummary,
    TrainingRequestStatus,
)
from dws_operator.controller.logs import JsonFormatter, about
from dws_operator.controller.metrics import OperatorMetrics, metric_names
from dws_operator.reconcile import read_spec, tally
from tests.builders import spec_body, tpu

T0 = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
#: When the passes in these tests look (after every time they name).
NOW = T0 + timedelta(days=1)
KEY = ("ml", "llama")
SPEC = read_spec("r", "uid", spec_body(tpu("v6e", "4x4"), provisioning={"zones": ["us-east5-a"]}))
PLAN = PlanSummary(
    accelerator="tpu-v6e",
    accelerator_label="tpu-v6e-slice",
    shape="4x4",
    machine_type="ct6e-standard-4t",
    nodes=4,
    chips_per_node=4,
    total_chips=16,
    single_host=False,
    resource_name="google.com/tpu",
    node_selector={},
)
KIND = {"accelerator": "tpu-v6e", "mode": "FlexStart"}


def status(phase: Phase, **fields: object) -> TrainingRequestStatus:
    return TrainingRequestStatus(phase=phase, plan=PLAN, requested_at=T0, **fields)


def seen(
    metrics: OperatorMetrics,
    created: str | None,
    before: TrainingRequestStatus,
    after: TrainingRequestStatus,
    now: datetime,
) -> None:
    """A pass that wrote `after` over `before`, counted as the decision tallies it."""
    made = rfc3339.parse(created) if created else None
    metrics.request_seen(KEY, SPEC, after, tally(before, after, made, now))


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_a_request_deleted_while_it_runs_counts_its_chips_until_the_pass_that_saw_it() -> None:
    metrics = OperatorMetrics()
    ready = T0 + timedelta(minutes=9)
    running = status(Phase.RUNNING, provisioned_at=ready, started_at=ready)
    deleting = running.model_copy(update={"phase": Phase.DELETING})
    # The pass's own time, not the machine's: 16 chips for 3 hours.
    seen(metrics, None, running, deleting, ready + timedelta(hours=3))
    assert value(metrics, "dws_chip_hours_total", **KIND) == 48.0


def test_a_lifecycle_moves_the_metrics() -> None:
    metrics = OperatorMetrics()
    created = "2026-11-01T08:59:00Z"
    pending = TrainingRequestStatus()
    waiting = status(Phase.WAITING_FOR_CAPACITY)
    seen(metrics, created, pending, waiting, NOW)
    waiting_labels = {"phase": "WaitingForCapacity", **KIND}
    assert value(metrics, "dws_requests", **waiting_labels) == 1
    ready = T0 + timedelta(minutes=9)
    running = status(Phase.RUNNING, provisioned_at=ready, started_at=ready)
    seen(metrics, created, waiting, running, NOW)
    assert value(metrics, "dws_requests", **waiting_labels) is None
    assert value(metrics, "dws_requests", phase="Running", **KIND) == 1
    capacity = {**KIND, "zone": "us-east5-a"}
    assert value(metrics, "dws_time_to_capacity_seconds_count", **capacity) == 1
    # From the request's creation (a minute before capacity was asked for) to ready.
    assert value(metrics, "dws_time_to_capacity_seconds_sum", **capacity) == 600.0
    assert (
        value(
            metrics,
            "dws_request_phase_transitions_total",
            from_phase="WaitingForCapacity",
            to_phase="Running",
        )
        == 1
    )
    done = ready + timedelta(hours=2)
    succeeded = running.model_copy(update={"phase": Phase.SUCCEEDED, "finished_at": done})
    seen(metrics, created, running, succeeded, NOW)
    # 16 chips for 2 hours.
    assert value(metrics, "dws_chip_hours_total", **KIND) == 32.0
    zero = succeeded.model_copy(update={"scaled_down_at": done + timedelta(seconds=30)})
    seen(metrics, created, succeeded, zero, NOW)
    assert value(metrics, "dws_scale_down_seconds_sum", **KIND) == 30.0
    # 4 nodes, each gone 570 s before GKE's autoscaler would have taken it.
    assert value(metrics, "dws_idle_node_seconds_avoided_total", **KIND) == 4 * 570.0
    # The same status again counts nothing twice.
    seen(metrics, created, zero, zero, NOW)
    assert value(metrics, "dws_idle_node_seconds_avoided_total", **KIND) == 4 * 570.0
    metrics.request_gone(KEY)
    assert value(metrics, "dws_requests", phase="Succeeded", **KIND) is None


def test_timeouts_restarts_and_ladder_steps() -> None:
    metrics = OperatorMetrics()
    waiting = status(Phase.WAITING_FOR_CAPACITY, restarts=0)
    restarted = waiting.model_copy(update={"restarts": 1})
    seen(metrics, None, waiting, restarted, NOW)
    assert value(metrics, "dws_restarts_total", **KIND) == 1
    timeout = Condition(
        type="Completed", status="False", reason="CapacityTimeout", last_transition_time=T0
    )
    step = Attempt(
        step=1, mode="FlexStart", started_at=T0, ended_at=T0, outcome=AttemptOutcome.TIMED_OUT
    )
    failed = restarted.model_copy(
        update={"phase": Phase.FAILED, "conditions": [timeout], "attempts": [step]}
    )
    seen(metrics, None, restarted, failed, NOW)
    seen(metrics, None, failed, failed, NOW)
    assert value(metrics, "dws_capacity_timeouts_total", **KIND) == 1
    assert value(metrics, "dws_ladder_steps_total", mode="FlexStart", outcome="TimedOut") == 1


def test_gke_calls_kube_errors_passes_and_leader() -> None:
    metrics = OperatorMetrics()
    metrics.gke_call("CreateNodePool", "OK", 0.2)
    metrics.gke_call("CreateNodePool", "RESOURCE_EXHAUSTED", 0.1)
    metrics.kube_error(409)
    metrics.reconciled(0.01, ok=True)
    metrics.leader.set(1)
    assert value(metrics, "dws_gke_requests_total", method="CreateNodePool", code="OK") == 1
    assert value(metrics, "dws_gke_request_duration_seconds_count", method="CreateNodePool") == 2
    assert value(metrics, "dws_kubernetes_api_errors_total", code="409") == 1
    assert value(metrics, "dws_reconcile_passes_total", result="ok") == 1
    assert value(metrics, "dws_leader") == 1
    assert "dws_requests" in set(metric_names(metrics))


def test_the_endpoint_serves_the_registry() -> None:
    metrics = OperatorMetrics()
    port = metrics.serve(0, "127.0.0.1")
    try:
        metrics.kube_error(500)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    finally:
        metrics.close()
    assert 'dws_kubernetes_api_errors_total{code="500"} 1.0' in text


def test_json_log_lines_carry_the_request_and_pool() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("dws-test-json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("%s: %s", "ml/llama", "CreateNodePool", extra=about("ml/llama", pool="p"))
    finally:
        logger.removeHandler(handler)
    line = json.loads(out.getvalue())
    assert line["message"] == "ml/llama: CreateNodePool"
    assert (line["level"], line["request"], line["pool"]) == ("WARNING", "ml/llama", "p")
    assert "phase" not in line
    assert line["time"].endswith("+00:00")


def test_deleting_a_timed_out_request_counts_no_second_timeout() -> None:
    metrics = OperatorMetrics()
    timeout = Condition(
        type="Completed", status="False", reason="CapacityTimeout", last_transition_time=T0
    )
    waiting = status(Phase.WAITING_FOR_CAPACITY)
    failed = waiting.model_copy(update={"phase": Phase.FAILED, "conditions": [timeout]})
    deleting = failed.model_copy(update={"phase": Phase.DELETING})
    seen(metrics, None, waiting, failed, NOW)
    seen(metrics, None, failed, deleting, NOW)
    assert value(metrics, "dws_capacity_timeouts_total", **KIND) == 1


def test_a_restart_counts_the_chips_held_and_its_next_time_to_capacity() -> None:
    metrics = OperatorMetrics()
    ready = T0 + timedelta(minutes=5)
    running = status(Phase.RUNNING, provisioned_at=ready, started_at=ready)
    lost = ready + timedelta(hours=1)
    restarted = running.model_copy(
        update={
            "phase": Phase.WAITING_FOR_CAPACITY,
            "restarts": 1,
            "started_at": None,
            "requested_at": lost,
        }
    )
    seen(metrics, None, running, restarted, NOW)
    assert value(metrics, "dws_chip_hours_total", **KIND) == 16.0
    again = restarted.model_copy(
        update={"phase": Phase.RUNNING, "started_at": lost + timedelta(minutes=2)}
    )
    seen(metrics, None, restarted, again, NOW)
    capacity = {**KIND, "zone": "us-east5-a"}
    assert value(metrics, "dws_time_to_capacity_seconds_count", **capacity) == 1
    assert value(metrics, "dws_time_to_capacity_seconds_sum", **capacity) == 120.0


def test_counters_start_at_zero_for_every_accelerator_and_mode() -> None:
    metrics = OperatorMetrics()
    assert value(metrics, "dws_restarts_total", accelerator="nvidia-l4", mode="Spot") == 0
    assert value(metrics, "dws_ladder_steps_total", mode="Spot", outcome="Preempted") == 0


def test_bookings_are_counted_by_state_every_state_shown() -> None:
    metrics = OperatorMetrics()
    booking = BookingStatus(
        name="dws-llama",
        zone="us-east5-a",
        start_time=T0,
        end_time=NOW,
        count=16,
        unit="chips",
        machine_type="ct6e-standard-4t",
        state=BookingState.UNDER_REVIEW,
    )
    seen(metrics, None, TrainingRequestStatus(), TrainingRequestStatus(booking=booking), NOW)
    assert value(metrics, "dws_bookings", state="UnderReview") == 1
    assert value(metrics, "dws_bookings", state="Delivered") == 0
    metrics.request_gone(KEY)
    assert value(metrics, "dws_bookings", state="UnderReview") == 0
