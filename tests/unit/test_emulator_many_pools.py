"""The simulated autoscaler's latency in clusters with many node pools (GKE documents
it above 200 pools): a delay added to every scale-up, only above the threshold."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from dws_workshop.simulator.scenario import (
    MANY_POOLS,
    MANY_POOLS_SCALE_UP_DELAY_SECONDS,
    CapacityRule,
    SimScenario,
)

ZONES = ["us-east5-a", "us-east5-b"]


def test_gke_threshold_and_our_default_delay() -> None:
    scenario = SimScenario()
    assert (scenario.many_pools_threshold, MANY_POOLS) == (200, 200)
    assert scenario.many_pools_scale_up_delay_seconds == MANY_POOLS_SCALE_UP_DELAY_SECONDS == 30
    assert scenario.scale_up_delay(200) == 0.0
    assert scenario.scale_up_delay(201) == 30.0


def test_capacity_at_once_comes_after_the_delay_above_the_threshold() -> None:
    scenario = SimScenario()
    assert scenario.capacity_zone(ZONES, "nvidia-l4", 0, pools=200) == "us-east5-a"
    assert scenario.capacity_zone(ZONES, "nvidia-l4", 29.9, pools=201) is None
    assert scenario.capacity_zone(ZONES, "nvidia-l4", 30, pools=201) == "us-east5-a"


def test_the_delay_adds_to_a_capacity_rules_wait() -> None:
    scenario = SimScenario(
        capacity=[CapacityRule(accelerator="nvidia-l4", after_seconds=300)],
        many_pools_threshold=10,
        many_pools_scale_up_delay_seconds=60,
    )
    assert scenario.capacity_zone(ZONES, "nvidia-l4", 300, pools=10) == "us-east5-a"
    assert scenario.capacity_zone(ZONES, "nvidia-l4", 359, pools=11) is None
    assert scenario.capacity_zone(ZONES, "nvidia-l4", 360, pools=11) == "us-east5-a"
    # A stockout stays a stockout, however long the wait.
    stockout = SimScenario(capacity=[CapacityRule(stockout=True)], many_pools_threshold=0)
    assert stockout.capacity_zone(ZONES, "nvidia-l4", 1e9, pools=1) is None


def test_the_settings_are_read_from_a_scenario_file() -> None:
    data = yaml.safe_load("many_pools_threshold: 50\nmany_pools_scale_up_delay_seconds: 90\n")
    scenario = SimScenario.model_validate(data)
    assert scenario.scale_up_delay(51) == 90.0
    assert scenario.scale_up_delay(50) == 0.0
    with pytest.raises(ValidationError):
        SimScenario(many_pools_scale_up_delay_seconds=-1)
