"""The reconcile decision: observed state in; new status, actions and events out. Pure.

Status is written before the actions run, and every action is idempotent and keyed
on the object's uid (deterministic pool and Job names), so an operator killed at
any point converges on restart: it re-observes, decides the same thing, and finds
what it already created.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, NamedTuple

from pydantic import ValidationError

from dws_operator.api import (
    TERMINAL_PHASES,
    Attempt,
    AttemptOutcome,
    CleanupPolicy,
    NodePoolStatus,
    ObjectReference,
    Phase,
    ProvisioningSpec,
    SliceStatus,
    TrainingRequestSpec,
    TrainingRequestStatus,
)
from dws_operator.catalog import unmet_gates, version_gates
from dws_operator.errors import InvalidSpec, SpecError, from_validation_error
from dws_operator.multislice import JOBSET_KIND, MAX_MULTISLICE_NAME, render_jobset
from dws_operator.naming import default_node_pool_name, slice_pool_names, step_pool_base
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.reconcile import conditions as cond
from dws_operator.reconcile.actions import (
    Action,
    CancelPoolOperation,
    CreateJob,
    CreateNodePool,
    CreateService,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    ScaleNodePoolToZero,
    TakeOverNodePool,
)
from dws_operator.reconcile.observed import Observed, PoolState, PoolView, RequestView
from dws_operator.validation import spec_errors
from dws_operator.workload import (
    RequestRef,
    job_name,
    needs_service,
    queue_for,
    render_job,
    render_service,
    service_name,
    uses_provisioning_request,
)
from dws_operator.zones import ClusterSite

#: After a pool was scaled to zero, its Nodes are given this long to go before it is
#: resized again (GKE deletes the VMs, then the Node objects disappear).
DRAIN_SECONDS = 120.0
#: How soon to look again after a step whose result no watch reports (a restart).
FOLLOW_SECONDS = 2.0
#: How soon to look again while the Job runs, with nothing changing. Every change that
#: matters wakes the request at once (its Job's events, its pool in GKE's snapshot, its
#: Nodes); this is only the safety net for an event lost, so it is long.
RUNNING_POLL_SECONDS = 300.0
#: How soon to look again after a pass that has more to do next: the clean-up after a
#: failure is recorded, the next attempt after a Job is deleted for a restart.
NEXT_STEP_SECONDS = 1.0
#: How often a request waiting for nodes of an `existing` pool that other work holds looks
#: again (their pods leaving is not something it is woken for).
NODES_IN_USE_SECONDS = 5.0
#: A deadline is looked at this long after it passes, so the pass then sees it passed.
PAST_DEADLINE_SECONDS = 1.0
#: How long a pool of a step left behind, whose delete GKE refused for good (say, a
#: permission missing), waits before its delete is tried again.
HELD_BACK_SECONDS = 60.0


@dataclass(frozen=True)
class ReconcileConfig:
    kueue: bool = False
    #: The cluster serves JobSets (jobset.x-k8s.io): multi-slice requests need them.
    jobset: bool = False
    default_queue: str | None = None
    #: LocalQueue for QueuedProvisioning requests that name none.
    queued_queue: str | None = None
    location: str | None = None
    running_poll_seconds: float = RUNNING_POLL_SECONDS


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass
class Decision:
    status: TrainingRequestStatus
    actions: list[Action] = field(default_factory=list)
    #: Seconds until the next look; None when nothing is left to do or wait for.
    requeue_after: float | None = None
    events: list[Event] = field(default_factory=list)
    #: Deletion only: everything the operator created is gone, the finalizer may go.
    released: bool = False


def steps_of(spec: Mapping[str, Any]) -> int:
    """Steps of the stored spec's capacity ladder (1 without fallback; admission bounds it)."""
    provisioning = spec.get("provisioning")
    fallback = provisioning.get("fallback") if isinstance(provisioning, dict) else None
    return 1 + (len(fallback) if isinstance(fallback, list) else 0)


def step_provisioning(spec: Mapping[str, Any], step: int | None) -> Mapping[str, Any]:
    """The stored spec's provisioning of ladder step `step` (1-based, as `status.step`)
    as written: a fallback step's own fields (unset ones are the first step's), or the
    first step's (no ladder, no such step, or unreadable)."""
    provisioning = spec.get("provisioning")
    first: Mapping[str, Any] = provisioning if isinstance(provisioning, dict) else {}
    fallback = first.get("fallback")
    index = (step or 1) - 2
    if isinstance(fallback, list) and 0 <= index < len(fallback):
        chosen = fallback[index]
        return chosen if isinstance(chosen, dict) else first
    return first


def step_of(request: RequestView) -> int:
    """The ladder step the request is on, 0-based (`status.step` counts from 1)."""
    return min(max(request.status.step or 1, 1), steps_of(request.spec)) - 1


def base_pool_name(request: RequestView) -> str:
    """The base name of the request's pools on its first step: the one it names, else
    derived from name and uid (shorter for several slices or a ladder, so every
    suffix fits)."""
    pool = request.spec.get("nodePool") or {}
    name = pool.get("name") if isinstance(pool, dict) else None
    if isinstance(name, str) and name:
        return name
    ladder = steps_of(request.spec) > 1
    return default_node_pool_name(request.name, request.uid, slices_of(request.spec), ladder)


def soonest(first: float | None, second: float | None) -> float | None:
    """The sooner of two timers; None (no timer) only when neither is set."""
    if first is None or second is None:
        return first if second is None else second
    return min(first, second)


