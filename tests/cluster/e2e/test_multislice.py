"""Multislice end to end: two v5p 2x2x2 slices as one JobSet on two pools (the real JobSet
controller, Kueue's JobSet integration, kwok nodes from the emulator's autoscaler)."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import LOCAL_QUEUE, dws_objects
from dws_operator.naming import default_node_pool_name, slice_pool_names
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.emulator import DEFAULT_CLUSTER
from dws_workshop.simulator.scenario import Preemption, SimScenario
from tests.builders import tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, sim
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

POOL_LABEL = "cloud.google.com/gke-nodepool"
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
TWO_SLICES = tpu("v5p", "2x2x2", slices=2)


def pools_of(scenario: Scenario) -> tuple[str, ...]:
    body = scenario.get()
    assert body is not None
    uid = body["metadata"]["uid"]
    return slice_pool_names(default_node_pool_name(scenario.name, uid, slices=2), 2)


def nodes_of(scenario: Scenario, pool: str) -> list[k8s.V1Node]:
    return list(scenario.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items)


def all_nodes(scenario: Scenario) -> list[k8s.V1Node]:
    return [n for pool in pools_of(scenario) for n in nodes_of(scenario, pool)]


def jobsets(scenario: Scenario) -> list[dict[str, Any]]:
    listed: Any = k8s.CustomObjectsApi(scenario.api).list_namespaced_custom_object(
        JOBSETS[0], JOBSETS[1], scenario.namespace, JOBSETS[2]
    )
    return list(listed["items"])


def pods(scenario: Scenario) -> list[k8s.V1Pod]:
    return list(scenario.core.list_namespaced_pod(scenario.namespace).items)


def gke_pool(scenario: Scenario, name: str) -> Any:
    return scenario.emulator.node_pool(f"{DEFAULT_CLUSTER}/nodePools/{name}")


def pool_max(scenario: Scenario, name: str) -> int:
    pool = gke_pool(scenario, name)
    assert pool is not None
    return int(pool.autoscaling.max_node_count or pool.autoscaling.total_max_node_count)


def test_two_slices_run_as_one_jobset_through_kueue(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK), kueue=KueueMode.REQUIRED, queue=LOCAL_QUEUE)
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    scenario.create(TWO_SLICES, template=sim("10s"))
    first, second = pools_of(scenario)
    [jobset] = eventually(lambda: jobsets(scenario), timeout=60, what="the JobSet")
    assert jobset["metadata"]["name"] == scenario.name
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "dws-queue"
    assert [r["name"] for r in jobset["spec"]["replicatedJobs"]] == ["s0", "s1"]

    def running_pods() -> list[k8s.V1Pod] | None:
        running = [p for p in pods(scenario) if p.status.phase == "Running"]
        return running if len(running) == 4 else None

    running = eventually(running_pods, timeout=60, what="4 pods running on 2 slices")
    # Each slice's two pods run on its own pool, and know their slice.
    by_pool: dict[str, set[int]] = {}
    node_pool = {n.metadata.name: n.metadata.labels[POOL_LABEL] for n in all_nodes(scenario)}
    for pod in running:
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        by_pool.setdefault(node_pool[pod.spec.node_name], set()).add(int(env["MEGASCALE_SLICE_ID"]))
        assert env["MEGASCALE_NUM_SLICES"] == "2"
        assert env["MEGASCALE_COORDINATOR_ADDRESS"] == f"{scenario.name}-s0-0-0.{scenario.name}"
    assert by_pool == {first: {0}, second: {1}}
    status = eventually(
        lambda: (
            (s := scenario.status()).get("phase") == "Running"
            and [x["nodes"] for x in s.get("slices", [])] == [2, 2]
            and s
        ),
        timeout=30,
        what="status with both slices' nodes",
    )
    assert [x["nodePool"] for x in status["slices"]] == [first, second]
    assert status["plan"]["totalNodes"] == 4
    scenario.wait_phase("Succeeded", timeout=90)
    eventually(lambda: all_nodes(scenario) == [], timeout=30, what="both slices' nodes gone")
    assert (pool_max(scenario, first), pool_max(scenario, second)) == (0, 0)
    created = [c.request.node_pool.name for c in scenario.emulator.calls_for("CreateNodePool")]
    assert sorted(created) == [first, second]


def test_a_preempted_slice_restarts_the_jobset(stack: Stack) -> None:
    # The pools are named up front so that only slice 1's pool is reclaimed: 25 s (wall)
    # after the autoscaler starts, while the pods run their 30 s (at 15 s, one loaded
    # CI run never saw the restart: the slice was likely not up yet when reclaimed).
    base = f"ms-{uuid.uuid4().hex[:6]}"
    lost = f"{base}-s1"
    scenario = stack(
        SimScenario(clock_factor=CLOCK, preemptions=[Preemption(at_seconds=1500, pool=lost)])
    )
    scenario.create(
        TWO_SLICES, mode="Spot", maxRestarts=1, nodePool={"name": base}, template=sim("30s")
    )
    scenario.wait_phase("Running", timeout=40)
    eventually(lambda: scenario.status().get("restarts") == 1, timeout=60, what="a restart")
    restarted = eventually(
        lambda: [j for j in jobsets(scenario) if j["metadata"]["name"] == f"{scenario.name}-r1"],
        timeout=30,
        what="the second attempt's JobSet",
    )
    assert len(restarted) == 1
    status = scenario.wait_phase("Succeeded", timeout=120)
    assert status["restarts"] == 1
    assert status["job"]["name"] == f"{scenario.name}-r1"
    assert "Restarting" in scenario.events()
    # The first attempt's JobSet is gone, and both attempts ran on the same two pools.
    assert [j["metadata"]["name"] for j in jobsets(scenario)] == [f"{scenario.name}-r1"]
    created = [c.request.node_pool.name for c in scenario.emulator.calls_for("CreateNodePool")]
    assert sorted(created) == [f"{base}-s0", lost]
    eventually(
        lambda: nodes_of(scenario, f"{base}-s0") == [] and nodes_of(scenario, lost) == [],
        timeout=30,
        what="both slices' nodes gone",
    )


def test_deleting_a_multi_slice_request_leaves_nothing(stack: Stack) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK))
    scenario.create(TWO_SLICES, template=sim("120s"))
    scenario.wait_phase("Running", timeout=60)
    first, second = pools_of(scenario)
    assert (len(nodes_of(scenario, first)), len(nodes_of(scenario, second))) == (2, 2)
    scenario.delete()
    eventually(lambda: scenario.get() is None, timeout=40, what="the request gone")
    eventually(lambda: jobsets(scenario) == [], timeout=30, what="the JobSet gone")
    # Both pools go at once, so their nodes can vanish before kwok has finished the pods:
    # such orphans are removed by the pod garbage collector (a 40 s quarantine).
    eventually(lambda: pods(scenario) == [], timeout=90, what="the pods gone")
    eventually(
        lambda: gke_pool(scenario, first) is None and gke_pool(scenario, second) is None,
        timeout=30,
        what="both pools gone",
    )
    eventually(
        lambda: nodes_of(scenario, first) == [] and nodes_of(scenario, second) == [],
        timeout=30,
        what="the nodes gone",
    )
    assert scenario.jobs() == []
