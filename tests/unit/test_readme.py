"""The README's examples stay true: the scenario example parses as the emulator reads it,
the Monitoring section lists the metrics the operator exports, the dashboard queries them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.dashboard import PANELS, dashboard_json, metrics_used
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


def test_monitoring_lists_every_metric_the_operator_exports() -> None:
    text = README.read_text()
    section = text[text.index("## Monitoring") : text.index("## Performance")]
    listed = set(re.findall(r"^\| `(dws_[a-z_]+)` \|", section, re.M))
    exported = set()
    for family in OperatorMetrics().registry.collect():
        exported.add(f"{family.name}_total" if family.type == "counter" else family.name)
    assert listed == exported


def test_every_dashboard_query_names_exported_metrics() -> None:
    families = {family.name for family in OperatorMetrics().registry.collect()}
    assert metrics_used() <= families, metrics_used() - families
    # And every metric the operator exports has a panel.
    assert families - metrics_used() == set()


def test_the_committed_dashboard_is_the_generated_one() -> None:
    committed = (README.parent / "charts/dws-operator/dashboards/dws-operator.json").read_text()
    assert committed == dashboard_json()
    assert len(json.loads(committed)["panels"]) == len(PANELS)
