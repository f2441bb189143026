"""CEL rules on the object's name (the Job's, Service's and JobSet's pods' names are
built from it) and on `spec.nodePool`: the pool a request names or takes over."""

from __future__ import annotations

from dws_operator.crd.rule import Rule, lit
from dws_operator.multislice import MAX_MULTISLICE_NAME

#: Job, Service and pod hostnames (`<job>-<index>`, a DNS label) are built from the
#: object's name, so it must leave room for suffixes.
MAX_NAME_LENGTH = 48
NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"


def node_pool_rules() -> list[Rule]:
    return [
        Rule("!self.existing || has(self.name)", "name is required when existing is true", ".name"),
        Rule(
            '!self.existing || self.cleanup != "Delete"',
            "cleanup Delete is not allowed for an existing pool: the operator never deletes a "
            "pool it did not create; use ScaleToZero or Keep",
            ".cleanup",
        ),
        Rule(
            "has(self.name) == has(oldSelf.name) && (!has(self.name) || self.name == oldSelf.name)"
            " && self.existing == oldSelf.existing",
            "spec.nodePool.name and spec.nodePool.existing are immutable",
        ),
    ]


def root_rules() -> list[Rule]:
    return [
        Rule(
            f"size(self.metadata.name) <= {MAX_NAME_LENGTH} && "
            f"self.metadata.name.matches({lit(NAME_PATTERN)})",
            f"metadata.name must be a DNS label of at most {MAX_NAME_LENGTH} characters that "
            "starts with a letter (the Job, Service and pod hostnames are derived from it)",
        ),
        Rule(
            "!has(self.spec) || !has(self.spec.accelerator) || !has(self.spec.accelerator.tpu) "
            "|| !has(self.spec.accelerator.tpu.slices) || self.spec.accelerator.tpu.slices == 1 "
            f"|| size(self.metadata.name) <= {MAX_MULTISLICE_NAME}",
            f"metadata.name has at most {MAX_MULTISLICE_NAME} characters with several slices "
            "(the JobSet's pod names are built from it)",
        ),
    ]
