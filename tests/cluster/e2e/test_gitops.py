"""What GitOps tools and `kubectl wait` see of a TrainingRequest: Ready, Reconciling and
Stalled with observedGeneration, and the chart's Argo CD health check run by a real Lua
interpreter on the statuses of real runs."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

from dws_operator.api import GROUP, PLURAL
from dws_workshop.devcluster import find_binaries
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.argocd import health
from tests.builders import gpu, tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, sim
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


def kubectl_wait(scenario: Scenario, condition: str, timeout: int) -> subprocess.Popen[str]:
    kubectl = find_binaries(["kubectl"])["kubectl"]
    argv = [str(kubectl), "--kubeconfig", str(scenario.operator_kubeconfig)]
    argv += ["-n", scenario.namespace, "wait", f"--for=condition={condition}"]
    argv += [f"{PLURAL}.{GROUP}/{scenario.name}", f"--timeout={timeout}s"]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def watch_health(scenario: Scenario, until: threading.Event) -> list[str]:
    """Argo CD's verdicts on the request as it goes, in order, without repeats."""
    seen: list[str] = []

    def follow() -> None:
        while not until.is_set():
            body: dict[str, Any] | None = scenario.get()
            if body is not None:
                verdict = health(body)[0]
                if not seen or seen[-1] != verdict:
                    seen.append(verdict)
            until.wait(0.2)

    threading.Thread(target=follow, daemon=True).start()
    return seen


def test_kubectl_wait_ready_and_argo_cd_health_of_a_success(stack: Stack) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK))
    done = threading.Event()
    scenario.create(tpu("v6e", "2x2"), template=sim("5s"))
    verdicts = watch_health(scenario, done)
    waiting = kubectl_wait(scenario, "Ready", 90)
    out, err = waiting.communicate(timeout=120)
    assert waiting.returncode == 0, err
    eventually(lambda: verdicts[-1] == "Healthy", timeout=10, what="Argo CD's Healthy")
    done.set()
    assert "condition met" in out
    status = scenario.status()
    assert status["phase"] == "Succeeded"
    by_type = {c["type"]: c for c in status["conditions"]}
    assert (by_type["Ready"]["status"], by_type["Reconciling"]["status"]) == ("True", "False")
    assert by_type["Stalled"]["status"] == "False"
    assert {c["observedGeneration"] for c in by_type.values()} == {1}
    assert health(scenario.get() or {})[0] == "Healthy"
    # In the order of the phases (a look may miss a short one): pool being made,
    # waiting for capacity, running, done.
    order = iter(["Progressing", "Suspended", "Progressing", "Healthy"])
    assert all(verdict in order for verdict in verdicts), verdicts
    assert verdicts[-1] == "Healthy"


def test_a_failure_is_stalled_naming_the_reason_and_degraded(stack: Stack) -> None:
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK, capacity=[CapacityRule(accelerator="nvidia-l4", stockout=True)]
        )
    )
    scenario.create(gpu("nvidia-l4"), provisioning={"maxWaitDuration": "3s"}, template=sim("5s"))
    eventually(
        lambda: health(scenario.get() or {})[0] in ("Progressing", "Suspended"),
        what="a verdict while it waits",
    )
    waiting = kubectl_wait(scenario, "Stalled", 60)
    _, err = waiting.communicate(timeout=90)
    assert waiting.returncode == 0, err
    stalled = scenario.condition("Stalled") or {}
    assert (stalled.get("status"), stalled.get("reason")) == ("True", "CapacityTimeout")
    assert "no capacity" in stalled.get("message", "")
    assert (scenario.condition("Ready") or {}).get("status") == "False"
    verdict, message = health(scenario.get() or {})
    assert verdict == "Degraded"
    assert message.startswith("CapacityTimeout")
