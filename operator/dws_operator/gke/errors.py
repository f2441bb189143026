"""What a failed GKE call means for the operator: retry later, or stop and say why.

Every failure, whether an RPC status or a long-running operation that ended in
error, becomes one `GkeError` with a CamelCase `reason` the reconciler can put in a
condition. GKE reuses a few status codes for unrelated situations (RESOURCE_EXHAUSTED
is a rate limit, the cap on concurrent operations and a resource quota;
FAILED_PRECONDITION is mostly "another operation is running"), so the message text
decides those cases.
"""

from __future__ import annotations

import grpc
from google.api_core import exceptions as core_exceptions

_BY_NUMBER: dict[int, grpc.StatusCode] = {code.value[0]: code for code in grpc.StatusCode}
_BY_HTTP: dict[int, grpc.StatusCode] = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    409: grpc.StatusCode.ALREADY_EXISTS,
    412: grpc.StatusCode.FAILED_PRECONDITION,
    429: grpc.StatusCode.RESOURCE_EXHAUSTED,
    499: grpc.StatusCode.CANCELLED,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    504: grpc.StatusCode.DEADLINE_EXCEEDED,
}

#: Compute Engine's words for "no capacity in this zone right now" (not a quota).
_STOCKOUT_MARKERS = (
    "gce_stockout",
    "stockout",
    "zone_resource_pool_exhausted",
    "does not have enough resources",
)
#: GKE's cap on a cluster's operations in flight: 'Too many operations: cluster "c"
#: hits the concurrent operations quota 5, please try again later.' A slot frees when
#: one of them is DONE (Google's Terraform provider retries it too). It says "quota",
#: so it must be told apart before the resource quotas below.
_TOO_MANY_OPERATIONS_MARKERS = ("too many operations", "concurrent operations quota")
#: API rate limits: they pass with time.
_RATE_LIMIT_MARKERS = (
    "per minute",
    "per second",
    "per 100 seconds",
    "rate limit",
    "ratelimitexceeded",
    "too many",
)
#: Resource quota (CPUs, GPUs, TPU chips): retrying will not raise it.
_QUOTA_MARKERS = ("quota_exceeded", "insufficient", "quota")
#: GKE: "Operation operation-... is currently creating a node pool for cluster c.
#: Please wait and try again once it is done." or "Cluster is running incompatible
#: operation operation-...".
_IN_PROGRESS_MARKERS = ("is currently", "in progress", "incompatible operation", "please wait")

_RETRYABLE_CODES: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.UNAVAILABLE: "Unavailable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "DeadlineExceeded",
    grpc.StatusCode.ABORTED: "Aborted",
    grpc.StatusCode.INTERNAL: "InternalError",
    grpc.StatusCode.UNKNOWN: "UnknownError",
    grpc.StatusCode.CANCELLED: "Cancelled",
}
_TERMINAL_CODES: dict[grpc.StatusCode, str] = {
    grpc.StatusCode.INVALID_ARGUMENT: "InvalidArgument",
    grpc.StatusCode.OUT_OF_RANGE: "InvalidArgument",
    grpc.StatusCode.PERMISSION_DENIED: "PermissionDenied",
    grpc.StatusCode.UNAUTHENTICATED: "Unauthenticated",
    grpc.StatusCode.ALREADY_EXISTS: "AlreadyExists",
    grpc.StatusCode.UNIMPLEMENTED: "Unimplemented",
}


class GkeError(Exception):
    """A GKE call that did not do what was asked.

    `retryable` says whether the same call may succeed later unchanged; `reason` is a
    CamelCase word for conditions and metrics; `message` is GKE's text.
    """

    def __init__(
        self,
        *,
        retryable: bool,
        reason: str,
        message: str,
        code: grpc.StatusCode | None = None,
    ) -> None:
        self.retryable = retryable
        self.reason = reason
        self.message = message
        self.code = code
        super().__init__(f"{reason}: {message}")

    def __repr__(self) -> str:
        return (
            f"GkeError(retryable={self.retryable}, reason={self.reason!r}, "
            f"message={self.message!r}, code={self.code})"
        )


