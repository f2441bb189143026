"""GKE node pools: rendering from a SlicePlan (pure) and the async clients (I/O).

`NodePoolClient` drives GKE's node pools; `WorkloadPolicyClient` makes the Compute
workload policies that tpu7x multi-host pools are placed with.
"""

from dws_operator.gke.bookings import BookingClient, insert_booking_request
from dws_operator.gke.client import ENDPOINT_ENV, CreateResult, NodePoolClient, connect
from dws_operator.gke.cluster_ref import ClusterRef
from dws_operator.gke.compute_rest import COMPUTE_ENDPOINT_ENV, ComputeApis, connect_compute
from dws_operator.gke.errors import GkeError, classify, classify_status
from dws_operator.gke.labels import UID_LABEL, owned_by, pool_labels
from dws_operator.gke.policies import WorkloadPolicyClient, insert_policy_request
from dws_operator.gke.render import render_node_pool
from dws_operator.gke.retry import PollPolicy, RetryPolicy

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
