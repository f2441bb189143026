"""What the operator would create for a TrainingRequest, step by step, without doing it.

Pure. Runs the controller's own `decide` on made-up observations of each capacity
ladder step (no pools yet, then every pool ready and no workload yet), so the node
pools asked for and the Kubernetes objects rendered are exactly the controller's:
`dws-operator plan --objects` prints them (cli/plan.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.catalog import ProvisioningMode
from dws_operator.errors import InvalidSpec
from dws_operator.kube_types import Job, JobSet, Service
from dws_operator.planning import SlicePlan
from dws_operator.reconcile.actions import CreateJob, CreateNodePool, CreateService
from dws_operator.reconcile.booking import BookingPlan, plan_booking
from dws_operator.reconcile.decide import decide
from dws_operator.reconcile.decision import Decision, ReconcileConfig
from dws_operator.reconcile.facts import RequestFacts, read_spec
from dws_operator.reconcile.observed import (
    AdviceView,
    BookingView,
    CalendarWindow,
    Observed,
    PoolState,
    PoolView,
    RequestView,
)
from dws_operator.reconcile.step import StepPlan, attempt_number, planned
from dws_operator.zones import ClusterSite

#: `decide` stamps the status with the observation's time; nothing shown depends on it,
#: so a fixed one keeps the preview the same on every run.
_NOW = datetime(2000, 1, 1, tzinfo=UTC)


class Refused(Exception):
    """The operator would fail the request (its status message says why)."""


@dataclass(frozen=True)
class PreviewStep:
    """One ladder step: the pools the operator asks GKE for, then the objects it creates
    once they are ready (the step's first attempt)."""

    #: 0-based, as `step_of`.
    index: int
    mode: str
    #: The attempt number in the workload's name and `dws-operator.dev/attempt` label.
    attempt: int
    #: Its own pools: false for `nodePool.existing` (nothing is created in GKE).
    managed: bool
    #: (pool name, plan) of every CreateNodePool, in slice order.
    pools: tuple[tuple[str, SlicePlan], ...]
    #: The Service (first step only: later steps find it made) and the Job or JobSet.
    objects: tuple[Service | Job | JobSet, ...]
    #: What a Calendar step books (shown as once approved and delivered at its start).
    booking: BookingPlan | None = None


def preview(
    name: str,
    namespace: str,
    uid: str,
    spec: Mapping[str, Any],
    config: ReconcileConfig,
    site: ClusterSite,
) -> list[PreviewStep]:
    """Every ladder step of the request, in order, for a cluster at `site` (a TPU
    slice's zone depends on it). Raises InvalidSpec when the spec is invalid and Refused
    when the operator would fail it (e.g. Kueue needed and off)."""
    steps: list[PreviewStep] = []
    facts = read_spec(name, uid, spec)
    index = 0
    while True:
        request = _view(name, namespace, uid, facts, index, site)
        step = _planned(request)
        steps.append(_step(request, step, config))
        index += 1
        if index >= len(step.ladder):
            return steps


def _planned(request: RequestView) -> StepPlan:
    result = planned(request)
    if isinstance(result, InvalidSpec):
        raise result
    return result


def _view(
    name: str,
    namespace: str,
    uid: str,
    facts: RequestFacts,
    index: int,
    site: ClusterSite,
) -> RequestView:
    # `status.step` counts from 1 and is written only for a ladder of several steps. A
    # ladder ordered by estimate is shown in the order as written (the operator's history
    # orders it in the cluster: `plan --estimate` says how).
    ladder = facts.ladder_steps > 1
    order = list(range(1, facts.ladder_steps + 1)) if ladder else None
    status = (
        TrainingRequestStatus(step=index + 1, ladder_order=order)
        if ladder
        else TrainingRequestStatus()
    )
    return RequestView(name, namespace, uid, 1, False, facts, status, site=site)


def _step(request: RequestView, step: StepPlan, config: ReconcileConfig) -> PreviewStep:
    plan = step.plan
    managed = not step.spec.node_pool.existing
    pools: tuple[tuple[str, SlicePlan], ...] = ()
    now, booking, seen, advice = _NOW, None, None, None
    block = step.spec.provisioning.calendar
    if step.spec.provisioning.mode == ProvisioningMode.CALENDAR and block is not None:
        # Looked at as the block starts (at the earliest it may): the booking approved
        # and its reservation there.
        start = block.first_start
        assert start is not None
        booking = plan_booking(request.facts.booking_name, request.uid, step.spec, plan, start)
        now, seen = booking.start, BookingView("FULFILLED", (booking.name,))
        if block.start_time is None:
            advice = AdviceView(CalendarWindow(booking.start, booking.end, "preview"))
    if managed:
        asking = _decide(
            Observed(request=request, now=now, booking=seen, advice=advice), config
        ).actions
        pools = tuple((a.name, a.plan) for a in asking if isinstance(a, CreateNodePool))
    ready = tuple(
        PoolView(
            name=pool,
            state=PoolState.RUNNING,
            ours=managed,
            max_nodes=plan.nodes,
            machine_type=plan.machine_type,
            accelerator_type=plan.accelerator_label if plan.kind == "gpu" else None,
        )
        for pool in plan.pool_names
    )
    observed = Observed(
        request=request,
        now=now,
        booking=seen,
        advice=advice,
        pool=ready[0] if ready else None,
        more_pools=ready[1:],
        # Made on the first step; a later step finds it there.
        service_exists=step.step > 0,
    )
    decision = _decide(observed, config)
    objects = tuple(
        a.manifest for a in decision.actions if isinstance(a, CreateService | CreateJob)
    )
    mode = str(step.ladder[step.step].mode)
    attempt = attempt_number(decision.status)
    return PreviewStep(step.step, mode, attempt, managed, pools, objects, booking)


def _decide(observed: Observed, config: ReconcileConfig) -> Decision:
    decision = decide(observed, config)
    if decision.status.phase == Phase.FAILED:
        raise Refused(decision.status.message or "the operator would fail this request")
    return decision
