"""Multislice end to end: v5p 2x2x2 slices as one JobSet of one replicatedJob, each slice
on a node pool of its own (the real JobSet controller and its exclusive-placement
webhooks, Kueue's JobSet integration, kwok nodes from the emulator's autoscaler), with
more slices than a Kueue Workload holds PodSets (18 in v0.19): what only the real
servers can show, that Kueue admits such a JobSet and that JobSet's webhooks and the
scheduler put each slice's pods on a pool of its own.

The operator's part (the JobSet it renders, its status per slice, a preempted slice
restarting the JobSet, a deleted request leaving nothing, its pools resized to zero) is
tested on the virtual clock in tests/virtual/test_multislice.py, the test standing in
for the JobSet controller and Kueue."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from dws_operator.controller import KueueMode
from dws_operator.kueue_objects import LOCAL_QUEUE, dws_objects
from dws_operator.naming import default_node_pool_name, slice_pool_names
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION
from dws_workshop.emulator import DEFAULT_CLUSTER
from dws_workshop.simulator.scenario import SimScenario
from tests.builders import tpu
from tests.cluster.e2e.conftest import Stack
from tests.cluster.e2e.test_dws_flow import CLOCK, forever
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

POOL_LABEL = "cloud.google.com/gke-nodepool"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSETS = ("jobset.x-k8s.io", "v1alpha2", "jobsets")


def pools_of(scenario: Scenario, slices: int = 2) -> tuple[str, ...]:
    body = scenario.get()
    assert body is not None
    uid = body["metadata"]["uid"]
    return slice_pool_names(default_node_pool_name(scenario.name, uid, slices=slices), slices)


def nodes_of(scenario: Scenario, pool: str) -> list[k8s.V1Node]:
    return list(scenario.core.list_node(label_selector=f"{POOL_LABEL}={pool}").items)


def all_nodes(scenario: Scenario, slices: int = 2) -> list[k8s.V1Node]:
    return [n for pool in pools_of(scenario, slices) for n in nodes_of(scenario, pool)]


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


#: More slices than Kueue v0.19's Workload holds PodSets (18).
MANY_SLICES = 20


def test_more_slices_than_kueues_podset_limit_run_through_kueue(
    stack: Stack, e2e_kueue: KueueManager, e2e_namespace: str
) -> None:
    scenario = stack(SimScenario(clock_factor=CLOCK), kueue=KueueMode.REQUIRED, queue=LOCAL_QUEUE)
    apply_kueue_objects(scenario.api, dws_objects([e2e_namespace], f"dws-{e2e_namespace}"))
    # Pods that run until the test lets them end: a slice that ended would free its pool
    # to another slice's leader (anti-affinity counts running pods only), so none ends
    # before every one is placed, however long the placements take.
    scenario.create(tpu("v5p", "2x2x2", slices=MANY_SLICES), template=forever())
    pools = pools_of(scenario, MANY_SLICES)
    [jobset] = eventually(lambda: jobsets(scenario), timeout=60, what="the JobSet")
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == LOCAL_QUEUE
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert rjob["replicas"] == MANY_SLICES
    hosts = MANY_SLICES * 2
    # Where each pod ran, gathered while they run: the slices start over many seconds
    # (20 pools to scale up), so the first may end before the last begins.
    placed: dict[str, tuple[str, int]] = {}
    node_pool: dict[str, str] = {}
    # Each running pod's MEGASCALE_NUM_SLICES and hostNetwork.
    run_as: set[tuple[str | None, bool | None]] = set()

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
                env = {e.name: e.value for e in pod.spec.containers[0].env}
                run_as.add((env.get("MEGASCALE_NUM_SLICES"), pod.spec.host_network))
        return len(placed) == hosts

    eventually(every_pod_placed, timeout=300, what=f"all {hosts} pods placed and started")
    for pod in pods(scenario):
        # kwok's pod-succeed stage ends a running pod this long after it sees this.
        scenario.core.patch_namespaced_pod(
            pod.metadata.name,
            scenario.namespace,
            {"metadata": {"annotations": {SIM_DURATION_ANNOTATION: "1s"}}},
        )
    assert run_as == {(str(MANY_SLICES), True)}
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
