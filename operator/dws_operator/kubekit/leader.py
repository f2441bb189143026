"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.

Replicas of the operator compete for one Lease; only its holder reconciles. The rules
are client-go's `leaderelection` package's, so the operator behaves as every Kubernetes
controller does beside it:

- A candidate reads the Lease every `retry_period`. It takes the Lease when nobody holds
  it, or when the holder's record has not changed for the record's own
  `leaseDurationSeconds`, timed on the candidate's monotonic clock from when *it* saw
  the record change (so no two machines' clocks are ever compared). Every write carries
  the `resourceVersion` read, so of two candidates at once only one wins.
- The holder renews every `retry_period`. When it has not renewed for `renew_deadline`
  (less than the lease duration) it has lost the Lease and must stop acting at once:
  before any other candidate may take the Lease, `lease_duration - renew_deadline` later
  at the earliest.
- A holder that stops cleanly releases the Lease (no holder, one second), so a rolling
  update hands over at once instead of after a lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from dws_operator import rfc3339
from dws_operator.kubekit.api import Caller
from dws_operator.kubekit.fence import LeaseLost
from dws_operator.kubekit.transport import ApiError, Conflict, NotFound

log = logging.getLogger(__name__)

#: What one failed attempt at the Lease looks like: an answer that is not 2xx, or no
#: answer (connection refused or reset, a timeout). Either is one failed try, retried.
_FAILED_ATTEMPT = (ApiError, aiohttp.ClientError, OSError, TimeoutError)

#: client-go's (and controller-runtime's) defaults.
LEASE_DURATION_SECONDS = 15.0
RENEW_DEADLINE_SECONDS = 10.0
RETRY_PERIOD_SECONDS = 2.0
#: A candidate waits `retry_period` times up to this much more (client-go's JitterFactor),
#: so replicas started together do not ask in lockstep.
JITTER = 1.2
#: A Lease named after nothing in particular, when its holder names none.
LEASE_NAME = "leader"
#: Where a pod finds its own namespace.
_SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class Waitable(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class LeaseSettings:
    namespace: str
    identity: str
    name: str = LEASE_NAME
    duration: float = LEASE_DURATION_SECONDS
    renew_deadline: float = RENEW_DEADLINE_SECONDS
    retry_period: float = RETRY_PERIOD_SECONDS

    def __post_init__(self) -> None:
        # client-go refuses the same: a holder must give up before others may take over,
        # and must get more than one try before giving up. (Others time the holder by
        # `written_duration`, rounded up, so never for less than `duration`.)
        if not self.duration > self.renew_deadline:
            raise ValueError(
                f"lease duration {self.duration:g}s must be longer than the renew deadline "
                f"{self.renew_deadline:g}s"
            )
        if not self.renew_deadline > JITTER * self.retry_period:
            raise ValueError(
                f"renew deadline {self.renew_deadline:g}s must be longer than {JITTER:g} x "
                f"the retry period {self.retry_period:g}s"
            )
        if self.retry_period <= 0:
            raise ValueError(f"retry period {self.retry_period:g}s must be positive")

    @property
    def written_duration(self) -> int:
        """`leaseDurationSeconds` as written: whole seconds, never shorter than asked."""
        return max(1, math.ceil(self.duration))


def default_identity() -> str:
    """The pod's name (its hostname in Kubernetes) and a per-process suffix, as client-go
    recommends: a restarted container is another candidate than the one it replaces."""
    host = os.environ.get("POD_NAME") or socket.gethostname()
    return f"{host}_{uuid.uuid4().hex[:12]}"


def default_namespace() -> str:
    """The pod's own namespace (POD_NAMESPACE, else its service account's), else
    `default` for an operator run outside a cluster."""
    given = os.environ.get("POD_NAMESPACE")
    if given:
        return given
    with contextlib.suppress(OSError):
        return _SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    return "default"


def _micro_time(at: datetime) -> str:
    """A `MicroTime` as the API server writes it."""
    return rfc3339.microseconds(at)


def _record(lease: Mapping[str, Any]) -> tuple[Any, ...]:
    """What of a Lease says whether its holder is alive: any change is a sign of life."""
    spec = lease.get("spec") or {}
    return (
        spec.get("holderIdentity") or "",
        spec.get("leaseDurationSeconds"),
        spec.get("acquireTime"),
        spec.get("renewTime"),
        spec.get("leaseTransitions"),
    )


class LeaderElector:
    """Takes, keeps and releases the Lease for one replica."""

    def __init__(
        self,
        kube: Caller,
        settings: LeaseSettings,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.settings = settings
        self._clock = clock
        self._now = now
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self.holder = ""

    @property
    def _path(self) -> str:
        s = self.settings
        return f"/apis/coordination.k8s.io/v1/namespaces/{s.namespace}/leases/{s.name}"

    @property
    def _collection(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.settings.namespace}/leases"

    @property
    def leading(self) -> bool:
        return self.holder == self.settings.identity

    def describe(self) -> str:
        return f"lease {self.settings.namespace}/{self.settings.name}"

    def valid(self) -> bool:
        """Held, and renewed less than the renew deadline ago."""
        renewed = self._renewed_at
        return (
            self.leading
            and renewed is not None
            and self._clock() - renewed < self.settings.renew_deadline
        )

    async def acquire(self, stop: Waitable | None = None) -> bool:
        """Wait until this replica holds the Lease (True), or `stop` is set (False)."""
        announced = ""
        while stop is None or not stop.is_set():
            if await self.try_acquire_or_renew():
                log.info("leader election: %s holds lease %s/%s", *self._who())
                return True
            if self.holder and self.holder != announced:
                log.info("leader election: waiting; %s holds the lease", self.holder)
                announced = self.holder
            await asyncio.sleep(self.settings.retry_period * random.uniform(1.0, JITTER))
        return False

    async def keep(self) -> None:
        """Renew every retry period; raise `LeaseLost` once `renew_deadline` has passed
        since the last renewal (each call is cut off at that deadline too)."""
        settings = self.settings
        while True:
            await asyncio.sleep(settings.retry_period)
            renewed = self._renewed_at if self._renewed_at is not None else self._clock()
            deadline = renewed + settings.renew_deadline
            while True:
                left = deadline - self._clock()
                if left <= 0:
                    raise LeaseLost(
                        f"lease {settings.namespace}/{settings.name} not renewed for "
                        f"{settings.renew_deadline:g}s (holder now {self.holder or 'unknown'})"
                    )
                try:
                    # asyncio.timeout, not wait_for: on Python 3.11 wait_for may swallow
                    # a cancellation that comes as the call ends (a stopping replica).
                    async with asyncio.timeout(left):
                        renewed_now = await self.try_acquire_or_renew()
                except TimeoutError:
                    continue
                if renewed_now:
                    break
                if self.holder and not self.leading:
                    raise LeaseLost(f"lease {settings.name} was taken by {self.holder}")
                await asyncio.sleep(min(settings.retry_period, max(deadline - self._clock(), 0)))

    async def release(self) -> None:
        """Give the Lease up (on a clean stop), if still held: the next may take it now."""
        if not self.leading:
            return
        try:
            lease = await self.kube.call("GET", self._path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.settings.identity:
                return
            now = _micro_time(self._now())
            lease["spec"] = {**spec, "holderIdentity": "", "leaseDurationSeconds": 1}
            lease["spec"]["renewTime"] = lease["spec"]["acquireTime"] = now
            await self.kube.call("PUT", self._path, body=lease, fenced=False)
            self.holder = ""
            log.info("leader election: released lease %s/%s", *self._who()[1:])
        except _FAILED_ATTEMPT as error:
            # The others take over after a lease duration instead.
            log.warning("leader election: releasing the lease failed: %s", _why(error))

    async def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this replica holds the Lease afterwards."""
        settings = self.settings
        # A renewal counts from before it was asked: the others count from when they
        # see it, which is later, so this replica always gives up first.
        asked_at = self._clock()
        now = self._now()
        mine = {
            "holderIdentity": settings.identity,
            "leaseDurationSeconds": settings.written_duration,
            "acquireTime": _micro_time(now),
            "renewTime": _micro_time(now),
            "leaseTransitions": 0,
        }
        try:
            lease = await self.kube.call("GET", self._path)
        except NotFound:
            return await self._create(mine, asked_at)
        except _FAILED_ATTEMPT as error:
            log.warning("leader election: reading the lease failed: %s", _why(error))
            return False
        record = _record(lease)
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        self.holder = holder
        held_for = float(spec.get("leaseDurationSeconds") or 0)
        alive = self._observed_at + held_for > self._clock()
        if holder and holder != settings.identity and alive:
            return False  # its holder is alive, as far as this replica can tell
        if holder == settings.identity:
            mine["acquireTime"] = spec.get("acquireTime") or mine["acquireTime"]
            mine["leaseTransitions"] = int(spec.get("leaseTransitions") or 0)
        else:
            mine["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**spec, **mine}
        try:
            # resourceVersion is in the body: a write since the GET answers 409.
            written = await self.kube.call("PUT", self._path, body=lease, fenced=False)
        except Conflict:
            return False
        except _FAILED_ATTEMPT as error:
            log.warning("leader election: writing the lease failed: %s", _why(error))
            return False
        self._took(written, asked_at)
        return True

    async def _create(self, mine: dict[str, Any], asked_at: float) -> bool:
        settings = self.settings
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": settings.name, "namespace": settings.namespace},
            "spec": mine,
        }
        try:
            written = await self.kube.call("POST", self._collection, body=lease, fenced=False)
        except Conflict:
            return False  # another replica created it first
        except _FAILED_ATTEMPT as error:
            log.warning("leader election: creating the lease failed: %s", _why(error))
            return False
        self._took(written, asked_at)
        return True

    def _took(self, written: Mapping[str, Any], asked_at: float) -> None:
        self._observed, self._observed_at = _record(written), self._clock()
        self._renewed_at = asked_at
        self.holder = self.settings.identity

    def _who(self) -> tuple[str, ...]:
        s = self.settings
        return s.identity, s.namespace, s.name


def _why(error: BaseException) -> str:
    if isinstance(error, ApiError):
        return f"{error.status} {error.reason}"
    return repr(error)
