"""GKE node pools: rendering from a SlicePlan (pure) and the async clients (I/O).

`NodePoolClient` drives GKE's node pools; `WorkloadPolicyClient` makes the Compute
workload policies that tpu7x multi-host pools are placed with.
"""

from dws_operator.gke.client import (
    ENDPOINT_ENV,
    ClusterRef,
    CreateResult,
    NodePoolClient,
    PollPolicy,
    RetryPolicy,
    connect,
    endpoint_from_env,
)
from dws_operator.gke.errors import GkeError, classify, classify_status
from dws_operator.gke.labels import UID_LABEL, owned_by, pool_labels
from dws_operator.gke.policies import (
    COMPUTE_ENDPOINT_ENV,
    ComputeApis,
    WorkloadPolicyClient,
    compute_endpoint_from_env,
    connect_compute,
    region_of,
    workload_policy_name,
)
from dws_operator.gke.render import render_node_pool

__all__ = [
    "COMPUTE_ENDPOINT_ENV",
    "ENDPOINT_ENV",
    "UID_LABEL",
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
    "compute_endpoint_from_env",
    "connect",
    "connect_compute",
    "endpoint_from_env",
    "owned_by",
    "pool_labels",
    "region_of",
    "render_node_pool",
    "workload_policy_name",
]