def pool_name_for(request: RequestView) -> str:
    """The base name of `request`'s pools on its current step: an idle pool it took
    over (its status says so, written before the takeover began); else the step's own
    (`step_pool_base`)."""
    held = request.status.node_pool
    if held is not None and held.reused and held.managed and slices_of(request.spec) == 1:
        return held.name
    return step_pool_base(base_pool_name(request), step_of(request))


def pool_names_for(request: RequestView) -> tuple[str, ...]:
    """Every slice's pool of `request` on its current step, in slice order."""
    return slice_pool_names(pool_name_for(request), slices_of(request.spec))


def step_pool_names(request: RequestView) -> tuple[str, ...]:
    """The pools every step of the request's ladder would make for itself (a status-free
    answer: which pools' changes concern the request)."""
    base, slices = base_pool_name(request), slices_of(request.spec)
    return tuple(
        name
        for step in range(steps_of(request.spec))
        for name in slice_pool_names(step_pool_base(base, step), slices)
    )


def abandoned_pool_names(request: RequestView) -> tuple[str, ...]:
    """Pools of the ladder steps the request has left: each step's own, and a pool a step
    took over (its attempt names it). None of them may keep nodes or start work."""
    current = step_of(request)
    if current == 0:
        return ()
    base, slices = base_pool_name(request), slices_of(request.spec)
    names = [
        name
        for step in range(current)
        for name in slice_pool_names(step_pool_base(base, step), slices)
    ]
    names += [
        a.node_pool
        for a in request.status.attempts or ()
        if a.node_pool and a.step - 1 < current and slices == 1
    ]
    keep = set(pool_names_for(request))
    return tuple(dict.fromkeys(n for n in names if n not in keep))


def attempt_number(status: TrainingRequestStatus) -> int:
    """The workload attempt: one more for each restart and each ladder step moved on to
    (both only grow), so every attempt's Job has a name of its own."""
    return status.restarts + max((status.step or 1) - 1, 0)


def slices_of(spec: Mapping[str, Any]) -> int:
    """`spec.accelerator.tpu.slices` as stored (admission bounds it); 1 when unreadable,
    so a spec the operator cannot plan still has its one pool looked after."""
    accelerator = spec.get("accelerator")
    tpu = accelerator.get("tpu") if isinstance(accelerator, dict) else None
    slices = tpu.get("slices", 1) if isinstance(tpu, dict) else 1
    # Any stored count (admission bounded it when it was written): a later, lower bound
    # must not rename the pools of requests that already exist.
    return slices if isinstance(slices, int) and not isinstance(slices, bool) and slices >= 1 else 1


def workload_kind(spec: Mapping[str, Any]) -> str:
    return JOBSET_KIND if slices_of(spec) > 1 else "Job"


class _Draft:
    """A decision being drafted: the status so far and the actions to take. `phase` (or
    `fail`, which ends in one) finishes it; only the clean-up after the work, which keeps
    the phase, returns the draft's decision as it stands."""

    def __init__(self, observed: Observed) -> None:
        self.observed = observed
        self.request = observed.request
        self.now = observed.now
        self.before = observed.request.status.phase
        self.status = observed.request.status.model_copy(deep=True)
        self.status.observed_generation = self.request.generation
        self.decision = Decision(status=self.status)
        #: A look wanted within this many seconds, whatever the phase's own timer says.
        self.wake_by: float | None = None

    def wake_within(self, seconds: float) -> None:
        self.wake_by = seconds if self.wake_by is None else min(self.wake_by, seconds)
        self.decision.requeue_after = soonest(self.decision.requeue_after, self.wake_by)

    def condition(self, type_: str, status: cond.ConditionStatus, reason: str, msg: str) -> None:
        self.status.conditions = cond.set_condition(
            self.status.conditions, type_, status, reason, msg, self.now, self.request.generation
        )

    def act(self, action: Action) -> None:
        self.decision.actions.append(action)

    def phase(self, phase: Phase, message: str, requeue: float | None = FOLLOW_SECONDS) -> Decision:
        self.status.phase = phase
        self.status.message = message
        self.decision.requeue_after = soonest(requeue, self.wake_by)
        if phase != self.before:
            kind = "Warning" if phase == Phase.FAILED else "Normal"
            self.decision.events.append(Event(kind, phase.value, message))
        return self.decision

    def fail(self, reason: str, message: str) -> Decision:
        self.condition(cond.COMPLETED, "False", reason, message)
        self.status.finished_at = self.status.finished_at or self.now
        outcome = _OUTCOMES.get(reason, AttemptOutcome.FAILED)
        self.end_attempt(outcome, message)
        return self.phase(Phase.FAILED, f"{reason}: {message}", requeue=NEXT_STEP_SECONDS)

    def end_attempt(self, outcome: AttemptOutcome, message: str) -> Attempt | None:
        """Close the current ladder step's attempt (once); the attempt, if any."""
        attempts = self.status.attempts or []
        if not attempts or attempts[-1].ended_at is not None:
            return None
        attempts[-1].ended_at = self.now
        attempts[-1].outcome = outcome
        attempts[-1].message = message[:4096]
        return attempts[-1]


#: How a failure of the request reads as the outcome of its ladder step.
_OUTCOMES: dict[str, AttemptOutcome] = {
    "CapacityTimeout": AttemptOutcome.TIMED_OUT,
    "Stockout": AttemptOutcome.STOCKOUT,
    "QuotaExceeded": AttemptOutcome.QUOTA_EXCEEDED,
    "PreemptedTooOften": AttemptOutcome.PREEMPTED,
}
#: GKE's terminal answers that say a step cannot get capacity (so the next step may),
#: rather than that the request itself is wrong.
CAPACITY_REASONS = frozenset({"Stockout", "QuotaExceeded"})


