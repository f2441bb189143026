"""What a request leaves behind, removed: the clean-up after its work ends (ScaleToZero,
Delete or Keep), its deletion, the pools of ladder steps it left, and the pool
operations not started yet that must not outlive it. Pure."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from dws_operator import rfc3339
from dws_operator.api import (
    AttemptOutcome,
    BookingState,
    CleanupPolicy,
    Phase,
    TrainingRequestSpec,
)
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import (
    CancelBooking,
    CancelPoolOperation,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    ScaleNodePoolToZero,
)
from dws_operator.reconcile.decision import (
    BLOCK_ENDED,
    BOOKING_POLL_SECONDS,
    CANCEL_REFUSED,
    DRAIN_SECONDS,
    HELD_BACK_SECONDS,
    NODES_IN_USE_SECONDS,
    PAST_DEADLINE_SECONDS,
    Decision,
    Draft,
    Event,
    pool_list,
    soonest,
)
from dws_operator.reconcile.observed import PoolState, PoolView
from dws_operator.validation import segmented
from dws_operator.workload import service_name


def remove_pools(run: Draft, pools: list[PoolView], also: Iterable[str] = ()) -> None:
    """Delete the given pools of the request (not while an operation on them runs: it
    ends first and wakes the request; nor while GKE's refusal of the last delete holds
    it back) and call off creates not yet started of them, of `also` and of every pool
    of a step left behind."""
    observed = run.observed
    operations = observed.operations
    for pool in pools:
        held = pool.name in observed.held_back
        if pool.state != PoolState.STOPPING and pool.name not in operations and not held:
            run.act(DeleteNodePool(pool.name))
        if held:
            run.wake_within(HELD_BACK_SECONDS)
    _call_off(run, {p.name for p in pools} | set(also) | observed.abandoned_names)


def _call_off(run: Draft, names: Collection[str] | None = None) -> None:
    """Call off the request's creates and takeovers not started in GKE yet (of `names`;
    None: of every pool), once each per pass."""
    asked = {a.name for a in run.decision.actions if isinstance(a, CancelPoolOperation)}
    for name, operation in run.observed.operations.items():
        unstarted = operation.kind in ("Create", "TakeOver") and not operation.running
        wanted = names is None or name in names
        if wanted and name not in asked and operation.mine and unstarted:
            run.act(CancelPoolOperation(name))


def abandon(run: Draft) -> None:
    """Pools of the ladder steps left behind go, whatever the request does now."""
    remove_pools(run, [p for p in run.observed.abandoned if p.ours])


def clean_up(run: Draft, spec: TrainingRequestSpec) -> Decision:
    """After the work ends: stop what could still start, then ScaleToZero/Delete/Keep."""
    observed, status = run.observed, run.status
    stopping = _stop_pending(run, spec)
    if stopping is not None:
        return stopping
    grace = _block_grace(run)
    if grace is not None:
        # The pods stopped before a calendar block's end have until then (their grace
        # period) to checkpoint: the VMs, paid for the whole block, stay till the end. A
        # pool operation not started yet is called off all the same.
        _settle_operations(run)
        run.decision.requeue_after = soonest(grace, run.wake_by)
        return run.decision
    booking = status.booking
    if (
        booking is not None
        and booking.state == BookingState.DELIVERED
        and run.now >= booking.end_time
    ):
        booking.state = BookingState.ENDED
    managed = status.node_pool is not None and status.node_pool.managed
    cleanup = _cleanup_policy(run, spec)
    pools = observed.all_pools
    ours = [p for p in pools if p is not None and p.ours]
    busy = _settle_operations(run) if managed else False
    if managed and ours:
        if cleanup == CleanupPolicy.SCALE_TO_ZERO:
            # Zero only when GKE's ceiling and the Nodes that are billed both say so. A
            # TPU slice pool keeps its ceiling (GKE checks it against the slice's size):
            # for it, a resize to zero asked for in an earlier pass (recorded in the
            # ScaledDown condition, written before the resize is sent) and done stands in.
            nodes = observed.nodes_by_pool
            scaled = cond.condition(run.status.conditions, cond.SCALED_DOWN)
            resized = scaled is not None and scaled.reason in (RESIZING, RETRYING, "ScaledToZero")

            def capped(pool: PoolView) -> bool:
                if pool.keeps_ceiling:
                    return resized and pool.name not in observed.operations
                return pool.max_nodes == 0

            scaling = [p for p in ours if not capped(p) or nodes.get(p.name, 0) > 0]
            for pool in scaling:
                draining = capped(pool) and pool.name in observed.draining
                if pool.name not in observed.operations and not draining:
                    run.act(ScaleNodePoolToZero(pool.name))
            slices = [p.name for p in scaling if p.keeps_ceiling]
            if slices and not resized:
                run.condition(
                    cond.SCALED_DOWN,
                    "False",
                    RESIZING,
                    f"resizing {pool_list(slices)} to zero (a TPU slice pool keeps its "
                    "autoscaling ceiling at the slice's size)",
                )
            _refused(run, scaling)
            if any(p.name in observed.draining for p in scaling):
                # Their Node objects' removal wakes the request; this is the backstop
                # after which a pool still showing Nodes is resized again.
                run.decision.requeue_after = DRAIN_SECONDS
            if not scaling:
                names = pool_list([p.name for p in ours])
                verb = "has" if len(ours) == 1 else "have"
                _scaled_down(run, "ScaledToZero", f"{names} {verb} no nodes")
        elif cleanup == CleanupPolicy.DELETE:
            for pool in ours:
                if pool.state != PoolState.STOPPING and pool.name not in observed.operations:
                    run.act(DeleteNodePool(pool.name))
    elif (
        managed
        and all(p is None for p in pools)
        # Not while an operation on them is still queued or running: it ends first.
        and not busy
        and cleanup == CleanupPolicy.DELETE
        # A request that failed before it asked for a pool has none to report deleted.
        and cond.condition(status.conditions, cond.NODE_POOL_READY) is not None
    ):
        gone = "node pool deleted" if len(pools) == 1 else "node pools deleted"
        _scaled_down(run, "Deleted", gone)
    # Pool operations and Job deletions wake the request when done: no timer needed
    # (except to give draining Nodes their time, set above).
    if run.decision.requeue_after != DRAIN_SECONDS:
        run.decision.requeue_after = None
    run.decision.requeue_after = soonest(run.decision.requeue_after, run.wake_by)
    return run.decision


def _stop_pending(run: Draft, spec: TrainingRequestSpec) -> Decision | None:
    """A failed request's workload not finished is deleted: pods still waiting for
    capacity must not start on nodes arriving later. A long run's (stopped at its end)
    goes in the foreground, and the pools wait for it: its pods checkpoint on them."""
    job = run.observed.job
    pending = job is not None and job.ours and not (job.complete or job.failed)
    if run.status.phase != Phase.FAILED or not pending or job is None:
        return None
    long_run = segmented(spec)
    run.act(DeleteJob(job.name, run.request.facts.workload_kind, foreground=long_run))
    if run.observed.service_exists:
        run.act(DeleteService(service_name(run.request.name)))
    if not long_run:
        return None
    _settle_operations(run)
    run.decision.requeue_after = soonest(NODES_IN_USE_SECONDS, run.wake_by)
    return run.decision


def _block_grace(run: Draft) -> float | None:
    """Seconds until the end of the calendar block whose end stopped the workload (a
    moment after); None when the request was not stopped so, or the end has passed."""
    booking, completed = run.status.booking, cond.condition(run.status.conditions, cond.COMPLETED)
    if booking is None or completed is None or completed.reason != BLOCK_ENDED:
        return None
    left = (booking.end_time - run.now).total_seconds()
    return left + PAST_DEADLINE_SECONDS if left > 0 else None


def _cleanup_policy(run: Draft, spec: TrainingRequestSpec) -> CleanupPolicy:
    """The request's cleanup, except that pools which never got capacity are deleted
    (unless Keep): their names are this request's, so nothing else could ever use them.
    That is a request that timed out waiting, or one that failed before it ever ran (e.g.
    GKE refused one slice's pool after another slice's was made)."""
    completed = cond.condition(run.status.conditions, cond.COMPLETED)
    timed_out = completed is not None and completed.reason == "CapacityTimeout"
    never_ran = run.status.phase == Phase.FAILED and run.status.provisioned_at is None
    if (timed_out or never_ran) and spec.node_pool.cleanup == CleanupPolicy.SCALE_TO_ZERO:
        return CleanupPolicy.DELETE
    return spec.node_pool.cleanup


#: The ScaledDown condition's reason while TPU slice pools are being resized to zero.
RESIZING = "Resizing"
#: Its reason while GKE refuses a scale-down the operator keeps trying (nodes billed).
RETRYING = "Retrying"


def _refused(run: Draft, scaling: list[PoolView]) -> None:
    """A scale-down GKE answered with a retryable error is tried again by the scheduler;
    the status says so meanwhile, with GKE's words, since the nodes are still billed."""
    operations, nodes = run.observed.operations, run.observed.nodes_by_pool
    refused = [
        (p.name, view.retrying)
        for p in scaling
        if (view := operations.get(p.name)) is not None
        # This request's own scale-down, waiting to be tried again (not another
        # request's takeover of the pool, nor an attempt GKE is running now).
        and view.kind == "ScaleDown"
        and view.mine
        and not view.running
        and view.retrying
    ]
    if not refused:
        scaled = cond.condition(run.status.conditions, cond.SCALED_DOWN)
        if scaled is not None and scaled.reason == RETRYING:
            # GKE took it: no longer refused (the nodes are going, or will).
            names = pool_list([p.name for p in scaling])
            run.condition(cond.SCALED_DOWN, "False", RESIZING, f"scaling {names} down to zero")
        return
    names = pool_list([name for name, _ in refused])
    up = sum(nodes.get(p.name, 0) for p in scaling)
    run.condition(
        cond.SCALED_DOWN,
        "False",
        RETRYING,
        f"GKE refused to scale {names} down ({refused[0][1]}); trying again, {up} node(s) still up",
    )


