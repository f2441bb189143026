"""The line of node pool operations waiting for one of GKE's slots, shared fairly.

GKE runs a cluster's node pool operations a few at a time, for every tenant of the
cluster together. Served strictly by the request's creation time, one namespace that
applies a thousand requests holds every slot until the thousandth is served, and
another namespace's five wait behind all of them. So each namespace has its own line
(by priority, then creation time), and the lines are served in turn: a free slot goes
to the most urgent operation waiting (what stops a bill before what starts one, whoever
asks), then to the namespace served least recently, and within a namespace to its
oldest request. A namespace alone in the line gets every slot.

The place an operation is told (its request's status) follows the same turns: exactly
while no more urgent operation waits (one that does goes first and moves its namespace's
turn), an estimate otherwise.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from dataclasses import dataclass

#: How an operation is ordered within its namespace: priority, request creation time
#: (RFC 3339), then the order it was asked in.
Order = tuple[int, str, int]


@dataclass(frozen=True, order=True)
class Entry:
    order: Order
    pool: str


class FairLine:
    """Waiting operations by namespace: places and turns in O(namespaces x log n); taking
    one passes over the operations backing off at the head of each namespace's line."""

    def __init__(self) -> None:
        self._lines: dict[str, list[Entry]] = {}
        self._count = 0
        #: When each namespace last had an operation started (a count of starts).
        self._served: dict[str, int] = {}
        self._starts = 0

    def __len__(self) -> int:
        return self._count

    def add(self, tenant: str, entry: Entry) -> None:
        bisect.insort(self._lines.setdefault(tenant, []), entry)
        self._count += 1

    def remove(self, tenant: str, entry: Entry) -> int:
        """Take `entry` out of the line; its index in its namespace's line, or -1."""
        line = self._lines.get(tenant, [])
        index = bisect.bisect_left(line, entry)
        if index == len(line) or line[index] != entry:
            return -1
        del line[index]
        self._count -= 1
        if not line:
            del self._lines[tenant]
        return index

    def take(self, ready: Callable[[Entry], bool]) -> Entry | None:
        """Out of the line, the operation to start now: of each namespace's first ready
        operation, the most urgent, then the one whose namespace was served least
        recently (never before first), then the oldest request. None when none is ready."""
        best: tuple[tuple[int, int, str, int], str, Entry] | None = None
        for tenant, line in self._lines.items():
            entry = next((e for e in line if ready(e)), None)
            if entry is None:
                continue
            key = (entry.order[0], *self._rotation(tenant, entry.order))
            if best is None or key < best[0]:
                best = (key, tenant, entry)
        if best is None:
            return None
        _, tenant, entry = best
        self.remove(tenant, entry)
        self._served[tenant] = self._starts
        self._starts += 1
        return entry

    def position(self, tenant: str, order: Order) -> int:
        """Where an operation ordered `order` of `tenant` stands (1 = next), whether or
        not it is in the line: those of a more urgent priority, then the turns."""
        priority = order[0]
        own = self._lines.get(tenant, [])
        turn = bisect.bisect_left(own, Entry(order, "")) - _first_of(own, priority)
        first = _first_of(own, priority)
        head = own[first].order if first < len(own) and own[first].order < order else order
        rotation = self._rotation(tenant, head)
        ahead = 0
        for other, line in self._lines.items():
            first = _first_of(line, priority)
            ahead += first
            if other == tenant:
                ahead += turn
                continue
            same = _first_of(line, priority + 1) - first
            ahead += min(same, turn)
            if same > turn:
                ahead += self._rotation(other, line[first].order) < rotation
        return ahead + 1

    def _rotation(self, tenant: str, head: Order) -> tuple[int, str, int]:
        """Where `tenant` comes in each turn, its first waiting operation being `head`:
        the namespace served least recently first; among those never served, the one
        whose oldest request is oldest."""
        return (self._served.get(tenant, -1), head[1], head[2])

    def first(self, count: int) -> list[Entry]:
        """The next `count` operations in the order of their places."""
        candidates = [
            (entry.order[0], turn, self._rotation(tenant, head), entry)
            for tenant, line in self._lines.items()
            for turn, entry, head in _turns(line, count)
        ]
        candidates.sort(key=lambda c: c[:3])
        return [c[3] for c in candidates[:count]]

    def every_doubling(self) -> Iterator[Entry]:
        """Each namespace's operations at its places 1, 2, 4, 8...: when one leaves the
        line, waking only these keeps the places told close to true at O(log n) passes
        each, not O(n)."""
        for line in self._lines.values():
            index = 1
            while index - 1 < len(line):
                yield line[index - 1]
                index *= 2


def _first_of(line: list[Entry], priority: int) -> int:
    """Index of `line`'s first entry of `priority` or later (the line is sorted)."""
    return bisect.bisect_left(line, Entry((priority, "", -1), ""))


def _turns(line: list[Entry], count: int) -> Iterator[tuple[int, Entry, Order]]:
    """`line`'s first `count` entries, each with its turn within its priority and the
    first entry of that priority."""
    turn, head = 0, None
    for entry in line[:count]:
        if head is not None and entry.order[0] == head[0]:
            turn += 1
        else:
            turn, head = 0, entry.order
        yield turn, entry, head
