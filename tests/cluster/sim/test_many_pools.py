"""GKE's autoscaler is slower in clusters with many node pools: the emulator's scales
up later, by the scenario's delay, only while the cluster has more pools than its
threshold (GKE's 200; a threshold of 2 here, so three pools are enough)."""

from __future__ import annotations

import time

from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu
from tests.cluster.sim.conftest import StartAutoscaler
from tests.cluster.sim.harness import Sim
from tests.cluster.sim.test_autoscaler import FAST, l4_pod
from tests.gke.harness import rendered
from tests.polling import eventually, never

#: Simulated seconds a scale-up waits with more pools than the threshold: 4 real seconds.
DELAY = 240.0


def scale_up_seconds(sim: Sim, pod: str, pool: str, quiet: float = 0.0) -> float:
    """Real seconds from the pod's creation to its pool's first node; no node for the
    first `quiet` seconds."""
    began = time.monotonic()
    l4_pod(sim, pod, pool)
    if quiet:
        never(lambda: sim.nodes(pool), quiet, f"a node of {pool} within {quiet:g}s")
    eventually(lambda: sim.nodes(pool), timeout=15.0, what=f"a node of {pool}")
    return time.monotonic() - began


def test_scale_ups_wait_only_above_the_pool_threshold(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    start_autoscaler(
        SimScenario(
            clock_factor=FAST, many_pools_threshold=2, many_pools_scale_up_delay_seconds=DELAY
        )
    )
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-a"))
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-b"))
    # Two pools, the threshold itself: capacity is there, the node comes without the delay.
    assert scale_up_seconds(sim, "first", "l4-a") < DELAY / FAST

    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-c"))
    # Three pools: the same scale-up waits DELAY simulated seconds.
    waited = scale_up_seconds(sim, "second", "l4-b", quiet=DELAY / FAST - 1.5)
    # No sooner than the delay (the wait for the node bounds how much later).
    assert waited >= DELAY / FAST - 0.5
    eventually(lambda: sim.phase("second") == "Running", what="the pod running")
