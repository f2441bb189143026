"""Queued TPU pools serve ProvisioningRequests by whole slices of their topology, or
answer NotProvisioned. Pure: no API server."""

from __future__ import annotations

from google.cloud import container_v1

from dws_workshop.simulator.autoscaler_view import ScalingPool
from dws_workshop.simulator.nodes import pool_shape
from dws_workshop.simulator.whole_slices import Choice, choose, refusal
from tests.builders import gpu
from tests.gke.harness import queued_tpu, rendered


def view(pool: container_v1.NodePool) -> ScalingPool:
    pool.status = container_v1.NodePool.Status.RUNNING
    return ScalingPool(pool=pool, count=0, shape=pool_shape(pool), path=f"p/{pool.name}")


V6E_4X4 = view(queued_tpu("v6e", "4x4", name="v6e-4x4"))
V6E_2X4 = view(queued_tpu("v6e", "2x4", name="v6e-2x4"))


def test_a_multi_host_slice_comes_whole_and_of_its_topology() -> None:
    assert refusal(V6E_4X4, 4, "4x4") is None
    assert refusal(V6E_4X4, 4, None) is None
    assert refusal(V6E_4X4, 2, "4x4") == (
        "Node pool v6e-4x4 provisions its 4x4 TPU slice whole (4 nodes); the request asks for 2."
    )
    # Two slices never come from one slice's pool.
    assert refusal(V6E_4X4, 8, None) == (
        "Node pool v6e-4x4 provisions its 4x4 TPU slice whole (4 nodes); the request asks for 8."
    )
    assert refusal(V6E_4X4, 4, "2x4") == (
        "Node pool v6e-4x4 provisions TPU slices of topology 4x4; "
        "the request asks for tpu-topology 2x4."
    )


def test_single_host_topology_comes_from_the_machine_type() -> None:
    v6e = view(queued_tpu("v6e", "2x2", name="v6e-2x2"))
    v6e_8t = view(queued_tpu("v6e", "2x4", name="v6e-8t", machine_type="ct6e-standard-8t"))
    assert not v6e_8t.pool.placement_policy.tpu_topology
    v5p = view(queued_tpu("v5p", "2x2x1", name="v5p-one"))
    tpu7x = view(queued_tpu("tpu7x", "2x2x1", name="tpu7x-one"))
    assert [p.shape.tpu_topology for p in (v6e, v6e_8t, v5p, tpu7x)] == [
        "2x2",
        "2x4",
        "2x2x1",
        "2x2x1",
    ]
    # Each VM is a slice: any count is whole slices (the pool maximum bounds it elsewhere).
    assert refusal(v6e, 3, "2x2") is None
    assert refusal(v6e_8t, 1, "2x4") is None
    assert refusal(v5p, 1, "2x2x2") == (
        "Node pool v5p-one provisions TPU slices of topology 2x2x1; "
        "the request asks for tpu-topology 2x2x2."
    )
    assert refusal(tpu7x, 2, None) is None


def test_gpu_pools_take_any_count() -> None:
    h100 = view(rendered(gpu("nvidia-h100-80gb", nodes=2), "QueuedProvisioning", name="h100"))
    assert refusal(h100, 1, None) is None
    assert refusal(h100, 2, "4x4") is None


def test_choose_prefers_a_pool_that_serves_whole_else_explains_the_first() -> None:
    candidates = [V6E_2X4, V6E_4X4]
    assert choose(candidates, 4, "4x4") == Choice(V6E_4X4)
    assert choose(candidates, 2, None) == Choice(V6E_2X4)
    refused = choose(candidates, 3, "4x4")
    assert refused is not None
    assert refused.pool is V6E_2X4
    assert refused.refusal == refusal(V6E_2X4, 3, "4x4")
    assert choose([], 4, "4x4") is None
