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

from dws_operator.api import Phase
from dws_operator.catalog import ProvisioningMode
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import DeleteJob
from dws_operator.reconcile.decision import (
    NEXT_STEP_SECONDS,
    Decision,
    Draft,
    Event,
    ReconcileConfig,
)
from dws_operator.reconcile.observed import PoolState, RequestView
from dws_operator.reconcile.step import StepPlan, planned

#: The Event a recovery is told with.
RECOVERED = "StuckRequestRecovered"


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
    status = run.status
    attempts = status.attempts or []
    current = attempts[-1] if attempts and len(step.ladder) > 1 else None
    used = current.recoveries if current is not None else status.recoveries
    if used >= config.max_recoveries:
        return None
    if left > 0:
        run.wake_within(left + 1.0)
        return None
    status.recoveries += 1
    if current is not None:
        current.recoveries += 1
    kind = run.request.facts.workload_kind
    run.act(DeleteJob(job_name, kind))
    hours = accepted_for / 3600
    message = (
        f"ProvisioningRequest {seen.name} was Accepted {hours:.1f}h ago and not provisioned: "
        f"asking again with a new {kind} (recovery {used + 1}/{config.max_recoveries})"
    )
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Recovering", message)
    run.decision.events.append(Event("Warning", RECOVERED, message))
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, NEXT_STEP_SECONDS)
