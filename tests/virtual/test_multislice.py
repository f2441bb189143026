"""Multislice on the virtual clock: v5p 2x2x2 slices as one JobSet of one replicatedJob,
each slice on a node pool of its own. The test stands in for the JobSet controller, the
Job controller, the garbage collector and Kueue (tests/virtual/jobset_steps.py), and for
GKE's autoscaler (the harness's `nodes_up`). tests/cluster/e2e/test_multislice.py keeps
what needs the real ones: Kueue admitting the JobSet (its PodSet limit) and JobSet's
exclusive placement of each slice's pods on a pool of its own."""

from __future__ import annotations

from typing import Any

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP, LOCAL_QUEUE
from dws_operator.multislice import (
    COORDINATOR_ENV,
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    JOB_INDEX_LABEL,
    SLICE_ID_ENV,
    SLICES_ENV,
)
from dws_operator.naming import default_node_pool_name, slice_pool_names
from dws_operator.workload import QUEUE_LABEL, job_name
from tests.builders import tpu
from tests.virtual.harness import Virtual, VirtualOperator
from tests.virtual.jobset_steps import JobSets

TWO_SLICES = tpu("v5p", "2x2x2", slices=2)
#: Nodes (VMs) of one v5p 2x2x2 slice.
NODES = 2


def slice_pools(op: VirtualOperator) -> list[str]:
    return [s["nodePool"] for s in op.status().get("slices") or []]


async def pools_up(op: VirtualOperator, pools: list[str], nodes: int = NODES) -> None:
    """Each slice's pool, once running in GKE, gets its slice's VMs (whole)."""
    for pool in pools:
        await op.until(
            lambda p=pool: (found := op.pool(p)) is not None and found.status.name == "RUNNING",
            f"the pool {pool} running",
        )
        await op.nodes_up(pool, nodes)


def pod_spec(jobset: dict[str, Any]) -> dict[str, Any]:
    [rjob] = jobset["spec"]["replicatedJobs"]
    spec: dict[str, Any] = rjob["template"]["spec"]["template"]["spec"]
    return spec


async def local_queue(op: VirtualOperator) -> None:
    """The namespace's LocalQueue, as `dws_objects` makes it."""
    path = f"/apis/{KUEUE_GROUP}/{KUEUE_API_VERSION}/namespaces/{op.namespace}/localqueues"
    body = {
        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_API_VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": op.namespace},
        "spec": {"clusterQueue": f"dws-{op.namespace}"},
    }
    await op.call("POST", path, body)


def test_two_slices_run_as_one_jobset_through_kueue() -> None:
    virtual = Virtual(kueue=True, jobset=True, settings={"default_queue": LOCAL_QUEUE})

    async def scenario(op: VirtualOperator) -> None:
        jobsets = JobSets(op)
        await local_queue(op)
        await op.create(TWO_SLICES)
        jobset = await jobsets.made(op.name)
        pools = slice_pools(op)
        uid = (op.get() or {})["metadata"]["uid"]
        assert pools == list(slice_pool_names(default_node_pool_name(op.name, uid, slices=2), 2))
        # Queued for Kueue: suspended, labelled with the queue.
        assert jobset["metadata"]["labels"][QUEUE_LABEL] == LOCAL_QUEUE
        assert jobset["spec"]["suspend"] is True
        assert jobset["metadata"]["annotations"][EXCLUSIVE_TOPOLOGY_ANNOTATION] == (
            NODE_POOL_LABEL_KEY
        )
        [rjob] = jobset["spec"]["replicatedJobs"]
        assert (rjob["name"], rjob["replicas"]) == ("s", 2)
        assert rjob["template"]["spec"]["parallelism"] == NODES
        spec = pod_spec(jobset)
        env = {e["name"]: e for e in spec["containers"][0]["env"]}
        assert env[SLICES_ENV]["value"] == "2"
        assert env[COORDINATOR_ENV]["value"] == f"{op.name}-s-0-0.{op.name}"
        assert env[SLICE_ID_ENV]["valueFrom"]["fieldRef"]["fieldPath"] == (
            f"metadata.labels['{JOB_INDEX_LABEL}']"
        )
        assert spec["hostNetwork"] is True
        [term] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        assert {"key": NODE_POOL_LABEL_KEY, "operator": "In", "values": pools} in term[
            "matchExpressions"
        ]
        # A JobSet makes its own headless Service: the operator makes none.
        assert op.service() is None
        await jobsets.admit(jobset)
        await jobsets.start(await jobsets.made(op.name))
        await pools_up(op, pools)
        await jobsets.run(op.name)
        status = await op.until(
            lambda: (
                (s := op.status()).get("phase") == "Running"
                and [x["nodes"] for x in s.get("slices", [])] == [NODES, NODES]
                and s
            ),
            "Running with both slices' nodes",
        )
        assert status["plan"]["totalNodes"] == 2 * NODES
        assert status["job"]["name"] == op.name
        await jobsets.complete(op.name)
        await op.wait_phase("Succeeded")
        await op.until(lambda: resized_to_zero(op) == set(pools), "both pools resized to zero")
        await slices_gone(op, pools)
        assert sorted(p.name for p in op.created_pools()) == sorted(pools)

    virtual.run(scenario)


