"""Whether a Job (or JobSet) is on its way out with its pods: deleted, and not so as to
orphan them (then the operator deletes it again, its own way)."""

from __future__ import annotations

import pytest

from dws_operator.controller.records import JobRecord, workload_deleting

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
