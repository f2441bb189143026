"""Where a request is on its capacity ladder: its step, the names of its pools and
workload on it, and the slice plan of that step. Pure: read from the request's facts
and status."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

from dws_operator.api import (
    TERMINAL_PHASES,
    ProvisioningSpec,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.errors import InvalidSpec, SpecError
from dws_operator.naming import segment_pool_base, slice_pool_names, step_pool_base
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.reconcile.facts import RequestFacts
from dws_operator.reconcile.observed import RequestView
from dws_operator.zones import ClusterSite


class StepPlan(NamedTuple):
    """A request planned on its current ladder step."""

    #: The spec as the step provisions it (the step's mode, zones, reservation, wait).
    spec: TrainingRequestSpec
    plan: SlicePlan
    #: Every step of the ladder (one without fallback).
    ladder: tuple[ProvisioningSpec, ...]
    #: The current step, 0-based.
    step: int


Planned = StepPlan | InvalidSpec


def step_of(request: RequestView) -> int:
    """The ladder step the request is on, 0-based (`status.step` counts from 1)."""
    return step_index(request.status.step, request.facts.ladder_steps)


def step_index(step: int | None, steps: int) -> int:
    """`status.step` (1-based, maybe unset or past the ladder) as an index into the
    ladder of `steps` steps."""
    return min(max(step or 1, 1), steps) - 1


def segment_of(request: RequestView) -> int:
    """A long run's current segment, 1-based (1 for a run of one window)."""
    return max(request.status.segment or 1, 1)


def pool_name_for(request: RequestView) -> str:
    """The base name of `request`'s pools on its current step and segment: an idle pool
    it took over (its status says so, written before the takeover began); else the
    step's and segment's own (`step_pool_base`, `segment_pool_base`)."""
    held = request.status.node_pool
    if held is not None and held.reused and held.managed and request.facts.slices == 1:
        return held.name
    return _base(request.facts, step_of(request), segment_of(request))


def _base(facts: RequestFacts, step: int, segment: int) -> str:
    return segment_pool_base(step_pool_base(facts.base_pool, step), segment)


def pool_names_for(request: RequestView) -> tuple[str, ...]:
    """Every slice's pool of `request` on its current step, in slice order."""
    return slice_pool_names(pool_name_for(request), request.facts.slices)


def next_pool_names_for(request: RequestView) -> tuple[str, ...]:
    """Every slice's pool of a long run's next segment on the current step, made ahead
    of the rollover; () when the run has no further segment."""
    segment = segment_of(request)
    if segment >= request.facts.segments:
        return ()
    base = _base(request.facts, step_of(request), segment + 1)
    return slice_pool_names(base, request.facts.slices)


def next_segment_plan(request: RequestView) -> SlicePlan | None:
    """The slice plan of a long run's next segment on the current step (its pools); None
    when there is no next segment or no plan."""
    if not next_pool_names_for(request):
        return None
    status = request.status.model_copy(update={"segment": segment_of(request) + 1})
    made = planned(dataclasses.replace(request, status=status))
    return made.plan if isinstance(made, StepPlan) else None


def step_pool_names(facts: RequestFacts) -> tuple[str, ...]:
    """The pools every step (and segment) of the request would make for itself (a
    status-free answer: which pools' changes concern the request)."""
    return tuple(
        name
        for step in range(facts.ladder_steps)
        for segment in range(1, facts.segments + 1)
        for name in slice_pool_names(_base(facts, step, segment), facts.slices)
    )


