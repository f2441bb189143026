"""The README's examples stay true: the scenario example parses as the emulator reads it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from dws_workshop.simulator.scenario import SimScenario

README = Path(__file__).resolve().parents[2] / "README.md"


def test_scenario_example_is_valid() -> None:
    section = README.read_text().split("### The simulated cluster", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match, "README lost its scenario example"
    scenario = SimScenario.model_validate(yaml.safe_load(match.group(1)))
    assert scenario.clock_factor == 60
    assert scenario.capacity[0].after_seconds == 300
    assert scenario.capacity[1].stockout
    assert scenario.preemptions[0].at_seconds == 900
