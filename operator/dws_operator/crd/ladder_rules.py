"""CEL rules of the capacity ladder: each fallback step valid for the accelerator as
the first step must be, a pool of its own for every step, and a wait that ends on every
step but the last."""

from __future__ import annotations

from dws_operator.api.provisioning import MAX_FALLBACK_STEPS
from dws_operator.catalog import ProvisioningMode
from dws_operator.crd.rule import Rule, lit, lits
from dws_operator.durations import DURATION_PATTERN
from dws_operator.naming import max_pool_name
from dws_operator.validation import (
    FLEX_START_MODES,
    FLEX_START_UNSUPPORTED_GPUS,
    FLEX_START_UNSUPPORTED_TPUS,
    TPU_ONE_ZONE,
)

_FALLBACK = "self.provisioning.fallback"
#: The request has fallback steps (a long run's pool names leave room for theirs too).
HAS_FALLBACK = f"has({_FALLBACK}) && size({_FALLBACK}) > 0"


def _step_rules(bad: str, field: str, text: str) -> list[Rule]:
    """One rule per possible fallback step, each naming its step: `bad` is a CEL
    condition on `{s}`, the step. (A rule per index rather than one over the list: the
    API server can name the step only in a fixed message, and a message computed by CEL
    over the list costs more than its budget allows.)"""
    rules = []
    for index in range(MAX_FALLBACK_STEPS):
        step = f"{_FALLBACK}[{index}]"
        rules.append(
            Rule(
                f"!has({_FALLBACK}) || size({_FALLBACK}) <= {index} || !({bad.format(s=step)})",
                f"spec.provisioning.fallback[{index}].{field}: {text}",
                ".provisioning.fallback",
            )
        )
    return rules


def ladder_rules() -> list[Rule]:
    """Each fallback step valid for the accelerator, as the first step must be."""
    flex_modes = lits(m.value for m in FLEX_START_MODES)
    no_flex_tpus = [v.value for v in FLEX_START_UNSUPPORTED_TPUS]
    no_flex_gpus = [t.value for t in FLEX_START_UNSUPPORTED_GPUS]
    others = ", ".join(m.value for m in ProvisioningMode if m not in FLEX_START_MODES)
    queued = lit(ProvisioningMode.QUEUED_PROVISIONING)
    several = "has(self.accelerator.tpu) && has(self.accelerator.tpu.slices) && " + (
        "self.accelerator.tpu.slices > 1"
    )
    longest = max_pool_name(ladder=True)
    longest_sliced = max_pool_name(2, ladder=True)
    return [
        *_step_rules(
            f"has(self.accelerator.tpu) && {{s}}.mode in {flex_modes} && "
            f"self.accelerator.tpu.version in {lits(no_flex_tpus)}",
            "mode",
            f"flex-start modes are not available for TPU {', '.join(no_flex_tpus)}: flex-start "
            f"VMs do not serve it; use {others}",
        ),
        *_step_rules(
            f"has(self.accelerator.gpu) && {{s}}.mode in {flex_modes} && "
            f"self.accelerator.gpu.type in {lits(no_flex_gpus)}",
            "mode",
            f"flex-start modes are not available for {', '.join(no_flex_gpus)}: flex-start VMs "
            f"do not serve it; use {others}",
        ),
        *_step_rules(
            "has(self.accelerator.tpu) && has({s}.zones) && size({s}.zones) > 1",
            "zones",
            TPU_ONE_ZONE,
        ),
        *_step_rules(
            f"{several} && {{s}}.mode == {queued}",
            "mode",
            "QueuedProvisioning is not available for several slices: GKE provisions one slice "
            "per ProvisioningRequest",
        ),
        Rule(
            f"!({HAS_FALLBACK}) || !has(self.nodePool.existing) || !self.nodePool.existing",
            "spec.provisioning.fallback is not available with nodePool.existing: every step "
            "gets a node pool of its own",
            ".provisioning.fallback",
        ),
        Rule(
            f"!({HAS_FALLBACK}) || !has(self.nodePool.name) || "
            f"size(self.nodePool.name) <= ({several} ? {longest_sliced} : {longest})",
            f"nodePool.name has at most {longest} characters with fallback steps, "
            f"{longest_sliced} with several slices too (each step's pool adds -f<step>)",
            ".nodePool.name",
        ),
    ]


def _waits_forever(value: str) -> str:
    parses = f"size({value}) >= 2 && {value}.matches({lit(DURATION_PATTERN)})"
    return f"({parses} && duration({value}) == duration('0s'))"


def ladder_wait_rules() -> list[Rule]:
    """On `spec.provisioning`: every step but the last has a wait that ends."""
    fallback = "self.fallback"
    text = (
        "0s waits forever, so the steps after this one would never be tried; give it a limit "
        "(only the last step may wait forever)"
    )
    rules = [
        Rule(
            f"!has({fallback}) || size({fallback}) == 0 || !has(self.maxWaitDuration) || "
            f"!{_waits_forever('self.maxWaitDuration')}",
            f"maxWaitDuration: {text}",
            ".maxWaitDuration",
        )
    ]
    for index in range(MAX_FALLBACK_STEPS - 1):
        step = f"{fallback}[{index}]"
        rules.append(
            Rule(
                f"!has({fallback}) || size({fallback}) <= {index + 1} || "
                f"!has({step}.maxWaitDuration) || !{_waits_forever(step + '.maxWaitDuration')}",
                f"spec.provisioning.fallback[{index}].maxWaitDuration: {text}",
                ".fallback",
            )
        )
    return rules


def fallback_step_rules() -> list[Rule]:
    """On each fallback step (the API server names its index)."""
    return [
        Rule(
            f"self.mode != {lit(ProvisioningMode.CALENDAR)}",
            "Calendar is only the first step of a capacity ladder (its block is booked ahead); "
            "fall back from it to other modes",
            ".mode",
            needs=("mode",),
        ),
        Rule(
            f"(self.mode == {lit(ProvisioningMode.RESERVATION)}) == has(self.reservation)",
            "reservation is required when mode is Reservation and not allowed otherwise",
            ".reservation",
            needs=("mode",),
        ),
    ]
