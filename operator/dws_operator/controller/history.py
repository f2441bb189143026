"""The history of waits for capacity (`estimate.History`), kept in one ConfigMap in the
operator's namespace so it outlives the operator: read on first use, added to as passes
end asks for capacity, written back at most every `FLUSH_SECONDS` (and when the operator
stops). Only the replica that leads writes (the writes are fenced as every other).

A ConfigMap and not the requests' own status: requests are deleted, and their waits
should still count. Losing the newest few waits to a crash between writes costs an
estimate a little; it cannot make a request wrong, so writes are batched rather than one
per observation. A conflicting write (another writer in between) is merged: the stored
history is read again and this replica's unwritten waits added to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import Any

from dws_operator.controller.kube import ApiError, Conflict, KubeApi, NotFound
from dws_operator.estimate import Estimate, History, Wait

log = logging.getLogger(__name__)
#: The ConfigMap's name when the operator's settings give none.
DEFAULT_NAME = "dws-operator-capacity-history"
#: At most one write per this many seconds.
FLUSH_SECONDS = 30.0
#: A failed read is tried again after this many seconds.
READ_RETRY_SECONDS = 30.0


class CapacityHistory:
    def __init__(
        self,
        kube: KubeApi | None,
        namespace: str = "",
        name: str = DEFAULT_NAME,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self._kube = kube
        self._path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
        self._collection = f"/api/v1/namespaces/{namespace}/configmaps"
        self._name, self._namespace = name, namespace
        self._clock = clock
        self._history: History | None = None
        #: Waits added since the last write.
        self._unwritten: list[tuple[str, Wait]] = []
        self._written_at: float | None = None
        self._resource_version: str | None = None
        #: Passes run concurrently: one reads, adds or writes at a time, so no wait added
        #: while a write is on its way is lost with it.
        self._lock = asyncio.Lock()
        #: Whether the stored history has been read (always, with no ConfigMap); until
        #: then estimates rest on this process's waits only, and the read is tried again
        #: every READ_RETRY_SECONDS.
        self.read = kube is None
        self._read_again_at: float | None = None

    @classmethod
    def in_memory(cls) -> CapacityHistory:
        """A history of this process's waits only (no ConfigMap: tests, `-`)."""
        return cls(None)

    async def estimate(self, key: str) -> Estimate:
        async with self._lock:
            return (await self._loaded()).estimate(key)

    async def add(self, waits: Iterable[tuple[str, Wait]]) -> None:
        """Count waits that ended; written with the next flush (at once when none was
        written for FLUSH_SECONDS; else by `flush` from the operator's timer)."""
        added = list(waits)
        if not added:
            return
        async with self._lock:
            history = await self._loaded()
            for key, wait in added:
                history.add(key, wait)
            self._unwritten += added
            await self._flush(force=False)

    async def flush(self, force: bool = True) -> None:
        """Write the waits added since the last write, at most every FLUSH_SECONDS unless
        `force`. A failed write is logged and tried again later (the waits are kept)."""
        async with self._lock:
            await self._flush(force)

    async def _flush(self, force: bool) -> None:
        if self._kube is None:
            self._unwritten = []
        if not self._unwritten or self._history is None or not self.read:
            return  # nothing to write, or the stored history not read yet: kept for later
        now = self._clock() if self._clock is not None else None
        recent = (
            now is not None
            and self._written_at is not None
            and now - self._written_at < FLUSH_SECONDS
        )
        if recent and not force:
            return
        try:
            try:
                await self._write(self._history)
            except Conflict:
                # Someone else wrote it (or our last write went through unanswered): the
                # stored history, with ours added that it does not hold yet.
                stored = self._with_unwritten(await self._read())
                self._history = stored
                await self._write(stored)
        except ApiError as error:
            log.warning("capacity history: cannot write %s: %s", self._name, error)
            return
        self._unwritten = []
        self._written_at = now

    async def _loaded(self) -> History:
        if self._history is not None and (self.read or not self._read_due()):
            return self._history
        try:
            stored = await self._read()
        except ApiError as error:
            # No permission, say: estimates from what this process sees, until a read
            # goes through.
            if self._history is None:
                log.warning("capacity history: cannot read %s: %s", self._name, error)
                self._history = History()
            now = self._clock() if self._clock is not None else None
            self._read_again_at = now + READ_RETRY_SECONDS if now is not None else None
            return self._history
        # Waits this process saw before the read count too.
        self._history, self.read = self._with_unwritten(stored), True
        return self._history

    def _with_unwritten(self, stored: History) -> History:
        """`stored` with the waits added since the last write that it does not hold yet."""
        for key, wait in self._unwritten:
            if not any(_same(wait, w) for w in stored.waits.get(key, ())):
                stored.add(key, wait)
        return stored

    def _read_due(self) -> bool:
        if self._read_again_at is None or self._clock is None:
            return True
        return self._clock() >= self._read_again_at

    async def _read(self) -> History:
        if self._kube is None:
            return History()
        try:
            found = await self._kube.call("GET", self._path)
        except NotFound:
            self._resource_version = None
            return History()
        self._resource_version = (found.get("metadata") or {}).get("resourceVersion")
        return History.from_data(found.get("data"))

    async def _write(self, history: History) -> None:
        assert self._kube is not None
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": self._name,
                "namespace": self._namespace,
                "labels": {"app.kubernetes.io/managed-by": "dws-operator"},
            },
            "data": history.to_data(),
        }
        if self._resource_version is None:
            written = await self._kube.call("POST", self._collection, body=body)
        else:
            body["metadata"]["resourceVersion"] = self._resource_version
            written = await self._kube.call("PUT", self._path, body=body)
        self._resource_version = ((written or {}).get("metadata") or {}).get("resourceVersion")


def _same(one: Wait, other: Wait) -> bool:
    """The same wait, as the ConfigMap keeps it (milliseconds, whole seconds)."""
    return (round(one.seconds, 3), one.censored, int(one.at.timestamp())) == (
        round(other.seconds, 3),
        other.censored,
        int(other.at.timestamp()),
    )
