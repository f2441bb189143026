"""A queued request whose ProvisioningRequest sticks (Accepted, never provisioned, as
kueue#3245 and autoscaler#9490 report), with real Kueue and the simulated autoscaler:
without the guard it waits out its maxWaitDuration; with it, it is asked for again once
stuck and runs. The operator decides on the emulator's clock, sixty times real time."""

from __future__ import annotations

import dataclasses
from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode, OperatorThread
from dws_operator.kueue_objects import QUEUED_LOCAL_QUEUE, dws_objects
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import gpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import SETTLE, sim
from tests.polling import eventually

#: Simulated seconds per real second, for the operator's decisions and the autoscaler.
CLOCK = 60.0


def test_a_stuck_queued_request_waits_out_its_time_without_the_guard_and_runs_with_it(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(
        SimScenario(clock_factor=CLOCK, stuck_provisioning_requests=2),
        kueue=KueueMode.REQUIRED,
        queued_queue=QUEUED_LOCAL_QUEUE,
        operator=False,
        emulator_clock=CLOCK,
    )
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    objects = k8s.CustomObjectsApi(scenario.api)

    def provreqs() -> list[dict[str, Any]]:
        listed: Any = objects.list_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", scenario.namespace, "provisioningrequests"
        )
        return list(listed["items"])

    def accepted(item: dict[str, Any]) -> bool:
        conditions = (item.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Accepted" and c["status"] == "True" for c in conditions)

    # Without the guard: Accepted, never provisioned, until its 30 minutes run out.
    unguarded = dataclasses.replace(scenario.operator_config, stuck_after_seconds=0)
    with OperatorThread(unguarded, kubeconfig=scenario.operator_kubeconfig):
        scenario.name = "unguarded"
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "30m"},
            template=sim("5s"),
        )
        eventually(lambda: any(accepted(p) for p in provreqs()), what="Accepted")
        failed = scenario.wait_phase("Failed", timeout=SETTLE)
        assert "CapacityTimeout" in failed["message"]
        assert failed.get("recoveries", 0) == 0
    # With it (stuck after 10 simulated minutes): asked for again once, then it runs.
    guarded = dataclasses.replace(scenario.operator_config, stuck_after_seconds=600)
    with OperatorThread(guarded, kubeconfig=scenario.operator_kubeconfig):
        scenario.name = "guarded"
        scenario._pool_name = None
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "3h"},
            template=sim("5s"),
        )
        stuck = eventually(
            lambda: [p for p in provreqs() if p["metadata"]["name"].startswith("job-guarded-")],
            what="the guarded request's ProvisioningRequest",
        )
        assert [p["metadata"]["name"].startswith("job-guarded-r1-") for p in stuck] == [False]
        done = scenario.wait_phase("Succeeded", timeout=SETTLE)
    assert done["recoveries"] == 1
    assert done.get("restarts", 0) == 0
    events = scenario.core.list_namespaced_event(
        scenario.namespace, field_selector="involvedObject.name=guarded"
    ).items
    [recovered] = [e for e in events if e.reason == "StuckRequestRecovered"]
    assert "was Accepted" in recovered.message
    # The new attempt's Job (a new Kueue Workload, so a new ProvisioningRequest) ran.
    assert done["job"]["name"] == "guarded-r1"
