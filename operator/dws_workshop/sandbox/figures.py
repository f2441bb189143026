"""The arithmetic of a load run: percentiles, and the lower bounds GKE's limits allow. Pure.

GKE runs at most `quota` node pool operations of a cluster at once (5 by default), each
taking its time, so a batch of operations cannot finish sooner than these bounds, however
good the operator is; the load run reports its figures beside them.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks, as
    numpy's default; None for no values."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile {q} is not within 0..100")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def quota_bound(operations: int, quota: int, duration: float) -> float:
    """The least time `operations` of `duration` each take with `quota` at once:
    ceil(operations / quota) rounds of one duration."""
    if quota < 1:
        raise ValueError(f"quota {quota} must be at least 1")
    return math.ceil(operations / quota) * duration if operations > 0 else 0.0


def mixed_bound(
    creates: int, updates: int, quota: int, create_duration: float, update_duration: float
) -> float:
    """The least time creates and updates together take through one quota.

    Each kind alone needs its own rounds, and together they cannot beat their total work
    spread over every slot: the largest of the three is a lower bound (with creates only,
    exactly `quota_bound` of the creates).
    """
    work = (creates * create_duration + updates * update_duration) / quota
    return max(
        quota_bound(creates, quota, create_duration),
        quota_bound(updates, quota, update_duration),
        work,
    )


def queue_latencies(arrivals: Sequence[float], quota: int, duration: float) -> list[float]:
    """Each operation's least latency (arrival -> done) when operations of `duration`
    arrive at `arrivals` and at most `quota` run at once, first come first served.

    Operations of equal length served in arrival order, each on the slot that frees
    first: no schedule finishes the k-th arrival sooner. Returned in arrival order.
    """
    if quota < 1:
        raise ValueError(f"quota {quota} must be at least 1")
    slots = [-math.inf] * quota  # when each slot is free again (a min-heap)
    latencies = []
    for arrival in sorted(arrivals):
        free = heapq.heappop(slots)
        done = max(free, arrival) + duration
        heapq.heappush(slots, done)
        latencies.append(done - arrival)
    return latencies


def rounded(value: float | None, digits: int = 3) -> float | None:
    """For the JSON line: None stays None (a figure that could not be measured)."""
    return None if value is None else round(value, digits)