#: The plans of this many requests are kept (see `planned`): those being looked at
#: now. A plan takes ~0.07 ms to make and ~7 KB to keep (its pydantic models: 1.8 MiB
#: for 256, measured with tracemalloc), so requests that only wait are planned again
#: when woken rather than kept planned; the passes that follow one change to a request
#: (its status write, the watch event echoing it) come within a second of each other.
PLAN_MEMORY = 64


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
_plans: OrderedDict[str, tuple[str, str, int, ClusterSite | None, Planned]] = OrderedDict()


def _fingerprint(spec: Mapping[str, Any]) -> str:
    """The spec as compact JSON with sorted keys: what a remembered plan is checked
    against. Kept instead of the spec's decoded dicts (a fourth of their memory), and
    encoding 0.4 KB costs far less than validating and planning again."""
    return json.dumps(spec, sort_keys=True, separators=(",", ":"))


def planned(request: RequestView) -> Planned:
    """The request's validated spec and the slice plan of its current ladder step, or
    why it has none.

    Remembered per request for as long as its spec is the same (a status write gives
    the shell a new object with an equal spec: comparing two small dicts is far cheaper
    than validating and planning again), so a request that only waits is validated and
    planned once, not on every pass."""
    pool_name = pool_name_for(request)
    step = step_of(request)
    known = _plans.get(request.uid)
    fingerprint = _fingerprint(request.spec)
    site = request.site
    if known is not None and known[:4] == (fingerprint, pool_name, step, site):
        _plans.move_to_end(request.uid)
        return known[4]
    result: Planned
    try:
        spec = TrainingRequestSpec.model_validate(request.spec)
        errors = spec_errors(spec) if spec.ladder_steps > 1 else []
        if errors:
            raise InvalidSpec(errors)
        if spec.ladder_steps > 1:
            _every_step_placed(spec, site)
        stepped = spec.at_step(step) if spec.ladder_steps > 1 else spec
        plan = plan_slice(stepped, pool_name=pool_name, site=site)
        result = StepPlan(stepped, plan, tuple(spec.provisioning.steps), step)
    except ValidationError as error:
        result = from_validation_error(error)
    except InvalidSpec as invalid:
        result = invalid
    _plans[request.uid] = (fingerprint, pool_name, step, site, result)
    if len(_plans) > PLAN_MEMORY:
        _plans.popitem(last=False)
    return result


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


def decide(observed: Observed, config: ReconcileConfig) -> Decision:
    """The pass's decision, its status summed up in the conditions GitOps tools read."""
    decision = _decide(observed, config)
    cond.summarize(decision.status, observed.now, observed.request.generation)
    return decision


def _decide(observed: Observed, config: ReconcileConfig) -> Decision:
    run = _Draft(observed)
    if run.request.deleting:
        return _release(run)
    result = planned(run.request)
    if isinstance(result, InvalidSpec):
        return _invalid(run, result)
    spec, plan = result.spec, result.plan
    _abandon(run)
    for stale in run.observed.stale_jobs:
        # An earlier attempt's workload (a restart or a step change interrupted midway):
        # gone before anything else, so nothing starts on what was given up.
        run.act(DeleteJob(stale, workload_kind(run.request.spec)))
    if len(result.ladder) > 1:
        _begin_attempt(run, result)
    run.condition(cond.VALID, "True", "Planned", f"{plan.nodes} x {plan.machine_type}")
    run.status.plan = plan.summary()
    managed = not spec.node_pool.existing
    before = run.status.node_pool
    run.status.node_pool = NodePoolStatus(
        name=plan.pool_names[0],
        managed=managed,
        location=config.location,
        reused=before.reused if before and before.name == plan.pool_names[0] else None,
    )
    run.status.slices = [
        SliceStatus(index=i, node_pool=name, nodes=observed.nodes_by_pool.get(name, 0))
        for i, name in enumerate(plan.pool_names)
    ]
    if run.status.phase in TERMINAL_PHASES:
        return _clean_up(run, spec)
    if plan.multi_slice and not config.jobset:
        return run.fail(
            "JobSetRequired",
            f"{plan.slices} slices run as one JobSet (jobset.x-k8s.io); install the JobSet "
            "controller in the cluster, or ask for one slice",
        )
    if plan.multi_slice and len(run.request.name) > MAX_MULTISLICE_NAME:
        return _invalid(
            run,
            InvalidSpec(
                [
                    SpecError(
                        "metadata.name",
                        f"at most {MAX_MULTISLICE_NAME} characters with several slices (the "
                        "JobSet's pod names are built from it)",
                    )
                ]
            ),
        )
    if uses_provisioning_request(spec.provisioning):
        if not config.kueue:
            return run.fail(
                "KueueRequired",
                "QueuedProvisioning scales up only through a ProvisioningRequest created by "
                "Kueue; enable Kueue (DWS_KUEUE) or choose FlexStart",
            )
        if queue_for(spec, config.default_queue, config.queued_queue) is None:
            return run.fail(
                "QueueRequired",
                "QueuedProvisioning needs a Kueue LocalQueue: set spec.queueName or the "
                "operator's DWS_DEFAULT_QUEUE",
            )
    ladder = len(result.ladder) > 1
    outside = _zones_outside(run, result.ladder, config.location) if managed and ladder else None
    if outside is not None:
        return outside
    too_old = _gke_too_old(run, spec, plan, result.ladder) if managed else None
    if too_old is not None:
        return too_old
    run.status.requested_at = run.status.requested_at or run.now
    still_provisioning = run.status.phase in (
        Phase.PROVISIONING,
        Phase.PENDING,
        # The workload could not be created yet (e.g. the API server refuses it for now).
        Phase.WAITING_FOR_CAPACITY,
    )
    if still_provisioning and run.observed.job is None and _timed_out(run, plan):
        return _wait_ran_out(run, spec, result)
    waiting = _node_pool(run, spec, plan, managed)
    if waiting is not None:
        return waiting
    return _workload(run, spec, plan, config)


