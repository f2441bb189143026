"""A long run in segments (`spec.run.duration` longer than one window). Pure.

A window is `provisioning.maxRunDuration`: a flex-start VM's life (GKE deletes the VM
then, and annotates its Node with the moment), or, for capacity that does not end by
itself (Spot, on-demand, a reservation), the operator's own bound on one segment. Each
segment runs on pools of its own (`naming.segment_pool_base`):

- `requestAhead` before the segment is to stop, the next segment's pools are made, so
  the next segment waits only for its VMs, not for GKE to create a pool;
- `stopBefore` (and a minute for the pass) before the window ends, the segment's
  workload is deleted, its pods get SIGTERM and that long to checkpoint
  (`terminationGracePeriodSeconds`); the status says the next segment first, so an
  operator killed in between finds the old workload stale and the new segment's pools;
- once the old workload is gone (deleted in the foreground: its pods are gone with it),
  the next segment's workload starts on the new pools, and the old pools go.

An unplanned end (a Spot preemption, a window cut short) is a restart of the same
segment from its checkpoint, counted against `maxRestarts`; a rollover is not. The run
fails RunDurationExceeded when its workload has used `run.duration` without finishing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from dws_operator import rfc3339
from dws_operator.api import (
    TERMINAL_PHASES,
    Phase,
    Segment,
    SegmentOutcome,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.durations import parse_duration
from dws_operator.holder import holder_name, render_holder
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import CreateHolder, CreateNodePool, DeleteJob
from dws_operator.reconcile.decision import (
    NEXT_STEP_SECONDS,
    PAST_DEADLINE_SECONDS,
    STOP_LEAD_SECONDS,
    Decision,
    Draft,
    Event,
    pool_list,
)
from dws_operator.reconcile.observed import PoolState
from dws_operator.reconcile.step import (
    StepPlan,
    attempt_number,
    next_pool_names_for,
    next_segment_plan,
)
from dws_operator.validation import FLEX_START_MODES, segmented
from dws_operator.workload import RequestRef, uses_provisioning_request

#: The reason a long run fails with when it used `run.duration` without finishing.
RUN_DURATION_EXCEEDED = "RunDurationExceeded"
#: ... and when it took the most segments it may (`RequestFacts.segments`) without
#: using its duration (its windows trained less than planned).
SEGMENTS_USED_UP = "SegmentsUsedUp"
#: Segments kept in the status: the first and the latest.
KEPT_SEGMENTS = 64


@dataclass(frozen=True)
class RunTimes:
    """A long run's `spec.run`, parsed."""

    duration: timedelta
    stop_before: timedelta
    request_ahead: timedelta

    @classmethod
    def of(cls, spec: TrainingRequestSpec) -> RunTimes:
        run = spec.run
        if run is None or run.duration is None:
            raise ValueError("not a long run: spec.run.duration is not set")
        return cls(
            duration=parse_duration(run.duration),
            stop_before=parse_duration(run.stop_before),
            request_ahead=parse_duration(run.request_ahead),
        )


#: The workload's stop comes this much before its capacity ends, beyond `stopBefore`.
_LEAD = timedelta(seconds=STOP_LEAD_SECONDS)


@dataclass(frozen=True)
class Window:
    """The current segment's window and what happens in it."""

    #: When the segment's capacity ends (its VMs', or the operator's bound).
    ends: datetime
    #: When its workload is told to stop.
    stop_at: datetime
    #: When the next segment's pools are made; None when there is no next segment.
    ahead_at: datetime | None

    @property
    def last(self) -> bool:
        return self.ahead_at is None


def current(status: TrainingRequestStatus) -> Segment | None:
    """The record of the segment running now (or waiting for its capacity)."""
    records = status.segments or []
    if records and records[-1].outcome is None:
        return records[-1]
    return None


def note_segment(run: Draft, step: StepPlan) -> Segment:
    """The current segment's record, begun when its capacity is first asked for."""
    status = run.status
    status.segment = status.segment or 1
    record = current(status)
    if record is not None and record.segment == status.segment:
        record.attempt = attempt_number(status)
        record.node_pool = step.plan.pool_names[0]
        return record
    record = Segment(
        segment=status.segment,
        attempt=attempt_number(status),
        node_pool=step.plan.pool_names[0],
        requested_at=status.requested_at or run.now,
    )
    _append(status, record)
    return record


def _append(status: TrainingRequestStatus, record: Segment) -> None:
    records = list(status.segments or [])
    records.append(record)
    if len(records) > KEPT_SEGMENTS:
        records = records[:1] + records[-(KEPT_SEGMENTS - 1) :]
    status.segments = records


