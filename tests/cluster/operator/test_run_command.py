"""`dws-operator run` as a process, with only the operator's runtime dependencies
installed (as in its image): it reconciles, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from dws_workshop.devcluster import DevCluster
from dws_workshop.emulator import ClusterManagerEmulator
from dws_workshop.sandbox.operator_env import metrics_env
from dws_workshop.sandbox.operator_env import operator_python as runtime_only_python
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


@pytest.fixture(scope="module")
def operator_python() -> str:
    """An interpreter from a virtualenv with the operator's dependencies and nothing more."""
    return runtime_only_python()


def test_the_operator_needs_no_workshop_library(operator_python: str) -> None:
    for library in ("kubernetes", "pytest"):
        found = subprocess.run(
            [operator_python, "-c", f"import {library}"],
            check=False,
            capture_output=True,
            text=True,
        )
        assert f"No module named '{library}'" in found.stderr


def test_run_command(
    operator_python: str,
    devcluster: DevCluster,
    training_request_crd: str,
    emulator: ClusterManagerEmulator,
    scenario: Scenario,
) -> None:
    env = {
        **os.environ,
        "DWS_GKE_PROJECT": "dws-sandbox",
        "DWS_GKE_LOCATION": "us-east5",
        "DWS_GKE_CLUSTER": "sandbox",
        "DWS_GKE_ENDPOINT": emulator.endpoint,
        "DWS_KUEUE": "disabled",
        "DWS_NAMESPACES": scenario.namespace,
        **metrics_env(),
    }
    process = subprocess.Popen(
        [operator_python, "-m", "dws_operator", "run", "--kubeconfig", str(devcluster.kubeconfig)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="OnDemand")
        eventually(
            lambda: scenario.phase() == "WaitingForCapacity",
            timeout=60,
            what="the operator process to reconcile",
        )
        assert len(scenario.created_pools()) == 1
    finally:
        signalled = time.monotonic()
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    stopping = time.monotonic() - signalled
    assert process.returncode == 0, output
    # Stopped by the signal, not by a wait: kopf gives tasks still pending at its exit
    # 5 s (a fixed wait in its code), which a task left waiting on the stop flag cost
    # every stop; an exit takes well under a second.
    print(f"\nSIGTERM to exit: {stopping:.2f} s")
    assert stopping < 5.0, output