def region_of(location: str) -> str:
    """`us-east5` of a region or of one of its zones (`us-east5-a`): regions have one
    hyphen (`europe-west4`, `northamerica-northeast1`), zones two."""
    return location.rsplit("-", 1)[0] if location.count("-") >= 2 else location


def _zones_outside(
    run: _Draft, ladder: tuple[ProvisioningSpec, ...], location: str | None
) -> Decision | None:
    """Failed at once when a step names a zone outside the cluster's region: GKE refuses
    such a pool, and finding out only when the ladder gets to that step wastes the
    steps before it."""
    if location is None or run.status.phase in TERMINAL_PHASES:
        return None
    region = region_of(location)
    for index, provisioning in enumerate(ladder):
        path = "spec.provisioning" if index == 0 else f"spec.provisioning.fallback[{index - 1}]"
        for zone in provisioning.zones or ():
            if region_of(zone) != region:
                return run.fail(
                    "ZoneOutsideCluster",
                    f"{path}.zones: {zone} is not in the cluster's region {region} (cluster "
                    f"location {location}); GKE makes node pools only in its cluster's region",
                )
    return None


def _gke_too_old(
    run: _Draft,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    ladder: tuple[ProvisioningSpec, ...],
) -> Decision | None:
    """Failed at once when the cluster's GKE is older than a feature of the request needs:
    GKE would refuse the pool, or accept settings it ignores. Checked only before the
    first pool is created (every step of a ladder then, not when the ladder reaches
    it); a pool GKE already made proves the version was enough."""
    observed = run.observed
    cluster = observed.cluster_version
    if cluster is None or any(p is not None for p in observed.slice_pools(plan.slices)):
        return None
    if len(ladder) > 1 and step_of(run.request) > 0:
        return None  # checked for every step on the first
    tpu = spec.accelerator.tpu
    gates = [
        gate
        for mode in dict.fromkeys(step.mode for step in ladder)
        for gate in version_gates(plan.kind, mode, tpu.version if tpu else None, plan.slices)
    ]
    unmet = list(dict.fromkeys(unmet_gates(cluster, gates)))
    if not unmet:
        return None
    needs = ", ".join(f"{g.feature} requires GKE {g.minimum} or later" for g in unmet)
    return run.fail("GkeVersionTooOld", f"{needs}; this cluster runs GKE {cluster}")


def _invalid(run: _Draft, invalid: InvalidSpec) -> Decision:
    message = "; ".join(str(e) for e in invalid.errors)
    run.condition(cond.VALID, "False", "InvalidSpec", message)
    if run.status.phase == Phase.FAILED:
        return run.phase(Phase.FAILED, run.status.message or message, requeue=None)
    return run.fail("InvalidSpec", message)


def _node_pool(
    run: _Draft, spec: TrainingRequestSpec, plan: SlicePlan, managed: bool
) -> Decision | None:
    """Ensure the pool; a Decision while it is not ready, None once work can run on it."""
    pool = run.observed.pool
    name = plan.node_pool.name or ""
    if not managed:
        if pool is None:
            return run.fail("NodePoolNotFound", f"existing node pool {name} does not exist")
        if pool.machine_type != plan.machine_type:
            return run.fail(
                "NodePoolMismatch",
                f"node pool {name} runs {pool.machine_type}, the request needs {plan.machine_type}",
            )
        if plan.kind == "gpu" and pool.accelerator_type not in (None, plan.accelerator_label):
            return run.fail(
                "NodePoolMismatch",
                f"node pool {name} carries {pool.accelerator_type}, not {plan.accelerator_label}",
            )
        if pool.max_nodes < plan.nodes:
            return run.fail(
                "NodePoolTooSmall",
                f"node pool {name} has at most {pool.max_nodes} nodes; the slice needs "
                f"{plan.nodes}",
            )
        free = pool.max_nodes - run.observed.nodes_used_by_others
        if run.observed.job is None and free < plan.nodes:
            message = f"{free} of {pool.max_nodes} nodes of {name} free, {plan.nodes} needed"
            run.condition(cond.NODE_POOL_READY, "False", "NodesInUse", message)
            waiting = f"Waiting for nodes of {name}: {message}"
            return run.phase(Phase.PENDING, waiting, NODES_IN_USE_SECONDS)
        run.condition(cond.NODE_POOL_READY, "True", "Existing", f"using existing node pool {name}")
        return None
    pools = run.observed.slice_pools(plan.slices)
    missing = [n for n, p in zip(plan.pool_names, pools, strict=True) if p is None]
    busy: list[tuple[str, PoolState]] = []
    operations = run.observed.operations
    for pool_name, slice_pool in zip(plan.pool_names, pools, strict=True):
        if slice_pool is None:
            continue
        if not slice_pool.ours and run.observed.takeover:
            return _take_over(run, plan, pool_name)
        if not slice_pool.ours:
            return run.fail(
                "NodePoolNameTaken", f"node pool {pool_name} exists and belongs to something else"
            )
        if (
            slice_pool.max_nodes == 0
            and slice_pool.state == PoolState.RUNNING
            and run.observed.job is None
        ):
            # Ours but capped at zero before the work began: an interrupted takeover
            # (labels set, ceiling not yet) or a pool someone capped. Its ceiling back.
            return _take_over(run, plan, pool_name)
        if slice_pool.state == PoolState.ERROR:
            return run.fail(
                "NodePoolError", slice_pool.message or f"node pool {pool_name} is in error"
            )
        if slice_pool.state in (PoolState.PROVISIONING, PoolState.STOPPING):
            busy.append((pool_name, slice_pool.state))
    if missing:
        # Every missing pool at once: a multi-slice request waits for the slowest anyway.
        for pool_name in missing:
            if pool_name not in operations:
                run.act(CreateNodePool(name=pool_name, plan=plan))
        names = _pool_list(missing)
        queued = _queued(run.observed, missing)
        if queued is not None:
            run.condition(cond.NODE_POOL_READY, "False", "WaitingForOperationSlot", queued)
            return run.phase(
                Phase.PROVISIONING, f"Creating {names}: {queued}", _until_timeout(run, plan)
            )
        retrying = next((operations[n].retrying for n in missing if n in operations), "")
        detail = f" ({retrying}; retrying)" if retrying else ""
        run.condition(cond.NODE_POOL_READY, "False", "Creating", f"creating {names}{detail}")
        return run.phase(Phase.PROVISIONING, f"Creating {names}{detail}", _until_timeout(run, plan))
    if busy:
        states = "; ".join(f"node pool {n} {state}" for n, state in busy)
        run.condition(cond.NODE_POOL_READY, "False", "Provisioning", states)
        message = "; ".join(f"Node pool {n} is {state.lower()}" for n, state in busy)
        return run.phase(Phase.PROVISIONING, message, _until_timeout(run, plan))
    ready = _pool_list(list(plan.pool_names))
    run.condition(cond.NODE_POOL_READY, "True", "Created", f"{ready} {_are(plan)} ready")
    return None


