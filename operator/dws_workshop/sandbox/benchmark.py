"""One scale point of the load benchmark: a fresh testbed, three waves, one
dict of figures.

1. Intake and first wave: `requests` TrainingRequests (ten shapes, round-robin) created
   at `rate` per second while GKE has no capacity for any; wait until every one has its
   capacity requested (`gke_view`).
2. Steady wait: `steady_seconds` with nothing changing; GKE calls per second and the
   operator's CPU and memory.
3. Completion wave: capacity arrives for all, pods end after `sim_duration`; each
   request's Job finished -> its pool back at zero.
4. Second wave: the same shapes again, capacity off again; creates and updates GKE
   saw, and the time until every request has its capacity requested.

Time base: wall seconds (`time.time()`), with GKE's operations lasting their simulated
durations divided by the clock factor; every bound is in the same base.

The figures (`_s`: seconds; None: could not be measured, e.g. not every request got there):

- `intake_p50_s`, `intake_p99_s`: create call returned -> first status the operator wrote,
  seen through a watch; `intake_operator_cpu_s`: operator CPU from the wave's start until
  every first status was in (read once a second, so up to a second too much).
- `creates`: CreateNodePool calls GKE accepted in the first wave; `capacity_requested_s`:
  wave start (first create call) -> the last request had its capacity requested;
  `capacity_requested_bound_s`: ceil(creates / quota) x create duration.
- `steady_gke_calls_per_s` (GKE and Compute calls), `steady_operator_cpu_percent` (of one
  core), `operator_rss_mib` / `operator_peak_rss_mib` (VmRSS / VmHWM at the window's end).
- `job_finished_to_zero_p99_s`: the request's Job first seen complete -> its pool at zero
  (autoscaling maximum 0 and no nodes, or deleted) in the emulator, at the end of the
  pool's last operation; `..._bound_p99_s`: the p99 of the least latencies if each pool
  needed two update operations in a row from its Job's end (cap the autoscaler, resize
  to zero: neither alone stops the bill on GKE), `quota` at once, first come first served.
- `wave2_*`: the second wave's creates, updates (autoscaling, size, update calls) and
  deletes GKE accepted, the time until all had capacity requested, and its bound
  (`figures.mixed_bound` of those creates and updates); `wave2_idle_pools_at_start`.
- `max_operations_in_flight`, `mutations`, `resource_exhausted` (mutations answered so),
  `gke_calls`: over the whole point.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import grpc
from google.cloud import container_v1

from dws_workshop.emulator.server import CallRecord
from dws_workshop.sandbox.figures import (
    mixed_bound,
    percentile,
    queue_latencies,
    quota_bound,
    rounded,
)
from dws_workshop.sandbox.gke_view import GkeSnapshot, snapshot
from dws_workshop.sandbox.load import Fleet
from dws_workshop.sandbox.process_usage import MIB
from dws_workshop.sandbox.shapes import SHAPES, Shape
from dws_workshop.sandbox.testbed import (
    CREATE_METHODS,
    DELETE_METHODS,
    MUTATIONS,
    UPDATE_METHODS,
    GkeLimits,
    Testbed,
)

#: Seconds between looks at the fleet and GKE while a wave runs. The times measured come
#: from watch events and GKE's own operation times, not from these looks, and a look is
#: not free: it copies every pool and operation out of the emulator (this process, under
#: the emulator's lock, thousands of them late in a run), during which GKE answers
#: nobody. So it is rare; only while the operator's intake CPU is to be read is it quick.
LOOK_SECONDS = 5.0
INTAKE_LOOK_SECONDS = 1.0


@dataclass(frozen=True)
class PointOptions:
    requests: int
    rate: float = 50.0
    steady_seconds: float = 60.0
    limits: GkeLimits = field(default_factory=GkeLimits)
    #: How long each pod runs once it has a node (kwok's clock: wall seconds).
    sim_duration: str = "2s"
    #: A wave is given up after this many times its bound (plus its creation time and a
    #: minute), and the figures say how many requests got there.
    timeout_factor: float = 4.0
    #: The later phases; a quick check (e.g. steady calls at two sizes) may skip them.
    completion_wave: bool = True
    second_wave: bool = True
    #: The operator's DWS_POOL_IDLE_SECONDS: longer than a completion wave, so the second
    #: wave measures reuse rather than idle pools deleted meanwhile (the default, 300 s,
    #: is shorter than a 1,000-request completion wave on this testbed).
    pool_idle_seconds: float = 3600.0
    #: The interpreter the operator runs with (see `Testbed.operator_python`).
    operator_python: str = sys.executable


class Point:
    """One scale point on its own testbed; `run` returns its figures."""

    def __init__(
        self, options: PointOptions, workdir: Path, say: Callable[[str], None] = print
    ) -> None:
        self.options = options
        self.limits = options.limits
        self.workdir = workdir
        self.say = say
        self.nodes: dict[str, int] = {s.name: s.nodes() for s in SHAPES}
        self.figures: dict[str, Any] = {}
        #: Per request, after `run`: what the watches saw and when it got where.
        self.rows: list[dict[str, Any]] = []
        self._requested: dict[str, float] = {}
        self._at_zero: dict[str, float] = {}
        #: Every GKE call the emulator answered, after `run` (see `call_row`).
        self.calls: list[dict[str, Any]] = []

    def run(self) -> dict[str, Any]:
        options, limits = self.options, self.limits
        self.figures = {
            "requests": options.requests,
            "rate_per_s": options.rate,
            "clock_factor": limits.clock_factor,
            "quota": limits.concurrent_operations,
            "pool_idle_s": options.pool_idle_seconds,
            "time_base": "wall seconds; GKE operations last simulated seconds / clock_factor",
            "operation_s": {
                "create": limits.real(limits.create_seconds),
                "update": limits.real(limits.update_seconds),
                "delete": limits.real(limits.delete_seconds),
            },
        }
        began = time.monotonic()
        env = {"DWS_POOL_IDLE_SECONDS": f"{options.pool_idle_seconds:g}"}
        with Testbed(
            limits, self.workdir, operator_env=env, operator_python=options.operator_python
        ) as bed:
            self.say(f"testbed up in {time.monotonic() - began:.1f}s (logs in {self.workdir})")
            with Fleet(bed.cluster.api_client, bed.namespace) as fleet:
                self._first_wave(bed, fleet)
                self._steady(bed)
                if self.options.completion_wave:
                    self._completion(bed, fleet)
                if self.options.second_wave:
                    self._second_wave(bed, fleet)
                self.figures["watch_errors"] = len(fleet.errors)
                self.rows = [
                    {
                        **asdict(r),
                        "shape": r.shape.name,
                        "capacity_requested_at": self._requested.get(r.name),
                        "at_zero_at": self._at_zero.get(r.name),
                    }
                    for r in fleet.records()
                ]
            self._totals(bed)
        return self.figures

    # Waves -------------------------------------------------------------------

    def _first_wave(self, bed: Testbed, fleet: Fleet) -> None:
        count, limits = self.options.requests, self.limits
        cpu_before = bed.operator_usage().cpu
        mark, since = len(bed.emulator.calls), time.time()
        self.say(f"wave 1: creating {count} requests at {self.options.rate:g}/s")
        fleet.create_wave(1, count, self.options.rate, self.options.sim_duration)
        creates_bound = quota_bound(
            count, limits.concurrent_operations, limits.real(limits.create_seconds)
        )
        reached, intake_cpu = self._wait_requested(bed, fleet, 1, since, creates_bound)
        self._requested |= reached
        records = fleet.records(1)
        intake = [
            max(r.first_status_at - r.created_at, 0.0)
            for r in records
            if r.first_status_at is not None and r.created_at is not None
        ]
        creates = self._ok_calls(bed, CREATE_METHODS, mark)
        self.figures |= {
            "intake_p50_s": rounded(percentile(intake, 50)),
            "intake_p99_s": rounded(percentile(intake, 99)),
            "intake_seen": len(intake),
            "intake_operator_cpu_s": rounded(
                None if intake_cpu is None else intake_cpu - cpu_before
            ),
            "creates": creates,
            "capacity_requested": len(reached),
            "capacity_requested_s": rounded(_span(since, reached, count)),
            "capacity_requested_bound_s": rounded(
                quota_bound(
                    creates, limits.concurrent_operations, limits.real(limits.create_seconds)
                )
            ),
        }

    def _steady(self, bed: Testbed) -> None:
        seconds = self.options.steady_seconds
        self.say(f"steady: {seconds:g}s of waiting")
        emulator = bed.emulator
        calls = len(emulator.calls) + len(emulator.compute.calls)
        before, began = bed.operator_usage(), time.monotonic()
        # The measurement is this window itself: nothing to wait for but time.
        time.sleep(seconds)
        after, elapsed = bed.operator_usage(), time.monotonic() - began
        calls = len(emulator.calls) + len(emulator.compute.calls) - calls
        self.figures |= {
            "steady_s": rounded(elapsed, 1),
            "steady_gke_calls_per_s": rounded(calls / elapsed),
            "steady_operator_cpu_percent": rounded(100 * (after.cpu - before.cpu) / elapsed, 2),
            "operator_rss_mib": rounded(after.rss / MIB, 1),
            "operator_peak_rss_mib": rounded(after.peak_rss / MIB, 1),
        }

    def _completion(self, bed: Testbed, fleet: Fleet) -> None:
        limits, count = self.limits, self.options.requests
        self.say("completion wave: capacity for everyone")
        since = time.time()
        bed.capacity.on()
        update = limits.real(limits.update_seconds)
        deadline = self._deadline(quota_bound(count, limits.concurrent_operations, 2 * update))
        at_zero: dict[str, float] = {}
        while True:
            records = [r for r in fleet.records(1) if r.name not in at_zero]
            gke = snapshot(bed.emulator)
            now = time.time()
            for record in records:
                if record.job_finished_at is None:
                    continue
                zero = gke.at_zero_at(record, since, now)
                if zero is not None:
                    at_zero[record.name] = zero
            if len(at_zero) == count or self._past(deadline, bed):
                break
            time.sleep(LOOK_SECONDS)
        self._at_zero = at_zero
        finished = {r.name: r.job_finished_at for r in fleet.records(1)}
        latencies = [
            max(zero - done, 0.0)
            for name, zero in at_zero.items()
            if (done := finished.get(name)) is not None
        ]
        ends = [t for t in finished.values() if t is not None]
        # Two operations per pool, one after the other: capping the autoscaler (else it
        # adds nodes back for any pending pod) and resizing to zero (else idle nodes stay
        # until the autoscaler's 10-minute scale-down delay).
        bound = queue_latencies(ends, limits.concurrent_operations, 2 * update)
        self.figures |= _completion_breakdown(
            snapshot(bed.emulator), fleet, at_zero, since, limits.concurrent_operations
        )
        self.figures |= {
            "jobs_finished": len(ends),
            "pools_at_zero": len(at_zero),
            "job_finished_to_zero_p50_s": rounded(percentile(latencies, 50)),
            "job_finished_to_zero_p99_s": rounded(percentile(latencies, 99)),
            "job_finished_to_zero_bound_p99_s": rounded(percentile(bound, 99)),
        }

    def _second_wave(self, bed: Testbed, fleet: Fleet) -> None:
        limits, count = self.limits, self.options.requests
        bed.capacity.off()
        gke = snapshot(bed.emulator)
        idle = sum(1 for p in gke.pools.values() if p.running and p.nodes == 0)
        mark, since = len(bed.emulator.calls), time.time()
        self.say(f"wave 2: {count} requests of the same shapes ({idle} idle pools)")
        fleet.create_wave(2, count, self.options.rate, self.options.sim_duration)
        create, update = limits.real(limits.create_seconds), limits.real(limits.update_seconds)
        guess = quota_bound(count, limits.concurrent_operations, create)
        reached, _ = self._wait_requested(bed, fleet, 2, since, guess)
        self._requested |= reached
        creates = self._ok_calls(bed, CREATE_METHODS, mark)
        updates = self._ok_calls(bed, UPDATE_METHODS, mark)
        self.figures |= {
            "wave2_idle_pools_at_start": idle,
            "wave2_creates": creates,
            "wave2_updates": updates,
            "wave2_deletes": self._ok_calls(bed, DELETE_METHODS, mark),
            "wave2_capacity_requested": len(reached),
            "wave2_capacity_requested_s": rounded(_span(since, reached, count)),
            "wave2_capacity_requested_bound_s": rounded(
                mixed_bound(creates, updates, limits.concurrent_operations, create, update)
            ),
        }

    def _totals(self, bed: Testbed) -> None:
        emulator = bed.emulator
        mutations = [c for c in emulator.calls if c.method in MUTATIONS]
        exhausted = [c for c in mutations if c.code == grpc.StatusCode.RESOURCE_EXHAUSTED]
        self.figures |= {
            "max_operations_in_flight": emulator.max_operations_in_flight(),
            "mutations": len(mutations),
            "resource_exhausted": len(exhausted),
            "gke_calls": len(emulator.calls),
        }
        # The emulator's clock is monotonic; one offset puts its calls on the wall clock.
        offset = time.time() - time.monotonic()
        self.calls = [call_row(call, offset) for call in emulator.calls]

    # Helpers -----------------------------------------------------------------

    def _wait_requested(
        self, bed: Testbed, fleet: Fleet, wave: int, since: float, bound: float
    ) -> tuple[dict[str, float], float | None]:
        """Each request's capacity-requested time, for those that got there before the
        wave's deadline; and the operator's CPU seconds when every first status was in."""
        count = self.options.requests
        deadline = self._deadline(bound)
        reached: dict[str, float] = {}
        intake_cpu: float | None = None
        while True:
            records = fleet.records(wave)
            if intake_cpu is None and all(r.first_status_at is not None for r in records):
                intake_cpu = bed.operator_usage().cpu
            gke = snapshot(bed.emulator)
            for record in records:
                if record.name in reached:
                    continue
                at = gke.capacity_requested_at(record, self._needed(record.shape), since)
                if at is not None:
                    reached[record.name] = at
            if len(reached) == count or self._past(deadline, bed):
                if len(reached) < count:
                    self.say(f"wave {wave}: {len(reached)}/{count} got there before the deadline")
                return reached, intake_cpu
            time.sleep(INTAKE_LOOK_SECONDS if intake_cpu is None else LOOK_SECONDS)

    def _needed(self, shape: Shape) -> int:
        return self.nodes[shape.name]

    def _deadline(self, bound: float) -> float:
        creating = self.options.requests / self.options.rate
        return time.monotonic() + self.options.timeout_factor * (bound + creating) + 60.0

    def _past(self, deadline: float, bed: Testbed) -> bool:
        bed.operator_usage()  # raises, with the operator's log, if it died
        return time.monotonic() > deadline

    @staticmethod
    def _ok_calls(bed: Testbed, methods: Sequence[str], mark: int) -> int:
        """Calls of `methods` GKE accepted after the first `mark` calls of its log."""
        return sum(1 for c in bed.emulator.calls[mark:] if c.method in methods and c.ok)


def call_row(call: CallRecord, offset: float) -> dict[str, Any]:
    """One GKE call as the emulator answered it, times on the wall clock: what it named
    (a pool, an operation), and the operation it started, if any."""
    request, response = call.request, call.response
    row: dict[str, Any] = {
        "method": call.method,
        "code": call.code.name,
        "started": round(call.started + offset, 4),
        "duration": round(call.duration, 4),
        "name": str(getattr(request, "name", "") or getattr(request, "parent", "")),
    }
    if isinstance(response, container_v1.Operation):
        row |= {
            "operation": response.name,
            "status": response.status.name,
            "operation_start": response.start_time,
            "operation_end": response.end_time,
        }
    return row


def _span(since: float, reached: dict[str, float], count: int) -> float | None:
    """From the wave's start until the last request got there; None if some never did."""
    if len(reached) < count or not reached:
        return None
    return max(reached.values()) - since


