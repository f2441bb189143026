"""Compute errors, classified: Compute's error reason first, then the HTTP status."""

from __future__ import annotations

import grpc
import pydantic
import pytest
import requests
from google.api_core import exceptions as core_exceptions
from google.auth import exceptions as auth_exceptions

from dws_operator.gke.compute_errors import classify_compute, classify_http, classify_operation
from dws_operator.gke.compute_types import Operation, OperationError, OperationErrorEntry


@pytest.mark.parametrize(
    ("status", "reason", "message", "retryable", "ours"),
    [
        (409, "alreadyExists", "The resource 'x' already exists", False, "AlreadyExists"),
        (404, "notFound", "The resource 'x' was not found", False, "NotFound"),
        (400, "invalid", "Invalid value for field 'resource.name'", False, "InvalidArgument"),
        (400, "resourceInUseByAnotherResource", "is already being used", False, "ResourceInUse"),
        (400, "resourceNotReady", "The resource 'x' is not ready", True, "ResourceNotReady"),
        (403, "rateLimitExceeded", "Rate Limit Exceeded", True, "RateLimited"),
        (403, "quotaExceeded", "Quota 'RESOURCE_POLICIES' exceeded", False, "QuotaExceeded"),
        (403, "forbidden", "Required 'compute.resourcePolicies.create'", False, "PermissionDenied"),
        (403, "", "Insufficient regional quota", False, "QuotaExceeded"),
        (409, "aborted", "conflicting operation", True, "Aborted"),
        (500, "backendError", "Internal error", True, "InternalError"),
        (503, "backendError", "The service is currently unavailable", True, "Unavailable"),
        (429, "", "Too Many Requests", True, "RateLimited"),
        (504, "", "Deadline exceeded", True, "DeadlineExceeded"),
        (412, "conditionNotMet", "fingerprint", False, "FailedPrecondition"),
        (418, "", "teapot", False, "ComputeApiError"),
        (599, "", "odd", True, "ComputeApiError"),
    ],
)
def test_http_errors(status: int, reason: str, message: str, retryable: bool, ours: str) -> None:
    error = classify_http(status, reason, message)
    assert (error.retryable, error.reason, error.message) == (retryable, ours, message)


def test_library_exceptions_carry_compute_reasons() -> None:
    raised = core_exceptions.from_http_status(
        409,
        "POST http://x: The resource 'x' already exists",
        errors=[{"message": "m", "domain": "global", "reason": "alreadyExists"}],
    )
    error = classify_compute(raised)
    assert (error.retryable, error.reason, error.code) == (
        False,
        "AlreadyExists",
        grpc.StatusCode.ALREADY_EXISTS,
    )
    bare = core_exceptions.from_http_status(503, "unavailable")
    assert (classify_compute(bare).retryable, classify_compute(bare).reason) == (
        True,
        "Unavailable",
    )


@pytest.mark.parametrize(
    ("raised", "retryable", "reason"),
    [
        (requests.exceptions.ConnectionError("refused"), True, "Unavailable"),
        (requests.exceptions.ReadTimeout("read timed out"), True, "DeadlineExceeded"),
        (TimeoutError(), True, "DeadlineExceeded"),
        (auth_exceptions.TransportError("metadata server"), True, "Unavailable"),
        (auth_exceptions.RefreshError("expired", retryable=True), True, "Unauthenticated"),
        (auth_exceptions.DefaultCredentialsError("none found"), False, "Unauthenticated"),
    ],
)
def test_no_answer_and_no_credentials(raised: BaseException, retryable: bool, reason: str) -> None:
    error = classify_compute(raised)
    assert (error.retryable, error.reason) == (retryable, reason)


def test_anything_else_is_not_ours_to_classify() -> None:
    with pytest.raises(TypeError, match="not a Compute API error"):
        classify_compute(KeyError("x"))


def operation(code: str, status: int, message: str = "m") -> Operation:
    return Operation(
        name="operation-1",
        status="DONE",
        http_error_status_code=status,
        error=OperationError(errors=[OperationErrorEntry(code=code, message=message)]),
    )


@pytest.mark.parametrize(
    ("code", "status", "retryable", "reason"),
    [
        ("RESOURCE_ALREADY_EXISTS", 409, False, "AlreadyExists"),
        ("QUOTA_EXCEEDED", 403, False, "QuotaExceeded"),
        ("INTERNAL_ERROR", 500, True, "InternalError"),
        ("RESOURCE_NOT_READY", 400, True, "ResourceNotReady"),
        ("RATE_LIMIT_EXCEEDED", 429, True, "RateLimited"),
        ("SOMETHING_NEW", 503, True, "Unavailable"),
        ("SOMETHING_NEW", 400, False, "InvalidArgument"),
    ],
)
def test_operation_errors(code: str, status: int, retryable: bool, reason: str) -> None:
    error = classify_operation(operation(code, status, "what went wrong"))
    assert (error.retryable, error.reason, error.message) == (retryable, reason, "what went wrong")


def test_an_operation_as_compute_writes_it() -> None:
    done = Operation.model_validate(
        {
            "kind": "compute#operation",
            "name": "operation-1",
            "status": "DONE",
            "httpErrorStatusCode": 403,
            "httpErrorMessage": "FORBIDDEN",
            "error": {"errors": [{"code": "QUOTA_EXCEEDED", "message": "Quota 'X' exceeded"}]},
        }
    )
    error = classify_operation(done)
    assert (error.retryable, error.reason, error.message) == (
        False,
        "QuotaExceeded",
        "Quota 'X' exceeded",
    )


def test_an_answer_that_is_not_the_methods_json_is_terminal() -> None:
    with pytest.raises(pydantic.ValidationError) as raised:
        Operation.model_validate({"name": "operation-1", "status": ["DONE"]})
    error = classify_compute(raised.value)
    assert (error.retryable, error.reason) == (False, "ComputeApiError")
