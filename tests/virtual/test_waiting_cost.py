"""What waiting costs, on the virtual clock: GKE's calls while requests wait for capacity
do not grow with the number of requests (one shared listing of the pools per interval),
and the pool operations keep within GKE's concurrent-operation quota, using all of it.
The full figures (1,000 requests, the operator's CPU and memory) are `hack/bench.py`'s."""

from __future__ import annotations

from collections import Counter

import grpc

from dws_workshop.emulator.config import MethodName
from dws_workshop.sandbox.shapes import SHAPES
from dws_workshop.sandbox.testbed import GkeLimits, emulator_config
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.requests import another

#: GKE's operation times at GKE's pace (the virtual clock is GKE's own: factor 1).
LIMITS = GkeLimits(clock_factor=1.0)
#: Virtual seconds each size's calls are counted over: 180 listings at the default 10 s.
WINDOW = 1800.0
MUTATIONS: tuple[MethodName, ...] = (
    "CreateNodePool",
    "DeleteNodePool",
    "SetNodePoolAutoscaling",
    "SetNodePoolSize",
    "UpdateNodePool",
)


async def _grow(op: VirtualOperator, requests: list[VirtualOperator], size: int) -> None:
    """Requests up to `size` (shapes in turn), each waiting for capacity on its pool."""
    for index in range(len(requests), size):
        shape = SHAPES[index % len(SHAPES)]
        request = another(op)
        await request.create(shape.accelerator, mode=shape.mode)
        requests.append(request)

    def waiting() -> int:
        return sum(1 for r in requests if r.phase() == "WaitingForCapacity")

    await op.until(
        lambda: waiting() == size, lambda: f"{size} waiting (now {waiting()})", within=3600
    )


async def _calls_over(op: VirtualOperator, seconds: float) -> Counter[str]:
    before = op.emulator.call_counts()
    await op.sleep(seconds)
    return op.emulator.call_counts() - before


def test_waiting_costs_no_more_gke_calls_with_twice_the_requests() -> None:
    async def scenario(op: VirtualOperator) -> None:
        requests: list[VirtualOperator] = []
        await _grow(op, requests, 20)
        smaller = await _calls_over(op, WINDOW)
        await _grow(op, requests, 40)
        larger = await _calls_over(op, WINDOW)
        # One listing per interval, whatever the number of requests; nothing else but
        # the cluster's version, read once an hour (a window may hold one read).
        # (A window's edges may fall either side of a listing: one more or one less.)
        for counted in (smaller, larger):
            assert abs(counted["ListNodePools"] - WINDOW / 10) <= 1, counted
        for counted in (smaller, larger):
            others = counted - Counter({"ListNodePools": counted["ListNodePools"]})
            assert set(others) <= {"GetCluster"}, others
            assert others["GetCluster"] <= 1
        mutations = [c for c in op.emulator.calls if c.method in MUTATIONS]
        assert len(mutations) >= 40
        assert not [c for c in mutations if c.code == grpc.StatusCode.RESOURCE_EXHAUSTED]
        quota = LIMITS.concurrent_operations
        assert op.emulator.max_operations_in_flight() == quota  # every slot used, no more

    Virtual(emulator_config=emulator_config(LIMITS)).run(scenario)
