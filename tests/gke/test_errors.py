"""Classification of GKE failures: retryable or terminal, and the reason a condition shows."""

from __future__ import annotations

import grpc
import pytest
from google.api_core import exceptions as core_exceptions

from dws_operator.gke import GkeError, classify, classify_status
from dws_operator.gke.errors import status_code

C = grpc.StatusCode

# Messages are GKE's and Compute Engine's own wording where known.
TABLE = [
    (C.UNAVAILABLE, "The service is currently unavailable.", True, "Unavailable"),
    (C.DEADLINE_EXCEEDED, "Deadline Exceeded", True, "DeadlineExceeded"),
    (C.ABORTED, "The operation was aborted.", True, "Aborted"),
    (C.INTERNAL, "Internal error encountered.", True, "InternalError"),
    (
        C.RESOURCE_EXHAUSTED,
        "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' "
        "of service 'container.googleapis.com'",
        True,
        "RateLimited",
    ),
    (
        # The emulator's answer beyond GKE's per-project request quota (api_rate_limit),
        # in the API front end's words: a quota, but one that passes within the minute.
        C.RESOURCE_EXHAUSTED,
        "Quota exceeded for quota metric 'Requests' and limit 'Requests per minute' of "
        "service 'container.googleapis.com' for consumer 'project_number:493176118204'.",
        True,
        "RateLimited",
    ),
    (
        # Cloud Run's, word for word (googleapis/repo-automation-bots#4469), with its tail.
        C.RESOURCE_EXHAUSTED,
        "Quota exceeded for quota metric 'Read requests' and limit 'Read requests per "
        "minute per region' of service 'run.googleapis.com' for consumer "
        "'project_number:REDACTED'. To see usage, go to https://console.cloud.google.com/"
        "iam-admin/quotas?metric=run.googleapis.com/read_regional&limit=ReadPerMinutePer"
        "ProjectRegion&qs_error_code=INSUFFICIENT_TOKENS&project=repo-automation-bots&"
        "service=run.googleapis.com. To request a quota increase, see "
        "https://cloud.google.com/run/quotas.",
        True,
        "RateLimited",
    ),
    (
        C.RESOURCE_EXHAUSTED,
        'Too many operations: cluster "sandbox" hits the concurrent operations quota 5, '
        "please try again later.",
        True,
        "TooManyOperations",
    ),
    (
        # Worded differently, the cap on operations in flight is still not a resource quota.
        C.RESOURCE_EXHAUSTED,
        'Cluster "sandbox" hits the concurrent operations quota 10.',
        True,
        "TooManyOperations",
    ),
    (
        # The emulator's accelerator quota, worded as GKE words a short regional quota.
        C.RESOURCE_EXHAUSTED,
        'Insufficient quota to satisfy request: resource "tpu-v6e-slice": request requires '
        "'16' and is short '8'. Project has a quota of '64' with '8' available.",
        False,
        "QuotaExceeded",
    ),
    (C.RESOURCE_EXHAUSTED, "", True, "RateLimited"),
    (
        C.FAILED_PRECONDITION,
        "Operation operation-1533161820212-e0451fc6 is currently creating a node pool for "
        "cluster prombench. Please wait and try again once it is done.",
        True,
        "OperationInProgress",
    ),
    (
        C.FAILED_PRECONDITION,
        "Cluster is running incompatible operation operation-1731137433803-29e34938.",
        True,
        "OperationInProgress",
    ),
    (
        C.FAILED_PRECONDITION,
        "Operation operation-1 is already in progress on node pool dws-a.",
        True,
        "OperationInProgress",
    ),
    (C.FAILED_PRECONDITION, "Cluster is not in a running state.", False, "FailedPrecondition"),
    (
        C.INVALID_ARGUMENT,
        "node_pool.autoscaling: flex-start node pools need autoscaling",
        False,
        "InvalidArgument",
    ),
    (
        C.PERMISSION_DENIED,
        "Required 'container.clusters.update' permission",
        False,
        "PermissionDenied",
    ),
    (
        C.UNAUTHENTICATED,
        "Request had invalid authentication credentials.",
        False,
        "Unauthenticated",
    ),
    (
        C.NOT_FOUND,
        "Not found: projects/p/locations/us-east5/clusters/missing.",
        False,
        "ClusterNotFound",
    ),
    (
        C.NOT_FOUND,
        "Not found: projects/p/locations/us-east5/clusters/c/nodePools/np.",
        False,
        "NodePoolNotFound",
    ),
    (
        C.NOT_FOUND,
        "Not found: projects/p/locations/us-east5/operations/operation-1.",
        False,
        "OperationNotFound",
    ),
    (C.NOT_FOUND, "Not found", False, "NotFound"),
    (C.ALREADY_EXISTS, "Already exists: projects/p/.../nodePools/np.", False, "AlreadyExists"),
    (
        C.RESOURCE_EXHAUSTED,
        'Insufficient regional quota to satisfy request: resource "NVIDIA_H100_GPUS": '
        "request requires '16.0' and is short '8.0'.",
        False,
        "QuotaExceeded",
    ),
    (
        C.PERMISSION_DENIED,
        'Insufficient regional quota to satisfy request: resource "SSD_TOTAL_GB"',
        False,
        "QuotaExceeded",
    ),
    (
        C.RESOURCE_EXHAUSTED,
        "QUOTA_EXCEEDED: Quota 'TPUS_PER_TPU_FAMILY' exceeded.",
        False,
        "QuotaExceeded",
    ),
    (
        C.RESOURCE_EXHAUSTED,
        "GCE_STOCKOUT: The zone 'projects/p/zones/us-east5-a' does not have enough "
        "resources available to fulfill the request.",
        False,
        "Stockout",
    ),
    (
        C.UNKNOWN,
        "ZONE_RESOURCE_POOL_EXHAUSTED: The zone does not have enough resources available.",
        False,
        "Stockout",
    ),
    (C.UNIMPLEMENTED, "Method not found!", False, "Unimplemented"),
]


