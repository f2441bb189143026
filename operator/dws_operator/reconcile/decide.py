"""The reconcile decision: observed state in; new status, actions and events out. Pure.

Status is written before the actions run, and every action is idempotent and keyed
on the object's uid (deterministic pool and Job names), so an operator killed at
any point converges on restart: it re-observes, decides the same thing, and finds
what it already created.

The decision is drafted by idea: the pools (`pools`), the workload (`work`), the
capacity ladder (`ladder`), the clean-up (`cleanup`), on the request's current step
(`step`) as its facts say (`facts`).
"""

from __future__ import annotations

from dws_operator.api import (
    TERMINAL_PHASES,
    NodePoolStatus,
    Phase,
    ProvisioningSpec,
    SliceStatus,
)
from dws_operator.catalog import ProvisioningMode
from dws_operator.errors import InvalidSpec, SpecError
from dws_operator.multislice import MAX_MULTISLICE_NAME
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import DeleteJob
from dws_operator.reconcile.advice import block_start
from dws_operator.reconcile.booking import book, plan_booking, refused_booking
from dws_operator.reconcile.cleanup import abandon, clean_up, release
from dws_operator.reconcile.decision import (
    AT_ONCE,
    BOOKING_REFUSED,
    CAPACITY_REASONS,
    OUTCOMES,
    Decision,
    Draft,
    ReconcileConfig,
    timed_out,
)
from dws_operator.reconcile.estimates import show_estimate
from dws_operator.reconcile.holders import tidy_holders
from dws_operator.reconcile.ladder import begin_attempt, next_step, wait_ran_out
from dws_operator.reconcile.observed import Observed
from dws_operator.reconcile.order import order_ladder, order_pending
from dws_operator.reconcile.policy import policy_gate
from dws_operator.reconcile.pools import ensure_pools, gke_too_old, zones_outside
from dws_operator.reconcile.segments import settle as settle_segments
from dws_operator.reconcile.step import StepPlan, planned
from dws_operator.reconcile.stuck import remake_pools
from dws_operator.reconcile.tally import account_lost_time, account_phase_time, tally
from dws_operator.reconcile.work import ensure_workload
from dws_operator.validation import segmented
from dws_operator.workload import queue_for, uses_provisioning_request


def decide(observed: Observed, config: ReconcileConfig) -> Decision:
    """The pass's decision, its status summed up in the conditions GitOps tools read."""
    decision = _decide(observed, config)
    settle_segments(decision.status, observed.now)
    show_estimate(decision.status, observed.estimate)
    account_phase_time(observed.request.status, decision.status, observed.now)
    account_lost_time(observed.request.status, decision.status)
    cond.summarize(decision.status, observed.now, observed.request.generation)
    request = observed.request
    first = request.facts.steps[0] if request.facts.ladder_steps == 1 else None
    decision.tally = tally(request.status, decision.status, request.created, observed.now, first)
    return decision