def _take_over(run: _Draft, plan: SlicePlan, name: str) -> Decision:
    """An idle pool of this request's shape becomes its own (one pool serves one request
    at a time): its labels, then its ceiling, in one of the cluster's operation slots."""
    if name not in run.observed.operations:
        run.act(TakeOverNodePool(name=name, plan=plan))
    queued = _queued(run.observed, [name])
    detail = f": {queued}" if queued else ""
    message = f"taking over idle node pool {name} (same shape){detail}"
    run.condition(cond.NODE_POOL_READY, "False", "Reusing", message)
    return run.phase(
        Phase.PROVISIONING, message[0].upper() + message[1:], _until_timeout(run, plan)
    )


def _queued(observed: Observed, pools: list[str]) -> str | None:
    """Why a pool's operation has not started yet (the cluster's operation slots are
    taken), with its place in line; None when it runs or can start at once."""
    views = [observed.operations[p] for p in pools if p in observed.operations]
    waiting = [v for v in views if not v.running]
    if views and not waiting:
        return None
    if waiting:
        first = min(waiting, key=lambda v: v.position)
        position, slots = first.position, first.slots
    elif observed.create_position > 0:
        position, slots = observed.create_position, 0
    else:
        return None
    limit = (
        f"GKE runs {slots} node pool operations at a time in this cluster"
        if slots
        else ("the cluster's GKE operation slots are taken")
    )
    return f"waiting for a GKE operation slot, position {position} in line ({limit})"


def _pool_list(names: list[str]) -> str:
    return f"node pool {names[0]}" if len(names) == 1 else f"node pools {', '.join(names)}"


def _are(plan: SlicePlan) -> str:
    return "is" if plan.slices == 1 else "are"


def _shape(plan: SlicePlan) -> str:
    """`4 x ct6e-standard-4t`, or `2 slices of 2 x ct5p-hightpu-4t`."""
    one = f"{plan.nodes} x {plan.machine_type}"
    return one if plan.slices == 1 else f"{plan.slices} slices of {one}"


def _workload(
    run: _Draft, spec: TrainingRequestSpec, plan: SlicePlan, config: ReconcileConfig
) -> Decision:
    request = run.request
    ref = RequestRef(request.name, request.namespace, request.uid)
    observed = run.observed
    multi_host = needs_service(plan)
    if multi_host:
        if observed.service_taken:
            return run.fail(
                "ServiceNameTaken",
                f"Service {service_name(request.name)} exists and belongs to something else",
            )
        run.status.service = ObjectReference(name=service_name(request.name))

    def ensure_service() -> None:
        # Only while the work can still run: a finished request gets no new objects.
        if multi_host and not observed.service_exists:
            run.act(CreateService(render_service(ref)))

    kind = workload_kind(run.request.spec)
    job = observed.job
    attempt = attempt_number(run.status)
    total = plan.total_nodes
    if job is None:
        queue = queue_for(spec, config.default_queue, config.queued_queue) if config.kueue else None
        known = observed.local_queues
        if queue is not None and known is not None and queue not in known:
            # Kueue would keep the workload suspended without a word: say it here, and
            # go on when the queue is made (its creation wakes the request).
            message = (
                f"Kueue LocalQueue {request.namespace}/{queue} does not exist: create it, "
                "or set spec.queueName to one that does"
            )
            run.condition(cond.WORKLOAD_CREATED, "False", "LocalQueueNotFound", message)
            return run.phase(Phase.WAITING_FOR_CAPACITY, message, _until_timeout(run, plan))
        ensure_service()
        render = render_jobset if plan.multi_slice else render_job
        run.act(CreateJob(render(ref, spec, plan, attempt=attempt, queue=queue)))
        run.status.job = ObjectReference(name=job_name(request.name, attempt))
        run.condition(cond.WORKLOAD_CREATED, "True", "JobCreated", f"{kind} {run.status.job.name}")
        run.condition(cond.CAPACITY_PROVISIONED, "False", "Waiting", "waiting for nodes")
        return run.phase(
            Phase.WAITING_FOR_CAPACITY,
            f"Waiting for capacity: 0/{total} nodes",
            _until_timeout(run, plan),
        )
    if not job.ours:
        return run.fail("JobNameTaken", f"{kind} {job.name} exists and belongs to something else")
    run.status.job = ObjectReference(name=job.name)
    run.condition(cond.WORKLOAD_CREATED, "True", "JobCreated", f"{kind} {job.name}")
    if job.complete:
        run.status.finished_at = run.status.finished_at or run.now
        run.condition(cond.COMPLETED, "True", "JobSucceeded", f"{kind} {job.name} succeeded")
        run.phase(Phase.SUCCEEDED, f"{kind} {job.name} succeeded")
        return _clean_up(run, spec)
    if job.failed and job.disrupted:
        return _restart(run, spec, planned_step(run), job.name)
    if job.failed:
        run.fail(
            job.failure_reason or "JobFailed", job.failure_message or f"{kind} {job.name} failed"
        )
        return _clean_up(run, spec)
    if job.ready >= total or run.status.started_at is not None:
        ensure_service()
        if run.status.started_at is None:
            run.end_attempt(AttemptOutcome.PROVISIONED, f"{total} nodes ready")
        run.status.started_at = run.status.started_at or run.now
        run.status.provisioned_at = run.status.provisioned_at or run.now
        run.condition(cond.CAPACITY_PROVISIONED, "True", "NodesReady", f"{total} nodes")
        return run.phase(Phase.RUNNING, f"Running on {_shape(plan)}", config.running_poll_seconds)
    if _timed_out(run, plan):
        return _wait_ran_out(run, spec, planned_step(run))
    ensure_service()
    message = f"Waiting for capacity: {job.ready}/{total} nodes ready"
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Waiting", message)
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, _until_timeout(run, plan))


