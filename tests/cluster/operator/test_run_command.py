"""`dws-operator run` as a process: it reconciles, and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from dws_operator.devcluster import DevCluster
from dws_operator.emulator import ClusterManagerEmulator
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


def test_run_command(
    devcluster: DevCluster,
    training_request_crd: str,
    emulator: ClusterManagerEmulator,
    scenario: Scenario,
) -> None:
    env = {
        **os.environ,
        "DWS_GKE_PROJECT": "dws-sandbox",
        "DWS_GKE_LOCATION": "us-central1",
        "DWS_GKE_CLUSTER": "sandbox",
        "DWS_GKE_ENDPOINT": emulator.endpoint,
        "DWS_KUEUE": "disabled",
        "DWS_NAMESPACES": scenario.namespace,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "dws_operator", "run", "--kubeconfig", str(devcluster.kubeconfig)],
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
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
