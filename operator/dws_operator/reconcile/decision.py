"""The decision a pass makes, and the draft it is made in: the status so far, the
actions to take, the events to post and when to look again. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from dws_operator.api import Attempt, AttemptOutcome, Phase, TrainingRequestStatus
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import Action, DeleteJob
from dws_operator.reconcile.observed import Observed
from dws_operator.reconcile.tally import Tally

#: After a pool was scaled to zero, its Nodes are given this long to go before it is
#: resized again (GKE deletes the VMs, then the Node objects disappear).
DRAIN_SECONDS = 120.0
#: Looked at again straight away: the status a pass wrote is what the next acts on.
AT_ONCE = 0.0
#: How soon to look again after a step whose result no watch reports (a restart).
FOLLOW_SECONDS = 2.0
#: How soon to look again while the Job runs, with nothing changing. Every change that
#: matters wakes the request at once (its Job's events, its pool in GKE's snapshot, its
#: Nodes); this is only the safety net for an event lost, so it is long.
RUNNING_POLL_SECONDS = 300.0
#: How soon to look again after a pass that has more to do next: the clean-up after a
#: failure is recorded, the next attempt after a Job is deleted for a restart.
NEXT_STEP_SECONDS = 1.0
#: How often a request waiting for nodes of an `existing` pool that other work holds looks
#: again (their pods leaving is not something it is woken for).
NODES_IN_USE_SECONDS = 5.0
#: A deadline is looked at this long after it passes, so the pass then sees it passed.
PAST_DEADLINE_SECONDS = 1.0
#: A workload stopped before its capacity ends (a calendar block's, a long run's window)
#: is told to stop this much earlier than `stopBefore` asks, so that its pods get all of
#: their grace period whatever the pass that stops it takes: a timer's slack, a slow API
#: server.
STOP_LEAD_SECONDS = 60.0
#: How often Compute is asked again while Google reviews a booking, while a block that
#: has started is being delivered, or while a cancel is on its way (nothing watches
#: Compute).
BOOKING_POLL_SECONDS = 60.0
#: The reason a request fails with when its calendar block's end stopped its workload.
BLOCK_ENDED = "BlockEnded"
#: The refusal the shell reports when Compute refused a booking's submit for good.
BOOKING_REFUSED = "BookingRefused"
#: The refusal the shell reports when Compute refused to cancel a booking for good.
CANCEL_REFUSED = "CancelRefused"
#: How soon a submitted booking Compute does not show yet is looked for (and sent) again.
SUBMIT_POLL_SECONDS = 10.0
#: How long a pool of a step left behind, whose delete GKE refused for good (say, a
#: permission missing), waits before its delete is tried again.
HELD_BACK_SECONDS = 60.0


#: A queued-provisioning request Accepted and not provisioned for this long is taken as
#: stuck, and asked for again. Reported stuck ones waited 7 hours to over a day where a new
#: request was served within a minute (kubernetes/autoscaler#9490, kubernetes-sigs/kueue
#: #3245): this is well short of those, and long enough that an ordinary wait for scarce
#: capacity is seldom cut (a request made again starts its wait again).
STUCK_AFTER_SECONDS = 4 * 3600.0
#: Recoveries per ladder step: a request that sticks again and again is left to its
#: maxWaitDuration (and the ladder's next step).
MAX_RECOVERIES = 2


@dataclass(frozen=True)
class ReconcileConfig:
    kueue: bool = False
    #: The cluster serves JobSets (jobset.x-k8s.io): multi-slice requests need them.
    jobset: bool = False
    default_queue: str | None = None
    #: LocalQueue for QueuedProvisioning requests that name none.
    queued_queue: str | None = None
    location: str | None = None
    running_poll_seconds: float = RUNNING_POLL_SECONDS
    #: Submit Calendar-mode bookings without waiting for spec.approveBooking.
    book_without_approval: bool = False
    #: A queued request's ProvisioningRequest Accepted this long and not provisioned has
    #: stuck (`reconcile.stuck`); 0: never taken as stuck.
    stuck_after_seconds: float = STUCK_AFTER_SECONDS
    #: At most this many recoveries from a stuck request per ladder step.
    max_recoveries: int = MAX_RECOVERIES


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Decision:
    status: TrainingRequestStatus
    actions: list[Action] = field(default_factory=list)
    #: Seconds until the next look; None when nothing is left to do or wait for.
    requeue_after: float | None = None
    events: list[Event] = field(default_factory=list)
    #: Deletion only: everything the operator created is gone, the finalizer may go.
    released: bool = False
    #: What the metrics count once `status` is written (`tally.tally`).
    tally: Tally = field(default_factory=Tally)


def soonest(first: float | None, second: float | None) -> float | None:
    """The sooner of two timers; None (no timer) only when neither is set."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)


