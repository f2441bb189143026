"""GKE node pools: rendering from a SlicePlan (pure) and the async client (I/O)."""

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
from dws_operator.gke.render import render_node_pool

__all__ = [
    "ENDPOINT_ENV",
    "UID_LABEL",
    "ClusterRef",
    "CreateResult",
    "GkeError",
    "NodePoolClient",
    "PollPolicy",
    "RetryPolicy",
    "classify",
    "classify_status",
    "connect",
    "endpoint_from_env",
    "owned_by",
    "pool_labels",
    "render_node_pool",
]