def status_code(number: int) -> grpc.StatusCode:
    """The gRPC code of a `google.rpc.Status.code` number (UNKNOWN when unheard of)."""
    return _BY_NUMBER.get(number, grpc.StatusCode.UNKNOWN)


def http_status_code(status: int) -> grpc.StatusCode:
    """The gRPC code Google's APIs pair with an HTTP status (UNKNOWN when unheard of)."""
    return _BY_HTTP.get(status, grpc.StatusCode.UNKNOWN)


def classify_status(code: grpc.StatusCode, message: str) -> GkeError:
    """Classify a status code and its message, from an RPC or an operation's `error`."""
    text = message.lower()
    if any(marker in text for marker in _STOCKOUT_MARKERS):
        return GkeError(retryable=False, reason="Stockout", message=message, code=code)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        if any(marker in text for marker in _TOO_MANY_OPERATIONS_MARKERS):
            return GkeError(retryable=True, reason="TooManyOperations", message=message, code=code)
        if any(marker in text for marker in _RATE_LIMIT_MARKERS):
            return GkeError(retryable=True, reason="RateLimited", message=message, code=code)
        if any(marker in text for marker in _QUOTA_MARKERS):
            return GkeError(retryable=False, reason="QuotaExceeded", message=message, code=code)
        # A bare RESOURCE_EXHAUSTED is how gRPC reports throttling.
        return GkeError(retryable=True, reason="RateLimited", message=message, code=code)
    if code == grpc.StatusCode.PERMISSION_DENIED and "quota" in text:
        # GKE reports a short regional quota as HTTP 403 "Insufficient regional quota".
        return GkeError(retryable=False, reason="QuotaExceeded", message=message, code=code)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        if any(marker in text for marker in _IN_PROGRESS_MARKERS):
            return GkeError(
                retryable=True, reason="OperationInProgress", message=message, code=code
            )
        return GkeError(retryable=False, reason="FailedPrecondition", message=message, code=code)
    if code == grpc.StatusCode.NOT_FOUND:
        return GkeError(
            retryable=False, reason=_not_found_reason(message), message=message, code=code
        )
    if code in _RETRYABLE_CODES:
        return GkeError(retryable=True, reason=_RETRYABLE_CODES[code], message=message, code=code)
    reason = _TERMINAL_CODES.get(code, "GkeApiError")
    return GkeError(retryable=False, reason=reason, message=message, code=code)


def _not_found_reason(message: str) -> str:
    # GKE names the missing resource: "Not found: projects/p/locations/l/clusters/c."
    if "/nodepools/" in message.lower():
        return "NodePoolNotFound"
    if "/operations/" in message.lower():
        return "OperationNotFound"
    if "/clusters/" in message.lower():
        return "ClusterNotFound"
    return "NotFound"


def classify(error: BaseException) -> GkeError:
    """Classify an exception raised by the google-cloud-container client."""
    if isinstance(error, GkeError):
        return error
    if isinstance(error, core_exceptions.GoogleAPICallError):
        code = error.grpc_status_code
        if not isinstance(code, grpc.StatusCode):
            # Errors built from HTTP responses carry only the HTTP status.
            code = http_status_code(error.code or 0)
        return classify_status(code, error.message or str(error))
    if isinstance(error, grpc.aio.AioRpcError):
        return classify_status(error.code(), error.details() or "")
    if isinstance(error, TimeoutError):
        return GkeError(
            retryable=True,
            reason="DeadlineExceeded",
            message=str(error) or "timed out",
            code=grpc.StatusCode.DEADLINE_EXCEEDED,
        )
    raise TypeError(f"not a GKE API error: {error!r}") from error