class Draft:
    """A decision being drafted: the status so far and the actions to take. `phase` (or
    `fail`, which ends in one) finishes it; only the clean-up after the work, which keeps
    the phase, returns the draft's decision as it stands."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed
        self.request = observed.request
        self.now = observed.now
        self.before = observed.request.status.phase
        self.status = observed.request.status.model_copy(deep=True)
        self.status.observed_generation = self.request.generation
        self.decision = Decision(status=self.status)
        #: A look wanted within this many seconds, whatever the phase's own timer says.
        self.wake_by: float | None = None

    def wake_within(self, seconds: float) -> None:
        self.wake_by = seconds if self.wake_by is None else min(self.wake_by, seconds)
        self.decision.requeue_after = soonest(self.decision.requeue_after, self.wake_by)

    def condition(self, type_: str, status: cond.ConditionStatus, reason: str, msg: str) -> None:
        self.status.conditions = cond.set_condition(
            self.status.conditions, type_, status, reason, msg, self.now, self.request.generation
        )

    def act(self, action: Action) -> None:
        """Adds `action`; a workload's delete only once: not for one being deleted."""
        if isinstance(action, DeleteJob) and action.name in self.observed.going:
            return
        self.decision.actions.append(action)

    def phase(self, phase: Phase, message: str, requeue: float | None = FOLLOW_SECONDS) -> Decision:
        self.status.phase = phase
        self.status.message = message
        self.decision.requeue_after = soonest(requeue, self.wake_by)
        if phase != self.before:
            kind = "Warning" if phase == Phase.FAILED else "Normal"
            self.decision.events.append(Event(kind, phase.value, message))
        return self.decision

    def fail(self, reason: str, message: str) -> Decision:
        self.condition(cond.COMPLETED, "False", reason, message)
        self.status.finished_at = self.status.finished_at or self.now
        outcome = OUTCOMES.get(reason, AttemptOutcome.FAILED)
        self.end_attempt(outcome, message)
        return self.phase(Phase.FAILED, f"{reason}: {message}", requeue=NEXT_STEP_SECONDS)

    def end_attempt(self, outcome: AttemptOutcome, message: str) -> Attempt | None:
        """Close the current ladder step's attempt (once); the attempt, if any."""
        attempts = self.status.attempts or []
        if not attempts or attempts[-1].ended_at is not None:
            return None
        attempts[-1].ended_at = self.now
        attempts[-1].outcome = outcome
        attempts[-1].message = message[:4096]
        return attempts[-1]


#: How a failure of the request reads as the outcome of its ladder step.
OUTCOMES: dict[str, AttemptOutcome] = {
    "CapacityTimeout": AttemptOutcome.TIMED_OUT,
    "Stockout": AttemptOutcome.STOCKOUT,
    "QuotaExceeded": AttemptOutcome.QUOTA_EXCEEDED,
    "PreemptedTooOften": AttemptOutcome.PREEMPTED,
}
#: GKE's terminal answers that say a step cannot get capacity (so the next step may),
#: rather than that the request itself is wrong.
CAPACITY_REASONS = frozenset({"Stockout", "QuotaExceeded"})


def pool_list(names: list[str]) -> str:
    return f"node pool {names[0]}" if len(names) == 1 else f"node pools {', '.join(names)}"


def shape(plan: SlicePlan) -> str:
    """`4 x ct6e-standard-4t`, or `2 slices of 2 x ct5p-hightpu-4t`."""
    one = f"{plan.nodes} x {plan.machine_type}"
    return one if plan.slices == 1 else f"{plan.slices} slices of {one}"


def timed_out(run: Draft, plan: SlicePlan) -> bool:
    """maxWaitDuration passed since capacity was requested (0s: never)."""
    waited = run.now - (run.status.requested_at or run.now)
    return bool(plan.max_wait_seconds) and waited > timedelta(seconds=plan.max_wait_seconds)


def until_timeout(run: Draft, plan: SlicePlan) -> float | None:
    """Seconds until maxWaitDuration runs out (a moment after, so the pass then sees it
    passed); None without a limit. Everything else that can end a wait is an event."""
    if not plan.max_wait_seconds:
        return None
    waited = (run.now - (run.status.requested_at or run.now)).total_seconds()
    return max(plan.max_wait_seconds - waited, 0.0) + PAST_DEADLINE_SECONDS
