"""What a pass is told of its namespace for the TrainingPolicies: the policies as the
cache read them, what the namespace's admitted requests hold (those this process
admitted and has not seen written included), who waits ahead, and who is woken when room
is made. Fake cache: the real KubeCache fed raw objects."""

from __future__ import annotations

from typing import Any

from dws_operator.api import Phase, TrainingRequestStatus
from dws_operator.controller.cache import KubeCache
from dws_operator.controller.tenancy import PolicyLedger
from dws_operator.guardrails import Size
from dws_operator.reconcile import conditions as cond
from tests.unit.decisions import MULTI, NAME, NAMESPACE, observed

POLICY = {
    "apiVersion": "dws-operator.dev/v1alpha1",
    "kind": "TrainingPolicy",
    "metadata": {"name": "limits", "namespace": NAMESPACE, "resourceVersion": "1"},
    "spec": {"maxChipsInFlight": 32},
}


def stored(
    name: str, created: str, status: dict[str, Any] | None = None, ns: str = NAMESPACE
) -> dict[str, Any]:
    return {
        "apiVersion": "dws-operator.dev/v1alpha1",
        "kind": "TrainingRequest",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "resourceVersion": "5",
            "creationTimestamp": created,
        },
        "spec": MULTI,
        "status": status or {},
    }


#: A request its namespace's in-flight limits hold.
HELD = {
    "phase": "Pending",
    "conditions": [
        {
            "type": "Admitted",
            "status": "False",
            "reason": "PolicyLimit",
            "message": "",
            "lastTransitionTime": "2026-11-28T09:00:00Z",
        }
    ],
}
#: A request past its policies, holding 16 chips on 4 nodes.
RUNNING = {
    "phase": "Running",
    "requestedAt": "2026-11-28T09:00:00Z",
    "plan": {"totalChips": 16, "slices": 1, "totalNodes": 4, "nodes": 4},
}


def ledger(
    *bodies: dict[str, Any], policies: bool = True
) -> tuple[PolicyLedger, list[tuple[str, str]]]:
    cache = KubeCache()
    if policies:
        assert cache.put_policy(POLICY)
    for body in bodies:
        cache.put_request(body)
    woken: list[tuple[str, str]] = []
    return PolicyLedger(cache, woken.append), woken


def test_the_namespaces_admitted_requests_are_counted_and_the_oldest_waiting_named() -> None:
    book, _ = ledger(
        stored("a", "2026-11-28T08:00:00Z", RUNNING),
        stored("b", "2026-11-28T08:30:00Z", RUNNING | {"phase": "Succeeded"}),
        stored("older", "2026-11-28T08:40:00Z", HELD),
        stored("oldest", "2026-11-28T08:20:00Z", HELD),
        # Older still, but its passes never reached its policies: it holds up no one.
        stored("not-looked-at", "2026-11-28T08:10:00Z"),
        stored("elsewhere", "2026-11-28T08:00:00Z", RUNNING, ns="other"),
    )
    seen = book.observed((NAMESPACE, NAME), "2026-11-28T09:00:00Z", observed(MULTI))
    assert [p.name for p in seen.policies] == ["limits"]
    assert seen.in_flight == Size(16, 4)  # a only: b ended, the others wait
    assert seen.waits_behind == f"{NAMESPACE}/oldest"


def test_an_admission_not_yet_written_counts_until_the_cache_shows_it() -> None:
    book, woken = ledger(stored("a", "2026-11-28T08:00:00Z"), stored("b", "2026-11-28T08:10:00Z"))
    before = TrainingRequestStatus()
    after = TrainingRequestStatus(phase=Phase.PROVISIONING)
    after.conditions = cond.set_condition(
        [], cond.ADMITTED, "True", "WithinPolicy", "", observed(MULTI).now, 1
    )
    book.note((NAMESPACE, "a"), before, after, Size(16, 4))
    assert woken == [(NAMESPACE, "b")]  # room may be left: the next in line looks
    seen = book.observed((NAMESPACE, "b"), "2026-11-28T08:10:00Z", observed(MULTI))
    assert seen.in_flight == Size(16, 4)
    assert seen.waits_behind == ""  # a is past, not waiting
    # Written: counted from the cache (once, not twice).
    book.cache.put_request(
        stored("a", "2026-11-28T08:00:00Z", RUNNING)
        | {"metadata": {**stored("a", "2026-11-28T08:00:00Z")["metadata"], "resourceVersion": "6"}}
    )
    again = book.observed((NAMESPACE, "b"), "2026-11-28T08:10:00Z", observed(MULTI))
    assert again.in_flight == Size(16, 4)


