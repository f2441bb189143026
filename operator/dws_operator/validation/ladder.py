"""The capacity ladder's rules: the fallback steps, their order and their pools."""

from __future__ import annotations

from dws_operator.api import FallbackOrder, TrainingRequestSpec
from dws_operator.catalog import ProvisioningMode
from dws_operator.durations import parse_duration
from dws_operator.errors import SpecError
from dws_operator.naming import max_pool_name
from dws_operator.validation.accelerator import mode_errors, queued_slices_errors
from dws_operator.validation.paths import FALLBACK_PATH, NODE_POOL_PATH, PROVISIONING_PATH
from dws_operator.validation.provisioning import reservation_errors, tpu_zone_errors

#: Why fallbackOrder Estimated is refused without fallback steps, or with a Calendar step.
ESTIMATED_NEEDS_FALLBACK = "Estimated orders the ladder's steps: it needs fallback steps"
ESTIMATED_NOT_CALENDAR = (
    "Estimated is not available with mode Calendar: its block is booked ahead, so it is "
    "always the first step"
)


def ladder_errors(spec: TrainingRequestSpec) -> list[SpecError]:
    """The capacity ladder's rules: each fallback step valid for the accelerator as the
    first step must be, a pool of its own for every step, and a wait that ends on every
    step but the last (else the steps after it are never reached)."""
    steps = spec.provisioning.steps
    estimated = spec.provisioning.fallback_order == FallbackOrder.ESTIMATED
    if len(steps) == 1:
        if not estimated:
            return []
        return [SpecError(f"{PROVISIONING_PATH}.fallbackOrder", ESTIMATED_NEEDS_FALLBACK)]
    found: list[SpecError] = []
    if estimated and spec.provisioning.mode == ProvisioningMode.CALENDAR:
        found.append(SpecError(f"{PROVISIONING_PATH}.fallbackOrder", ESTIMATED_NOT_CALENDAR))
    if spec.node_pool.existing:
        found.append(
            SpecError(
                FALLBACK_PATH,
                "not available with nodePool.existing: every step gets a node pool of its own",
            )
        )
    slices = spec.accelerator.tpu.slices if spec.accelerator.tpu else 1
    longest = max_pool_name(slices, ladder=True)
    if spec.node_pool.name is not None and len(spec.node_pool.name) > longest:
        found.append(
            SpecError(
                f"{NODE_POOL_PATH}.name",
                f"at most {longest} characters with fallback steps (each step's pool adds "
                "-f<step>)",
            )
        )
    for index, provisioning in enumerate(steps):
        path = PROVISIONING_PATH if index == 0 else f"{FALLBACK_PATH}[{index - 1}]"
        last = index == len(steps) - 1
        if not last and not parse_duration(provisioning.max_wait_duration):
            found.append(
                SpecError(
                    f"{path}.maxWaitDuration",
                    "0s waits forever, so the steps after this one would never be tried; "
                    "give it a limit (only the last step may wait forever)",
                )
            )
        if index == 0:
            continue  # the first step's own rules are the spec's
        if provisioning.mode == ProvisioningMode.CALENDAR:
            found.append(
                SpecError(
                    f"{path}.mode",
                    "Calendar is only the first step of a capacity ladder (its block is "
                    "booked ahead)",
                )
            )
            continue
        step = spec.at_step(index)
        found += mode_errors(step, path)
        found += queued_slices_errors(step, path)
        found += tpu_zone_errors(step, path)
        found += reservation_errors(step, path)
    return found