@pytest.mark.parametrize(("code", "message", "retryable", "reason"), TABLE)
def test_classify_status(code: grpc.StatusCode, message: str, retryable: bool, reason: str) -> None:
    error = classify_status(code, message)
    assert (error.retryable, error.reason) == (retryable, reason)
    assert error.message == message
    assert error.code == code
    assert reason in str(error)


@pytest.mark.parametrize(
    ("exception", "retryable", "reason"),
    [
        # google-api-core's exception constructors are untyped.
        (core_exceptions.ServiceUnavailable("down"), True, "Unavailable"),  # type: ignore[no-untyped-call]
        (core_exceptions.InvalidArgument("bad"), False, "InvalidArgument"),  # type: ignore[no-untyped-call]
        (
            core_exceptions.NotFound(  # type: ignore[no-untyped-call]
                "Not found: projects/p/locations/l/clusters/c."
            ),
            False,
            "ClusterNotFound",
        ),
        # Built from an HTTP 429, as the REST transport would: no gRPC code, only HTTP's.
        (
            core_exceptions.TooManyRequests("Too many"),  # type: ignore[no-untyped-call]
            True,
            "RateLimited",
        ),
        # What the gRPC client raises when GKE's concurrent-operations quota is hit.
        (
            core_exceptions.ResourceExhausted(  # type: ignore[no-untyped-call]
                'Too many operations: cluster "sandbox" hits the concurrent operations '
                "quota 5, please try again later."
            ),
            True,
            "TooManyOperations",
        ),
        (TimeoutError(), True, "DeadlineExceeded"),
    ],
)
def test_classify_client_exceptions(exception: BaseException, retryable: bool, reason: str) -> None:
    error = classify(exception)
    assert isinstance(error, GkeError)
    assert (error.retryable, error.reason) == (retryable, reason)


def test_classify_keeps_a_gke_error() -> None:
    error = GkeError(retryable=False, reason="NodePoolNameTaken", message="taken")
    assert classify(error) is error


def test_classify_refuses_other_exceptions() -> None:
    with pytest.raises(TypeError, match="not a GKE API error"):
        classify(ValueError("bug"))


def test_status_code_numbers() -> None:
    assert status_code(14) == C.UNAVAILABLE
    assert status_code(8) == C.RESOURCE_EXHAUSTED
    assert status_code(9999) == C.UNKNOWN
