"""Multislice end to end: v5p 2x2x2 slices as one JobSet of one replicatedJob, each slice
on a node pool of its own (the real JobSet controller and its exclusive-placement
webhooks, Kueue's JobSet integration, kwok nodes from the emulator's autoscaler). Two
slices, and more slices than a Kueue Workload holds PodSets (18 in v0.19)."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import LOCAL_QUEUE, dws_objects
from dws_operator.naming import default_node_pool_name, slice_pool_names
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.emulator import DEFAULT_CLUSTER
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, forever, sim
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

POOL_LABEL = "cloud.google.com/gke-nodepool"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
TWO_SLICES = tpu("v5p", "2x2x2", slices=2)


def pools_of(scenario: Scenario, slices: int = 2) -> tuple[str, ...]:
    body = scenario.get()
    assert body is not None
    uid = body["metadata"]["uid"]
    return slice_pool_names(default_node_pool_name(scenario.name, uid, slices=slices), slices)


def nodes_of(scenario: Scenario, pool: str) -> list[k8s.V1Node]:
    return list(scenario.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items)


def all_nodes(scenario: Scenario, slices: int = 2) -> list[k8s.V1Node]:
    return [n for pool in pools_of(scenario, slices) for n in nodes_of(scenario, pool)]


def slices_by_pool(
    scenario: Scenario, running: list[k8s.V1Pod], slices: int
) -> dict[str, set[int]]:
    """The slices (the JobSet controller's job index) whose pods run on each pool."""
    node_pool = {
        n.metadata.name: n.metadata.labels[POOL_LABEL] for n in all_nodes(scenario, slices)
    }
    found: dict[str, set[int]] = {}
    for pod in running:
        found.setdefault(node_pool[pod.spec.node_name], set()).add(
            int(pod.metadata.labels[JOB_INDEX])
        )
    return found


def pools_by_slice(by_pool: dict[str, set[int]]) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for pool, indexes in by_pool.items():
        for index in indexes:
            found.setdefault(index, set()).add(pool)
    return found


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
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("s", 2)

    def running_pods() -> list[k8s.V1Pod] | None:
        running = [p for p in pods(scenario) if p.status.phase == "Running"]
        return running if len(running) == 4 else None

    running = eventually(running_pods, timeout=60, what="4 pods running on 2 slices")
    # Each slice's two pods run on one pool, a pool of its own (exclusive placement).
    assert slices_by_pool(scenario, running, 2) in (
        {first: {0}, second: {1}},
        {first: {1}, second: {0}},
    )
    for pod in running:
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["MEGASCALE_NUM_SLICES"].value == "2"
        assert (
            env["MEGASCALE_COORDINATOR_ADDRESS"].value == f"{scenario.name}-s-0-0.{scenario.name}"
        )
        assert env["MEGASCALE_SLICE_ID"].value_from.field_ref.field_path == (
            f"metadata.labels['{JOB_INDEX}']"
        )
        assert pod.spec.host_network is True
    status = eventually(
        lambda: (
            (s := scenario.status()).get("phase") == "Running"
            and [x["nodes"] for x in s.get("slices", [])] == [2, 2]
            and s
        ),
        what="status with both slices' nodes",
    )
    assert [x["nodePool"] for x in status["slices"]] == [first, second]
    assert status["plan"]["totalNodes"] == 4
    scenario.wait_phase("Succeeded", timeout=90)
    eventually(lambda: all_nodes(scenario) == [], what="both slices' nodes gone")
    # Resized to zero, never capped: GKE checks a slice pool's maximum against the slice.
    assert (pool_max(scenario, first), pool_max(scenario, second)) == (2, 2)
    created = [c.request.node_pool.name for c in scenario.emulator.calls_for("CreateNodePool")]
    assert sorted(created) == [first, second]


def test_a_preempted_slice_restarts_the_jobset(stack: Stack) -> None:
    # The pools are named up front so that only slice 1's pool is reclaimed. The first
    # attempt's pods have no duration: they run until their nodes go, so the preemption
    # always meets running work; the second attempt is let finish once it runs.
    base = f"ms-{uuid.uuid4().hex[:6]}"
    lost = f"{base}-s1"
    scenario = stack(SimScenario(clock_factor=CLOCK))
    scenario.create(
        TWO_SLICES, mode="Spot", maxRestarts=1, nodePool={"name": base}, template=forever()
    )
    scenario.wait_phase("Running")
    scenario.autoscaler.preempt(pool=lost)
    eventually(lambda: scenario.status().get("restarts") == 1, what="a restart")
    restarted = eventually(
        lambda: [j for j in jobsets(scenario) if j["metadata"]["name"] == f"{scenario.name}-r1"],
        what="the second attempt's JobSet",
    )
    assert len(restarted) == 1
    scenario.finish_pods(attempt=1, count=4)
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
    eventually(lambda: jobsets(scenario) == [], what="the JobSet gone")
    # Both pools go at once, so their nodes can vanish before kwok has finished the pods:
    # such orphans are removed by the pod garbage collector (a 40 s quarantine).
    eventually(lambda: pods(scenario) == [], timeout=90, what="the pods gone")
    eventually(
        lambda: gke_pool(scenario, first) is None and gke_pool(scenario, second) is None,
        what="both pools gone",
    )
    eventually(
        lambda: nodes_of(scenario, first) == [] and nodes_of(scenario, second) == [],
        what="the nodes gone",
    )
    assert scenario.jobs() == []


#: More slices than Kueue v0.19's Workload holds PodSets (18).
MANY_SLICES = 20


def test_more_slices_than_kueues_podset_limit_run_through_kueue(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK), kueue=KueueMode.REQUIRED, queue=LOCAL_QUEUE)
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    # Pods of 10 s: where each ran is gathered below from running and finished pods, on
    # every node seen on the way, so the slices need not all run at once.
    scenario.create(tpu("v5p", "2x2x2", slices=MANY_SLICES), template=sim("10s"))
    pools = pools_of(scenario, MANY_SLICES)
    [jobset] = eventually(lambda: jobsets(scenario), timeout=60, what="the JobSet")
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert rjob["replicas"] == MANY_SLICES
    hosts = MANY_SLICES * 2
    # Where each pod ran, gathered while they run: the slices start over many seconds
    # (20 pools to scale up), so the first may end before the last begins.
    placed: dict[str, tuple[str, int]] = {}
    node_pool: dict[str, str] = {}

    def every_pod_placed() -> bool:
        node_pool.update(
            (n.metadata.name, n.metadata.labels[POOL_LABEL])
            for n in all_nodes(scenario, MANY_SLICES)
        )
        for pod in pods(scenario):
            node = pod.spec.node_name
            if node and node in node_pool and pod.status.phase in ("Running", "Succeeded"):
                index = int(pod.metadata.labels[JOB_INDEX])
                placed[pod.metadata.name] = (node_pool[node], index)
        return len(placed) == hosts

    eventually(every_pod_placed, timeout=300, what=f"all {hosts} pods placed and started")
    by_pool: dict[str, set[int]] = {}
    for pool, index in placed.values():
        by_pool.setdefault(pool, set()).add(index)
    by_slice = pools_by_slice(by_pool)
    # Every slice's pods on exactly one pool...
    assert sorted(by_slice) == list(range(MANY_SLICES))
    assert all(len(on) == 1 for on in by_slice.values())
    # ...a pool of its own, and every one of the request's pools in use.
    assert sorted(by_pool) == sorted(pools)
    assert all(len(held) == 1 for held in by_pool.values())
    scenario.wait_phase("Succeeded", timeout=240)
    eventually(
        lambda: all_nodes(scenario, MANY_SLICES) == [], timeout=120, what="every slice's nodes gone"
    )
    assert [pool_max(scenario, pool) for pool in pools] == [2] * MANY_SLICES
