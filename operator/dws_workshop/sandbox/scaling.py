"""Whether waiting gets dearer with more requests: the operator's GKE calls per second
while N requests wait, at growing N on one testbed. The CI-sized form of the benchmark:
only the ratio between sizes is judged (absolute figures vary with the machine)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import grpc

from dws_workshop.sandbox.gke_view import snapshot
from dws_workshop.sandbox.load import Fleet
from dws_workshop.sandbox.shapes import SHAPES
from dws_workshop.sandbox.testbed import MUTATIONS, GkeLimits, Testbed

#: Between two looks at whether every request has its capacity requested.
LOOK_SECONDS = 0.5


@dataclass(frozen=True)
class WaitingCost:
    requests: int
    #: Seconds until every request so far had its capacity requested.
    settled_s: float
    gke_calls_per_s: float
    operator_cpu_percent: float


@dataclass(frozen=True)
class ScalingFigures:
    stages: list[WaitingCost]
    max_operations_in_flight: int
    quota: int
    mutations: int
    resource_exhausted: int


def waiting_cost(
    sizes: list[int],
    limits: GkeLimits,
    workdir: Path,
    *,
    window: float = 20.0,
    rate: float = 50.0,
    operator_env: dict[str, str] | None = None,
    timeout: float = 600.0,
) -> ScalingFigures:
    """Grow the waiting fleet to each of `sizes` in turn (no capacity ever arrives);
    once all have their capacity requested, count GKE calls over `window` seconds."""
    needed = {shape.name: shape.nodes() for shape in SHAPES}
    stages: list[WaitingCost] = []
    with (
        Testbed(limits, workdir, operator_env=operator_env) as bed,
        Fleet(bed.cluster.api_client, bed.namespace) as fleet,
    ):
        made = 0
        for stage, size in enumerate(sizes, start=1):
            began = time.time()
            fleet.create_wave(stage, size - made, rate)
            made = size
            deadline = time.monotonic() + timeout
            while True:
                gke = snapshot(bed.emulator)
                waiting = [
                    r
                    for r in fleet.records()
                    if gke.capacity_requested_at(r, needed[r.shape.name], 0.0) is None
                ]
                if not waiting:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(waiting)} of {size} requests never got a pool")
                time.sleep(LOOK_SECONDS)
            settled = time.time() - began
            emulator = bed.emulator
            calls = len(emulator.calls) + len(emulator.compute.calls)
            usage, start = bed.operator_usage(), time.monotonic()
            time.sleep(window)
            elapsed = time.monotonic() - start
            calls = len(emulator.calls) + len(emulator.compute.calls) - calls
            cpu = bed.operator_usage().cpu - usage.cpu
            stages.append(WaitingCost(size, settled, calls / elapsed, 100 * cpu / elapsed))
        mutations = [c for c in bed.emulator.calls if c.method in MUTATIONS]
        return ScalingFigures(
            stages=stages,
            max_operations_in_flight=bed.emulator.max_operations_in_flight(),
            quota=limits.concurrent_operations,
            mutations=len(mutations),
            resource_exhausted=sum(
                1 for c in mutations if c.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            ),
        )
