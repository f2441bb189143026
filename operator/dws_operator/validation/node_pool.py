"""The node pool's rules: a pool taken over is named and never deleted, and several
slices get pools of their own with room for the slice suffix."""

from __future__ import annotations

from dws_operator.api import CleanupPolicy, TrainingRequestSpec
from dws_operator.errors import SpecError
from dws_operator.naming import MAX_SLICED_POOL_NAME
from dws_operator.validation.paths import NODE_POOL_PATH


def node_pool_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    pool = spec.node_pool
    found: list[SpecError] = []
    if pool.existing and pool.name is None:
        found.append(SpecError(f"{NODE_POOL_PATH}.name", "required when existing is true"))
    if pool.existing and pool.cleanup == CleanupPolicy.DELETE:
        found.append(
            SpecError(
                f"{NODE_POOL_PATH}.cleanup",
                "Delete is not allowed for an existing pool: the operator never deletes a pool "
                "it did not create",
                (CleanupPolicy.SCALE_TO_ZERO.value, CleanupPolicy.KEEP.value),
            )
        )
    tpu = spec.accelerator.tpu
    if tpu is not None and tpu.slices > 1:
        if pool.existing:
            found.append(
                SpecError(
                    f"{NODE_POOL_PATH}.existing",
                    "not available with several slices: each slice gets a node pool of its own",
                )
            )
        elif pool.name is not None and len(pool.name) > MAX_SLICED_POOL_NAME:
            found.append(
                SpecError(
                    f"{NODE_POOL_PATH}.name",
                    f"at most {MAX_SLICED_POOL_NAME} characters with several slices (each "
                    "slice's pool adds -s<index>)",
                )
            )
    return found
