"""The namespace's TrainingPolicies, checked before a request asks for anything.

Once past (its status says it asked for capacity, holds a pool or booking, or was
admitted), a request is never checked again: a policy made or tightened later limits the
requests that come after, and never cuts a run short. A request a policy forbids fails
`PolicyViolation` naming the policy and the rule; one that would take its namespace
over an in-flight limit waits (`PolicyLimit`) until others end, first come, first served
within the namespace.
"""

from __future__ import annotations

from dws_operator.api import TERMINAL_PHASES, TrainingRequestStatus
from dws_operator.api.policy import TrainingPolicySpec
from dws_operator.guardrails import POLICY_LIMIT, POLICY_VIOLATION, over_in_flight, violations
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.decision import Decision, Draft, Event

#: A request waiting for its namespace's in-flight limits looks again this often (its
#: namespace's requests ending wake it sooner).
POLICY_RECHECK_SECONDS = 30.0


def admitted(status: TrainingRequestStatus) -> bool:
    """The request is past its policies: it asked for capacity or holds some."""
    return bool(
        status.requested_at
        or status.node_pool
        or status.booking
        or _reason(status, "True") is not None
    )


def policy_gate(run: Draft, plan: SlicePlan) -> Decision | None:
    """The request fails or waits by its namespace's policies; None: it goes on."""
    policies = run.observed.policies
    if not policies or admitted(run.status) or run.status.phase in TERMINAL_PHASES:
        return None  # past them, or ended (failed by them or before them): settled
    spec, size = run.request.facts.spec, run.request.facts.size
    if spec is None or size is None:
        return None  # a spec that cannot be planned fails on its own
    # The whole ladder as written (the plan's spec is its current step's alone).
    broken = [v for policy in policies for v in violations(policy, spec, size)]
    if broken:
        message = "; ".join(str(v) for v in broken)
        run.condition(cond.ADMITTED, "False", POLICY_VIOLATION, message)
        return run.fail(POLICY_VIOLATION, message)
    why = next(
        (w for p in policies if (w := over_in_flight(p, size, run.observed.in_flight))), None
    )
    behind = run.observed.waits_behind
    if why is None and behind and any(_limits_in_flight(p.spec) for p in policies):
        why = f"waiting behind {behind}, older in this namespace, for the in-flight limits"
    if why is not None:
        if _reason(run.status, "False") != POLICY_LIMIT:
            run.decision.events.append(Event("Normal", POLICY_LIMIT, why))
        run.condition(cond.ADMITTED, "False", POLICY_LIMIT, why)
        return run.phase(run.status.phase, f"{POLICY_LIMIT}: {why}", POLICY_RECHECK_SECONDS)
    names = ", ".join(f"{p.namespace}/{p.name}" for p in policies)
    run.condition(cond.ADMITTED, "True", "WithinPolicy", f"within TrainingPolicy {names}")
    # Written with the admission, whatever the pass does next (an Estimated ladder is
    # ordered first): the namespace's other passes count the request by its plan.
    run.status.plan = plan.summary()
    return None


def _limits_in_flight(spec: TrainingPolicySpec) -> bool:
    return spec.max_chips_in_flight is not None or spec.max_nodes_in_flight is not None


def _reason(status: TrainingRequestStatus, value: str) -> str | None:
    """The reason of the Admitted condition when its status is `value`."""
    found = cond.condition(status.conditions, cond.ADMITTED)
    return found.reason if found is not None and found.status == value else None