def window_of(run: Draft, step: StepPlan, record: Segment) -> Window:
    """The segment's window: its end from its VMs' annotation when GKE gave one (else a
    bound it cannot pass: a flex-start VM comes after its capacity was asked for, other
    capacity ends only when the operator says), its stop, and when the next segment's
    pools are made."""
    spec, plan = step.spec, step.plan
    times = RunTimes.of(spec)
    window = timedelta(seconds=plan.max_run_seconds)
    started = record.started_at or run.now
    if spec.provisioning.mode in FLEX_START_MODES:
        ends = run.observed.capacity_ends or record.requested_at + window
    else:
        ends = started + window
    stop_at = ends - times.stop_before - _LEAD
    budget_end = started + times.duration - timedelta(seconds=run.status.trained_seconds or 0)
    more = run.status.segment is not None and run.status.segment < run.request.facts.segments
    if budget_end <= stop_at or not more:
        return Window(ends=ends, stop_at=min(stop_at, budget_end), ahead_at=None)
    return Window(ends=ends, stop_at=stop_at, ahead_at=stop_at - times.request_ahead)


def segment_end_hint(
    spec: TrainingRequestSpec, plan: SlicePlan, status: TrainingRequestStatus, now: datetime
) -> datetime:
    """`DWS_SEGMENT_END` for a workload made now: the segment runs at least until then.
    Its VMs come after it (so end after now + maxRunDuration), or end when the operator
    says; the stop is `stopBefore` and a minute before that, or sooner when the run's
    duration is used up."""
    times = RunTimes.of(spec)
    stop = now + timedelta(seconds=plan.max_run_seconds) - times.stop_before - _LEAD
    left = times.duration - timedelta(seconds=status.trained_seconds or 0)
    return min(stop, now + left)


def follow_segment(run: Draft, step: StepPlan) -> Decision | None:
    """While a segment's workload runs: its pools made ahead, then its stop. None while
    it just runs (with a timer for the next of those)."""
    status = run.status
    record = note_segment(run, step)
    if record.started_at is None:
        record.started_at = run.now
        _count_gap(status, record)
    window = window_of(run, step, record)
    record.ends_at = window.ends
    if run.now >= window.stop_at:
        return _stop(run, step, record, window)
    if window.ahead_at is not None:
        if run.now >= window.ahead_at:
            _make_next_pools(run, step)
        else:
            run.wake_within((window.ahead_at - run.now).total_seconds() + PAST_DEADLINE_SECONDS)
    run.wake_within((window.stop_at - run.now).total_seconds() + PAST_DEADLINE_SECONDS)
    return None


def past_stop(run: Draft, step: StepPlan) -> bool:
    """The segment's capacity went at or after its planned stop (the stop was missed:
    the operator was down): a rollover, not a restart."""
    record = current(run.status)
    if record is None or record.started_at is None or not segmented(step.spec):
        return False
    window = window_of(run, step, record)
    return not window.last and run.now >= window.stop_at


def roll_over(run: Draft, step: StepPlan) -> Decision:
    """Stop the segment that runs now for the next (its capacity ends), or (its VMs
    already went past the planned stop) go on to the next."""
    record = note_segment(run, step)
    window = window_of(run, step, record)
    return _stop(run, step, record, window)


def _stop(run: Draft, step: StepPlan, record: Segment, window: Window) -> Decision:
    status = run.status
    kind = run.request.facts.workload_kind
    job = run.observed.job
    if job is not None and job.ours and not job.complete:
        run.act(DeleteJob(job.name, kind, foreground=True))
    ends = rfc3339.seconds(window.ends)
    if window.last:
        _end(status, record, run.now, SegmentOutcome.FAILED)
        trained = status.trained_seconds or 0.0
        if trained < RunTimes.of(step.spec).duration.total_seconds() - 1:
            return run.fail(
                SEGMENTS_USED_UP,
                f"the workload ran {trained:.0f}s over {record.segment} "
                "segments, the most this run may take, without finishing; its windows "
                "trained less than maxRunDuration less stopBefore (raise maxRunDuration)",
            )
        return run.fail(
            RUN_DURATION_EXCEEDED,
            f"the workload ran {trained:.0f}s over "
            f"{record.segment} segments without finishing (spec.run.duration)",
        )
    _end(status, record, run.now, SegmentOutcome.ROLLED_OVER)
    nxt = record.segment + 1
    status.segment = nxt
    status.started_at = None
    status.provisioned_at = None
    status.requested_at = run.now
    status.job = None
    names = next_pool_names_for(run.request)
    new = Segment(
        segment=nxt,
        attempt=attempt_number(status),
        node_pool=names[0] if names else record.node_pool,
        requested_at=_asked_at(run, window, names),
    )
    _append(status, new)
    message = (
        f"segment {record.segment} stopped (its capacity ends at {ends}); segment {nxt} "
        f"starts on {pool_list(list(names))} once its workload has stopped"
    )
    run.condition(cond.CAPACITY_PROVISIONED, "False", "RollingOver", message)
    run.decision.events.append(Event("Normal", "RolledOver", message))
    return run.phase(
        Phase.WAITING_FOR_CAPACITY, message[0].upper() + message[1:], NEXT_STEP_SECONDS
    )


