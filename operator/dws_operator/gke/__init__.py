"""GKE node pools: rendering from a SlicePlan (pure) and the async clients (I/O).

`NodePoolClient` drives GKE's node pools; `WorkloadPolicyClient` makes the Compute
workload policies that tpu7x multi-host pools are placed with.
"""

import importlib
from typing import TYPE_CHECKING, Any

from dws_operator.gke.client import (
    ENDPOINT_ENV,
    ClusterRef,
    CreateResult,
    NodePoolClient,
    PollPolicy,
    RetryPolicy,
    connect,
)
from dws_operator.gke.errors import GkeError, classify, classify_status
from dws_operator.gke.labels import UID_LABEL, owned_by, pool_labels
from dws_operator.gke.render import render_node_pool

if TYPE_CHECKING:
    from dws_operator.gke.bookings import BookingClient, insert_booking_request
    from dws_operator.gke.policies import (
        COMPUTE_ENDPOINT_ENV,
        ComputeApis,
        WorkloadPolicyClient,
        connect_compute,
        insert_policy_request,
    )

#: Served by `policies`, imported on first use: the Compute client library it needs
#: costs about 95 MiB and a second at start-up, and only Ironwood slices and calendar-mode
#: bookings use it.
_POLICIES = (
    "COMPUTE_ENDPOINT_ENV",
    "ComputeApis",
    "WorkloadPolicyClient",
    "connect_compute",
    "insert_policy_request",
)


#: Served by `bookings` (calendar mode), on the same Compute library, on first use.
_BOOKINGS = ("BookingClient", "insert_booking_request")


def __getattr__(name: str) -> Any:
    if name in _POLICIES:
        return getattr(importlib.import_module("dws_operator.gke.policies"), name)
    if name in _BOOKINGS:
        return getattr(importlib.import_module("dws_operator.gke.bookings"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "COMPUTE_ENDPOINT_ENV",
    "ENDPOINT_ENV",
    "UID_LABEL",
    "BookingClient",
    "ClusterRef",
    "ComputeApis",
    "CreateResult",
    "GkeError",
    "NodePoolClient",
    "PollPolicy",
    "RetryPolicy",
    "WorkloadPolicyClient",
    "classify",
    "classify_status",
    "connect",
    "connect_compute",
    "insert_booking_request",
    "insert_policy_request",
    "owned_by",
    "pool_labels",
    "render_node_pool",
]
