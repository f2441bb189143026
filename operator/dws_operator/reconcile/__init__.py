"""The reconcile decision (pure): observed state in, status, actions and events out.

What the shell may use is exported here; the modules behind it are the core's own.
"""

from dws_operator.guardrails import POLICY_LIMIT
from dws_operator.reconcile.actions import (
    Action,
    CancelBooking,
    CancelPoolOperation,
    CreateHolder,
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
from dws_operator.reconcile.advice import (
    ADVICE_POLL_SECONDS,
    NO_WINDOW,
    AdviceQuery,
    advice_query,
    query_for,
)
from dws_operator.reconcile.booking import BookingPlan, plan_booking
from dws_operator.reconcile.conditions import ADMITTED
from dws_operator.reconcile.decide import decide
from dws_operator.reconcile.decision import (
    AT_ONCE,
    BLOCK_ENDED,
    BOOKING_REFUSED,
    CANCEL_REFUSED,
    DRAIN_SECONDS,
    HELD_BACK_SECONDS,
    MAX_RECOVERIES,
    RUNNING_POLL_SECONDS,
    STOP_LEAD_SECONDS,
    STUCK_AFTER_SECONDS,
    Decision,
    Event,
    ReconcileConfig,
)
from dws_operator.reconcile.estimates import describe as describe_estimate
from dws_operator.reconcile.estimates import estimate_key
from dws_operator.reconcile.facts import RequestFacts, StepWords, read_spec, step_provisioning
from dws_operator.reconcile.observed import (
    AdviceView,
    BookingView,
    CalendarWindow,
    JobView,
    Observed,
    OperationView,
    PoolState,
    PoolView,
    ProvisioningRequestView,
    RequestView,
)
from dws_operator.reconcile.order import ORDERED, estimated_order, ladder_keys, order_pending
from dws_operator.reconcile.policy import admitted
from dws_operator.reconcile.preview import PreviewStep, Refused, preview
from dws_operator.reconcile.segments import RUN_DURATION_EXCEEDED
from dws_operator.reconcile.step import (
    Planned,
    StepPlan,
    abandoned_pool_names,
    attempt_number,
    next_pool_names_for,
    planned,
    pool_name_for,
    pool_names_for,
    step_pool_names,
    written_step,
)
from dws_operator.reconcile.stuck import RECOVERED, provisioning_request_wanted
from dws_operator.reconcile.tally import Tally, capacity_key_of, step_key, tally

__all__ = [
    "ADMITTED",
    "ADVICE_POLL_SECONDS",
    "AT_ONCE",
    "BLOCK_ENDED",
    "BOOKING_REFUSED",
    "CANCEL_REFUSED",
    "DRAIN_SECONDS",
    "HELD_BACK_SECONDS",
    "MAX_RECOVERIES",
    "NO_WINDOW",
    "ORDERED",
    "POLICY_LIMIT",
    "RECOVERED",
    "RUNNING_POLL_SECONDS",
    "RUN_DURATION_EXCEEDED",
    "STOP_LEAD_SECONDS",
    "STUCK_AFTER_SECONDS",
    "Action",
    "AdviceQuery",
    "AdviceView",
    "BookingPlan",
    "BookingView",
    "CalendarWindow",
    "CancelBooking",
    "CancelPoolOperation",
    "CreateHolder",
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
    "ProvisioningRequestView",
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
    "admitted",
    "advice_query",
    "attempt_number",
    "capacity_key_of",
    "decide",
    "describe_estimate",
    "estimate_key",
    "estimated_order",
    "ladder_keys",
    "next_pool_names_for",
    "order_pending",
    "plan_booking",
    "planned",
    "pool_name_for",
    "pool_names_for",
    "preview",
    "provisioning_request_wanted",
    "query_for",
    "read_spec",
    "step_key",
    "step_pool_names",
    "step_provisioning",
    "tally",
    "written_step",
]
