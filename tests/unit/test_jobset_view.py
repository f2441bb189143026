"""A JobSet seen as one workload (`controller.observe.jobset_view`): its own conditions
say complete or failed; its Jobs say whether a node was lost and how many pods are ready."""

from __future__ import annotations

from typing import Any

from dws_operator.controller.cache import JobRecord
from dws_operator.controller.observe import jobset_view

UID = "uid-1"


def jobset(*conditions: tuple[str, str, str], owner: str = UID) -> dict[str, Any]:
    return {
        "metadata": {"name": "mega", "ownerReferences": [{"uid": owner}]},
        "spec": {"suspend": False},
        "status": {
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": f"{t} {r}"}
                for t, s, r in conditions
            ]
        },
    }


def child(name: str, ready: int = 0, failed: tuple[str, str] | None = None) -> JobRecord:
    conditions: list[dict[str, Any]] = []
    if failed is not None:
        conditions.append(
            {"type": "Failed", "status": "True", "reason": failed[0], "message": failed[1]}
        )
    # As the watch delivers it: the JobSet controller's Job, in plain JSON.
    return JobRecord.of(
        {
            "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/jobset-name": "mega"}},
            "status": {"ready": ready, "active": ready, "conditions": conditions},
        }
    )


def test_running_counts_ready_pods_over_every_slice() -> None:
    view = jobset_view(jobset(), [child("mega-s-0", 2), child("mega-s-1", 1)], UID)
    assert (view.ready, view.complete, view.failed) == (3, False, False)
    assert view.ours


def test_completed() -> None:
    view = jobset_view(jobset(("Completed", "True", "AllJobsCompleted")), [], UID)
    assert (view.complete, view.failed) == (True, False)


def test_failed_by_the_code_is_not_a_lost_node() -> None:
    failed = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
    view = jobset_view(
        jobset(("Failed", "True", "ReachedMaxRestarts")), [child("mega-s-1", failed=failed)], UID
    )
    assert (view.failed, view.disrupted) == (True, False)
    assert view.failure_reason == "ReachedMaxRestarts"


def test_a_slice_that_lost_a_node_makes_the_jobset_disrupted() -> None:
    lost = ("PodFailurePolicy", "Container train for pod x failed: DisruptionTarget")
    view = jobset_view(
        jobset(("Failed", "True", "ReachedMaxRestarts")),
        [child("mega-s-0", 2), child("mega-s-1", failed=lost)],
        UID,
    )
    assert (view.failed, view.disrupted) == (True, True)


def test_a_lost_node_before_the_jobset_failed_changes_nothing_yet() -> None:
    lost = ("PodFailurePolicy", "Container train for pod x failed: DisruptionTarget")
    view = jobset_view(jobset(), [child("mega-s-1", failed=lost)], UID)
    assert (view.failed, view.disrupted) == (False, False)


def test_someone_elses_jobset_is_not_ours() -> None:
    assert not jobset_view(jobset(owner="other"), [], UID).ours