def abandoned_pool_names(request: RequestView) -> tuple[str, ...]:
    """Pools the request has left: each ladder step's own (its segments' too), a pool a
    step took over (its attempt names it), a long run's earlier segments', and, once the
    request has ended, the next segment's made ahead. None of them may keep nodes or
    start work."""
    current, segment = step_of(request), segment_of(request)
    ended = request.deleting or request.status.phase in TERMINAL_PHASES
    if current == 0 and segment == 1 and not (ended and next_pool_names_for(request)):
        return ()
    facts, slices = request.facts, request.facts.slices
    # An earlier step's segments up to the next one's (made ahead, then the step left).
    ahead = min(segment + 1, facts.segments)
    names = [
        name
        for step in range(current + 1)
        for past in range(1, ahead + 1 if step < current else segment)
        for name in slice_pool_names(_base(facts, step, past), slices)
    ]
    if ended:
        names += next_pool_names_for(request)
    names += [
        a.node_pool
        for a in request.status.attempts or ()
        if a.node_pool and a.step - 1 < current and slices == 1
    ]
    keep = set(pool_names_for(request))
    return tuple(dict.fromkeys(n for n in names if n not in keep))


def attempt_number(status: TrainingRequestStatus) -> int:
    """The workload attempt: one more for each restart, each recovery from a stuck
    request, each ladder step moved on to and each segment rolled over to (all only
    grow), so every attempt's Job has a name of its own."""
    return (
        status.restarts
        + status.recoveries
        + max((status.step or 1) - 1, 0)
        + max((status.segment or 1) - 1, 0)
    )


def planned(request: RequestView) -> Planned:
    """The request's validated spec and the slice plan of its current ladder step, or
    why it has none (its spec is invalid, or a step's slice cannot be placed on this
    cluster). Made once per view, so once per pass, whoever in the pass asks (the idle
    pool's shape, the Service check, the decision); a new pass has a new view."""
    made = request.memo.get("planned")
    if not isinstance(made, StepPlan | InvalidSpec):
        made = _plan(request)
        request.memo["planned"] = made
    return made


def _plan(request: RequestView) -> Planned:
    facts = request.facts
    if facts.spec is None:
        assert facts.invalid is not None
        return facts.invalid
    spec, site = facts.spec, request.site
    try:
        if spec.ladder_steps > 1:
            _every_step_placed(spec, site)
        step = step_of(request)
        order = ladder_order(request.status.ladder_order, spec.ladder_steps)
        stepped = spec.at_step(order[step] - 1) if spec.ladder_steps > 1 else spec
        plan = plan_slice(
            stepped,
            pool_name=pool_name_for(request),
            site=site,
            calendar_reservation=facts.booking_name,
        )
    except InvalidSpec as invalid:
        return invalid
    steps = spec.provisioning.steps
    return StepPlan(stepped, plan, tuple(steps[written - 1] for written in order), step)


def ladder_order(recorded: list[int] | None, steps: int) -> tuple[int, ...]:
    """The ladder's steps in the order tried, each by its place as written (1-based):
    `status.ladderOrder` when it orders every step once, else as written."""
    written = tuple(range(1, steps + 1))
    if recorded is None or sorted(recorded) != list(written):
        return written
    return tuple(recorded)


def written_step(recorded: list[int] | None, step: int | None, steps: int) -> int:
    """The step in use (`status.step`, in the order tried; `recorded`:
    `status.ladderOrder`) by its place as written."""
    return ladder_order(recorded, steps)[step_index(step, steps)]


def _every_step_placed(spec: TrainingRequestSpec, site: ClusterSite | None) -> None:
    """InvalidSpec naming the step when a ladder step's slice cannot be placed on this
    cluster (a multi-host TPU slice with no zone to justify): found before the first
    step starts, not when the ladder reaches that step with the earlier steps' pools
    still to clean up."""
    errors: list[SpecError] = []
    for index in range(spec.ladder_steps):
        field = (
            "spec.provisioning.zones"
            if index == 0
            else f"spec.provisioning.fallback[{index - 1}].zones"
        )
        try:
            plan_slice(spec.at_step(index), site=site, zones_field=field)
        except InvalidSpec as invalid:
            errors.extend(invalid.errors)
    if errors:
        raise InvalidSpec(errors)
