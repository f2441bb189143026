"""A queued request whose ProvisioningRequest stuck (Accepted, never provisioned) is asked
for again through a new workload attempt, a bounded number of times per step; and the
ProvisioningRequest is read only once the wait is long enough to have stuck. Pure."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta

from dws_operator.api import Phase
from dws_operator.controller.provreqs import provisioning_request_of
from dws_operator.reconcile import (
    RECOVERED,
    CreateJob,
    DeleteJob,
    ProvisioningRequestView,
    ReconcileConfig,
    provisioning_request_wanted,
)
from dws_operator.reconcile.observed import Observed
from tests.unit.decisions import (
    GPU_TWO,
    KUEUE,
    NAME,
    QUEUED,
    T0,
    job_view,
    observed,
    only,
    pool_for,
    run,
    status_at,
    with_,
)

HOUR = timedelta(hours=1)
QUEUED = with_(QUEUED, queueName="team-a")
#: The default: four hours Accepted and not provisioned.
STUCK = KUEUE.stuck_after_seconds


def waiting(now: datetime, accepted: datetime | None, **status: object) -> Observed:
    """The queued request's Job waiting (suspended by Kueue), its pool up with no node,
    and Kueue's ProvisioningRequest for it Accepted at `accepted`."""
    before = status_at(Phase.WAITING_FOR_CAPACITY, QUEUED, requested=T0, **status)  # type: ignore[arg-type]
    obs = observed(
        QUEUED, before, pool=pool_for(QUEUED), job=job_view(ready=0), service=True, now=now
    )
    seen = ProvisioningRequestView(f"job-{NAME}-abcde-dws-0", accepted, provisioned=False)
    return dataclasses.replace(obs, provisioning_request=seen)


def test_accepted_and_not_provisioned_for_too_long_is_asked_for_again() -> None:
    now = T0 + timedelta(seconds=STUCK) + HOUR
    decision = run(waiting(now, T0 + HOUR), KUEUE)
    assert only(decision.actions, DeleteJob) == [DeleteJob(NAME, "Job")]
    assert decision.status.recoveries == 1
    assert decision.status.restarts == 0
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    [event] = [e for e in decision.events if e.reason == RECOVERED]
    assert event.type == "Warning"
    assert "was Accepted 4.0h ago and not provisioned" in event.message
    assert decision.tally.recoveries == 1
    # The next pass makes the new attempt's Job (a new Kueue Workload, so a new
    # ProvisioningRequest); the old one's name is not used again.
    nxt = run(observed(QUEUED, decision.status, pool=pool_for(QUEUED), now=now), KUEUE)
    [create] = only(nxt.actions, CreateJob)
    assert create.manifest["metadata"]["name"] == f"{NAME}-r1"


def test_not_yet_stuck_it_looks_again_when_it_would_be() -> None:
    accepted = T0 + HOUR
    now = accepted + timedelta(seconds=STUCK - 600)
    decision = run(waiting(now, accepted), KUEUE)
    assert only(decision.actions, DeleteJob) == []
    assert decision.status.recoveries == 0
    assert decision.requeue_after is not None
    assert decision.requeue_after <= 601


def test_recoveries_are_bounded_then_the_wait_runs_its_course() -> None:
    now = T0 + timedelta(seconds=STUCK) + 2 * HOUR
    used = run(waiting(now, T0 + HOUR, recoveries=KUEUE.max_recoveries), KUEUE)
    assert only(used.actions, DeleteJob) == []
    assert used.status.recoveries == KUEUE.max_recoveries


def test_provisioned_failed_or_with_nodes_coming_is_not_stuck() -> None:
    now = T0 + timedelta(seconds=STUCK) + 2 * HOUR
    obs = waiting(now, T0 + HOUR)
    assert obs.provisioning_request is not None
    for seen in (
        dataclasses.replace(obs.provisioning_request, provisioned=True),
        dataclasses.replace(obs.provisioning_request, failed=True),
        dataclasses.replace(obs.provisioning_request, accepted_at=None),
    ):
        decision = run(dataclasses.replace(obs, provisioning_request=seen), KUEUE)
        assert only(decision.actions, DeleteJob) == [], seen
    nodes = dataclasses.replace(obs, nodes_by_pool={pool_for(QUEUED).name: 1})
    assert only(run(nodes, KUEUE).actions, DeleteJob) == []
    off = ReconcileConfig(kueue=True, location="us-east5", stuck_after_seconds=0)
    assert only(run(obs, off).actions, DeleteJob) == []


def test_the_provisioning_request_is_read_only_when_it_may_have_stuck() -> None:
    config = KUEUE
    request = waiting(T0, None).request
    assert provisioning_request_wanted(request, T0 + HOUR, config) is None
    late = T0 + timedelta(seconds=STUCK)
    assert provisioning_request_wanted(request, late, config) == NAME
    off = ReconcileConfig(kueue=True, location="us-east5", stuck_after_seconds=0)
    assert provisioning_request_wanted(request, late, off) is None
    flex = status_at(Phase.WAITING_FOR_CAPACITY, GPU_TWO, requested=T0)
    assert provisioning_request_wanted(observed(GPU_TWO, flex).request, late, config) is None
    running = status_at(Phase.RUNNING, QUEUED, requested=T0, started=T0 + HOUR)
    assert provisioning_request_wanted(observed(QUEUED, running).request, late, config) is None
    deleting = observed(with_(QUEUED), status_at(Phase.WAITING_FOR_CAPACITY, QUEUED), deleting=True)
    assert provisioning_request_wanted(deleting.request, late, config) is None


def test_the_provisioning_request_is_the_workloads_own_not_a_namesakes() -> None:
    def item(name: str, made: str, accepted: str | None = None) -> dict[str, object]:
        conditions = (
            [{"type": "Accepted", "status": "True", "lastTransitionTime": accepted}]
            if accepted
            else []
        )
        return {
            "metadata": {"name": name, "creationTimestamp": made},
            "status": {"conditions": conditions},
        }

    items = [
        item("job-train-big-0a1b2-dws-queued-provisioning-1", "2025-06-01T12:05:00Z"),
        item("job-train-3c4d5-dws-queued-provisioning-1", "2025-06-01T12:00:00Z"),
        item(
            "job-train-3c4d5-dws-queued-provisioning-2",
            "2025-06-01T12:03:00Z",
            "2025-06-01T12:04:00Z",
        ),
        item("jobset-train-9e8f7-dws-queued-provisioning-1", "2025-06-01T12:06:00Z"),
    ]
    found = provisioning_request_of(items, "Job", "train")
    assert found is not None
    assert found.name == "job-train-3c4d5-dws-queued-provisioning-2"
    assert found.accepted_at == T0 + timedelta(minutes=4)
    assert (found.provisioned, found.failed) == (False, False)
    assert provisioning_request_of(items, "JobSet", "train") is not None
    assert provisioning_request_of(items, "Job", "tra") is None
