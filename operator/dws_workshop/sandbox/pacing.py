"""The sandbox's clock for a long run: days of a segment skipped, its rollover watched.

A long run's segment runs for days of simulated time with nothing to see; what matters
is its end: the next segment's pools made `requestAhead` before the stop, the stop
`stopBefore` before the VMs end, the next segment starting. `skip_to_the_rollover`
moves the emulator's clock (which the operator, the autoscaler and the simulated
workload all read) straight to a little before the first of those, and the clock then
runs at its own pace through them, so the stop is taken in a pass that is seconds of
simulated time, not hours.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from dws_operator import rfc3339
from dws_operator.durations import parse_duration
from dws_operator.reconcile import STOP_LEAD_SECONDS
from dws_workshop.emulator.clock import SimClock
from dws_workshop.simulator.autoscaler import Autoscaler

#: How far before the next segment's pools are due the clock is moved to.
MARGIN = timedelta(minutes=2)


def rollover_due(
    spec: Mapping[str, Any], status: Mapping[str, Any], finishes: datetime | None = None
) -> datetime | None:
    """A little before the running segment's rollover begins (its next pools made), or
    before its run's duration is used up, or (`finishes`: when the workload will have
    done its work, if the caller knows) before it finishes; None when no segment runs
    with a known end."""
    run = spec.get("run") or {}
    records = status.get("segments") or []
    if not run.get("duration") or not records or status.get("phase") != "Running":
        return None
    last = records[-1]
    if last.get("outcome") or not last.get("endsAt") or not last.get("startedAt"):
        return None
    ends = rfc3339.parse(last["endsAt"])
    stop = ends - parse_duration(run.get("stopBefore", "10m"))
    stop -= timedelta(seconds=STOP_LEAD_SECONDS)
    ahead = stop - parse_duration(run.get("requestAhead", "30m"))
    trained = timedelta(seconds=float(status.get("trainedSeconds") or 0))
    budget = rfc3339.parse(last["startedAt"]) + parse_duration(run["duration"]) - trained
    return min(ahead, budget, finishes or budget) - MARGIN


def skip_to_the_rollover(
    clock: SimClock,
    spec: Mapping[str, Any],
    status: Mapping[str, Any],
    finishes: datetime | None = None,
) -> float:
    """Move `clock` on to a little before the running segment's rollover (or the
    workload's finish); the simulated seconds skipped (0 when there is nothing to skip
    to, or it is passed)."""
    due = rollover_due(spec, status, finishes)
    if due is None:
        return 0.0
    skip = (due - clock.utc()).total_seconds()
    if skip <= 0:
        return 0.0
    clock.jump(skip)
    return skip


def finish_of(autoscaler: Autoscaler, clock: SimClock, item: dict[str, Any]) -> datetime | None:
    """When the run's simulated workload will have done its work, at the pace it runs
    now; None before it has run."""
    key = (item["metadata"]["namespace"], item["spec"].get("checkpointDir", ""))
    record = autoscaler.workloads.record(key)
    if record is None:
        return None
    left = record.work - autoscaler.workloads.progress(key, clock.now())
    return clock.utc() + timedelta(seconds=max(left, 0.0))
