"""`dws-operator plan`'s text for people: the plan's table, each fallback step, what a
Calendar-mode request books and Compute's advice for its window, and each ladder
step's estimate from the capacity history."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime, timedelta

from dws_operator import rfc3339
from dws_operator.api import FallbackOrder, TrainingRequestSpec
from dws_operator.durations import format_duration
from dws_operator.estimate import Estimate, History
from dws_operator.naming import workload_policy_name
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import (
    describe_estimate,
    estimated_order,
    plan_booking,
    query_for,
    step_key,
)

#: What each GKE driver setting means for the nodes, for the table.
_DRIVER_NOTES = {
    "DEFAULT": "installed by GKE: its default version for the node version",
    "LATEST": "installed by GKE: the newest version for the node version",
    "INSTALLATION_DISABLED": "not installed: until you install one, nodes offer no nvidia.com/gpu",
}


def render_booking(spec: TrainingRequestSpec, plan: SlicePlan) -> str | None:
    """What a Calendar-mode request books, for people; None for other modes."""
    block = spec.provisioning.calendar
    if block is None:
        return None
    # Its name and uid are the request's, not known here; the window and count are.
    start_at = block.first_start
    assert start_at is not None  # one of them, validated
    booking = plan_booking("", "", spec, plan, start_at)
    what = (
        f"{booking.count} chips"
        if booking.unit == "chips"
        else f"{booking.count} x {booking.machine_type}"
    )
    start, end = rfc3339.seconds(booking.start), rfc3339.seconds(booking.end)
    when = f"{start} to {end}"
    if block.start_time is None and block.earliest is not None and block.latest is not None:
        when = (
            f"for {block.duration}, starting between {start} and "
            f"{rfc3339.seconds(block.latest)} (the window Compute's calendar-mode advice finds)"
        )
    return "\n".join(
        (
            f"Booking     {what} in {booking.zone}, {when}",
            "            (a Compute future reservation in calendar mode; submitted once "
            "spec.approveBooking is true)",
            f"            the workload is told to stop {block.stop_before} (and a minute) before "
            "the end",
        )
    )


def render_advice(spec: TrainingRequestSpec, plan: SlicePlan, project: str) -> str | None:
    """Compute's calendar-mode advice for a request's block that starts between
    calendar.earliest and latest, asked of `project` (through DWS_COMPUTE_ENDPOINT when
    set, as the operator does); None for any other request."""
    query = query_for(spec, plan, datetime.now(UTC))
    if query is None:
        return None
    from dws_operator.gke.bookings import BookingClient  # noqa: PLC0415
    from dws_operator.gke.compute_rest import COMPUTE_ENDPOINT_ENV, connect_compute  # noqa: PLC0415
    from dws_operator.gke.errors import GkeError  # noqa: PLC0415

    apis = connect_compute(os.environ.get(COMPUTE_ENDPOINT_ENV))
    try:
        advice = asyncio.run(BookingClient(apis, project).advise(query))
    except GkeError as error:
        return f"Advice      Compute refused the advice: {error.reason}: {error.message}"
    finally:
        apis.close()
    if advice.window is None:
        why = f": {advice.why_none}" if advice.why_none else ""
        return f"Advice      no window in {query.zone} now{why}"
    start, end = rfc3339.seconds(advice.window.start), rfc3339.seconds(advice.window.end)
    return (
        f"Advice      {start} to {end} in {query.zone} "
        f"(Compute's recommendation {advice.window.recommendation_id}, asked of {project})"
    )


#: What `plan --estimate` says of a Calendar step: no history answers for it.
CALENDAR_ESTIMATE = "a calendar block starts when it was booked to"


def render_estimates(spec: TrainingRequestSpec, ladder: list[SlicePlan], history: History) -> str:
    """Each ladder step's estimate from `history`, for people."""
    lines = []
    steps = spec.provisioning.steps
    estimates: list[Estimate | None] = []
    for index, (plan, step) in enumerate(zip(ladder, steps, strict=True)):
        key = step_key(plan.summary(), step)
        found = history.estimate(key) if key is not None else None
        estimates.append(found)
        text = describe_estimate(found) if found is not None else CALENDAR_ESTIMATE
        label = "Estimate" if index == 0 else ""
        prefix = f"step {index + 1}: " if len(ladder) > 1 else ""
        lines.append(f"{label:<12}{prefix}{text}")
    if spec.provisioning.fallback_order == FallbackOrder.ESTIMATED and len(ladder) > 1:
        order = estimated_order(tuple(steps), tuple(estimates))
        lines.append(f"{'':<12}tried in the order {', '.join(str(i) for i in order)} (Estimated)")
    return "\n".join(lines)


