"""What the kit needs of a Kubernetes API client: one request, and an Event posted. The
operator's `controller.kube.KubeApi` is one."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol


class Caller(Protocol):
    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        fenced: bool = True,
    ) -> Any:
        """One request; the answer's JSON. Raises `transport.ApiError` for an answer that
        is not 2xx; `fenced`: asks the fence first (a write)."""
        ...


class EventWriter(Protocol):
    async def post_event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        at: datetime,
    ) -> None:
        """An Event about the object `involved` (its body), that happened `at` (on the
        operator's clock)."""
        ...
