"""Requests that stopped making progress, and their recovery. Pure.

Queued provisioning: Kueue's ProvisioningRequest for the workload is Accepted and then,
sometimes, never provisioned, while a new request for the same capacity is served at once
(kubernetes-sigs/kueue#3245; kubernetes/autoscaler#9490, after the pool it was bound to
was deleted). Accepted for longer than `ReconcileConfig.stuck_after_seconds` without
Provisioned, while the request's pool is there with no node, it has stuck: the workload is
deleted and made again as a new attempt, which gives Kueue a new Workload and so a new
ProvisioningRequest. At most `max_recoveries` times per ladder step; each is counted
(`status.recoveries`, the step's attempt), told (Event `StuckRequestRecovered`) and
metered; none is a restart (maxRestarts counts lost nodes only). The request's own
maxWaitDuration still bounds the whole wait.

The ProvisioningRequest is read only once the request has waited that long
(`provisioning_request_wanted`): until then it cannot have stuck.
"""

from __future__ import annotations

from datetime import datetime

from dws_operator.api import AttemptOutcome, Phase
from dws_operator.catalog import ProvisioningMode
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import DeleteJob, DeleteNodePool
from dws_operator.reconcile.cleanup import clean_up
from dws_operator.reconcile.decision import (
    NEXT_STEP_SECONDS,
    Decision,
    Draft,
    Event,
    ReconcileConfig,
    pool_list,
)
from dws_operator.reconcile.ladder import next_step
from dws_operator.reconcile.observed import JobView, PoolState, RequestView
from dws_operator.reconcile.step import StepPlan, planned
from dws_operator.workload import queue_for

#: The Event a recovery is told with.
RECOVERED = "StuckRequestRecovered"
#: The failure of a request on its last step whose workload Kueue deactivated.
DEACTIVATED = "WorkloadDeactivated"


def provisioning_request_wanted(
    request: RequestView, now: datetime, config: ReconcileConfig
) -> str | None:
    """The name of the workload whose ProvisioningRequest the pass needs: a queued
    request waiting with its workload made for at least `stuck_after_seconds`; None
    otherwise (nothing read)."""
    status = request.status
    if config.stuck_after_seconds <= 0 or request.deleting or status.started_at is not None:
        return None
    if status.phase != Phase.WAITING_FOR_CAPACITY or status.job is None:
        return None
    result = planned(request)
    if not isinstance(result, StepPlan):
        return None
    if result.ladder[result.step].mode != ProvisioningMode.QUEUED_PROVISIONING:
        return None
    asked = status.requested_at
    if asked is None or (now - asked).total_seconds() < config.stuck_after_seconds:
        return None
    return status.job.name


def recover_if_stuck(
    run: Draft, step: StepPlan, config: ReconcileConfig, job_name: str
) -> Decision | None:
    """Ask again for a queued request whose ProvisioningRequest stuck (a decision); None
    when it has not, or has used its recoveries; then a timer for when it would."""
    threshold = config.stuck_after_seconds
    if threshold <= 0 or step.ladder[step.step].mode != ProvisioningMode.QUEUED_PROVISIONING:
        return None
    seen = run.observed.provisioning_request
    if seen is None or seen.accepted_at is None:
        # Not read yet (it cannot have stuck so soon), or not there or not accepted yet:
        # looked at again when it could have, then every quarter of the threshold.
        asked = run.status.requested_at
        if asked is not None:
            gate = threshold - (run.now - asked).total_seconds()
            run.wake_within(max(gate, threshold / 4) + 1.0)
        return None
    if seen.provisioned or seen.failed:
        return None
    observed = run.observed
    pool = observed.pool
    if pool is None or pool.state != PoolState.RUNNING or observed.nodes_by_pool.get(pool.name):
        return None  # no pool ready (made again first), or nodes there: not stuck
    accepted_for = (run.now - seen.accepted_at).total_seconds()
    left = threshold - accepted_for
    if left > 0:
        run.wake_within(left + 1.0)
        return None
    hours = accepted_for / 3600
    why = f"ProvisioningRequest {seen.name} was Accepted {hours:.1f}h ago and not provisioned"
    return _recover_or_move_on(run, step, config, job_name, why)


def recover_if_deactivated(
    run: Draft, step: StepPlan, config: ReconcileConfig, job: JobView
) -> Decision | None:
    """A workload Kueue deactivated (it gave up on it; its Job stays suspended for good):
    asked for again with a new workload while recoveries are left; then the next step
    of the ladder; on the last step the request fails WorkloadDeactivated rather than
    wait for nothing. None when Kueue did not deactivate it."""
    if job.deactivated is None or not job.ours:
        return None
    why = f"Kueue deactivated the workload of {job.name}: {job.deactivated}"
    moved = _recover_or_move_on(run, step, config, job.name, why)
    if moved is not None:
        return moved
    used = recoveries_used(run, step)
    tried = f" after {used} recoveries" if used else ""
    run.fail(DEACTIVATED, f"{why}{tried}")
    return clean_up(run, step.spec)


