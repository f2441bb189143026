"""A spec's errors: every rule it breaks, in field order."""

from __future__ import annotations

from dws_operator.api import TrainingRequestSpec
from dws_operator.errors import SpecError
from dws_operator.validation.accelerator import gpu_errors, mode_errors, slice_errors, tpu_errors
from dws_operator.validation.ladder import ladder_errors
from dws_operator.validation.long_run import run_errors
from dws_operator.validation.node_pool import node_pool_errors
from dws_operator.validation.provisioning import provisioning_errors


def spec_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """Every rule the spec breaks, in field order; empty when GKE would accept it."""
    found: list[SpecError] = []
    if spec.accelerator.tpu is not None:
        tpu_found = tpu_errors(spec.accelerator.tpu)
        found += tpu_found or slice_errors(spec)
    if spec.accelerator.gpu is not None:
        found += gpu_errors(spec.accelerator.gpu)
    found += mode_errors(spec)
    found += provisioning_errors(spec)
    found += ladder_errors(spec)
    found += node_pool_errors(spec)
    found += run_errors(spec)
    return found