def _restart(run: _Draft, spec: TrainingRequestSpec, step: StepPlan, failed_job: str) -> Decision:
    """A node was lost under the Job: start a new attempt, up to maxRestarts.

    The restart count is written (with the status) before the old Job is deleted, so a
    crash in between is finished by the next pass: it deletes the old Job as stale and
    creates the new attempt's. On a capacity ladder maxRestarts counts per step: a step
    that lost its nodes once more than that hands over to the next step (fresh capacity,
    perhaps of another kind, is likelier than the same Spot capacity coming back); the
    last step fails as a request without fallback does.
    """
    status, plan = run.status, step.plan
    attempts = status.attempts or []
    current = attempts[-1] if attempts and len(step.ladder) > 1 else None
    restarts = current.restarts if current is not None else status.restarts
    if restarts >= plan.max_restarts:
        message = f"lost nodes {restarts + 1} times; maxRestarts is {plan.max_restarts}"
        if step.step + 1 < len(step.ladder):
            if current is not None:
                current.ended_at = None  # it ended Provisioned; it ends again, Preempted
            return _next_step(run, step, AttemptOutcome.PREEMPTED, message)
        run.fail("PreemptedTooOften", message)
        return _clean_up(run, spec)
    status.restarts += 1
    if current is not None:
        current.restarts += 1
        # The step asks for capacity again: its attempt is open until it gets it.
        current.ended_at = current.outcome = current.message = None
    status.started_at = None
    status.requested_at = run.now
    kind = workload_kind(run.request.spec)
    run.act(DeleteJob(failed_job, kind))
    message = f"Node lost under {kind} {failed_job}: restart {status.restarts}/{plan.max_restarts}"
    run.condition(cond.CAPACITY_PROVISIONED, "False", "Restarting", message)
    run.decision.events.append(Event("Warning", "Restarting", message))
    return run.phase(Phase.WAITING_FOR_CAPACITY, message, NEXT_STEP_SECONDS)


def _timed_out(run: _Draft, plan: SlicePlan) -> bool:
    """maxWaitDuration passed since capacity was requested (0s: never)."""
    waited = run.now - (run.status.requested_at or run.now)
    return bool(plan.max_wait_seconds) and waited > timedelta(seconds=plan.max_wait_seconds)


def _until_timeout(run: _Draft, plan: SlicePlan) -> float | None:
    """Seconds until maxWaitDuration runs out (a moment after, so the pass then sees it
    passed); None without a limit. Everything else that can end a wait is an event."""
    if not plan.max_wait_seconds:
        return None
    waited = (run.now - (run.status.requested_at or run.now)).total_seconds()
    return max(plan.max_wait_seconds - waited, 0.0) + PAST_DEADLINE_SECONDS


def _wait_ran_out(run: _Draft, spec: TrainingRequestSpec, step: StepPlan) -> Decision:
    """The step's maxWaitDuration passed: the next step of the ladder, or (the last
    step) the request fails CapacityTimeout."""
    wait = spec.provisioning.max_wait_duration
    if step.step + 1 < len(step.ladder):
        message = f"no capacity for {_shape(step.plan)} within {wait}"
        return _next_step(run, step, AttemptOutcome.TIMED_OUT, message)
    steps = f" on any of {len(step.ladder)} steps" if len(step.ladder) > 1 else ""
    run.fail("CapacityTimeout", f"no capacity for {_shape(step.plan)} within {wait}{steps}")
    return _clean_up(run, spec)


def planned_step(run: _Draft) -> StepPlan:
    """The current step's plan (decide made it already this pass, so it is remembered)."""
    result = planned(run.request)
    assert not isinstance(result, InvalidSpec)  # decide returned early otherwise
    return result


