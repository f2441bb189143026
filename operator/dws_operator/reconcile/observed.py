"""What the reconciler sees: the TrainingRequest, its node pool, Job and Service.

Plain values gathered by the shell (Kubernetes and GKE reads), so the decision is a
pure function of them and can be tested without either.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from dws_operator.api import TrainingRequestStatus
from dws_operator.api.policy import TrainingPolicy
from dws_operator.catalog import GkeVersion
from dws_operator.estimate import Estimate
from dws_operator.guardrails import Size
from dws_operator.reconcile.facts import RequestFacts
from dws_operator.zones import ClusterSite


class PoolState(StrEnum):
    """GKE's NodePool.Status values the decision distinguishes."""

    PROVISIONING = "PROVISIONING"
    RUNNING = "RUNNING"
    RECONCILING = "RECONCILING"
    STOPPING = "STOPPING"
    ERROR = "ERROR"
    RUNNING_WITH_ERROR = "RUNNING_WITH_ERROR"


@dataclass(frozen=True)
class RequestView:
    name: str
    namespace: str
    uid: str
    generation: int
    deleting: bool
    #: Its spec, read once (`facts.read_spec`): nothing after reads the stored object.
    facts: RequestFacts
    status: TrainingRequestStatus
    #: Where the cluster is: a TPU slice's zone is chosen from it when the spec names
    #: none (`zones.slice_zone`). None where no pool is planned from this view.
    site: ClusterSite | None = None
    #: Its creationTimestamp (time to capacity counts from it); None when not known.
    created: datetime | None = None
    #: What is worked out from this view once and read again in the same pass (its
    #: plan, `step.planned`). Not copied by `dataclasses.replace`: a view of another
    #: site or status plans afresh.
    memo: dict[str, object] = field(
        default_factory=dict, init=False, compare=False, repr=False, hash=False
    )


@dataclass(frozen=True)
class PoolView:
    name: str
    state: PoolState
    #: Carries the uid label of this TrainingRequest (so the operator may manage it).
    ours: bool
    #: The autoscaler's ceiling (per zone or total); 0 once scaled to zero.
    max_nodes: int
    machine_type: str
    accelerator_type: str | None = None
    message: str = ""
    #: A multi-host TPU slice pool: scaled to zero by a resize with its ceiling left at
    #: the slice's size (`gke.ceiling.holds_slice`), so only its Nodes show it at zero.
    keeps_ceiling: bool = False


@dataclass(frozen=True)
class JobView:
    name: str
    #: Owned by this TrainingRequest (uid in its owner references).
    ours: bool
    complete: bool = False
    failed: bool = False
    failure_reason: str = ""
    failure_message: str = ""
    ready: int = 0
    #: Failed because a pod lost its node (spot preemption, node loss), not by its code.
    disrupted: bool = False
    #: Kueue deactivated its Workload (gave up on it: a ProvisioningRequest that failed
    #: more often than Kueue retries, capacity revoked): Kueue's word why. It stays
    #: suspended for good.
    deactivated: str | None = None
    #: Being deleted (a deletionTimestamp): asked once, not again on every pass while
    #: its pods go (a foreground delete can take their whole grace period).
    deleting: bool = False


@dataclass(frozen=True)
class BookingView:
    """A Calendar-mode booking as Compute answers for it."""

    #: Compute's procurementStatus, e.g. PENDING_APPROVAL, PROCURING, FULFILLED, DECLINED.
    procurement: str
    #: The reservations it delivered (names), once FULFILLED.
    reservations: tuple[str, ...] = ()
    #: It names the request's uid (its description): the request's own, not another's
    #: that happens to have the name.
    ours: bool = True


@dataclass(frozen=True)
class ProvisioningRequestView:
    """The ProvisioningRequest Kueue made for the request's current workload (queued
    provisioning), as the API server has it."""

    name: str
    #: When its Accepted condition turned true; None while not accepted.
    accepted_at: datetime | None
    provisioned: bool
    failed: bool = False


@dataclass(frozen=True)
class CalendarWindow:
    """A window Compute's calendar-mode advice recommends for a block."""

    start: datetime
    end: datetime
    recommendation_id: str


@dataclass(frozen=True)
class AdviceView:
    """Compute's calendar-mode advice for the request's block in its zone: a window, or
    why there is none (Compute's words for the zone, when it gave some)."""

    window: CalendarWindow | None
    why_none: str = ""
    #: Compute refused the advice for good (no permission, a request it will not advise
    #: on): no window can be found (`why_none` says why).
    refused: bool = False


@dataclass(frozen=True)
class OperationView:
    """A GKE operation the operator queued or started on one of the request's pools."""

    #: Create, ScaleDown or Delete.
    kind: str
    #: Started in GKE (else still waiting for one of the cluster's operation slots).
    running: bool
    #: 1-based place in the cluster's queue while waiting; 0 once running.
    position: int = 0
    #: Operations waiting in all.
    queued: int = 0
    #: Operations GKE runs at once in this cluster.
    slots: int = 0
    #: The last retryable error of this operation (it is tried again), for messages.
    retrying: str = ""
    #: Queued by this request; else by another (the one taking its old pool over, or the
    #: sweep deleting an idle pool), which it waits for but must not call off.
    mine: bool = True