def _completion_breakdown(
    gke: GkeSnapshot, fleet: Fleet, at_zero: dict[str, float], since: float, quota: int
) -> dict[str, Any]:
    """Where a completion wave's time went, from GKE's operation times: Job finished ->
    its first scale-down call (noticing, then waiting for a slot), one call's end -> the
    next call on that pool (following the operation), and how busy GKE's slots were."""
    noticed: list[float] = []
    between: list[float] = []
    busy, first, last = 0.0, float("inf"), 0.0
    for record in fleet.records(1):
        if record.name not in at_zero or record.job_finished_at is None:
            continue
        operations = sorted(
            (op for pool in record.pools for op in gke.operations_since(pool, since)),
            key=lambda op: op.started,
        )
        if not operations:
            continue
        noticed.append(max(operations[0].started - record.job_finished_at, 0.0))
        for one, two in itertools.pairwise(operations):
            if one.ended is not None:
                between.append(max(two.started - one.ended, 0.0))
        for op in operations:
            if op.ended is not None:
                busy += op.ended - op.started
                first, last = min(first, op.started), max(last, op.ended)
    span = last - first
    return {
        "completion_finished_to_first_call_p50_s": rounded(percentile(noticed, 50)),
        "completion_finished_to_first_call_p99_s": rounded(percentile(noticed, 99)),
        "completion_between_calls_p50_s": rounded(percentile(between, 50)),
        "completion_between_calls_p99_s": rounded(percentile(between, 99)),
        "completion_operations_s": rounded(span if span > 0 else None),
        "completion_slots_busy_share": rounded(busy / (span * quota) if span > 0 else None),
    }