def describe_step(provisioning: ProvisioningSpec) -> str:
    """`FlexStart in us-east5-a`, `Spot`, `Reservation r1`: a ladder step for people."""
    text = str(provisioning.mode)
    if provisioning.reservation:
        text += f" {provisioning.reservation}"
    if provisioning.zones:
        text += f" in {', '.join(provisioning.zones)}"
    return text


def _begin_attempt(run: _Draft, step: StepPlan) -> None:
    """The ladder's current step in the status, with an attempt for it (once)."""
    status = run.status
    status.step = step.step + 1
    attempts = status.attempts = list(status.attempts or [])
    provisioning = step.ladder[step.step]
    pool = step.plan.pool_names[0] if step.plan.pool_names else None
    if attempts and attempts[-1].step == status.step:
        if attempts[-1].ended_at is None:
            # A pool taken over after the step began is the step's pool.
            attempts[-1].node_pool = pool
        return
    if status.phase in TERMINAL_PHASES:
        return
    attempts.append(
        Attempt(
            step=status.step,
            mode=str(provisioning.mode),
            zones=list(provisioning.zones) if provisioning.zones else None,
            node_pool=pool,
            started_at=run.now,
        )
    )
    total = len(step.ladder)
    message = f"step {status.step} of {total}: {describe_step(provisioning)}"
    run.decision.events.append(Event("Normal", "StepStarted", message))


def _next_step(run: _Draft, step: StepPlan, outcome: AttemptOutcome, why: str) -> Decision:
    """Leave the current ladder step for the next one. The status (the new step, the
    attempt's end) is written before anything is removed, so a crash after it resumes
    on the new step and removes the old step's pools and workload as abandoned."""
    status, observed = run.status, run.observed
    run.end_attempt(outcome, why)
    here = describe_step(step.ladder[step.step])
    there = describe_step(step.ladder[step.step + 1])
    total = len(step.ladder)
    job = observed.job
    if job is not None and job.ours:
        # Nothing may start late on a step given up: its pods go with their Job.
        run.act(DeleteJob(job.name, workload_kind(run.request.spec)))
    ours = [p for p in observed.all_pools if p is not None and p.ours]
    _remove_pools(run, ours, also=step.plan.pool_names)
    status.step = step.step + 2
    status.requested_at = run.now
    status.started_at = None
    status.provisioned_at = None
    status.node_pool = None
    status.job = None
    message = (
        f"step {step.step + 1} of {total} ({here}) ended {outcome.value}: {why}; "
        f"trying step {step.step + 2} ({there})"
    )
    run.condition(cond.NODE_POOL_READY, "False", "NextStep", message)
    run.condition(cond.CAPACITY_PROVISIONED, "False", "NextStep", message)
    run.decision.events.append(Event("Warning", "StepEnded", message))
    return run.phase(Phase.PROVISIONING, message[0].upper() + message[1:], NEXT_STEP_SECONDS)


def _remove_pools(run: _Draft, pools: list[PoolView], also: Iterable[str] = ()) -> None:
    """Delete the given pools of the request (not while an operation on them runs: it
    ends first and wakes the request; nor while GKE's refusal of the last delete holds
    it back) and call off creates not yet started of them, of `also` and of every pool
    of a step left behind."""
    observed = run.observed
    operations = observed.operations
    for pool in pools:
        held = pool.name in observed.held_back
        if pool.state != PoolState.STOPPING and pool.name not in operations and not held:
            run.act(DeleteNodePool(pool.name))
        if held:
            run.wake_within(HELD_BACK_SECONDS)
    _call_off(run, {p.name for p in pools} | set(also) | observed.abandoned_names)


def _call_off(run: _Draft, names: Collection[str] | None = None) -> None:
    """Call off the request's creates and takeovers not started in GKE yet (of `names`;
    None: of every pool), once each per pass."""
    asked = {a.name for a in run.decision.actions if isinstance(a, CancelPoolOperation)}
    for name, operation in run.observed.operations.items():
        unstarted = operation.kind in ("Create", "TakeOver") and not operation.running
        wanted = names is None or name in names
        if wanted and name not in asked and operation.mine and unstarted:
            run.act(CancelPoolOperation(name))


def _abandon(run: _Draft) -> None:
    """Pools of the ladder steps left behind go, whatever the request does now."""
    _remove_pools(run, [p for p in run.observed.abandoned if p.ours])


