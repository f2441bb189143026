"""The emulator autoscaler's scheduling of a multi-slice JobSet's pods onto node pools: a
node affinity list of the request's pools, and JobSet's exclusive placement (the
leader's pod affinity / anti-affinity on the pool label, the follower's pool selector).
Pure: the pods are the operator's rendered template as JobSet's pod webhook mutates it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from google.cloud import container_v1

from dws_operator.api import TrainingRequestSpec
from dws_operator.multislice import slice_pod_template
from dws_operator.planning import plan_slice
from dws_operator.workload import RequestRef
from dws_workshop.simulator.autoscaler_view import ScalingPool, pending_by_pool
from dws_workshop.simulator.nodes import pool_shape
from dws_workshop.simulator.pool_affinity import allowed_pools, places_by_pool, selector_matches
from tests.builders import spec_body, tpu
from tests.gke.harness import rendered

POOL = "cloud.google.com/gke-nodepool"
JOB_KEY = "jobset.sigs.k8s.io/job-key"
PRIORITY = "jobset.sigs.k8s.io/priority"
SLICES = 3
POOLS = tuple(f"ms-s{i}" for i in range(SLICES))
REF = RequestRef("ms", "ml", "0b5e2c9d-0000-4000-8000-00000000cafe")
BODY = spec_body(tpu("v5p", "2x2x2", slices=SLICES))


def template() -> dict[str, Any]:
    spec = TrainingRequestSpec.model_validate(BODY)
    plan = plan_slice(spec, pool_name="ms")
    assert plan.pool_names == POOLS
    return dict(slice_pod_template(REF, spec, plan, "ms", 0))


def slice_pod(job: int, index: int, *, node: str | None = None) -> dict[str, Any]:
    """Pod `index` of child Job `job`, after JobSet's pod webhook: the leader (index 0)
    with JobSet's exclusive affinities (pkg/webhooks/pod_webhook.go), a follower with
    its leader's pool once the leader is on `node` (`ms-s<k>-<n>`)."""
    base = template()
    labels = {**base["metadata"]["labels"], JOB_KEY: f"key-{job}", PRIORITY: "0"}
    spec = copy.deepcopy(base["spec"])
    if index == 0:
        spec["affinity"]["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": JOB_KEY, "operator": "In", "values": [f"key-{job}"]}
                        ]
                    },
                    "topologyKey": POOL,
                    "namespaceSelector": {},
                }
            ]
        }
        spec["affinity"]["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {
                    "labelSelector": {
                        "matchExpressions": [
                            {"key": JOB_KEY, "operator": "Exists"},
                            {"key": JOB_KEY, "operator": "NotIn", "values": [f"key-{job}"]},
                            {"key": PRIORITY, "operator": "In", "values": ["0"]},
                        ]
                    },
                    "topologyKey": POOL,
                    "namespaceSelector": {},
                }
            ]
        }
    elif node is not None:
        spec["nodeSelector"][POOL] = node.rsplit("-", 1)[0]
    status: dict[str, Any] = {"phase": "Pending"}
    if node is not None and index == 0:
        spec["nodeName"] = node
        status = {"phase": "Running"}
    else:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]
    return {
        "metadata": {"name": f"ms-s-{job}-{index}-x", "namespace": "ml", "labels": labels},
        "spec": spec,
        "status": status,
    }


def slice_pool(name: str, nodes: int = 0) -> ScalingPool:
    pool = rendered(tpu("v5p", "2x2x2"), name=name)
    pool.status = container_v1.NodePool.Status.RUNNING
    view = ScalingPool(pool=pool, count=nodes, shape=pool_shape(pool), path=f"p/{name}")
    view.nodes = [
        {"metadata": {"name": f"{name}-{i}", "labels": {POOL: name}}} for i in range(nodes)
    ]
    return view


def chosen(pools: list[ScalingPool], pods: list[dict[str, Any]]) -> dict[str, list[str]]:
    found = pending_by_pool({p.name: p for p in pools}, pods)
    return {k: [p["metadata"]["name"] for p in v] for k, v in sorted(found.items())}


