"""The operator's settings for a cluster of the GKE emulator, shared by the sandbox, the
benchmarks and the end-to-end tests."""

from __future__ import annotations

from typing import Any

from dws_operator.controller import OperatorConfig, OperatorTime
from dws_workshop.emulator.server import ClusterManagerEmulator


def emulated_config(
    emulator: ClusterManagerEmulator, cluster: str, **settings: Any
) -> OperatorConfig:
    """An operator serving `cluster` (`projects/P/locations/L/clusters/C`) of `emulator`,
    GKE and Compute both through it, with `settings` besides."""
    _, project, _, location, _, name = cluster.split("/")
    return OperatorConfig(
        project=project,
        location=location,
        cluster=name,
        gke_endpoint=emulator.endpoint,
        compute_endpoint=emulator.compute_endpoint,
        **settings,
    )


def on_emulator_clock(emulator: ClusterManagerEmulator) -> OperatorTime:
    """The operator's time is the emulator's simulated clock (a calendar block's days, a
    long run's windows), looked at at least every real second as it may be moved on."""
    clock = emulator.sim_clock
    return OperatorTime(now=clock.utc, speed=lambda: clock.factor, longest_wait=1.0)
