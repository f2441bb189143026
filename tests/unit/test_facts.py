"""A request's spec is read once, at the edge: its facts, valid or not, and the shell's
memory of them (read again only when the spec changes, which its generation says)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from dws_operator.api import TrainingRequestStatus
from dws_operator.controller.observe import FactsMemo, request_view
from dws_operator.multislice import JOBSET_KIND
from dws_operator.naming import default_node_pool_name
from dws_operator.reconcile import StepPlan, StepWords, planned, read_spec
from tests.builders import gpu, spec_body, tpu
from tests.unit import decisions

NAME, UID = "train", "0a1b2c3d-0000-4000-8000-00000000f00d"


def body(spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    metadata = {"name": NAME, "namespace": "ml", "uid": UID, "generation": generation}
    return {"metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def test_a_valid_spec_is_read_with_its_ladder_and_pool_names() -> None:
    spec = spec_body(
        tpu("v5p", "2x2x2", slices=2),
        provisioning={
            "zones": ["us-east5-a"],
            "fallback": [{"mode": "Spot", "zones": ["us-east5-b"]}],
        },
    )
    facts = read_spec(NAME, UID, spec)
    assert facts.spec is not None
    assert facts.invalid is None
    assert facts.spec.accelerator.tpu is not None
    assert facts.spec.accelerator.tpu.slices == 2
    assert facts.slices == 2
    assert facts.workload_kind == JOBSET_KIND
    assert facts.steps == (
        StepWords("FlexStart", ("us-east5-a",)),
        StepWords("Spot", ("us-east5-b",)),
    )
    assert facts.step_words(2) == StepWords("Spot", ("us-east5-b",))
    assert facts.step_words(None) == facts.step_words(9) == facts.steps[0]
    assert facts.base_pool == default_node_pool_name(NAME, UID, 2, True)
    assert (facts.named_pool, facts.existing) == (False, False)


def test_an_invalid_spec_still_says_what_to_look_after() -> None:
    # Its pools were made under an earlier, valid spec: they are still found and removed.
    spec = spec_body(tpu("v5p", "2x2x2", slices=3))
    spec["accelerator"]["tpu"]["topology"] = "not-a-topology"
    spec["nodePool"] = {"name": "mine", "existing": False}
    facts = read_spec(NAME, UID, spec)
    assert facts.spec is None
    assert facts.invalid is not None
    assert any("topology" in str(e) for e in facts.invalid.errors)
    assert (facts.slices, facts.base_pool, facts.named_pool) == (3, "mine", True)
    assert facts.workload_kind == JOBSET_KIND


def test_an_unreadable_spec_reads_as_one_slice_one_step() -> None:
    facts = read_spec(NAME, UID, {"accelerator": "tpu", "provisioning": ["x"]})
    assert facts.spec is None
    assert facts.invalid is not None
    assert (facts.slices, facts.ladder_steps, facts.workload_kind) == (1, 1, "Job")
    assert facts.steps == (StepWords(""),)
    assert facts.base_pool == default_node_pool_name(NAME, UID, 1, False)


def test_the_shell_reads_a_spec_once_per_generation() -> None:
    memo = FactsMemo()
    first = body(spec_body(gpu("nvidia-l4", 1)))
    facts = memo.of(first)
    assert memo.reads == 1
    # A status write: a new object, the same spec and generation.
    written = copy.deepcopy(first)
    written["status"] = {"phase": "Provisioning"}
    assert memo.of(written) is facts
    assert request_view(written, facts=memo.of(written)).facts is facts
    assert memo.reads == 1
    # A spec change raises the generation: read again.
    changed = copy.deepcopy(first)
    changed["spec"]["maxRestarts"] = 7
    changed["metadata"]["generation"] = 2
    again = memo.of(changed)
    assert memo.reads == 2
    assert again.spec is not None
    assert again.spec.max_restarts == 7


def test_the_memory_is_bounded_and_forgets() -> None:
    memo = FactsMemo(size=2)
    bodies = []
    for index in range(3):
        one = body(spec_body(gpu("nvidia-l4", 1)))
        one["metadata"]["uid"] = f"uid-{index}"
        bodies.append(one)
        memo.of(one)
    assert memo.reads == 3
    memo.of(bodies[2])
    assert memo.reads == 3
    memo.of(bodies[0])  # pushed out by the third
    assert memo.reads == 4
    memo.forget("uid-0")
    memo.of(bodies[0])
    assert memo.reads == 5
    # Without a generation (never so from an API server) nothing is kept.
    bare = body(spec_body(gpu("nvidia-l4", 1)))
    del bare["metadata"]["generation"]
    memo.of(bare)
    memo.of(bare)
    assert memo.reads == 7


def test_a_view_is_planned_once_whoever_asks() -> None:
    # The idle pool's shape, the Service check and the decision all read the pass's plan:
    # made once per view. A view of another status (a new pass) plans afresh.
    view = decisions.request(decisions.GPU_TWO)
    first = planned(view)
    assert isinstance(first, StepPlan)
    assert planned(view) is first
    moved = dataclasses.replace(view, status=TrainingRequestStatus(step=1))
    assert planned(moved) is not first
    assert planned(moved) == first
    assert view.memo == {"planned": first}