# -- label selectors and node affinity ------------------------------------------------------


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]},
            {"a": "2"},
            False,
        ),
        ({}, {"a": "1"}, True),
        (None, {"a": "1"}, False),
    ],
)
def test_label_selectors(
    selector: dict[str, Any] | None, labels: dict[str, str], expected: bool
) -> None:
    assert selector_matches(selector, labels) is expected


def _affinity(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]
                }
            }
        }
    }


def test_allowed_pools_unite_terms_and_intersect_within_one() -> None:
    def pools(*values: str) -> dict[str, Any]:
        return {"key": POOL, "operator": "In", "values": list(values)}

    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z"]}
    assert allowed_pools(template()["spec"]) == set(POOLS)
    assert allowed_pools(_affinity([pools("a", "b"), zone], [pools("c")])) == {"a", "b", "c"}
    assert allowed_pools(_affinity([pools("a", "b"), pools("b", "c")])) == {"b"}
    # A term without a pool list lets the pod onto any pool.
    assert allowed_pools(_affinity([pools("a")], [zone])) is None
    assert allowed_pools(_affinity([{"key": POOL, "operator": "NotIn", "values": ["a"]}])) is None
    assert allowed_pools({}) is None
    assert places_by_pool(slice_pod(0, 0)["spec"])
    assert not places_by_pool({"nodeSelector": {POOL: "a"}})


# -- which pools scale up ------------------------------------------------------------------


def test_each_pending_leader_claims_a_pool_of_its_own() -> None:
    pools = [slice_pool(name) for name in reversed(POOLS)]
    pods = [slice_pod(job, 0) for job in (2, 0, 1)]
    assert chosen(pools, pods) == {
        "ms-s0": ["ms-s-0-0-x"],
        "ms-s1": ["ms-s-1-0-x"],
        "ms-s2": ["ms-s-2-0-x"],
    }


def test_a_leader_avoids_pools_another_job_runs_on() -> None:
    # Job 0's leader runs on ms-s0 and its follower waits for ms-s0's other node; job
    # 1's leader must take another pool.
    pools = [slice_pool("ms-s0", nodes=2), slice_pool("ms-s1"), slice_pool("ms-s2")]
    pods = [slice_pod(0, 0, node="ms-s0-0"), slice_pod(0, 1, node="ms-s0-0"), slice_pod(1, 0)]
    assert chosen(pools, pods) == {"ms-s0": ["ms-s-0-1-x"], "ms-s1": ["ms-s-1-0-x"]}


def test_a_leader_takes_a_pools_free_node_before_claiming_an_empty_pool() -> None:
    # ms-s1 was scaled up for job 0's leader, which the scheduler has not bound yet: job
    # 0 keeps it (its nodes are free), job 1 claims the next empty pool.
    pools = [slice_pool("ms-s0"), slice_pool("ms-s1", nodes=2), slice_pool("ms-s2")]
    assert chosen(pools, [slice_pod(0, 0), slice_pod(1, 0)]) == {
        "ms-s0": ["ms-s-1-0-x"],
        "ms-s1": ["ms-s-0-0-x"],
    }


def test_no_pool_outside_the_list_and_none_at_its_maximum() -> None:
    full = slice_pool("ms-s0", nodes=2)
    busy = [slice_pod(5, 0, node="ms-s0-0")]
    stranger = slice_pool("other")
    # ms-s0 is at its maximum (2 nodes) with job 5 on it; `other` is not the request's.
    assert chosen([full, stranger], [*busy, slice_pod(0, 0)]) == {}
    at_zero = slice_pool("ms-s1")
    at_zero.pool.autoscaling.total_max_node_count = 0
    at_zero.pool.autoscaling.max_node_count = 0
    assert chosen([full, stranger, at_zero], [*busy, slice_pod(0, 0)]) == {}
