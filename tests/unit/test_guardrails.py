"""The namespace's TrainingPolicies before a request asks for anything: the rules (pure),
the pass that fails or holds a request by them, and the passes after that never look
again. The API server's side of the same rules is tests/cluster/test_guardrails_admission."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from dws_operator.api import NodePoolStatus, Phase
from dws_operator.api.policy import TrainingPolicy, TrainingPolicySpec
from dws_operator.guardrails import Size, over_in_flight, request_size, reservation_allowed
from dws_operator.reconcile import CreateNodePool
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.policy import POLICY_RECHECK_SECONDS
from tests.builders import gpu, make_spec, spec_body, tpu
from tests.unit.decisions import (
    GPU_TWO,
    MULTI,
    condition,
    observed,
    only,
    run,
    status_at,
)


def policy(name: str = "limits", **rules: Any) -> TrainingPolicy:
    return TrainingPolicy(name=name, namespace="ml", spec=TrainingPolicySpec.model_validate(rules))


def guarded(body: dict[str, Any], *policies: TrainingPolicy, **fields: Any) -> Any:
    return dataclasses.replace(observed(body, **fields), policies=policies)


@pytest.mark.parametrize(
    ("accelerator", "size"),
    [
        (tpu("v6e", "4x4"), Size(16, 4)),
        (tpu("v6e", "2x4", "ct6e-standard-8t"), Size(8, 1)),
        (tpu("v5p", "2x2x2", slices=4), Size(32, 8)),
        (tpu("tpu7x", "4x4x8"), Size(128, 32)),
        (gpu("nvidia-h100-80gb", nodes=3), Size(24, 3)),
        (gpu("nvidia-l4", nodes=2, count=4), Size(8, 2)),
    ],
)
def test_a_requests_size_is_its_chip_math_on_every_slice(
    accelerator: dict[str, Any], size: Size
) -> None:
    assert request_size(make_spec(accelerator)) == size


@pytest.mark.parametrize(
    ("written", "allowed", "ok"),
    [
        ("r1", ["r1"], True),
        ("r1/reservationBlocks/b1/reservationSubBlocks/s1", ["r1"], True),
        ("r2", ["r1"], False),
        ("projects/shared-proj/reservations/big", ["projects/shared-proj/reservations/*"], True),
        ("projects/other-proj/reservations/big", ["projects/shared-proj/reservations/*"], False),
        ("projects/shared-proj/reservations/big", ["big"], False),
        ("r1", [], False),
    ],
)
def test_reservations_match_as_written_or_by_project(
    written: str, allowed: list[str], ok: bool
) -> None:
    assert reservation_allowed(written, allowed) is ok


def test_a_forbidden_request_fails_naming_the_policy_and_every_rule_it_breaks() -> None:
    body = spec_body(
        tpu("v5p", "4x4x4"),
        provisioning={"fallback": [{"mode": "Reservation", "reservation": "r9"}]},
    )
    limits = policy(accelerators=["v6e"], reservations=["r1"], maxChipsPerRequest=32)
    decision = run(guarded(body, limits))
    assert decision.status.phase == Phase.FAILED
    assert decision.actions == []
    message = condition(decision, cond.COMPLETED).message
    assert condition(decision, cond.COMPLETED).reason == "PolicyViolation"
    assert "TrainingPolicy ml/limits: spec.accelerator.tpu.version: v5p is not allowed" in message
    assert "spec.provisioning.fallback[0].reservation: r9 is not allowed" in message
    assert "spec.accelerator: 64 chips, over maxChipsPerRequest (32)" in message
    assert [e.reason for e in decision.events] == ["Failed"]
    assert decision.status.plan is None  # nothing planned, nothing asked


def test_a_request_within_its_policies_is_admitted_and_goes_on() -> None:
    decision = run(guarded(MULTI, policy(accelerators=["v6e"], maxChipsInFlight=64)))
    assert condition(decision, cond.ADMITTED).status == "True"
    assert "ml/limits" in condition(decision, cond.ADMITTED).message
    assert len(only(decision.actions, CreateNodePool)) == 1


def test_over_the_in_flight_limit_a_request_waits_then_goes_when_there_is_room() -> None:
    limits = policy(maxChipsInFlight=24)  # MULTI is 16 chips
    first = run(
        guarded(
            MULTI,
            limits,
        ),
    )
    assert len(only(first.actions, CreateNodePool)) == 1
    held = dataclasses.replace(guarded(MULTI, limits), in_flight=Size(16, 4))
    waiting = run(held)
    assert waiting.actions == []
    assert waiting.status.phase == Phase.PENDING
    assert waiting.requeue_after == POLICY_RECHECK_SECONDS
    admitted = condition(waiting, cond.ADMITTED)
    assert (admitted.status, admitted.reason) == ("False", "PolicyLimit")
    assert "maxChipsInFlight is 24 chips" in admitted.message
    assert [e.reason for e in waiting.events] == ["PolicyLimit"]
    # Still waiting: no second Event.
    again = run(
        dataclasses.replace(held, request=dataclasses.replace(held.request, status=waiting.status))
    )
    assert again.events == []
    # Room again: it goes.
    freed = dataclasses.replace(
        held, request=dataclasses.replace(held.request, status=waiting.status), in_flight=Size(8, 2)
    )
    going = run(freed)
    assert condition(going, cond.ADMITTED).status == "True"
    assert len(only(going.actions, CreateNodePool)) == 1


def test_the_plan_is_written_with_the_admission_before_an_estimated_ladder_is_ordered() -> None:
    body = spec_body(
        tpu("v6e", "4x4"),
        provisioning={"fallback": [{"mode": "Spot"}], "fallbackOrder": "Estimated"},
    )
    decision = run(guarded(body, policy(maxChipsInFlight=64)))
    assert condition(decision, cond.ADMITTED).status == "True"
    assert decision.status.plan is not None
    assert decision.status.plan.total_chips == 16  # what the namespace's passes count


def test_a_request_larger_than_the_in_flight_limit_alone_fails() -> None:
    decision = run(guarded(GPU_TWO, policy(maxNodesInFlight=1)))
    assert decision.status.phase == Phase.FAILED
    assert "2 nodes, over maxNodesInFlight (1)" in decision.status.message


def test_first_come_first_served_a_younger_request_waits_behind_an_older_one() -> None:
    obs = dataclasses.replace(guarded(MULTI, policy(maxChipsInFlight=100)), waits_behind="ml/older")
    decision = run(obs)
    assert decision.actions == []
    assert "waiting behind ml/older" in condition(decision, cond.ADMITTED).message
    # Without an in-flight limit there is no line to keep.
    free = dataclasses.replace(
        guarded(MULTI, policy(accelerators=["v6e"])), waits_behind="ml/older"
    )
    assert len(only(run(free).actions, CreateNodePool)) == 1


def test_a_policy_made_later_never_stops_a_request_already_past() -> None:
    status = status_at(Phase.RUNNING, MULTI)
    assert status.requested_at is not None
    decision = run(guarded(MULTI, policy(accelerators=["nvidia-l4"]), status=status))
    assert decision.status.phase != Phase.FAILED
    assert cond.condition(decision.status.conditions, cond.ADMITTED) is None


def test_an_idle_pool_is_not_taken_over_by_a_request_its_policy_holds() -> None:
    obs = dataclasses.replace(
        guarded(MULTI, policy(maxChipsInFlight=16)), in_flight=Size(16, 4), offer="idle-pool"
    )
    decision = run(obs)
    assert decision.status.node_pool is None
    assert condition(decision, cond.ADMITTED).reason == "PolicyLimit"


def test_over_in_flight_names_the_limit_and_the_use() -> None:
    why = over_in_flight(policy(maxNodesInFlight=8), Size(8, 4), Size(32, 6))
    assert why == (
        "TrainingPolicy ml/limits: maxNodesInFlight is 8 nodes; the namespace's requests "
        "hold or ask for 6, this one needs 4"
    )
    assert over_in_flight(policy(maxNodesInFlight=8), Size(8, 2), Size(32, 6)) is None


def test_the_status_node_pool_counts_as_past_the_policies() -> None:
    bound = status_at(Phase.PENDING, MULTI, requested=None, job=None)
    bound.node_pool = NodePoolStatus(name="idle", managed=True, reused=True)
    decision = run(guarded(MULTI, policy(accelerators=["nvidia-l4"]), status=bound))
    assert decision.status.phase != Phase.FAILED


def test_a_request_failed_by_its_policy_is_settled_not_looked_at_again_and_again() -> None:
    obs = guarded(spec_body(gpu("nvidia-h100-80gb")), policy(accelerators=["v6e"]))
    failed = run(obs)
    again = run(
        dataclasses.replace(obs, request=dataclasses.replace(obs.request, status=failed.status))
    )
    assert again.requeue_after is None
    assert again.events == []
    assert again.status.message == failed.status.message
