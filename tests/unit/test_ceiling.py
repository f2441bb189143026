"""How many nodes a pool may have, read one way by the controller and the emulator."""

from __future__ import annotations

import pytest
from google.cloud import container_v1

from dws_operator.gke.ceiling import autoscaler_max, ceiling, max_nodes, zone_limit

Autoscaling = container_v1.NodePoolAutoscaling


def pool(autoscaling: Autoscaling, zones: int = 1, initial: int = 0) -> container_v1.NodePool:
    return container_v1.NodePool(
        name="p",
        autoscaling=autoscaling,
        locations=[f"us-east5-{z}" for z in "abcdef"[:zones]],
        initial_node_count=initial,
    )


@pytest.mark.parametrize(
    ("autoscaling", "zones", "expected"),
    [
        (Autoscaling(enabled=True, total_max_node_count=4), 3, 4),  # a total: zones aside
        (Autoscaling(enabled=True, max_node_count=2), 3, 6),  # per zone, in each
        (Autoscaling(enabled=True, max_node_count=2), 0, 2),  # zones not known yet: one
        (Autoscaling(enabled=False, max_node_count=2), 3, 0),  # not autoscaled
        (Autoscaling(enabled=True), 2, 0),  # capped at zero
    ],
)
def test_the_autoscalers_maximum(autoscaling: Autoscaling, zones: int, expected: int) -> None:
    assert autoscaler_max(autoscaling, zones) == expected
    assert max_nodes(pool(autoscaling, zones)) == expected


def test_a_pool_not_autoscaled_has_its_fixed_size_as_ceiling_and_no_zone_limit() -> None:
    fixed = pool(Autoscaling(enabled=False), zones=2, initial=3)
    assert (max_nodes(fixed), ceiling(fixed), zone_limit(fixed)) == (0, 3, None)


def test_an_autoscaled_pools_ceiling_is_its_maximum_not_its_initial_size() -> None:
    scaled = pool(Autoscaling(enabled=True, max_node_count=2), zones=2, initial=5)
    assert (ceiling(scaled), zone_limit(scaled)) == (4, 2)
    total = pool(Autoscaling(enabled=True, total_max_node_count=8), zones=2)
    assert (ceiling(total), zone_limit(total)) == (8, None)
