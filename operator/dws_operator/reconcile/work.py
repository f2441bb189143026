"""The request's workload: its Job (or JobSet) and Service made, followed until it
succeeds, fails or loses its nodes (a restart, or the ladder's next step). Pure."""

from __future__ import annotations

from collections.abc import Callable

from dws_operator.api import TERMINAL_PHASES, AttemptOutcome, ObjectReference, Phase
from dws_operator.holder import holder_name
from dws_operator.multislice import render_jobset
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import CreateJob, CreateService, DeleteJob
from dws_operator.reconcile.cleanup import clean_up
from dws_operator.reconcile.decision import (
    NEXT_STEP_SECONDS,
    Decision,
    Draft,
    Event,
    ReconcileConfig,
    shape,
    timed_out,
    until_timeout,
)
from dws_operator.reconcile.ladder import next_step, wait_ran_out
from dws_operator.reconcile.segments import (
    follow_segment,
    interrupted,
    note_segment,
    past_stop,
    roll_over,
    segment_end_hint,
    waiting_for_the_last_segment,
)
from dws_operator.reconcile.step import StepPlan, attempt_number
from dws_operator.reconcile.stuck import (
    recover_if_deactivated,
    recover_if_pool_stuck,
    recover_if_stuck,
)
from dws_operator.validation import segmented
from dws_operator.workload import (
    RequestRef,
    SegmentEnv,
    job_name,
    needs_service,
    queue_for,
    render_job,
    render_service,
    service_name,
)


def ensure_workload(run: Draft, step: StepPlan, config: ReconcileConfig) -> Decision:
    """Make the workload once the pools are ready, then follow it."""
    spec, plan, request = step.spec, step.plan, run.request
    ref = RequestRef(request.name, request.namespace, request.uid)
    observed = run.observed
    multi_host = needs_service(plan)
    if multi_host:
        if observed.service_taken:
            return run.fail(
                "ServiceNameTaken",
                f"Service {service_name(request.name)} exists and belongs to something else",
            )
        run.status.service = ObjectReference(name=service_name(request.name))

    def ensure_service() -> None:
        # Only while the work can still run: a finished request gets no new objects.
        if multi_host and not observed.service_exists:
            run.act(CreateService(render_service(ref)))

    kind = run.request.facts.workload_kind
    job = observed.job
    total = plan.total_nodes
    long_run = segmented(spec)
    if long_run and run.status.phase not in TERMINAL_PHASES:
        note_segment(run, step)
    if job is None:
        return _create_workload(run, step, config, ensure_service)
    if not job.ours:
        return run.fail("JobNameTaken", f"{kind} {job.name} exists and belongs to something else")
    run.status.job = ObjectReference(name=job.name)
    run.condition(cond.WORKLOAD_CREATED, "True", "JobCreated", f"{kind} {job.name}")
    if job.complete:
        run.status.finished_at = run.status.finished_at or run.now
        run.condition(cond.COMPLETED, "True", "JobSucceeded", f"{kind} {job.name} succeeded")
        run.phase(Phase.SUCCEEDED, f"{kind} {job.name} succeeded")
        return clean_up(run, step.spec)
    if job.failed and job.disrupted:
        if long_run and past_stop(run, step):
            return roll_over(run, step)
        return restart(run, step, job.name)
    if job.failed:
        run.fail(
            job.failure_reason or "JobFailed", job.failure_message or f"{kind} {job.name} failed"
        )
        return clean_up(run, step.spec)
    if job.ready >= total or run.status.started_at is not None:
        ensure_service()
        if run.status.started_at is None:
            run.end_attempt(AttemptOutcome.PROVISIONED, f"{total} nodes ready")
        run.status.started_at = run.status.started_at or run.now
        run.status.provisioned_at = run.status.provisioned_at or run.now
        run.condition(cond.CAPACITY_PROVISIONED, "True", "NodesReady", f"{total} nodes")
        if long_run:
            rolled = follow_segment(run, step)
            if rolled is not None:
                return rolled
            where = f"segment {run.status.segment} on {shape(plan)}"
            return run.phase(Phase.RUNNING, f"Running {where}", config.running_poll_seconds)
        return run.phase(Phase.RUNNING, f"Running on {shape(plan)}", config.running_poll_seconds)
    if timed_out(run, plan):
        return wait_ran_out(run, step)
    recovered = (
        recover_if_deactivated(run, step, config, job)
        or recover_if_stuck(run, step, config, job.name)
        or recover_if_pool_stuck(run, step, config, job)
    )
    if recovered is not None:
        return recovered
    ensure_service()
    message = f"Waiting for capacity: {job.ready}/{total} nodes ready"
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Waiting", message)
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, until_timeout(run, plan))


