"""Whether a Job (or JobSet) is on its way out with its pods: deleted, and not so as to
orphan them (then the operator deletes it again, its own way); and a decision asks for
such a workload's delete only once, whichever rule asks."""

from __future__ import annotations

import dataclasses

import pytest

from dws_operator.controller.records import JobRecord, workload_deleting
from dws_operator.reconcile import DeleteJob
from dws_operator.reconcile.decision import Draft
from tests.unit.decisions import GPU_TWO, job_view, observed

DELETED = "2026-11-28T12:00:00Z"


@pytest.mark.parametrize(
    ("metadata", "deleting"),
    [
        ({}, False),
        ({"finalizers": ["foregroundDeletion"]}, False),
        ({"deletionTimestamp": DELETED}, True),
        ({"deletionTimestamp": DELETED, "finalizers": ["foregroundDeletion"]}, True),
        ({"deletionTimestamp": DELETED, "finalizers": ["orphan"]}, False),
    ],
    ids=["there", "a-finalizer-only", "deleted", "foreground", "orphaning-its-pods"],
)
def test_deleting_unless_its_pods_are_orphaned(metadata: dict[str, object], deleting: bool) -> None:
    assert workload_deleting(metadata) is deleting
    job = JobRecord.of({"metadata": {"name": "llama", **metadata}})
    assert job.deleting is deleting


def test_a_decision_deletes_a_workload_being_deleted_no_more() -> None:
    seen = dataclasses.replace(
        observed(GPU_TWO, job=job_view("llama-2", deleting=True)),
        stale_jobs=("llama-0", "llama-1"),
        stale_going=frozenset({"llama-0"}),
    )
    assert seen.going == {"llama-0", "llama-2"}
    draft = Draft(seen)
    for name in ("llama-0", "llama-1", "llama-2", "llama-holder"):
        draft.act(DeleteJob(name))
    assert draft.decision.actions == [DeleteJob("llama-1"), DeleteJob("llama-holder")]
    # The current workload not being deleted is deleted as asked.
    there = Draft(observed(GPU_TWO, job=job_view("llama-2")))
    there.act(DeleteJob("llama-2", foreground=True))
    assert there.decision.actions == [DeleteJob("llama-2", foreground=True)]
