"""The capacity ladder: a step begun (its attempt in the status), a step given up for
the next (its pools and workload removed), a step's wait run out. Pure."""

from __future__ import annotations

from dws_operator.api import TERMINAL_PHASES, Attempt, AttemptOutcome, Phase, ProvisioningSpec
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import DeleteJob
from dws_operator.reconcile.cleanup import clean_up, remove_pools
from dws_operator.reconcile.decision import (
    NEXT_STEP_SECONDS,
    Decision,
    Draft,
    Event,
    shape,
)
from dws_operator.reconcile.segments import close_segment
from dws_operator.reconcile.step import StepPlan


def wait_ran_out(run: Draft, step: StepPlan) -> Decision:
    """The step's maxWaitDuration passed: the next step of the ladder, or (the last
    step) the request fails CapacityTimeout."""
    wait = step.spec.provisioning.max_wait_duration
    if step.step + 1 < len(step.ladder):
        message = f"no capacity for {shape(step.plan)} within {wait}"
        return next_step(run, step, AttemptOutcome.TIMED_OUT, message)
    steps = f" on any of {len(step.ladder)} steps" if len(step.ladder) > 1 else ""
    run.fail("CapacityTimeout", f"no capacity for {shape(step.plan)} within {wait}{steps}")
    return clean_up(run, step.spec)


def describe_step(provisioning: ProvisioningSpec) -> str:
    """`FlexStart in us-east5-a`, `Spot`, `Reservation r1`: a ladder step for people."""
    text = str(provisioning.mode)
    if provisioning.reservation:
        text += f" {provisioning.reservation}"
    if provisioning.zones:
        text += f" in {', '.join(provisioning.zones)}"
    return text


def begin_attempt(run: Draft, step: StepPlan) -> None:
    """The ladder's current step in the status, with an attempt for it (once)."""
    status = run.status
    status.step = step.step + 1
    attempts = status.attempts = list(status.attempts or [])
    provisioning = step.ladder[step.step]
    pool = step.plan.pool_names[0] if step.plan.pool_names else None
    if attempts and attempts[-1].step == status.step:
        if attempts[-1].ended_at is None:
            # A pool taken over after the step began is the step's pool.
            attempts[-1].node_pool = pool
        return
    if status.phase in TERMINAL_PHASES:
        return
    attempts.append(
        Attempt(
            step=status.step,
            mode=str(provisioning.mode),
            zones=list(provisioning.zones) if provisioning.zones else None,
            node_pool=pool,
            started_at=run.now,
        )
    )
    total = len(step.ladder)
    message = f"step {status.step} of {total}: {describe_step(provisioning)}"
    run.decision.events.append(Event("Normal", "StepStarted", message))


def next_step(run: Draft, step: StepPlan, outcome: AttemptOutcome, why: str) -> Decision:
    """Leave the current ladder step for the next one. The status (the new step, the
    attempt's end) is written before anything is removed, so a crash after it resumes
    on the new step and removes the old step's pools and workload as abandoned."""
    status, observed = run.status, run.observed
    run.end_attempt(outcome, why)
    close_segment(status, run.now)
    here = describe_step(step.ladder[step.step])
    there = describe_step(step.ladder[step.step + 1])
    total = len(step.ladder)
    job = observed.job
    if job is not None and job.ours:
        # Nothing may start late on a step given up: its pods go with their Job.
        run.act(DeleteJob(job.name, run.request.facts.workload_kind))
    ours = [p for p in observed.all_pools if p is not None and p.ours]
    remove_pools(run, ours, also=step.plan.pool_names)
    status.step = step.step + 2
    status.requested_at = run.now
    status.started_at = None
    status.provisioned_at = None
    status.node_pool = None
    status.job = None
    message = (
        f"step {step.step + 1} of {total} ({here}) ended {outcome.value}: {why}; "
        f"trying step {step.step + 2} ({there})"
    )
    run.condition(cond.NODE_POOL_READY, "False", "NextStep", message)
    run.condition(cond.CAPACITY_PROVISIONED, "False", "NextStep", message)
    run.decision.events.append(Event("Warning", "StepEnded", message))
    return run.phase(Phase.PROVISIONING, message[0].upper() + message[1:], NEXT_STEP_SECONDS)