@dataclass(frozen=True)
class Observed:
    request: RequestView
    now: datetime
    #: The first slice's node pool (a single slice's only one); None when absent.
    pool: PoolView | None = None
    #: The pools of slices 1..N-1 of a multi-slice request, in order; None when absent.
    more_pools: tuple[PoolView | None, ...] = ()
    #: The current attempt's workload: a batch Job, or a JobSet for several slices.
    job: JobView | None = None
    #: Kubernetes Nodes of each of the request's pools, by pool name.
    nodes_by_pool: Mapping[str, int] = field(default_factory=dict)
    #: A long run's next segment's pools (made ahead of its rollover), in slice order;
    #: () when the run has no next segment (`step.next_pool_names_for`).
    next_pools: tuple[PoolView | None, ...] = ()
    #: The earliest end of a VM of the current pools, as GKE annotates their Nodes
    #: (`node.gke.io/machine-termination-datetime`); None when no Node says.
    capacity_ends: datetime | None = None
    #: A Service of this TrainingRequest (owner reference with its uid) exists.
    service_exists: bool = False
    #: A Service of that name exists but belongs to something else.
    service_taken: bool = False
    #: Jobs of this request from other attempts (left by a restart interrupted midway).
    stale_jobs: tuple[str, ...] = ()
    #: Of those, the ones being deleted already (asked once: a delete again would be a
    #: write again, and a foreground one puts the collector's finalizer back).
    stale_going: frozenset[str] = frozenset()
    #: A long run's capacity holders there (`dws_operator.holder`), by name.
    holders: tuple[str, ...] = ()
    #: Nodes of an existing pool that other running TrainingRequests hold: a request may
    #: use at most the pool's maximum minus these.
    nodes_used_by_others: int = 0
    #: The GKE cluster's control-plane version; None when not known (no version gate then).
    cluster_version: GkeVersion | None = None
    #: Operations queued or running on the request's pools, by pool name.
    operations: Mapping[str, OperationView] = field(default_factory=dict)
    #: Where a create of this request's pool would wait (1 = next); 0: a slot is free.
    create_position: int = 0
    #: The pool the status names is another request's idle pool, free to take over.
    takeover: bool = False
    #: Pools scaled to zero a moment ago whose Nodes may still be on their way out
    #: (GKE removes the VMs, then their Node objects go): not to be resized again yet.
    draining: frozenset[str] = frozenset()
    #: Kueue's LocalQueues in the request's namespace; None when not known (no check).
    local_queues: frozenset[str] | None = None
    #: Pools of capacity ladder steps the request has left that still exist (to delete).
    abandoned: tuple[PoolView, ...] = ()
    #: The names of every pool of a step left behind, existing or not (their operations
    #: in `operations` are to be called off, not waited for as the current step's).
    abandoned_names: frozenset[str] = frozenset()
    #: Pools of steps left behind whose delete GKE refused for good a moment ago: not
    #: asked again until a while has passed.
    held_back: frozenset[str] = frozenset()
    #: An idle pool of the request's shape that the shell's shelf holds for it this
    #: pass: the decision binds it (the takeover itself follows on the next pass).
    offer: str | None = None
    #: The idle pool the status says the request takes over is no longer free for it
    #: (another request holds it now): the binding goes.
    binding_lost: bool = False
    #: An action of the request refused for good since its last pass, as (reason,
    #: message): a terminal GKE error on its pool, the API server refusing its workload.
    refusal: tuple[str, str] | None = None
    #: The request's Calendar-mode booking as Compute answered this pass; None when
    #: Compute has none of that name (or the request books none).
    booking: BookingView | None = None
    #: Compute's calendar-mode advice, asked this pass for a block to start between the
    #: spec's earliest and latest (`reconcile.advice.advice_query`); None when not asked.
    advice: AdviceView | None = None
    #: The history's estimate for the kind of capacity the request waits for
    #: (`reconcile.estimates.estimate_key`); None when not asked.
    estimate: Estimate | None = None
    #: The history's estimate for each ladder step as written, asked while the ladder
    #: waits to be ordered by estimate (`reconcile.order.ladder_keys`); None otherwise.
    step_estimates: tuple[Estimate | None, ...] | None = None
    #: The ProvisioningRequest of the request's current workload, read once its wait is
    #: long enough that it may have stuck (`reconcile.stuck.provisioning_request_wanted`);
    #: None when not read or not there.
    provisioning_request: ProvisioningRequestView | None = None
    #: The request's namespace's TrainingPolicies (`dws_operator.guardrails`).
    policies: tuple[TrainingPolicy, ...] = ()
    #: What the namespace's other admitted requests not yet ended hold or ask for.
    in_flight: Size = field(default_factory=Size)
    #: An older request of the namespace still waiting for its policies' in-flight
    #: limits, that this one waits behind (first come, first served); "" when none.
    waits_behind: str = ""

    @property
    def going(self) -> frozenset[str]:
        """The request's workloads being deleted already, the current one's included. One
        is there until its pods are; asked again, its delete would be a write for nothing
        on every pass (and a foreground one puts the collector's finalizer back)."""
        if self.job is not None and self.job.deleting:
            return self.stale_going | {self.job.name}
        return self.stale_going

    @property
    def all_pools(self) -> tuple[PoolView | None, ...]:
        """Every slice's pool as observed, in order (None where absent)."""
        return (self.pool, *self.more_pools)

    def slice_pools(self, slices: int) -> tuple[PoolView | None, ...]:
        """Every slice's pool in order (None where absent), `slices` of them."""
        pools = self.all_pools[:slices]
        return pools + (None,) * (slices - len(pools))
