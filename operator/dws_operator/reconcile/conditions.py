"""Kubernetes-style conditions: set one, keeping lastTransitionTime when nothing changed."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from dws_operator.api import Condition

ConditionStatus = Literal["True", "False", "Unknown"]

NODE_POOL_READY = "NodePoolReady"
WORKLOAD_CREATED = "WorkloadCreated"
CAPACITY_PROVISIONED = "CapacityProvisioned"
COMPLETED = "Completed"
SCALED_DOWN = "ScaledDown"
VALID = "Valid"


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
