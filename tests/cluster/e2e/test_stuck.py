"""A workload the real Kueue gives up on, end to end: its ProvisioningRequest fails (the
simulated autoscaler's WaitTimeExceeded), the queue's check allows no retry, so Kueue
deactivates the Workload (as kueue#5129 and #15255 report); the operator, watching
Kueue's Workloads, reads Kueue's own Evicted reason and message, asks again while its
recoveries last, then moves down the ladder. The autoscaler runs sixty times real time.

The rest of the stuck guard is tested on the virtual clock in tests/virtual/test_stuck.py
(Kueue's Workloads and ProvisioningRequests written as Kueue and GKE write them): a stuck
queued request waiting out its time without the guard and asked for again with it, a
queued pool deleted under a waiting request, this scenario's recoveries and ladder, and a
flex-start pool stuck at zero made again. That the operator finds the ProvisioningRequest
the real Kueue made for a Job (by Kueue's naming) is held to Kueue in
tests/cluster/kueue/test_kueue.py."""

from __future__ import annotations

from dws_operator.controller import KueueMode, OperatorThread
from dws_operator.kueue_objects import (
    ProvisioningCheck,
    QueueSetup,
    RetryStrategy,
    dws_flavors,
    dws_objects,
    kueue_objects,
)
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.simulator.scenario import CapacityRule, SimScenario
from tests.builders import gpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import SETTLE, sim

#: Simulated seconds per real second, for the autoscaler.
CLOCK = 60.0


def test_a_workload_kueue_gives_up_on_is_asked_for_again_then_the_ladder_moves_on(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    # Queued H100s never come: each ProvisioningRequest fails after a simulated minute
    # (GKE's WaitTimeExceeded), and this queue's check gives up at the first failure
    # (retryStrategy.backoffLimitCount 0), so Kueue deactivates the workload, as kueue#5129
    # and #15255 report. Spot H100s are there.
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK,
            provisioning_timeout_seconds=60,
            capacity=[
                CapacityRule(
                    accelerator="nvidia-h100-80gb", mode="QueuedProvisioning", stockout=True
                )
            ],
        ),
        kueue=KueueMode.REQUIRED,
        queued_queue="gives-up",
        operator=False,
    )
    check = ProvisioningCheck(
        name=f"gives-up-{e2e_namespace}",
        config_name=f"gives-up-{e2e_namespace}",
        retry=RetryStrategy(backoff_limit_count=0),
    )
    setup = QueueSetup(
        f"gives-up-{e2e_namespace}", "gives-up", e2e_namespace, dws_flavors(), check=check
    )
    apply_kueue_objects(
        scenario.api,
        [*dws_objects([e2e_namespace], f"dws-{e2e_namespace}"), *kueue_objects(setup)],
    )
    with OperatorThread(scenario.operator_config, kubeconfig=scenario.operator_kubeconfig):
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "10m", "fallback": [{"mode": "Spot"}]},
            template=sim("5s"),
        )
        done = scenario.wait_phase("Succeeded", timeout=SETTLE)
    most = scenario.operator_config.max_recoveries
    assert done["recoveries"] == most
    assert [(a["mode"], a["outcome"], a.get("recoveries", 0)) for a in done["attempts"]] == [
        ("QueuedProvisioning", "Stuck", most),
        ("Spot", "Provisioned", 0),
    ]
    assert "Kueue deactivated the workload" in done["attempts"][0]["message"]
    recovered = scenario.event_messages("StuckRequestRecovered")
    assert len(recovered) == most
    assert all("deactivated due to AdmissionCheck in Rejected state" in m for m in recovered)