def _scaled_down(run: Draft, reason: str, message: str) -> None:
    if run.status.scaled_down_at is None:
        run.status.scaled_down_at = run.now
        run.decision.events.append(Event("Normal", reason, message))
    run.condition(cond.SCALED_DOWN, "True", reason, message)


def release(run: Draft) -> Decision:
    """Deletion: remove the Job, the Service and a pool the operator created, then let go."""
    observed, request = run.observed, run.request
    kind = run.request.facts.workload_kind
    if observed.job is not None and observed.job.ours:
        run.act(DeleteJob(observed.job.name, kind))
    for stale in observed.stale_jobs:
        run.act(DeleteJob(stale, kind))
    for holder in observed.holders:
        run.act(DeleteJob(holder))
    if observed.service_exists:
        run.act(DeleteService(service_name(request.name)))
    managed = not request.facts.existing
    ours = [p for p in observed.all_pools if p is not None and p.ours]
    for pool in ours if managed else []:
        if pool.state != PoolState.STOPPING and pool.name not in observed.operations:
            run.act(DeleteNodePool(pool.name))
    abandon(run)
    run.end_attempt(AttemptOutcome.CANCELLED, "the TrainingRequest was deleted")
    busy = _settle_operations(run)
    left = any(p.ours for p in observed.abandoned)
    kept, holding = _settle_booking(run)
    if any(not view.mine for view in observed.operations.values()):
        # Another request's operation on a pool of this one's name (the request that
        # took it over): its end wakes that request, not this one, and the pool may look
        # the same before and after, so this one looks again on its own.
        run.wake_within(NODES_IN_USE_SECONDS)
    # A Job of ours still there (deleted already, its pods going) holds the request too,
    # an earlier attempt's as well.
    job_left = (observed.job is not None and observed.job.ours) or bool(observed.stale_going)
    gone = (
        not run.decision.actions
        and not busy
        and (not ours or not managed)
        and not left
        and not job_left
    )
    run.decision.released = gone and not holding
    message = "Deleting the Job, Service and node pool" + kept
    return run.phase(Phase.DELETING, message, run.wake_by)


