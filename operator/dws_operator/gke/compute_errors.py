"""What a failed Compute Engine call means for the operator, as a `GkeError`.

The same verdicts as for GKE (errors.py): retry later, or stop and say why, with a
CamelCase reason. Compute's REST API says more than its HTTP status: every error body
lists `errors[].reason` (`alreadyExists`, `resourceNotReady`, `rateLimitExceeded`...),
and a region operation that ends in error carries `httpErrorStatusCode` and
`error.errors[].code` (`QUOTA_EXCEEDED`, `RESOURCE_NOT_READY`...). The reason decides
first, the HTTP status otherwise. A request that never got an answer (refused or reset
connection, read timeout) is retryable; a credentials failure is Unauthenticated.
"""

from __future__ import annotations

import grpc
import requests
from google.api_core import exceptions as core_exceptions
from google.auth import exceptions as auth_exceptions

from dws_operator.gke.compute_types import Operation
from dws_operator.gke.errors import GkeError, http_status_code

#: Compute error reasons (`errors[].reason`) -> (retryable, our reason).
_REASONS: dict[str, tuple[bool, str]] = {
    "alreadyExists": (False, "AlreadyExists"),
    "notFound": (False, "NotFound"),
    "invalid": (False, "InvalidArgument"),
    "required": (False, "InvalidArgument"),
    "badRequest": (False, "InvalidArgument"),
    "conditionNotMet": (False, "FailedPrecondition"),
    "forbidden": (False, "PermissionDenied"),
    "quotaExceeded": (False, "QuotaExceeded"),
    "resourceInUseByAnotherResource": (False, "ResourceInUse"),
    "resourceNotReady": (True, "ResourceNotReady"),
    "rateLimitExceeded": (True, "RateLimited"),
    "userRateLimitExceeded": (True, "RateLimited"),
    "aborted": (True, "Aborted"),
    # Not "backendError": Compute gives it with 500 and 503 alike; the status tells.
    "internalError": (True, "InternalError"),
    "deadlineExceeded": (True, "DeadlineExceeded"),
}
#: Region operation error codes (`error.errors[].code`) -> (retryable, our reason).
_OPERATION_CODES: dict[str, tuple[bool, str]] = {
    "RESOURCE_ALREADY_EXISTS": (False, "AlreadyExists"),
    "RESOURCE_NOT_FOUND": (False, "NotFound"),
    "INVALID_FIELD_VALUE": (False, "InvalidArgument"),
    "QUOTA_EXCEEDED": (False, "QuotaExceeded"),
    "RESOURCE_IN_USE_BY_ANOTHER_RESOURCE": (False, "ResourceInUse"),
    "RESOURCE_NOT_READY": (True, "ResourceNotReady"),
    "RATE_LIMIT_EXCEEDED": (True, "RateLimited"),
    "INTERNAL_ERROR": (True, "InternalError"),
    "SERVICE_UNAVAILABLE": (True, "Unavailable"),
    "DEADLINE_EXCEEDED": (True, "DeadlineExceeded"),
    "ABORTED": (True, "Aborted"),
}
#: HTTP statuses -> (retryable, our reason), when the reason says nothing we know.
_STATUSES: dict[int, tuple[bool, str]] = {
    400: (False, "InvalidArgument"),
    401: (False, "Unauthenticated"),
    403: (False, "PermissionDenied"),
    404: (False, "NotFound"),
    408: (True, "DeadlineExceeded"),
    409: (False, "AlreadyExists"),
    412: (False, "FailedPrecondition"),
    429: (True, "RateLimited"),
    499: (True, "Cancelled"),
    500: (True, "InternalError"),
    501: (False, "Unimplemented"),
    502: (True, "Unavailable"),
    503: (True, "Unavailable"),
    504: (True, "DeadlineExceeded"),
}


#: What a Compute call (compute_rest.py) raises when it fails: API errors with an HTTP
#: status, the transport's own when no answer came, credentials that gave no token, and
#: an answer that is not the JSON the method returns.
COMPUTE_ERRORS: tuple[type[BaseException], ...] = (
    core_exceptions.GoogleAPICallError,
    requests.exceptions.RequestException,
    auth_exceptions.GoogleAuthError,
    TimeoutError,
    # pydantic's ValidationError is one.
    ValueError,
)


def classify_http(status: int, reason: str, message: str) -> GkeError:
    """Classify an HTTP error status with Compute's error reason."""
    code = http_status_code(status)
    if reason in _REASONS:
        retryable, ours = _REASONS[reason]
    elif status in _STATUSES:
        retryable, ours = _STATUSES[status]
    else:
        retryable, ours = status >= 500, "ComputeApiError"
    if ours == "PermissionDenied" and "quota" in message.lower():
        retryable, ours = False, "QuotaExceeded"
    return GkeError(retryable=retryable, reason=ours, message=message, code=code)


def classify_compute(error: BaseException) -> GkeError:
    """Classify an exception raised by a Compute call (compute_rest.py)."""
    if isinstance(error, GkeError):
        return error
    if isinstance(error, core_exceptions.GoogleAPICallError):
        reasons = [e.get("reason", "") for e in error.errors if isinstance(e, dict)]
        return classify_http(error.code or 0, reasons[0] if reasons else "", error.message)
    if isinstance(error, requests.exceptions.Timeout | TimeoutError):
        return GkeError(
            retryable=True,
            reason="DeadlineExceeded",
            message=str(error) or "timed out",
            code=grpc.StatusCode.DEADLINE_EXCEEDED,
        )
    if isinstance(error, requests.exceptions.RequestException | auth_exceptions.TransportError):
        # No answer at all (connection refused or reset): the call may not have run.
        return GkeError(
            retryable=True,
            reason="Unavailable",
            message=str(error),
            code=grpc.StatusCode.UNAVAILABLE,
        )
    if isinstance(error, auth_exceptions.GoogleAuthError):
        # No token: a 401 whose refresh failed, or credentials that cannot be found.
        # google-auth says itself whether trying again may help.
        return GkeError(
            retryable=bool(error.retryable),
            reason="Unauthenticated",
            message=str(error),
            code=grpc.StatusCode.UNAUTHENTICATED,
        )
    if isinstance(error, ValueError):
        # Answered, but not with the JSON the method returns (a proxy's page, a field of
        # an unexpected type): asking again gets the same.
        return GkeError(
            retryable=False,
            reason="ComputeApiError",
            message=f"unexpected answer from Compute: {error}",
            code=grpc.StatusCode.INTERNAL,
        )
    raise TypeError(f"not a Compute API error: {error!r}") from error


def classify_operation(operation: Operation) -> GkeError:
    """Classify a zone or region operation that ended DONE with an error."""
    errors = operation.error.errors
    code = errors[0].code if errors else ""
    message = "; ".join(e.message for e in errors) or operation.http_error_message
    status = operation.http_error_status_code
    if code in _OPERATION_CODES:
        retryable, ours = _OPERATION_CODES[code]
        return GkeError(
            retryable=retryable, reason=ours, message=message, code=http_status_code(status)
        )
    return classify_http(status, "", message or f"operation {operation.name} failed")
