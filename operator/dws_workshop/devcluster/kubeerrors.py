"""The workshop's Kubernetes client (the official sync one) answering with the
operator's typed errors (`NotFound`, `Conflict`, `Invalid`, `Busy`, `ApiError`), so
tools and tests say which refusal they expect instead of comparing status codes."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes.client.exceptions import ApiException

from dws_operator.kubekit.transport import (
    ApiError,
    Busy,
    Conflict,
    Invalid,
    NotFound,
    api_error,
)

__all__ = ["ApiError", "Busy", "Conflict", "Invalid", "NotFound", "typed_errors"]


@contextmanager
def typed_errors() -> Iterator[None]:
    """Inside, an `ApiException` from the client is raised as its typed error (the
    client's exception kept as the cause)."""
    try:
        yield
    except ApiException as error:
        raise api_error(
            int(error.status or 0), str(error.reason or ""), str(error.body or "")
        ) from error