#: Compute's procurement states in which the operator cancels a deleted request's
#: booking: before Google's answer. (Compute's calendar-mode page allows cancelling
#: later too, by a deadline it does not give; Cloud TPU's says TPU requests cannot be
#: cancelled at all.)
CANCELLABLE = frozenset({"DRAFTING", "PENDING_APPROVAL"})
#: States in which it holds nothing (nothing to cancel, nothing billed).
SETTLED = frozenset({"CANCELLED", "DECLINED", "FAILED"})
#: How long a deleted request whose booking was submitted, but not yet seen in Compute,
#: waits for it to show (its insert may still be running) before it is let go.
SUBMIT_SETTLE_SECONDS = 600.0


def _settle_booking(run: Draft) -> tuple[str, bool]:
    """A deleted request's Calendar-mode booking: cancelled while Google has not
    answered (GPU blocks); else it stays, and the message (and the Deleting event) says
    until when it is billed. With whether the request must be held meanwhile: a submit
    not seen yet is waited for, so it cannot land after the request is gone."""
    booking, seen = run.status.booking, run.observed.booking
    if booking is None or run.now >= booking.end_time or (seen is not None and not seen.ours):
        return "", False
    refusal = run.observed.refusal
    if refusal is not None and refusal[0] == CANCEL_REFUSED:
        return (
            f"; Compute refused to cancel the booking {booking.name} ({refusal[1]}): it stays, "
            f"billed until {rfc3339.seconds(booking.end_time)} unless you cancel it in Compute",
            False,
        )
    if seen is None:
        if booking.state != BookingState.SUBMITTED:
            return "", False
        last = booking.last_submitted_at or booking.submitted_at or run.now
        since = (run.now - last).total_seconds()
        if since >= SUBMIT_SETTLE_SECONDS:
            return f"; the booking {booking.name} was submitted but never seen in Compute", False
        run.wake_within(SUBMIT_SETTLE_SECONDS - since + PAST_DEADLINE_SECONDS)
        return f"; waiting to see whether the booking {booking.name} was made", True
    if seen.procurement in SETTLED:
        return "", False
    if seen.procurement in CANCELLABLE and booking.unit == "VMs":
        run.act(CancelBooking(booking.name, booking.zone))
        run.wake_within(BOOKING_POLL_SECONDS)
        return f"; cancelling the booking {booking.name}", True
    return (
        f"; the booking {booking.name} stays (the operator cancels only a GPU booking Google "
        f"has not answered yet): the project is billed for it until "
        f"{rfc3339.seconds(booking.end_time)} unless you cancel it in Compute",
        False,
    )


def _settle_operations(run: Draft) -> bool:
    """Operations queued for the request's pools must not outlive its work: a create or
    takeover not started in GKE is called off; one already started is waited for (its
    pool then shows, and is cleaned up like any other). Whether any is still on."""
    _call_off(run)
    return bool(run.observed.operations)
