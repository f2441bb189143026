"""A running request is not polled into noticing its Job finished: the Job's own events
wake it. With the running poll set to an hour, only the Job watch can scale the pool
down within seconds."""

from __future__ import annotations

import dataclasses
import time

from dws_operator.controller import OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from tests.builders import tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


def test_a_finished_job_wakes_its_request_at_once(
    devcluster: DevCluster,
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    config = dataclasses.replace(operator_config, running_poll_seconds=3600.0)
    with OperatorThread(config, kubeconfig=devcluster.kubeconfig):
        scenario.create(tpu("v6e", "2x4"))
        scenario.job()
        scenario.mark_pods("Running", 2)
        status = scenario.wait_phase("Running")
        assert status["startedAt"]
        scenario.mark_pods("Succeeded", 2)
        finished = time.monotonic()
        scenario.wait_phase("Succeeded", timeout=20)
        eventually(scenario.at_zero, timeout=20, what="the pool at zero")
        elapsed = time.monotonic() - finished
        print(f"\npool at zero {elapsed:.1f}s after the pods succeeded (running poll: 1 h)")
        assert elapsed < 20
        eventually(lambda: scenario.status().get("scaledDownAt"), timeout=10, what="scaledDownAt")
        # The operator watches Jobs without writing to them (no finalizer, no annotations).
        job = scenario.job()
        assert not job.metadata.finalizers
        assert not any(k.startswith("dws-operator.dev/") for k in job.metadata.annotations or {})
