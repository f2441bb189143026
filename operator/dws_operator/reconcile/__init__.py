"""The reconcile decision (pure): observed state in, status, actions and events out.

What the shell may use is exported here; the modules behind it are the core's own.
"""

from dws_operator.reconcile.actions import (
    Action,
    CancelBooking,
    CancelPoolOperation,
    CreateJob,
    CreateNodePool,
    CreateService,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    ScaleNodePoolToZero,
    SubmitBooking,
    TakeOverNodePool,
)
from dws_operator.reconcile.booking import BookingPlan, plan_booking
from dws_operator.reconcile.decide import decide
from dws_operator.reconcile.decision import (
    AT_ONCE,
    BLOCK_ENDED,
    BOOKING_REFUSED,
    CANCEL_REFUSED,
    DRAIN_SECONDS,
    HELD_BACK_SECONDS,
    RUNNING_POLL_SECONDS,
    Decision,
    Event,
    ReconcileConfig,
)
from dws_operator.reconcile.facts import RequestFacts, StepWords, read_spec, step_provisioning
from dws_operator.reconcile.observed import (
    BookingView,
    JobView,
    Observed,
    OperationView,
    PoolState,
    PoolView,
    RequestView,
)
from dws_operator.reconcile.preview import PreviewStep, Refused, preview
from dws_operator.reconcile.step import (
    Planned,
    StepPlan,
    abandoned_pool_names,
    attempt_number,
    planned,
    pool_name_for,
    pool_names_for,
    step_pool_names,
)
from dws_operator.reconcile.tally import Tally, tally

__all__ = [
    "AT_ONCE",
    "BLOCK_ENDED",
    "BOOKING_REFUSED",
    "CANCEL_REFUSED",
    "DRAIN_SECONDS",
    "HELD_BACK_SECONDS",
    "RUNNING_POLL_SECONDS",
    "Action",
    "BookingPlan",
    "BookingView",
    "CancelBooking",
    "CancelPoolOperation",
    "CreateJob",
    "CreateNodePool",
    "CreateService",
    "Decision",
    "DeleteJob",
    "DeleteNodePool",
    "DeleteService",
    "Event",
    "JobView",
    "Observed",
    "OperationView",
    "Planned",
    "PoolState",
    "PoolView",
    "PreviewStep",
    "ReconcileConfig",
    "Refused",
    "RequestFacts",
    "RequestView",
    "ScaleNodePoolToZero",
    "StepPlan",
    "StepWords",
    "SubmitBooking",
    "TakeOverNodePool",
    "Tally",
    "abandoned_pool_names",
    "attempt_number",
    "decide",
    "plan_booking",
    "planned",
    "pool_name_for",
    "pool_names_for",
    "preview",
    "read_spec",
    "step_pool_names",
    "step_provisioning",
    "tally",
]