def _asked_at(run: Draft, window: Window, names: tuple[str, ...]) -> datetime:
    """When the next segment's capacity was asked for: at the window's ahead time when
    its pools exist (made ahead) or are being made; else now."""
    made = any(p is not None for p in run.observed.next_pools) or any(
        n in run.observed.operations for n in names
    )
    if made and window.ahead_at is not None:
        return min(window.ahead_at, run.now)
    return run.now


def _make_next_pools(run: Draft, step: StepPlan) -> None:
    """The next segment's pools, made ahead (once: not while one is being made), then
    its capacity holder once they are ready (capacity that comes for pending pods)."""
    names = next_pool_names_for(run.request)
    observed = run.observed
    plan = next_segment_plan(run.request)
    if plan is None:
        return
    for name, pool in zip(names, observed.next_pools, strict=False):
        if pool is None and name not in observed.operations:
            run.act(CreateNodePool(name=name, plan=plan))
    ready = bool(observed.next_pools) and all(
        p is not None and p.state == PoolState.RUNNING and p.ours for p in observed.next_pools
    )
    segment = (run.status.segment or 1) + 1
    name = holder_name(run.request.name, segment)
    if ready and holds_capacity(step) and name not in observed.holders:
        ref = RequestRef(run.request.name, run.request.namespace, run.request.uid)
        run.act(CreateHolder(render_holder(ref, step.spec, plan, segment)))


def holds_capacity(step: StepPlan) -> bool:
    """Capacity that GKE's autoscaler adds for pending pods (not through a
    ProvisioningRequest), on one slice's pool: a holder can ask for it ahead."""
    return step.plan.slices == 1 and not uses_provisioning_request(step.spec.provisioning)


def waiting_for_the_last_segment(run: Draft) -> Decision | None:
    """The next segment's workload waits until the last one's is gone (its pods have
    checkpointed and exited): two segments never run at once."""
    stale = run.observed.stale_jobs
    if not stale or not segmented_request(run):
        return None
    message = (
        f"Waiting for the workload of the last segment ({', '.join(stale)}) to stop: its "
        "pods are checkpointing (spec.run.stopBefore)"
    )
    run.condition(cond.CAPACITY_PROVISIONED, "False", "RollingOver", message)
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, NEXT_STEP_SECONDS * 5)


def segmented_request(run: Draft) -> bool:
    spec = run.request.facts.spec
    return spec is not None and segmented(spec)


def interrupted(run: Draft) -> None:
    """The segment's capacity went under it (unplanned): its record ends Interrupted,
    and the same segment is asked for again as a new record."""
    status = run.status
    record = current(status)
    if record is None:
        return
    close_segment(status, run.now)
    _append(
        status,
        Segment(
            segment=record.segment,
            attempt=attempt_number(status),
            node_pool=record.node_pool,
            requested_at=run.now,
        ),
    )


def close_segment(status: TrainingRequestStatus, now: datetime) -> None:
    """The open segment ends Interrupted (its capacity given up: a ladder step left), its
    running time counted; the next pass begins the segment again on the new step."""
    record = current(status)
    if record is not None:
        _end(status, record, now, SegmentOutcome.INTERRUPTED)


def settle(status: TrainingRequestStatus, now: datetime) -> None:
    """A request that ended closes its open segment: Succeeded or Failed."""
    record = current(status)
    if record is None or status.phase not in TERMINAL_PHASES:
        return
    succeeded = status.phase == Phase.SUCCEEDED
    outcome = SegmentOutcome.SUCCEEDED if succeeded else SegmentOutcome.FAILED
    _end(status, record, record.stopped_at or now, outcome)


def _end(
    status: TrainingRequestStatus, record: Segment, at: datetime, outcome: SegmentOutcome
) -> None:
    """`record` ends at `at` with `outcome`; its workload's running time is counted."""
    record.stopped_at = at
    record.outcome = outcome
    if record.started_at is not None:
        ran = max((at - record.started_at).total_seconds(), 0.0)
        status.trained_seconds = round((status.trained_seconds or 0.0) + ran, 3)


def _count_gap(status: TrainingRequestStatus, record: Segment) -> None:
    """The time between the segment before and this one's workload running."""
    records = status.segments or []
    stops = [r.stopped_at for r in records[:-1] if r.stopped_at is not None]
    if record.started_at is None or not stops or record is not records[-1]:
        return
    gap = max((record.started_at - stops[-1]).total_seconds(), 0.0)
    status.rollover_seconds = round((status.rollover_seconds or 0.0) + gap, 3)
