"""A Spot preemption as the real Job controller reports it: a pod of the slice fails
with the DisruptionTarget condition, the Job controller fails the Job by the
podFailurePolicy the operator gave it (reason PodFailurePolicy, the condition named in
its message), and the operator tells that from the training code failing: it restarts
the workload as its next attempt.

The rest of the preemption's handling (the first attempt's Job deleted, the Restarting
event, the second attempt to success and the pool to zero), Kueue-queued GPUs, restarts
of the operator in every phase, GKE's UNAVAILABLE bursts and a quota refusal are tested
on the virtual clock in tests/virtual/test_resilience.py.
"""

from __future__ import annotations

import pytest

from tests.builders import tpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually


@pytest.mark.usefixtures("operator")
def test_spot_preemption_restarts_the_workload(scenario: Scenario) -> None:
    scenario.create(tpu("v6e", "2x4"), mode="Spot", checkpointDir="gs://b/ckpt")  # maxRestarts 6
    first = scenario.job()
    assert first.metadata.name == scenario.name
    scenario.mark_pods("Running", 2, attempt=0)
    scenario.wait_phase("Running")
    scenario.preempt_a_pod()
    second = eventually(
        lambda: [j for j in scenario.jobs() if j.metadata.name == f"{scenario.name}-r1"],
        what="the second attempt's Job",
    )[0]
    env = {e.name: e.value for e in second.spec.template.spec.containers[0].env}
    assert env["DWS_ATTEMPT"] == "1"
    assert scenario.status()["restarts"] == 1