def resized_to_zero(op: VirtualOperator) -> set[str]:
    """The pools the operator asked GKE to resize to zero."""
    calls = op.emulator.calls_for("SetNodePoolSize")
    return {c.request.name.rsplit("/", 1)[-1] for c in calls if c.ok and c.request.node_count == 0}


async def slices_gone(op: VirtualOperator, pools: list[str]) -> None:
    """The resized pools' VMs go; the request says it scaled down. Resized, never
    capped: GKE checks a slice pool's maximum against the slice."""
    for pool in pools:
        await op.nodes_up(pool, 0)
    await op.until(
        lambda: (c := op.condition("ScaledDown")) is not None and c["status"] == "True",
        "ScaledDown",
    )
    for pool in pools:
        found = op.pool(pool)
        assert found is not None
        assert found.autoscaling.max_node_count == NODES


def test_a_preempted_slice_restarts_the_jobset() -> None:
    virtual = Virtual(jobset=True)

    async def scenario(op: VirtualOperator) -> None:
        jobsets = JobSets(op)
        base = f"ms-{op.name[3:]}"
        await op.create(TWO_SLICES, mode="Spot", maxRestarts=1, nodePool={"name": base})
        first = await jobsets.made(op.name)
        assert "suspend" not in first["spec"]
        await jobsets.start(first)
        pools = [f"{base}-s0", f"{base}-s1"]
        assert slice_pools(op) == pools
        await pools_up(op, pools)
        await jobsets.run(op.name)
        await op.wait_phase("Running")
        # Slice 1's pool loses a Spot VM.
        await op.nodes_up(pools[1], NODES - 1)
        await jobsets.slice_lost(op.name, 1)
        await op.until(lambda: op.status().get("restarts") == 1, "a restart")
        restarted = await jobsets.made(job_name(op.name, 1))
        await jobsets.collect(op.name)
        assert [j["metadata"]["name"] for j in jobsets.children(op.name)] == []
        await jobsets.start(restarted)
        await op.nodes_up(pools[1], NODES)
        await jobsets.run(restarted["metadata"]["name"])
        await op.wait_phase("Running")
        await jobsets.complete(restarted["metadata"]["name"])
        status = await op.wait_phase("Succeeded")
        assert status["restarts"] == 1
        assert status["job"]["name"] == f"{op.name}-r1"
        assert "Restarting" in op.events()
        # The first attempt's JobSet is gone, and both attempts ran on the same two pools.
        assert jobsets.names() == [f"{op.name}-r1"]
        assert sorted(p.name for p in op.created_pools()) == pools
        await op.until(lambda: resized_to_zero(op) == set(pools), "both pools resized to zero")
        await slices_gone(op, pools)

    virtual.run(scenario)


def test_deleting_a_multi_slice_request_leaves_nothing() -> None:
    virtual = Virtual(jobset=True)

    async def scenario(op: VirtualOperator) -> None:
        jobsets = JobSets(op)
        await op.create(TWO_SLICES)
        await jobsets.start(await jobsets.made(op.name))
        pools = slice_pools(op)
        await pools_up(op, pools)
        await jobsets.run(op.name)
        await op.wait_phase("Running")
        await op.delete()
        await op.until(lambda: op.get() is None, "the request gone")
        assert jobsets.names() == []
        await jobsets.collect(op.name)
        assert op.jobs() == []
        assert op.pool_names() & set(pools) == set()
        deleted = {
            c.request.name.rsplit("/", 1)[-1] for c in op.emulator.calls_for("DeleteNodePool")
        }
        assert deleted == set(pools)

    virtual.run(scenario)