def render_step(index: int, steps: int, plan: SlicePlan) -> str:
    """A fallback step for people: its mode, wait and node pool (the slice is the first
    step's: only how the capacity is obtained changes)."""
    wait = format_duration_seconds(plan.max_wait_seconds, zero="forever")
    rows = [
        (f"Step {index + 1} of {steps}", [f"{plan.node_pool.mode.value}, waits {wait}"]),
        ("Node pool", _pool_lines(plan, step=index)),
    ]
    if plan.node_selector:
        rows.append(("Node selector", [f"{k}={v}" for k, v in plan.node_selector.items()]))
    width = max(len(label) for label, _ in rows) + 2
    return "\n".join(
        f"{(label if i == 0 else ''):<{width}}{value}"
        for label, values in rows
        for i, value in enumerate(values)
    )


def render_table(plan: SlicePlan) -> str:
    """The plan for people: one aligned `label  value` row per fact."""
    pool = plan.node_pool
    rows: list[tuple[str, list[str]]] = [
        ("Accelerator", [f"{plan.accelerator} (node label {plan.accelerator_label})"]),
    ]
    if plan.topology:
        rows.append(("Topology", [plan.topology]))
    if plan.multi_slice:
        rows.append(("Slices", [f"{plan.slices} (one node pool each, run as one JobSet)"]))
    hosts = "single-host" if plan.single_host else "multi-host"
    unit = "chips" if plan.kind == "tpu" else "GPUs"
    rows += [
        ("Machine type", [plan.machine_type]),
        ("Nodes", _node_lines(plan, unit, hosts)),
        ("Pod resources", [f"{plan.resource_name}: {plan.chips_per_node} (one pod per node)"]),
        ("Node selector", [f"{k}={v}" for k, v in plan.node_selector.items()]),
        ("Tolerations", [f"{t.key}={t.value}:{t.effect}" for t in plan.tolerations]),
        ("Mode", [pool.mode.value]),
        ("Node pool", _pool_lines(plan)),
        ("Max wait", [format_duration_seconds(plan.max_wait_seconds, zero="forever")]),
        ("Max run", [format_duration_seconds(plan.max_run_seconds)]),
        ("Max restarts", [str(plan.max_restarts)]),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines: list[str] = []
    for label, values in rows:
        for i, value in enumerate(values or ["-"]):
            lines.append(f"{(label if i == 0 else ''):<{width}}{value}")
    return "\n".join(lines)


def _node_lines(plan: SlicePlan, unit: str, hosts: str) -> list[str]:
    one = f"{plan.nodes} x {plan.chips_per_node} {unit} = {plan.total_chips} {unit} ({hosts})"
    if not plan.multi_slice:
        return [one]
    return [
        f"{one} per slice",
        f"{plan.total_nodes} nodes and {plan.total_chips * plan.slices} {unit} in all",
    ]


def _pool_lines(plan: SlicePlan, step: int = 0) -> list[str]:
    pool = plan.node_pool
    flags = [
        name
        for name, on in (
            ("flex-start", pool.flex_start),
            ("queued provisioning", pool.queued_provisioning),
            ("spot", pool.spot),
        )
        if on
    ] or ["standard VMs"]
    scaling = pool.autoscaling
    policy = f", location policy {scaling.location_policy}" if scaling.location_policy else ""
    if plan.multi_slice and plan.pool_names:
        name = f"names {', '.join(plan.pool_names)}"
    elif pool.name:
        name = f"name {pool.name}"
    else:
        name = (
            "name derived from the TrainingRequest"
            + (f" + -f{step}" if step else "")
            + (f", one per slice (-s0..-s{plan.slices - 1})" if plan.multi_slice else "")
        )
    lines = [
        name,
        ", ".join(flags),
        f"autoscaling {scaling.min_node_count}..{scaling.max_node_count} nodes "
        f"{'in all' if scaling.total else 'per zone'}{policy}, "
        f"starts with {pool.initial_node_count}",
    ]
    if pool.gpu_driver_version is not None:
        driver = pool.gpu_driver_version
        lines.append(f"GPU driver {driver} ({_DRIVER_NOTES[driver]})")
    if pool.reservation_affinity is not None:
        target = ", ".join(pool.reservation_affinity.values)
        lines.append(
            f"reservation {pool.reservation_affinity.consume_reservation_type.value}"
            + (f" {target}" if target else "")
        )
    if pool.auto_repair is not None:
        lines.append(f"auto-repair {'on' if pool.auto_repair else 'off'}")
    placement = pool.placement_policy
    if placement is not None and placement.type == "WORKLOAD_POLICY":
        lines.append(
            f"placement by workload policy {workload_policy_name(placement.tpu_topology)} "
            f"(HIGH_THROUGHPUT, accelerator topology {placement.tpu_topology})"
        )
    elif placement is not None:
        lines.append(f"placement COMPACT, TPU topology {placement.tpu_topology}")
    if pool.max_run_duration_seconds is not None:
        lines.append(
            f"VM max run duration {format_duration_seconds(pool.max_run_duration_seconds)}"
        )
    if pool.needs_provisioning_request:
        lines.append("scales up only through a ProvisioningRequest (Kueue admission check)")
    if pool.zones:
        lines.append(f"zones {', '.join(pool.zones)}")
    return lines


def format_duration_seconds(seconds: int, zero: str | None = None) -> str:
    if seconds == 0 and zero is not None:
        return zero
    return format_duration(timedelta(seconds=seconds))
