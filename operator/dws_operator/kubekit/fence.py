"""Whether this process may act: the check every mutation makes first.

Without leader election a process always may. With it, only while its Lease's last
renewal is younger than the renew deadline. The renewing task alone is not enough: a
process paused past its lease (a stopped VM, a frozen container) resumes with every
timer due at once, and a reconcile pass may run before the renewing task notices. So
every mutation (a call to a cloud API, a Kubernetes write) asks the fence first; a late
one ends the process instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol


class LeaseLost(Exception):
    """The holder could not renew within its renew deadline: it must stop acting now."""


class Holder(Protocol):
    def valid(self) -> bool:
        """Held, and renewed less than the renew deadline ago."""
        ...

    def describe(self) -> str: ...


class Fence:
    def __init__(self) -> None:
        self._holder: Holder | None = None
        self._on_lost: Callable[[LeaseLost], None] | None = None

    def arm(self, holder: Holder, on_lost: Callable[[LeaseLost], None]) -> None:
        self._holder, self._on_lost = holder, on_lost

    def disarm(self) -> None:
        self._holder = None
        self._on_lost = None

    def check(self) -> None:
        """Raise `LeaseLost` (after calling the armed `on_lost`, which normally ends the
        process) when this replica may no longer act."""
        holder = self._holder
        if holder is None or holder.valid():
            return
        lost = LeaseLost(f"{holder.describe()} not renewed in time")
        if self._on_lost is not None:
            self._on_lost(lost)
        raise lost


#: The process's fence (one Lease per process).
FENCE = Fence()
