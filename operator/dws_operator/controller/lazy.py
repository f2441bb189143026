"""A Compute client connected on first use: an operator that never needs Compute (no
Ironwood slice, no calendar block) needs no Compute credentials to start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from google.auth.exceptions import GoogleAuthError

from dws_operator.gke import GkeError

T = TypeVar("T")


class OnFirstUse(Generic[T]):
    def __init__(self, connect: Callable[[], T] | None) -> None:
        self._connect = connect
        self._client: T | None = None

    def get(self) -> T | None:
        """The client, connected now if it was not yet; None without a way to connect.
        Credentials that cannot be found are a GkeError (ComputeUnavailable), for good."""
        if self._client is None and self._connect is not None:
            try:
                self._client = self._connect()
            except GoogleAuthError as error:
                raise GkeError(
                    retryable=False, reason="ComputeUnavailable", message=str(error)
                ) from error
        return self._client
