"""The Argo CD health check of a TrainingRequest for every phase (Lua 5.1, lupa), and the
kstatus conditions (Ready, Reconciling, Stalled) the phase gives."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.reconcile import conditions as cond
from tests.argocd import health


def request(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    body: dict[str, Any] = {"metadata": {"name": "t", "generation": generation}}
    if status is not None:
        body["status"] = status
    return body


@pytest.mark.parametrize(
    ("phase", "expected"),
    [
        ("Pending", "Progressing"),
        ("Provisioning", "Progressing"),
        ("WaitingForCapacity", "Suspended"),
        ("Running", "Progressing"),
        ("Succeeded", "Healthy"),
        ("Failed", "Degraded"),
        ("Deleting", "Progressing"),
    ],
)
def test_every_phase(phase: str, expected: str) -> None:
    message = f"{phase}: details"
    status = {"phase": phase, "message": message, "observedGeneration": 1}
    assert health(request(status)) == (expected, message)


def test_a_request_not_yet_seen_or_changed_since_is_progressing() -> None:
    assert health(request(None))[0] == "Progressing"
    status = {"phase": "Succeeded", "message": "done", "observedGeneration": 1}
    assert health(request(status, generation=2)) == (
        "Progressing",
        "Waiting for dws-operator to see the latest spec",
    )


@pytest.mark.parametrize(
    ("phase", "ready", "reconciling", "stalled", "reason"),
    [
        (Phase.PROVISIONING, "False", "True", "False", "Provisioning"),
        (Phase.WAITING_FOR_CAPACITY, "False", "True", "False", "WaitingForCapacity"),
        (Phase.RUNNING, "False", "True", "False", "Running"),
        (Phase.SUCCEEDED, "True", "False", "False", "Succeeded"),
        (Phase.FAILED, "False", "False", "True", "CapacityTimeout"),
        (Phase.DELETING, "False", "True", "False", "Deleting"),
    ],
)
def test_kstatus_conditions_follow_the_phase(
    phase: Phase, ready: str, reconciling: str, stalled: str, reason: str
) -> None:
    now = datetime(2026, 11, 1, tzinfo=UTC)
    completed = cond.set_condition([], cond.COMPLETED, "False", "CapacityTimeout", "x", now, 3)
    status = TrainingRequestStatus(phase=phase, message="m", conditions=completed)
    cond.summarize(status, now, 3)
    found = {c.type: c for c in status.conditions}
    assert (found["Ready"].status, found["Reconciling"].status, found["Stalled"].status) == (
        ready,
        reconciling,
        stalled,
    )
    assert {found[t].reason for t in ("Ready", "Reconciling", "Stalled")} == {reason}
    assert {found[t].observed_generation for t in ("Ready", "Reconciling", "Stalled")} == {3}
