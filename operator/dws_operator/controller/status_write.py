"""A reconcile pass's one status write: the JSON merge patch from the status as
observed to the status decided, made over the version decided on, written through to
the cache and counted for the pass it is made in (`dws_reconcile_status_writes`). A
write refused because the request changed meanwhile leaves the pass to be made again."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

from dws_operator.api import TrainingRequestStatus
from dws_operator.controller.cache import Key, KubeCache
from dws_operator.controller.history import CapacityHistory
from dws_operator.controller.kube import KubeApi
from dws_operator.controller.logs import about
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.names import request_name
from dws_operator.reconcile import AT_ONCE, Decision, Observed, RequestView, Tally

log = logging.getLogger(__name__)

#: The status writes of the pass running in this task (one decision: at most one).
_PASS_WRITES: ContextVar[list[int] | None] = ContextVar("pass_writes", default=None)


def dump(status: TrainingRequestStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns `old` into `new`: a field `new` no
    longer has is sent as null, which removes it (left out, it would stay as it was:
    a cleared `startedAt` would still say the work had started)."""
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            nested = merge_patch(before, value)
            if nested:
                patch[key] = nested
        elif before != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


class StatusWriter:
    def __init__(
        self,
        kube: KubeApi,
        cache: KubeCache,
        metrics: OperatorMetrics,
        history: CapacityHistory,
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics
        self.history = history

    @contextlib.contextmanager
    def counting(self) -> Iterator[None]:
        """The status writes made within, counted as one pass's."""
        writes = [0]
        counting = _PASS_WRITES.set(writes)
        try:
            yield
        finally:
            self.metrics.pass_status_writes.observe(writes[0])
            _PASS_WRITES.reset(counting)

    async def write(
        self,
        body: Mapping[str, Any],
        observed: Observed,
        status: TrainingRequestStatus,
        tally: Tally,
    ) -> Mapping[str, Any]:
        """The pass's one status write: the merge patch from the status as observed."""
        request = observed.request
        key = (request.namespace, request.name)
        patch = merge_patch(dump(request.status), dump(status))
        if not patch:
            # Nothing new to count; the request's phase gauge is kept (after a restart of
            # the operator it is not there yet).
            self.metrics.request_seen(key, request.facts, status)
            return body
        # Only over the version decided on: a newer one (another writer's) is not undone.
        version = (body.get("metadata") or {}).get("resourceVersion")
        updated = await self._patch_status(request.namespace, request.name, patch, version)
        if updated is not None:
            # Counted once written: a pass that fails later has still made this change.
            self.metrics.request_seen(key, request.facts, status, tally)
            await self.history.add(tally.waits)
        if status.phase != request.status.phase:
            log.info(
                "%s: %s -> %s: %s",
                request_name(request),
                request.status.phase,
                status.phase,
                status.message or "",
                extra=about(request_name(request), phase=str(status.phase)),
            )
        if updated is None:
            return body
        self.cache.put_request(updated)
        return updated

    async def _patch_status(
        self, namespace: str, name: str, patch: dict[str, Any], resource_version: str | None
    ) -> dict[str, Any] | None:
        """Every status write of the reconciler, counted for the pass it is made in."""
        counted = _PASS_WRITES.get()
        if counted is not None:
            counted[0] += 1
        return await self.kube.patch_status(namespace, name, patch, resource_version)

    async def changed_meanwhile(self, key: Key, request: RequestView) -> Decision:
        """The request changed since the copy the pass decided on (a replica that took
        over wrote it, its owner edited it, the watch had not said so yet): nothing of
        the decision is done, and the pass is made again at once on the object as it
        is now. A deposed leader's last pass cannot overwrite its successor's status."""
        log.info("%s/%s: changed since read; deciding again", *key)
        fresh = await self.kube.training_request(*key)
        if fresh is not None:
            self.cache.put_request(fresh)
        return Decision(status=request.status, requeue_after=AT_ONCE)
