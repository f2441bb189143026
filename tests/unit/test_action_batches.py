"""Which of a decision's actions the reconciler runs at once: consecutive pool actions
(a multi-slice request's pools), nothing else."""

from __future__ import annotations

from dws_operator.controller.reconciler import _batches
from dws_operator.reconcile import (
    CreateJob,
    DeleteJob,
    DeleteNodePool,
    ScaleNodePoolToZero,
)


def test_consecutive_pool_actions_form_one_batch() -> None:
    actions = [
        DeleteJob("a", "JobSet"),
        ScaleNodePoolToZero("p-s0"),
        ScaleNodePoolToZero("p-s1"),
        DeleteNodePool("q"),
        CreateJob({"kind": "Job"}),
        ScaleNodePoolToZero("p-s2"),
    ]
    assert _batches(actions) == [
        [DeleteJob("a", "JobSet")],
        [ScaleNodePoolToZero("p-s0"), ScaleNodePoolToZero("p-s1"), DeleteNodePool("q")],
        [CreateJob({"kind": "Job"})],
        [ScaleNodePoolToZero("p-s2")],
    ]


def test_other_actions_stay_one_at_a_time_in_order() -> None:
    actions = [DeleteJob("a"), DeleteJob("b"), CreateJob({"kind": "Job"})]
    assert _batches(actions) == [[a] for a in actions]
    assert _batches([]) == []
