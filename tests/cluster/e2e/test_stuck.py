"""A queued request whose ProvisioningRequest sticks (Accepted, never provisioned, as
kueue#3245 and autoscaler#9490 report), with real Kueue and the simulated autoscaler:
without the guard it waits out its maxWaitDuration; with it, it is asked for again once
stuck and runs; and one whose pool is deleted under it gets its pool made again and is
asked for again. The autoscaler runs sixty times real time; the operator decides on real
time (a ProvisioningRequest's conditions carry the time they changed, as GKE's do), its
waits and threshold in seconds."""

from __future__ import annotations

import dataclasses
from typing import Any

from kubernetes import client as k8s

from dws_operator import rfc3339
from dws_operator.controller import KueueMode, OperatorThread
from dws_operator.gke import NodePoolClient
from dws_operator.kueue_objects import (
    QUEUED_LOCAL_QUEUE,
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
from tests.gke.harness import run
from tests.polling import eventually

#: Simulated seconds per real second, for the autoscaler.
CLOCK = 60.0
#: Seconds a ProvisioningRequest Accepted and not provisioned takes to be stuck here.
STUCK_AFTER = 5.0


def test_a_stuck_queued_request_waits_out_its_time_without_the_guard_and_runs_with_it(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(
        SimScenario(clock_factor=CLOCK, stuck_provisioning_requests=2),
        kueue=KueueMode.REQUIRED,
        queued_queue=QUEUED_LOCAL_QUEUE,
        operator=False,
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

    # Without the guard: Accepted, never provisioned, until its wait runs out.
    unguarded = dataclasses.replace(scenario.operator_config, stuck_after_seconds=0)
    with OperatorThread(unguarded, kubeconfig=scenario.operator_kubeconfig):
        scenario.name = "unguarded"
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "15s"},
            template=sim("5s"),
        )
        eventually(lambda: any(accepted(p) for p in provreqs()), what="Accepted")
        failed = scenario.wait_phase("Failed", timeout=SETTLE)
        assert "CapacityTimeout" in failed["message"]
        assert failed.get("recoveries", 0) == 0
    # With it: asked for again once stuck, then it runs.
    guarded = dataclasses.replace(scenario.operator_config, stuck_after_seconds=STUCK_AFTER)
    with OperatorThread(guarded, kubeconfig=scenario.operator_kubeconfig):
        scenario.name = "guarded"
        scenario._pool_name = None
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "10m"},
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
    [recovered] = scenario.event_messages("StuckRequestRecovered")
    assert "was Accepted" in recovered
    # The new attempt's Job (a new Kueue Workload, so a new ProvisioningRequest) ran.
    assert done["job"]["name"] == "guarded-r1"


def test_a_queued_pool_deleted_under_a_waiting_request_is_made_again_and_the_request_recovers(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    # Capacity for the H100s comes 20 simulated minutes (20 real seconds) after a request
    # is accepted; the request's pool is deleted (as node auto-provisioning did in
    # autoscaler#9490) while its ProvisioningRequest waits, which leaves that request bound
    # to the gone pool.
    scenario = stack(
        SimScenario(
            clock_factor=CLOCK,
            capacity=[CapacityRule(accelerator="nvidia-h100-80gb", after_seconds=1200)],
        ),
        kueue=KueueMode.REQUIRED,
        queued_queue=QUEUED_LOCAL_QUEUE,
        operator=False,
    )
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    objects = k8s.CustomObjectsApi(scenario.api)

    def accepted() -> bool:
        listed: Any = objects.list_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", scenario.namespace, "provisioningrequests"
        )
        return any(
            c["type"] == "Accepted" and c["status"] == "True"
            for item in listed["items"]
            for c in (item.get("status") or {}).get("conditions") or []
        )

    guarded = dataclasses.replace(scenario.operator_config, stuck_after_seconds=STUCK_AFTER)
    with OperatorThread(guarded, kubeconfig=scenario.operator_kubeconfig):
        scenario.create(
            gpu("nvidia-h100-80gb", nodes=2),
            mode="QueuedProvisioning",
            provisioning={"maxWaitDuration": "10m"},
            template=sim("5s"),
        )
        eventually(accepted, what="the ProvisioningRequest Accepted")

        async def delete(client: NodePoolClient) -> None:
            operation = await client.delete(scenario.pool_name)
            if operation is not None:
                await client.wait(operation)

        run(scenario.emulator, delete)
        done = scenario.wait_phase("Succeeded", timeout=SETTLE)
    # The pool was made again, and the request bound to the gone one asked for again.
    # Capacity comes 20 real seconds after each ask, longer than this test's 5 s threshold,
    # so every new request looks stuck too: the guard asks again as often as it may and no
    # more (bounded), and the last ask gets its capacity.
    assert len(scenario.created_pools()) == 2
    assert done["recoveries"] == guarded.max_recoveries
    assert done["job"]["name"] == f"{scenario.name}-r{guarded.max_recoveries}"


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


def test_a_flex_start_pool_stuck_at_zero_is_made_again_and_the_request_runs(
    stack: Stack, e2e_namespace: str
) -> None:
    # The first flex-start pool gets no node, ever (SIM-FLEX-STUCK). The operator decides on
    # the emulator's clock, two thousand times real time: its default threshold (4 h) is
    # seven real seconds, and no test waits for the wall clock.
    scenario = stack(
        SimScenario(clock_factor=CLOCK, stuck_flex_start_pools=1),
        emulator_clock=2000.0,
        operator=False,
    )
    config = scenario.operator_config
    with OperatorThread(config, kubeconfig=scenario.operator_kubeconfig):
        scenario.create(
            gpu("nvidia-l4"), provisioning={"maxWaitDuration": "72h"}, template=sim("5s")
        )
        done = scenario.wait_phase("Succeeded", timeout=SETTLE)
    assert done["recoveries"] == 1
    assert len(scenario.created_pools()) == 2  # the stuck pool, and the one made again
    [recovered] = scenario.event_messages("StuckRequestRecovered")
    assert f"node pool {scenario.pool_name}: no node and no operation" in recovered
    assert "its pool is made again" in recovered
    # On the operator's clock: the wait before it, at least the threshold.
    asked, again = (rfc3339.parse(done[k]) for k in ("requestedAt", "recoveredAt"))
    assert (again - asked).total_seconds() >= config.stuck_after_seconds