def _clean_up(run: _Draft, spec: TrainingRequestSpec) -> Decision:
    """After the work ends: stop what could still start, then ScaleToZero/Delete/Keep."""
    observed, status = run.observed, run.status
    job = observed.job
    pending = job is not None and job.ours and not (job.complete or job.failed)
    if status.phase == Phase.FAILED and pending and job is not None:
        # Pods still waiting for capacity must not start on nodes arriving later.
        run.act(DeleteJob(job.name, workload_kind(run.request.spec)))
        if observed.service_exists:
            run.act(DeleteService(service_name(run.request.name)))
    managed = status.node_pool is not None and status.node_pool.managed
    cleanup = _cleanup_policy(run, spec)
    pools = observed.all_pools
    ours = [p for p in pools if p is not None and p.ours]
    busy = _settle_operations(run) if managed else False
    if managed and ours:
        if cleanup == CleanupPolicy.SCALE_TO_ZERO:
            # Zero only when GKE's ceiling and the Nodes that are billed both say so. A
            # TPU slice pool keeps its ceiling (GKE checks it against the slice's size):
            # for it, a resize to zero asked for in an earlier pass (recorded in the
            # ScaledDown condition, written before the resize is sent) and done stands in.
            nodes = observed.nodes_by_pool
            scaled = cond.condition(run.status.conditions, cond.SCALED_DOWN)
            resized = scaled is not None and scaled.reason in (RESIZING, "ScaledToZero")

            def capped(pool: PoolView) -> bool:
                if pool.keeps_ceiling:
                    return resized and pool.name not in observed.operations
                return pool.max_nodes == 0

            scaling = [p for p in ours if not capped(p) or nodes.get(p.name, 0) > 0]
            for pool in scaling:
                draining = capped(pool) and pool.name in observed.draining
                if pool.name not in observed.operations and not draining:
                    run.act(ScaleNodePoolToZero(pool.name))
            slices = [p.name for p in scaling if p.keeps_ceiling]
            if slices and not resized:
                run.condition(
                    cond.SCALED_DOWN,
                    "False",
                    RESIZING,
                    f"resizing {_pool_list(slices)} to zero (a TPU slice pool keeps its "
                    "autoscaling ceiling at the slice's size)",
                )
            if any(p.name in observed.draining for p in scaling):
                # Their Node objects' removal wakes the request; this is the backstop
                # after which a pool still showing Nodes is resized again.
                run.decision.requeue_after = DRAIN_SECONDS
            if not scaling:
                names = _pool_list([p.name for p in ours])
                verb = "has" if len(ours) == 1 else "have"
                _scaled_down(run, "ScaledToZero", f"{names} {verb} no nodes")
        elif cleanup == CleanupPolicy.DELETE:
            for pool in ours:
                if pool.state != PoolState.STOPPING and pool.name not in observed.operations:
                    run.act(DeleteNodePool(pool.name))
    elif (
        managed
        and all(p is None for p in pools)
        # Not while an operation on them is still queued or running: it ends first.
        and not busy
        and cleanup == CleanupPolicy.DELETE
        # A request that failed before it asked for a pool has none to report deleted.
        and cond.condition(status.conditions, cond.NODE_POOL_READY) is not None
    ):
        gone = "node pool deleted" if len(pools) == 1 else "node pools deleted"
        _scaled_down(run, "Deleted", gone)
    # Pool operations and Job deletions wake the request when done: no timer needed
    # (except to give draining Nodes their time, set above).
    if run.decision.requeue_after != DRAIN_SECONDS:
        run.decision.requeue_after = None
    run.decision.requeue_after = soonest(run.decision.requeue_after, run.wake_by)
    return run.decision


def _cleanup_policy(run: _Draft, spec: TrainingRequestSpec) -> CleanupPolicy:
    """The request's cleanup, except that pools which never got capacity are deleted
    (unless Keep): their names are this request's, so nothing else could ever use them.
    That is a request that timed out waiting, or one that failed before it ever ran (e.g.
    GKE refused one slice's pool after another slice's was made)."""
    completed = cond.condition(run.status.conditions, cond.COMPLETED)
    timed_out = completed is not None and completed.reason == "CapacityTimeout"
    never_ran = run.status.phase == Phase.FAILED and run.status.provisioned_at is None
    if (timed_out or never_ran) and spec.node_pool.cleanup == CleanupPolicy.SCALE_TO_ZERO:
        return CleanupPolicy.DELETE
    return spec.node_pool.cleanup


#: The ScaledDown condition's reason while TPU slice pools are being resized to zero.
RESIZING = "Resizing"


def _scaled_down(run: _Draft, reason: str, message: str) -> None:
    if run.status.scaled_down_at is None:
        run.status.scaled_down_at = run.now
        run.decision.events.append(Event("Normal", reason, message))
    run.condition(cond.SCALED_DOWN, "True", reason, message)


def _release(run: _Draft) -> Decision:
    """Deletion: remove the Job, the Service and a pool the operator created, then let go."""
    observed, request = run.observed, run.request
    kind = workload_kind(run.request.spec)
    if observed.job is not None and observed.job.ours:
        run.act(DeleteJob(observed.job.name, kind))
    for stale in observed.stale_jobs:
        run.act(DeleteJob(stale, kind))
    if observed.service_exists:
        run.act(DeleteService(service_name(request.name)))
    node_pool = request.spec.get("nodePool")
    managed = not (isinstance(node_pool, dict) and node_pool.get("existing", False))
    ours = [p for p in observed.all_pools if p is not None and p.ours]
    for pool in ours if managed else []:
        if pool.state != PoolState.STOPPING and pool.name not in observed.operations:
            run.act(DeleteNodePool(pool.name))
    _abandon(run)
    run.end_attempt(AttemptOutcome.CANCELLED, "the TrainingRequest was deleted")
    busy = _settle_operations(run)
    left = any(p.ours for p in observed.abandoned)
    gone = not run.decision.actions and not busy and (not ours or not managed) and not left
    run.decision.released = gone
    return run.phase(Phase.DELETING, "Deleting the Job, Service and node pool", None)


def _settle_operations(run: _Draft) -> bool:
    """Operations queued for the request's pools must not outlive its work: a create or
    takeover not started in GKE is called off; one already started is waited for (its
    pool then shows, and is cleaned up like any other). Whether any is still on."""
    _call_off(run)
    return bool(run.observed.operations)


def failed(observed: Observed, reason: str, message: str) -> Decision:
    """The decision for a request whose action failed for good (a terminal GKE error).
    GKE's "no capacity" or "no quota" for a step of a capacity ladder with another step
    after it moves the request on to that step instead."""
    run = _Draft(observed)
    result = planned(observed.request)
    if (
        reason in CAPACITY_REASONS
        and isinstance(result, StepPlan)
        and result.step + 1 < len(result.ladder)
        and run.status.phase not in TERMINAL_PHASES
    ):
        decision = _next_step(run, result, _OUTCOMES[reason], message)
    else:
        decision = run.fail(reason, message)
    cond.summarize(decision.status, observed.now, observed.request.generation)
    return decision
