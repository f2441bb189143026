"""The reconcile decision (pure): observed state in, status, actions and events out."""

from dws_operator.reconcile.actions import (
    Action,
    CancelPoolOperation,
    CreateJob,
    CreateNodePool,
    CreateService,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    ScaleNodePoolToZero,
    TakeOverNodePool,
)
from dws_operator.reconcile.decide import (
    Decision,
    Event,
    ReconcileConfig,
    decide,
    failed,
    pool_name_for,
)
from dws_operator.reconcile.observed import (
    JobView,
    Observed,
    OperationView,
    PoolState,
    PoolView,
    RequestView,
)

__all__ = [
    "Action",
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
    "PoolState",
    "PoolView",
    "ReconcileConfig",
    "RequestView",
    "ScaleNodePoolToZero",
    "TakeOverNodePool",
    "decide",
    "failed",
    "pool_name_for",
]
