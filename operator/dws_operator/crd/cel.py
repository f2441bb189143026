"""CEL rules (`x-kubernetes-validations`) generated from the catalog.

These make the API server reject, at admission, every TrainingRequest that
`dws_operator.validation` would reject, with a message naming the field. They are
generated, never hand-written, so a new TPU topology or GPU machine type reaches
the CRD by regenerating it. Each group lives in a module of its own (`*_rules`); this
one says where each is attached.
"""

from __future__ import annotations

from dataclasses import replace

from dws_operator.crd.accelerator_rules import accelerator_rules, gpu_rules, tpu_rules
from dws_operator.crd.calendar_rules import calendar_block_rules, calendar_rules
from dws_operator.crd.ladder_rules import fallback_step_rules, ladder_rules, ladder_wait_rules
from dws_operator.crd.object_rules import node_pool_rules, root_rules
from dws_operator.crd.provisioning_rules import provisioning_rules, spec_rules
from dws_operator.crd.rule import Rule
from dws_operator.crd.run_rules import run_field_rules, run_rules


def _needing(rules: list[Rule], *fields: str) -> list[Rule]:
    return [replace(rule, needs=fields) for rule in rules]


#: Where each group of rules is attached, by field path below the root schema.
RULES_BY_PATH: dict[tuple[str, ...], list[Rule]] = {
    (): root_rules(),
    ("spec",): _needing(
        spec_rules() + ladder_rules() + calendar_rules() + run_rules(),
        "accelerator",
        "provisioning.mode",
    ),
    ("spec", "run"): run_field_rules(),
    ("spec", "accelerator"): accelerator_rules(),
    ("spec", "accelerator", "tpu"): _needing(tpu_rules(), "version", "topology"),
    ("spec", "accelerator", "gpu"): _needing(gpu_rules(), "type"),
    ("spec", "provisioning"): provisioning_rules() + ladder_wait_rules(),
    ("spec", "provisioning", "fallback", "[]"): fallback_step_rules(),
    ("spec", "provisioning", "calendar"): calendar_block_rules(),
    ("spec", "nodePool"): node_pool_rules(),
}
