"""How the controller reads a node pool's size limit from GKE's NodePool."""

from __future__ import annotations

from google.cloud import container_v1

from dws_operator.controller.observe import pool_view
from tests.builders import gpu
from tests.gke.harness import UID, rendered

ZONES = ["us-east5-a", "us-east5-b", "us-east5-c"]


def served(pool: container_v1.NodePool) -> container_v1.NodePool:
    """The pool as GetNodePool answers: GKE lists the zones it took from the cluster."""
    pool.locations = pool.locations or ZONES
    pool.status = container_v1.NodePool.Status.RUNNING
    return pool


def test_a_total_limit_is_the_pools_maximum() -> None:
    pool = served(rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot"))
    assert pool.autoscaling.total_max_node_count == 2
    assert pool_view(pool, UID).max_nodes == 2


def test_a_per_zone_limit_holds_in_each_of_the_pools_zones() -> None:
    pool = served(rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot"))
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=True, max_node_count=2)
    assert pool_view(pool, UID).max_nodes == 6
    pool.locations = ["us-east5-b"]
    assert pool_view(pool, UID).max_nodes == 2


def test_a_pool_without_autoscaling_has_its_initial_size() -> None:
    pool = served(rendered(gpu("nvidia-h100-80gb", nodes=2), "Spot"))
    pool.autoscaling = container_v1.NodePoolAutoscaling(enabled=False)
    pool.initial_node_count = 3
    view = pool_view(pool, UID)
    assert (view.max_nodes, view.ours, view.accelerator_type) == (3, True, "nvidia-h100-80gb")