def test_an_ended_request_wakes_the_oldest_waiting_one() -> None:
    book, woken = ledger(
        stored("a", "2026-11-28T08:00:00Z", RUNNING),
        stored("late", "2026-11-28T08:50:00Z"),
        stored("early", "2026-11-28T08:40:00Z"),
    )
    book.written(
        (NAMESPACE, "a"),
        TrainingRequestStatus(phase=Phase.RUNNING),
        TrainingRequestStatus(phase=Phase.SUCCEEDED),
    )
    assert woken == [(NAMESPACE, "early")]
    book.written(
        (NAMESPACE, "a"),
        TrainingRequestStatus(phase=Phase.SUCCEEDED),
        TrainingRequestStatus(phase=Phase.SUCCEEDED),
    )
    assert woken == [(NAMESPACE, "early")]  # only when it ends, not after


def test_a_namespace_without_policies_is_told_nothing_and_wakes_no_one() -> None:
    book, woken = ledger(
        stored("a", "2026-11-28T08:00:00Z", RUNNING),
        stored("b", "2026-11-28T08:10:00Z"),
        policies=False,
    )
    seen = book.observed((NAMESPACE, "b"), "2026-11-28T08:10:00Z", observed(MULTI))
    assert (seen.policies, seen.in_flight, seen.waits_behind) == ((), Size(), "")
    book.wake_next((NAMESPACE, "a"))
    assert woken == []


def test_a_policy_deleted_is_forgotten_and_one_unreadable_is_not_kept() -> None:
    cache = KubeCache()
    cache.put_policy(POLICY)
    cache.remove_policy((NAMESPACE, "limits"))
    assert cache.policies(NAMESPACE) == ()
    assert not cache.put_policy(POLICY | {"spec": {"maxChipsInFlight": "many"}})
    assert cache.policies(NAMESPACE) == ()


def test_a_policy_listed_again_unchanged_is_nothing_new_and_one_deleted_unseen_goes() -> None:
    cache = KubeCache()
    assert cache.put_policy(POLICY)
    assert not cache.put_policy(POLICY)  # a relist: no one is woken
    changed = POLICY | {"metadata": {**POLICY["metadata"], "resourceVersion": "2"}}
    assert cache.put_policy(changed)
    assert cache.holds("trainingpolicies", (NAMESPACE, "limits"))
    # A listing at version 3 without it: deleted while no watch said so.
    assert cache.stale("trainingpolicies", NAMESPACE, set(), 3) == [(NAMESPACE, "limits")]
    assert cache.stale("trainingpolicies", NAMESPACE, set(), 1) == []  # the listing is older


def test_an_ended_request_counts_while_its_pool_holds_nodes_and_not_after() -> None:
    pool = {"nodePool": {"name": "dws-a", "managed": True}}
    kept = RUNNING | pool | {"phase": "Succeeded"}  # cleanup: Keep, or still draining
    released = kept | {"scaledDownAt": "2026-11-28T10:00:00Z"}
    # Failed before asking for anything (its status names the pool it would have made).
    refused = {"phase": "Failed", "nodePool": {"name": "dws-c"}, "plan": RUNNING["plan"]}
    # Done on the user's own pool: never the operator's to scale down.
    theirs = RUNNING | {"phase": "Succeeded", "nodePool": {"name": "own", "managed": False}}
    # Once held, then failed for another reason: holds up no one.
    failed_held = HELD | {"phase": "Failed"}
    book, _ = ledger(
        stored("kept", "2026-11-28T08:00:00Z", kept),
        stored("released", "2026-11-28T08:01:00Z", released),
        stored("refused", "2026-11-28T08:02:00Z", refused),
        stored("theirs", "2026-11-28T08:03:00Z", theirs),
        stored("failed-held", "2026-11-28T08:04:00Z", failed_held),
    )
    seen = book.observed((NAMESPACE, NAME), "2026-11-28T09:00:00Z", observed(MULTI))
    assert seen.in_flight == Size(16, 4)  # kept only
    assert seen.waits_behind == ""


def test_a_scale_down_wakes_the_oldest_waiting_one() -> None:
    book, woken = ledger(stored("w", "2026-11-28T08:40:00Z", HELD))
    before = TrainingRequestStatus(phase=Phase.SUCCEEDED)
    after = before.model_copy(update={"scaled_down_at": observed(MULTI).now})
    book.note((NAMESPACE, "a"), before, after, Size(16, 4))
    assert woken == []  # not before its status is written
    book.written((NAMESPACE, "a"), before, after)
    assert woken == [(NAMESPACE, "w")]


def test_an_admission_whose_status_was_not_written_is_forgotten() -> None:
    book, _ = ledger(stored("a", "2026-11-28T08:00:00Z"))
    after = TrainingRequestStatus(phase=Phase.PROVISIONING, requested_at=observed(MULTI).now)
    book.note((NAMESPACE, "a"), TrainingRequestStatus(), after, Size(16, 4))
    assert book.observed(
        (NAMESPACE, "b"), "2026-11-28T09:00:00Z", observed(MULTI)
    ).in_flight == Size(16, 4)
    book.forget((NAMESPACE, "a"))
    assert (
        book.observed((NAMESPACE, "b"), "2026-11-28T09:00:00Z", observed(MULTI)).in_flight == Size()
    )
