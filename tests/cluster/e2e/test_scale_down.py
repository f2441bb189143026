"""Scale to zero is level-triggered: the pool's Nodes, not the calls made, say
when it is at zero. Capping the autoscaler removes no node (as on GKE); the resize does.
A TPU slice pool is never capped (GKE checks its maximum against the slice size): it is
resized to zero with its bounds left at the slice. The simulated autoscaler here never
removes idle nodes by itself (an hour's delay), so a pool at zero proves the operator's
resize."""

from __future__ import annotations

from dws_operator.controller import OperatorThread
from dws_workshop.emulator import MethodFaults
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu, tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, nodes, sim
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

REFUSED = MethodFaults(error_rate=1.0, error_code="UNAVAILABLE")


def _never_idle() -> SimScenario:
    return SimScenario(clock_factor=CLOCK, scale_down_unneeded_seconds=3600 * 24)


def _not_scaled_down(scenario: Scenario) -> None:
    assert scenario.status().get("scaledDownAt") is None
    condition = scenario.condition("ScaledDown")
    assert condition is None or condition["status"] != "True", condition


def test_stopped_between_cap_and_resize_it_resizes_after_restart(stack: Stack) -> None:
    scenario = stack(_never_idle(), operator=False)
    emulator, config = scenario.emulator, scenario.operator_config
    kubeconfig = scenario.operator_kubeconfig
    emulator.set_faults("SetNodePoolSize", REFUSED)
    with OperatorThread(config, kubeconfig=kubeconfig):
        scenario.create(gpu("nvidia-l4", nodes=2, count=1), mode="Spot", template=sim("3s"))
        scenario.wait_phase("Succeeded", timeout=60)
        eventually(lambda: scenario.pool_max() == 0, what="the autoscaler capped")
        eventually(lambda: emulator.calls_for("SetNodePoolSize"), what="a resize refused")
    # Stopped between the two calls: the ceiling is 0, the two billed nodes are still up,
    # and the request does not claim to be scaled down.
    assert len(nodes(scenario)) == 2
    _not_scaled_down(scenario)
    assert not any(c.ok for c in emulator.calls_for("SetNodePoolSize"))
    emulator.set_faults("SetNodePoolSize", None)
    with OperatorThread(config, kubeconfig=kubeconfig):
        eventually(lambda: nodes(scenario) == [], timeout=60, what="the nodes gone")
        eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")
    [resized] = [c for c in emulator.calls_for("SetNodePoolSize") if c.ok]
    assert resized.request.node_count == 0
    condition = scenario.condition("ScaledDown")
    assert condition is not None
    assert (condition["status"], condition["reason"]) == ("True", "ScaledToZero")


def test_a_resize_refused_again_and_again_is_retried_until_zero(stack: Stack) -> None:
    scenario = stack(_never_idle())
    emulator = scenario.emulator
    emulator.set_faults("SetNodePoolSize", REFUSED)
    scenario.create(tpu("v6e", "2x4"), template=sim("3s"))
    scenario.wait_phase("Succeeded", timeout=60)
    eventually(
        lambda: len(emulator.calls_for("SetNodePoolSize")) >= 3,
        timeout=60,
        what="three refused resizes",
    )
    assert len(nodes(scenario)) == 2
    _not_scaled_down(scenario)
    emulator.set_faults("SetNodePoolSize", None)
    eventually(lambda: nodes(scenario) == [], timeout=90, what="the nodes gone")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")
    resizes = [c.ok for c in emulator.calls_for("SetNodePoolSize")]
    assert resizes.count(True) == 1
    assert resizes.index(True) >= 3  # after every refusal, one that took
    # The slice pool was resized, never capped: its bounds are still the slice's.
    assert emulator.calls_for("SetNodePoolAutoscaling") == []
    assert scenario.pool_max() == 2
