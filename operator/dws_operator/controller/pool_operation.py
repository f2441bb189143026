"""A node pool operation as the operation scheduler (`controller.operations`) keeps it:
while it waits and runs, the calls it makes (`Step`), the work before its first call
(`Preparation`), its priority, its place in line and its progress, and what calls it
off (`CalledOff`); once it ended, what is remembered of it (`Outcomes`); its log lines'
fields, and the scheduler's counts."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import IntEnum

from dws_operator.controller.cache import Key
from dws_operator.gke import GkeError
from dws_operator.gke.client import Operation

log = logging.getLogger(__name__)

#: How long `done_lately` remembers an operation.
DONE_MEMORY_SECONDS = 600.0

#: One call to GKE: the operation it started, or None when nothing needed doing.
Step = Callable[[], Awaitable[Operation | None]]
#: Work outside GKE that must be done before an operation's first call (a finalizer).
Preparation = Callable[[], Awaitable[None]]


class CalledOff(Exception):
    """Raised by an operation's first step: the operation is no longer wanted (the
    request it was for is gone, or being deleted before anything was made for it). It
    ends at once, GKE untouched."""


class Priority(IntEnum):
    """Lower goes first: what stops the bill before what starts one."""

    RELEASE = 0
    CREATE = 1


@dataclass
class PoolOperation:
    pool: str
    #: What it does, for status messages and logs: Create, ScaleDown, Delete.
    kind: str
    owner: Key
    priority: Priority
    #: Orders operations of one priority: the request's creation time (RFC 3339).
    since: str
    #: Calls made one after another in one slot (scale to zero: cap, then resize).
    steps: tuple[Step, ...]
    #: Done while the operation is among the next in line, so that none of GKE's slots
    #: is held for it; awaited before the first step.
    prepare: Preparation | None = None
    preparing: asyncio.Future[None] | None = None
    step: int = 0
    order: tuple[int, str, int] = (0, "", 0)
    running: str | None = None
    #: When the running call was accepted (scheduler clock), and GKE's type for it.
    started_at: float = 0.0
    running_type: int = 0
    looked_at: float = 0.0
    attempts: int = 0
    not_before: float = 0.0
    last_error: GkeError | None = None


@dataclass
class SchedulerStats:
    started: int = 0
    too_many_operations: int = 0
    max_running: int = 0
    looks: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def log_fields(operation: PoolOperation) -> dict[str, str]:
    """A log record's fields for `operation` (see `controller.logs`)."""
    fields = {"pool": operation.pool, "operation": operation.kind}
    fields["request"] = "/".join(operation.owner)
    return fields


def log_failure(operation: PoolOperation, error: GkeError) -> None:
    log.warning(
        "%s of node pool %s failed: %s",
        operation.kind,
        operation.pool,
        error,
        extra=log_fields(operation),
    )


class Outcomes:
    """What the scheduler remembers of the operations that ended: the terminal error
    each ended with, for the request it was for, and which pool lately saw which kind
    end well."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        #: Terminal errors by pool, with the request they are for.
        self._errors: dict[str, tuple[Key, GkeError]] = {}
        #: The last operation each pool saw end well, and when (pruned as it is read).
        self._done_at: dict[str, tuple[str, float]] = {}

    def failed(self, operation: PoolOperation, error: GkeError) -> None:
        self._errors[operation.pool] = (operation.owner, error)

    def forget_error(self, pool: str) -> None:
        self._errors.pop(pool, None)

    def take_error(self, pool: str, owner: Key) -> GkeError | None:
        """The terminal error `owner`'s operation on `pool` ended with, once. Another
        request's (a sweep's delete, an old holder's) is not handed to it, and goes."""
        found = self._errors.pop(pool, None)
        return found[1] if found is not None and found[0] == owner else None

    def done(self, operation: PoolOperation) -> None:
        self._done_at[operation.pool] = (operation.kind, self._clock())

    def done_lately(self, pool: str, kind: str, within: float) -> bool:
        """Whether an operation of `kind` on `pool` ended well less than `within` s ago."""
        done = self._done_at.get(pool)
        if done is None:
            return False
        if self._clock() - done[1] > DONE_MEMORY_SECONDS:
            del self._done_at[pool]
            return False
        return done[0] == kind and self._clock() - done[1] < within
