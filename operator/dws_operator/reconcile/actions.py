"""What the reconciler asks the shell to do. Each action is idempotent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from dws_operator.kube_types import Job, JobSet, Service
from dws_operator.planning import SlicePlan

if TYPE_CHECKING:
    from dws_operator.reconcile.booking import BookingPlan


@dataclass(frozen=True)
class CreateNodePool:
    name: str
    plan: SlicePlan


@dataclass(frozen=True)
class TakeOverNodePool:
    """Make an idle pool of the request's shape its own: labels, then the plan's ceiling
    (also what brings back a pool of ours found capped at zero while the work is on)."""

    name: str
    plan: SlicePlan


@dataclass(frozen=True)
class CancelPoolOperation:
    """Call off a create or takeover of the request's that has not started in GKE yet
    (the request ended or is deleted: no pool may appear for it later)."""

    name: str


@dataclass(frozen=True)
class ScaleNodePoolToZero:
    name: str


@dataclass(frozen=True)
class DeleteNodePool:
    name: str


@dataclass(frozen=True)
class CreateService:
    manifest: Service


@dataclass(frozen=True)
class CreateJob:
    """Create an attempt's workload (a batch Job or a JobSet, as `manifest` says)."""

    manifest: Job | JobSet


@dataclass(frozen=True)
class CreateHolder:
    """Create a long run's capacity holder (`dws_operator.holder`): best effort, a
    refusal fails nothing."""

    manifest: Job


@dataclass(frozen=True)
class DeleteJob:
    """Delete an attempt's workload: a batch Job, or a JobSet (`kind`) for several slices.
    `foreground`: the workload stays (deleting) until its pods are gone, so its going
    says its pods have stopped (a long run's segment checkpointing)."""

    name: str
    kind: str = "Job"
    foreground: bool = False


@dataclass(frozen=True)
class DeleteService:
    name: str


@dataclass(frozen=True)
class SubmitBooking:
    """Submit a Calendar-mode booking (insert its future reservation with its requestId:
    a retry, or a second submit, books nothing more)."""

    booking: BookingPlan


@dataclass(frozen=True)
class CancelBooking:
    """Cancel a booking Google has not approved yet (its request was deleted)."""

    name: str
    zone: str


Action = (
    CreateHolder
    | CreateNodePool
    | TakeOverNodePool
    | CancelPoolOperation
    | ScaleNodePoolToZero
    | DeleteNodePool
    | CreateService
    | CreateJob
    | DeleteJob
    | DeleteService
    | SubmitBooking
    | CancelBooking
)