def _create_workload(
    run: Draft, step: StepPlan, config: ReconcileConfig, ensure_service: Callable[[], None]
) -> Decision:
    """The attempt's workload made (once its LocalQueue exists, and a long run's last
    segment's workload is gone)."""
    spec, plan, request = step.spec, step.plan, run.request
    stopping = waiting_for_the_last_segment(run)
    if stopping is not None:
        return stopping
    queue = queue_for(spec, config.default_queue, config.queued_queue) if config.kueue else None
    known = run.observed.local_queues
    if queue is not None and known is not None and queue not in known:
        # Kueue would keep the workload suspended without a word: say it here, and
        # go on when the queue is made (its creation wakes the request).
        message = (
            f"Kueue LocalQueue {request.namespace}/{queue} does not exist: create it, "
            "or set spec.queueName to one that does"
        )
        run.condition(cond.WORKLOAD_CREATED, "False", "LocalQueueNotFound", message)
        return run.phase(Phase.WAITING_FOR_CAPACITY, message, until_timeout(run, plan))
    ensure_service()
    render = render_jobset if plan.multi_slice else render_job
    segment = (
        SegmentEnv(run.status.segment or 1, segment_end_hint(spec, plan, run.status, run.now))
        if segmented(spec)
        else None
    )
    attempt = attempt_number(run.status)
    ref = RequestRef(request.name, request.namespace, request.uid)
    held = holder_name(request.name, run.status.segment or 1)
    if segment is not None and held in run.observed.holders:
        # Its pods go at once (no grace period): the workload's take the nodes they held.
        run.act(DeleteJob(held))
    run.act(CreateJob(render(ref, spec, plan, attempt=attempt, queue=queue, segment=segment)))
    run.status.job = ObjectReference(name=job_name(request.name, attempt))
    kind = request.facts.workload_kind
    run.condition(cond.WORKLOAD_CREATED, "True", "JobCreated", f"{kind} {run.status.job.name}")
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Waiting", "waiting for nodes")
    return run.phase(
        Phase.WAITING_FOR_CAPACITY,
        f"Waiting for capacity: 0/{plan.total_nodes} nodes",
        until_timeout(run, plan),
    )


def restart(run: Draft, step: StepPlan, failed_job: str) -> Decision:
    """A node was lost under the Job: start a new attempt, up to maxRestarts.

    The restart count is written (with the status) before the old Job is deleted, so a
    crash in between is finished by the next pass: it deletes the old Job as stale and
    creates the new attempt's. On a capacity ladder maxRestarts counts per step: a step
    that lost its nodes once more than that hands over to the next step (fresh capacity,
    perhaps of another kind, is likelier than the same Spot capacity coming back); the
    last step fails as a request without fallback does.
    """
    status, plan = run.status, step.plan
    attempts = status.attempts or []
    current = attempts[-1] if attempts and len(step.ladder) > 1 else None
    restarts = current.restarts if current is not None else status.restarts
    if restarts >= plan.max_restarts:
        message = f"lost nodes {restarts + 1} times; maxRestarts is {plan.max_restarts}"
        if step.step + 1 < len(step.ladder):
            if current is not None:
                current.ended_at = None  # it ended Provisioned; it ends again, Preempted
            return next_step(run, step, AttemptOutcome.PREEMPTED, message)
        run.fail("PreemptedTooOften", message)
        return clean_up(run, step.spec)
    status.restarts += 1
    if segmented(step.spec):
        interrupted(run)
    if current is not None:
        current.restarts += 1
        # The step asks for capacity again: its attempt is open until it gets it.
        current.ended_at = current.outcome = current.message = None
    status.started_at = None
    status.requested_at = run.now
    kind = run.request.facts.workload_kind
    run.act(DeleteJob(failed_job, kind))
    message = f"Node lost under {kind} {failed_job}: restart {status.restarts}/{plan.max_restarts}"
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Restarting", message)
    run.decision.events.append(Event("Warning", "Restarting", message))
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, NEXT_STEP_SECONDS)