def _recover_or_move_on(
    run: Draft, step: StepPlan, config: ReconcileConfig, job_name: str, why: str
) -> Decision | None:
    """Ask again while the step's recoveries last; then the ladder's next step (the step
    ends Stuck: its capacity, asked for again, did not come); None on the last step."""
    used = recoveries_used(run, step)
    if used < config.max_recoveries:
        return ask_again(run, step, job_name, why, used, config)
    if step.step + 1 < len(step.ladder):
        return next_step(run, step, AttemptOutcome.STUCK, f"{why}, {used} recoveries used")
    return None


def recover_if_pool_stuck(
    run: Draft, step: StepPlan, config: ReconcileConfig, job: JobView
) -> Decision | None:
    """A flex-start step not queued by Kueue whose pools have no node, no pod ready and
    no operation of ours `stuck_after_seconds` after it asked (or last recovered): its
    pools are deleted (made again by the next passes: a new pool is a new node group,
    with none of the cluster autoscaler's back-off after failed scale-ups) and its
    workload made again, while recoveries are left. Then the step waits out its own
    maxWaitDuration. None when not stuck; then a timer for when it would be."""
    threshold = config.stuck_after_seconds
    if threshold <= 0 or step.ladder[step.step].mode != ProvisioningMode.FLEX_START:
        return None
    if config.kueue and queue_for(step.spec, config.default_queue, config.queued_queue):
        # Queued by Kueue: a wait for the queue's quota (no pod, so no node) looks the
        # same from here, and a new workload would go to the back of the queue.
        return None
    observed, status = run.observed, run.status
    pools = observed.slice_pools(len(step.plan.pool_names))
    # On the operator's own clock: since the step asked, or since the last recovery.
    since = max((t for t in (status.requested_at, status.recovered_at) if t), default=None)
    if (
        since is None
        or job.ready > 0
        or any(
            p is None
            or not p.ours
            or p.state != PoolState.RUNNING
            or p.name in observed.operations
            or observed.nodes_by_pool.get(p.name)
            for p in pools
        )
    ):
        return None  # pools on their way, being changed, or with nodes: progress
    waited = (run.now - since).total_seconds()
    if waited < threshold:
        run.wake_within(threshold - waited + 1.0)
        return None
    names = pool_list([p.name for p in pools if p is not None])
    why = f"{names}: no node and no operation {waited / 3600:.1f}h after asking"
    used = recoveries_used(run, step)
    if used < config.max_recoveries:
        # Recorded before the deletes go (a crash after this write deletes them again).
        status.pools_to_remake = [p.name for p in pools if p is not None]
        for name in status.pools_to_remake:
            run.act(DeleteNodePool(name))
        return ask_again(run, step, job.name, f"{why}; its pool is made again", used, config)
    # Its recoveries used: the step waits out its own maxWaitDuration. A pool at zero is
    # also what scarce capacity looks like, so this alone never cuts a step short.
    return None


def remake_pools(run: Draft) -> Decision | None:
    """A recovery's pools to make again (`status.poolsToRemake`): each deleted until it is
    seen gone (the delete asked again when no operation is on it: one lost to a crash),
    then forgotten, so the pass after makes it again. A decision while any is left."""
    status, observed = run.status, run.observed
    if not status.pools_to_remake:
        return None
    seen = {p.name: p for p in observed.all_pools if p is not None}
    left = []
    for name in status.pools_to_remake:
        pool = seen.get(name)
        if pool is None:
            continue  # gone: made again from here on
        left.append(name)
        if pool.ours and pool.state == PoolState.RUNNING and name not in observed.operations:
            run.act(DeleteNodePool(name))
    status.pools_to_remake = left or None
    if not left:
        return None
    message = f"Making {pool_list(left)} again"
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Recovering", message)
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, NEXT_STEP_SECONDS)


def recoveries_used(run: Draft, step: StepPlan) -> int:
    """Recoveries made on the current ladder step (the request's, without a ladder)."""
    status = run.status
    attempts = status.attempts or []
    current = attempts[-1] if attempts and len(step.ladder) > 1 else None
    return current.recoveries if current is not None else status.recoveries


def ask_again(
    run: Draft, step: StepPlan, job_name: str, why: str, used: int, config: ReconcileConfig
) -> Decision:
    """A recovery: the workload deleted and made again as a new attempt (a new Kueue
    Workload, so a new ProvisioningRequest), counted, told and metered."""
    status = run.status
    status.recoveries += 1
    status.recovered_at = run.now
    attempts = status.attempts or []
    if attempts and len(step.ladder) > 1:
        attempts[-1].recoveries += 1
    kind = run.request.facts.workload_kind
    run.act(DeleteJob(job_name, kind))
    message = f"{why}: asking again with a new {kind} (recovery {used + 1}/{config.max_recoveries})"
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Recovering", message)
    run.decision.events.append(Event("Warning", RECOVERED, message))
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, NEXT_STEP_SECONDS)
