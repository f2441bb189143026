"""GKE's autoscaler is slower in clusters with many node pools: the emulator's scales
up later, by the scenario's delay, only while the cluster has more pools than its
threshold (GKE's 200; a threshold of 2 here, so three pools are enough)."""

from __future__ import annotations

import time

from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu
from tests.cluster.sim.conftest import StartAutoscaler
from tests.cluster.sim.harness import Sim
from tests.cluster.sim.test_autoscaler import FAST, l4_pod, node_once_waited
from tests.gke.harness import rendered
from tests.polling import eventually, never

#: Simulated seconds a scale-up waits with more pools than the threshold: 4 real seconds.
DELAY = 240.0


def scale_up_seconds(sim: Sim, autoscaler: Autoscaler, pod: str, pool: str, waits: float) -> float:
    """Real seconds from the pod's creation to its pool's first node, which comes no
    sooner than `waits` simulated seconds and in the autoscaler's pass after that."""
    began = time.monotonic()
    l4_pod(sim, pod, pool)
    quiet = waits / FAST - 1.5
    if quiet > 0:
        never(lambda: sim.nodes(pool), quiet, f"a node of {pool} within {quiet:g}s")
    node_once_waited(sim, autoscaler, pod, pool, waits)
    return time.monotonic() - began


def test_scale_ups_wait_only_above_the_pool_threshold(
    sim: Sim, start_autoscaler: StartAutoscaler
) -> None:
    autoscaler = start_autoscaler(
        SimScenario(
            clock_factor=FAST, many_pools_threshold=2, many_pools_scale_up_delay_seconds=DELAY
        )
    )
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-a"))
    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-b"))
    # Two pools, the threshold itself: capacity is there, the node comes without the delay.
    assert scale_up_seconds(sim, autoscaler, "first", "l4-a", 0) < DELAY / FAST

    sim.create_pool(rendered(gpu("nvidia-l4"), "FlexStart", name="l4-c"))
    # Three pools: the same scale-up waits DELAY simulated seconds.
    waited = scale_up_seconds(sim, autoscaler, "second", "l4-b", DELAY)
    assert waited >= DELAY / FAST - 0.5
    eventually(lambda: sim.phase("second") == "Running", what="the pod running")
