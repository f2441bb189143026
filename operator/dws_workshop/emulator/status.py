"""Errors the emulated API answers with, worded the way GKE words them.

Every error names its rule: the id of its row in RULES.md, which gives the source
(`ruleids` checks that code and table agree).
"""

from __future__ import annotations

import grpc


class ApiError(Exception):
    """An RPC that ends with a non-OK status instead of a response."""

    def __init__(self, code: grpc.StatusCode, message: str, *, rule: str) -> None:
        self.code = code
        self.message = message
        #: The RULES.md id of the rule this answer enforces.
        self.rule = rule
        super().__init__(f"{code.name}: {message}")


def invalid(field: str, message: str, *, rule: str) -> ApiError:
    """INVALID_ARGUMENT naming the request field at fault, as `field: message`."""
    return ApiError(grpc.StatusCode.INVALID_ARGUMENT, f"{field}: {message}", rule=rule)


def not_found(path: str) -> ApiError:
    return ApiError(grpc.StatusCode.NOT_FOUND, f"Not found: {path}.", rule="GKE-NOT-FOUND")


def already_exists(path: str) -> ApiError:
    return ApiError(
        grpc.StatusCode.ALREADY_EXISTS, f"Already exists: {path}.", rule="GKE-POOL-EXISTS"
    )


def operation_in_progress(operation: str, doing: str, cluster: str) -> ApiError:
    return ApiError(
        grpc.StatusCode.FAILED_PRECONDITION,
        f"Operation {operation} is currently {doing} for cluster {cluster}. "
        "Please wait and try again once it is done.",
        rule="GKE-ONE-OPERATION-PER-POOL",
    )


def too_many_operations(cluster: str, quota: int) -> ApiError:
    """GKE's answer to an operation beyond the cluster's concurrent-operations quota."""
    return ApiError(
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        f'Too many operations: cluster "{cluster}" hits the concurrent operations quota '
        f"{quota}, please try again later.",
        rule="GKE-CONCURRENT-OPERATIONS-QUOTA",
    )