def _decide(observed: Observed, config: ReconcileConfig) -> Decision:
    run = Draft(observed)
    if run.request.deleting:
        return release(run)
    if observed.refusal is not None:
        return _refused(run, *observed.refusal)
    if observed.binding_lost:
        return _rebind(run, None)
    result = planned(run.request)
    # Before anything is asked for, an idle pool taken over included.
    gated = policy_gate(run, result.plan) if isinstance(result, StepPlan) else None
    if gated is not None:
        return gated
    if observed.offer is not None and not order_pending(run.request):
        offer = NodePoolStatus(
            name=observed.offer, managed=True, reused=True, location=config.location
        )
        return _rebind(run, offer)
    if isinstance(result, InvalidSpec):
        return _invalid(run, result)
    if order_pending(run.request):
        return order_ladder(run, observed.step_estimates)
    spec, plan = result.spec, result.plan
    _tidy(run, result)
    if len(result.ladder) > 1:
        begin_attempt(run, result)
    run.condition(cond.VALID, "True", "Planned", f"{plan.nodes} x {plan.machine_type}")
    run.status.plan = plan.summary()
    managed = not spec.node_pool.existing
    before = run.status.node_pool
    run.status.node_pool = NodePoolStatus(
        name=plan.pool_names[0],
        managed=managed,
        location=config.location,
        reused=before.reused if before and before.name == plan.pool_names[0] else None,
    )
    run.status.slices = [
        SliceStatus(index=i, node_pool=name, nodes=observed.nodes_by_pool.get(name, 0))
        for i, name in enumerate(plan.pool_names)
    ]
    if run.status.phase in TERMINAL_PHASES:
        return clean_up(run, spec)
    if plan.multi_slice and not config.jobset:
        return run.fail(
            "JobSetRequired",
            f"{plan.slices} slices run as one JobSet (jobset.x-k8s.io); install the JobSet "
            "controller in the cluster, or ask for one slice",
        )
    if plan.multi_slice and len(run.request.name) > MAX_MULTISLICE_NAME:
        return _invalid(
            run,
            InvalidSpec(
                [
                    SpecError(
                        "metadata.name",
                        f"at most {MAX_MULTISLICE_NAME} characters with several slices (the "
                        "JobSet's pod names are built from it)",
                    )
                ]
            ),
        )
    if uses_provisioning_request(spec.provisioning):
        if not config.kueue:
            return run.fail(
                "KueueRequired",
                "QueuedProvisioning scales up only through a ProvisioningRequest created by "
                "Kueue; enable Kueue (DWS_KUEUE) or choose FlexStart",
            )
        if queue_for(spec, config.default_queue, config.queued_queue) is None:
            return run.fail(
                "QueueRequired",
                "QueuedProvisioning needs a Kueue LocalQueue: set spec.queueName or the "
                "operator's DWS_DEFAULT_QUEUE",
            )
    ladder = len(result.ladder) > 1
    # The ladder as written: the error names the step's field in the spec.
    written = tuple(spec_steps(run))
    outside = zones_outside(run, written, config.location) if managed and ladder else None
    if outside is not None:
        return outside
    too_old = gke_too_old(run, spec, plan, result.ladder) if managed else None
    if too_old is not None:
        return too_old
    if spec.provisioning.mode == ProvisioningMode.CALENDAR:
        start = block_start(run, result)
        if isinstance(start, Decision):
            return start
        booking = plan_booking(run.request.facts.booking_name, run.request.uid, spec, plan, *start)
        waiting = book(run, result, booking, config)
        if waiting is not None:
            return waiting
    run.status.requested_at = run.status.requested_at or run.now
    still_provisioning = run.status.phase in (
        Phase.PROVISIONING,
        Phase.PENDING,
        # The workload could not be created yet (e.g. the API server refuses it for now).
        Phase.WAITING_FOR_CAPACITY,
    )
    # A long run's next segment waits for the last one's workload to stop: not a wait
    # for capacity that can run out.
    checkpointing = segmented(spec) and bool(run.observed.stale_jobs)
    if (
        still_provisioning
        and run.observed.job is None
        and not checkpointing
        and timed_out(run, plan)
    ):
        return wait_ran_out(run, result)
    remaking = remake_pools(run)
    if remaking is not None:
        return remaking
    waiting = ensure_pools(run, spec, plan, managed)
    if waiting is not None:
        return waiting
    return ensure_workload(run, result, config)


def _tidy(run: Draft, step: StepPlan) -> None:
    """What the request left behind goes: the pools of steps (and segments) left, the
    workloads of earlier attempts, capacity holders no longer wanted."""
    long_run = segmented(step.spec)
    # A long run's last segment's pools stay until its workload is gone: its pods have
    # their grace period to checkpoint on them.
    if not (long_run and run.observed.stale_jobs):
        abandon(run)
    for stale in run.observed.stale_jobs:
        # An earlier attempt's workload (a restart or a step change interrupted midway):
        # gone before anything else, so nothing starts on what was given up. A long
        # run's goes in the foreground: it is there until its pods are.
        run.act(DeleteJob(stale, run.request.facts.workload_kind, foreground=long_run))
    if run.observed.holders:
        tidy_holders(run, step)


def spec_steps(run: Draft) -> list[ProvisioningSpec]:
    """The request's ladder as its spec writes it (a valid spec's)."""
    spec = run.request.facts.spec
    assert spec is not None
    return spec.provisioning.steps


def _invalid(run: Draft, invalid: InvalidSpec) -> Decision:
    message = "; ".join(str(e) for e in invalid.errors)
    run.condition(cond.VALID, "False", "InvalidSpec", message)
    if run.status.phase == Phase.FAILED:
        return run.phase(Phase.FAILED, run.status.message or message, requeue=None)
    return run.fail("InvalidSpec", message)


def _rebind(run: Draft, binding: NodePoolStatus | None) -> Decision:
    """The status names the idle pool the request takes over, or no longer does (another
    request holds it now), before anything is done with it: a crash after this write
    finds the binding, and the pass that follows (at once) acts on it."""
    run.status.node_pool = binding
    # The phase stays (no event before the takeover's own); the message says why.
    run.status.phase = run.status.phase or Phase.PENDING
    if binding is not None:
        run.status.message = f"Taking over idle node pool {binding.name}"
    run.decision.requeue_after = AT_ONCE
    return run.decision


def _refused(run: Draft, reason: str, message: str) -> Decision:
    """An action refused for good (a terminal GKE error, a refused workload): the request
    fails. GKE's "no capacity" or "no quota" for a step of a capacity ladder with another
    step after it moves the request on to that step instead."""
    result = planned(run.request)
    if reason == BOOKING_REFUSED and isinstance(result, StepPlan):
        return refused_booking(run, result, message)
    if (
        reason in CAPACITY_REASONS
        and isinstance(result, StepPlan)
        and result.step + 1 < len(result.ladder)
        and run.status.phase not in TERMINAL_PHASES
    ):
        return next_step(run, result, OUTCOMES[reason], message)
    if run.status.job is not None and run.observed.job is None:
        # The workload the last pass named was refused: it never existed.
        run.status.job = None
        run.condition(cond.WORKLOAD_CREATED, "False", reason, message)
    return run.fail(reason, message)
