"""Kubernetes-style conditions: set one, keeping lastTransitionTime when nothing changed."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from dws_operator.api import Condition, Phase, TrainingRequestStatus

ConditionStatus = Literal["True", "False", "Unknown"]

NODE_POOL_READY = "NodePoolReady"
WORKLOAD_CREATED = "WorkloadCreated"
CAPACITY_PROVISIONED = "CapacityProvisioned"
COMPLETED = "Completed"
SCALED_DOWN = "ScaledDown"
VALID = "Valid"
#: The namespace's TrainingPolicies let the request go on (set only where it has some):
#: WithinPolicy (True); PolicyLimit, waiting for its in-flight limits (False).
ADMITTED = "Admitted"
#: A Calendar-mode block: AwaitingApproval, Submitted, UnderReview (False); Approved,
#: Delivered (True); BookingDeclined, BookingLost (False).
BOOKED = "Booked"
#: Kubernetes API conventions / kstatus (Flux, `kubectl wait`): the goal reached,
#: on the way to it, cannot get there.
READY = "Ready"
RECONCILING = "Reconciling"
STALLED = "Stalled"


def set_condition(
    conditions: list[Condition],
    type_: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    now: datetime,
    generation: int,
) -> list[Condition]:
    """A new list with `type_` set; the transition time moves only when status changes."""
    previous = next((c for c in conditions if c.type == type_), None)
    since = previous.last_transition_time if previous and previous.status == status else now
    updated = Condition(
        type=type_,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=since,
        observed_generation=generation,
    )
    return [c for c in conditions if c.type != type_] + [updated]


def condition(conditions: list[Condition], type_: str) -> Condition | None:
    return next((c for c in conditions if c.type == type_), None)


def summarize(status: TrainingRequestStatus, now: datetime, generation: int) -> None:
    """Ready, Reconciling and Stalled from the phase, in place: Ready once the work
    succeeded (the request's goal), Stalled when it failed (the reason is the failure's:
    CapacityTimeout, InvalidSpec...), Reconciling while it is on its way (waiting for
    capacity and running included) or being deleted. Each carries observedGeneration."""
    phase = status.phase
    message = status.message or str(phase)
    failure = condition(status.conditions, COMPLETED)
    reason = failure.reason if phase == Phase.FAILED and failure else str(phase)
    verdicts: dict[str, ConditionStatus] = {
        READY: "True" if phase == Phase.SUCCEEDED else "False",
        STALLED: "True" if phase == Phase.FAILED else "False",
        RECONCILING: "False" if phase in (Phase.SUCCEEDED, Phase.FAILED) else "True",
    }
    for type_, verdict in verdicts.items():
        status.conditions = set_condition(
            status.conditions, type_, verdict, reason, message, now, generation
        )
