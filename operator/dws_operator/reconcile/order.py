"""A capacity ladder ordered by estimate (`fallbackOrder: Estimated`): which kinds of
capacity the shell asks the history about (`ladder_keys`), and the order the steps are
then tried in (`order_ladder`), fixed once in `status.ladderOrder` before the first step.
Pure.

Soonest expected first: steps whose kind of capacity has a p50 wait, by that p50; then
those with none (no data yet, or too many asks ended without capacity to tell), as
written. A step that waits forever (maxWaitDuration 0s, only ever the last as written)
stays last: a step after it would never be reached.
"""

from __future__ import annotations

from datetime import timedelta

from dws_operator.api import TERMINAL_PHASES, FallbackOrder, Phase, ProvisioningSpec
from dws_operator.durations import format_duration, parse_duration
from dws_operator.estimate import Estimate
from dws_operator.reconcile.decision import AT_ONCE, Decision, Draft, Event
from dws_operator.reconcile.ladder import describe_step
from dws_operator.reconcile.observed import RequestView
from dws_operator.reconcile.step import StepPlan, planned
from dws_operator.reconcile.tally import step_key

#: The Event that tells the order chosen.
ORDERED = "LadderOrdered"
#: How long a new request waits for the stored history to be read before its ladder
#: goes on as written, and how often it looks again meanwhile.
HISTORY_WAIT_SECONDS = 300.0
HISTORY_RETRY_SECONDS = 30.0


def order_pending(request: RequestView) -> bool:
    """The request's ladder is to be ordered by estimate and has no order yet."""
    spec, status = request.facts.spec, request.status
    return (
        spec is not None
        and spec.provisioning.fallback_order == FallbackOrder.ESTIMATED
        and spec.ladder_steps > 1
        and status.ladder_order is None
        and not request.deleting
        and status.phase not in TERMINAL_PHASES
    )


def ladder_keys(request: RequestView) -> tuple[str | None, ...] | None:
    """The kind of capacity of each ladder step as written (None for a step no history
    answers for), when the ladder waits for its order; None otherwise (nothing asked)."""
    if not order_pending(request):
        return None
    result = planned(request)
    if not isinstance(result, StepPlan) or request.facts.spec is None:
        return None
    summary = result.plan.summary()
    return tuple(step_key(summary, step) for step in request.facts.spec.provisioning.steps)


def estimated_order(
    steps: tuple[ProvisioningSpec, ...], estimates: tuple[Estimate | None, ...]
) -> list[int]:
    """The steps (1-based, as written) soonest expected first; see the module."""
    forever = [i for i, step in enumerate(steps) if not parse_duration(step.max_wait_duration)]

    def p50(index: int) -> float:
        found = estimates[index] if index < len(estimates) else None
        return found.p50 if found is not None and found.p50 is not None else float("inf")

    movable = [i for i in range(len(steps)) if i not in forever]
    ordered = sorted(movable, key=p50) + forever
    return [i + 1 for i in ordered]


def order_ladder(run: Draft, estimates: tuple[Estimate | None, ...] | None) -> Decision:
    """Fix the ladder's order in the status, before anything is asked for: by estimate
    (a request that has already tried a step keeps the order it tried in, as written).
    The next pass, at once, plans the first step of that order. With no estimates (the
    stored history not read yet) the request waits for them, up to HISTORY_WAIT_SECONDS
    from its creation; then it goes on as written."""
    status = run.status
    assert run.request.facts.spec is not None
    written = tuple(run.request.facts.spec.provisioning.steps)
    created = run.request.created
    waited = (run.now - created).total_seconds() if created is not None else None
    unread = ""
    if estimates is None and not status.attempts:
        if waited is not None and waited < HISTORY_WAIT_SECONDS:
            message = "Waiting for the capacity history to order the ladder's steps"
            status.phase = status.phase or Phase.PENDING
            status.message = message
            run.decision.requeue_after = HISTORY_RETRY_SECONDS
            return run.decision
        unread = " (the capacity history could not be read: as written)"
    if status.attempts:
        order = list(range(1, len(written) + 1))
    else:
        order = estimated_order(written, estimates or ())
    status.ladder_order = order

    def said(index: int) -> str:
        found = estimates[index - 1] if estimates and index - 1 < len(estimates) else None
        if found is None or found.p50 is None:
            guess = "no estimate"
        else:
            guess = f"p50 {format_duration(timedelta(seconds=round(found.p50)))}"
        return f"{index} ({describe_step(written[index - 1])}, {guess})"

    message = "steps by estimated wait: " + ", ".join(said(i) for i in order) + unread
    run.decision.events.append(Event("Normal", ORDERED, message))
    status.phase = status.phase or Phase.PENDING
    status.message = message[0].upper() + message[1:]
    run.decision.requeue_after = AT_ONCE
    return run.decision
