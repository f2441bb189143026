"""One reconcile pass: observe, decide, write status, act, post events.

The status is written before the actions run: a crash between the two leaves a
status that the next pass re-derives from what it observes, while a crash after an
action leaves an object the next pass finds (names are deterministic) instead of
making a second one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Any

from google.auth.exceptions import GoogleAuthError

from dws_operator.api import TrainingRequestStatus
from dws_operator.controller.kube import KubeApi, WorkloadRejected
from dws_operator.controller.observe import observe
from dws_operator.gke import (
    GkeError,
    NodePoolClient,
    WorkloadPolicyClient,
    pool_labels,
    region_of,
    render_node_pool,
)
from dws_operator.multislice import JOBSET_KIND
from dws_operator.planning import SlicePlan
from dws_operator.reconcile import (
    Action,
    CreateJob,
    CreateNodePool,
    CreateService,
    Decision,
    DeleteJob,
    DeleteNodePool,
    DeleteService,
    Event,
    Observed,
    ReconcileConfig,
    RequestView,
    ScaleNodePoolToZero,
    decide,
    failed,
)
from dws_operator.reconcile import conditions as cond

log = logging.getLogger(__name__)

#: Posts an Event about the object (its body) to Kubernetes.
EventSink = Callable[[Mapping[str, Any], Event], None]
#: Pause after a GKE error that retries did not clear, before the next pass.
GKE_BACKOFF_SECONDS = 10.0


#: Actions on different node pools that may run at once: a multi-slice request's pools
#: are created, scaled to zero and deleted together, so its slices come and go together.
_POOL_ACTIONS = (CreateNodePool, ScaleNodePoolToZero, DeleteNodePool)


def _batches(actions: list[Action]) -> list[list[Action]]:
    """`actions` in order, consecutive pool actions grouped to run concurrently."""
    batches: list[list[Action]] = []
    for action in actions:
        pooled = isinstance(action, _POOL_ACTIONS)
        if pooled and batches and isinstance(batches[-1][0], _POOL_ACTIONS):
            batches[-1].append(action)
        else:
            batches.append([action])
    return batches


def _dump(status: TrainingRequestStatus) -> dict[str, Any]:
    return status.model_dump(by_alias=True, exclude_none=True, mode="json")


class Reconciler:
    def __init__(
        self,
        kube: KubeApi,
        gke: NodePoolClient,
        config: ReconcileConfig,
        emit: EventSink,
        policies: Callable[[], WorkloadPolicyClient] | None = None,
    ) -> None:
        self.kube = kube
        self.gke = gke
        self.config = config
        self.emit = emit
        # Connected on first use: only Ironwood multi-host slices need Compute, and an
        # operator that never serves one must not need Compute credentials to start.
        self._connect_policies = policies
        self._policies: WorkloadPolicyClient | None = None

    async def reconcile(self, namespace: str, name: str) -> Decision | None:
        """One pass over the request as it is now; None when it no longer exists."""
        # Read afresh rather than trusting the watch's copy, which can lag behind the
        # status the previous pass wrote.
        body = await self.kube.training_request(namespace, name)
        if body is None:
            return None
        observed = await observe(body, self.kube, self.gke)
        decision = decide(observed, self.config)
        await self._write_status(observed.request, decision.status)
        try:
            for batch in _batches(decision.actions):
                failure = await self._execute_all(observed.request, batch)
                if failure is not None:
                    decision = await self._gke_failed(observed, decision, *failure)
                    break
        except WorkloadRejected as rejected:
            decision = failed(observed, rejected.reason, rejected.message)
            await self._write_status(observed.request, decision.status)
        for event in decision.events:
            self.emit(body, event)
        return decision

    async def _write_status(self, request: RequestView, status: TrainingRequestStatus) -> None:
        if _dump(status) != _dump(request.status):
            await self.kube.patch_status(request.namespace, request.name, _dump(status))

    async def _execute_all(
        self, request: RequestView, batch: list[Action]
    ) -> tuple[Action, GkeError] | None:
        """Run `batch` at once; the GKE failure to act on, if any (others are raised): a
        terminal one before a retryable one, which another pass may clear."""
        results = await asyncio.gather(
            *(self._execute(request, action) for action in batch), return_exceptions=True
        )
        failures: list[tuple[Action, GkeError]] = []
        for action, result in zip(batch, results, strict=True):
            if isinstance(result, GkeError):
                log.warning("%s/%s: %s failed: %s", request.namespace, request.name, action, result)
                failures.append((action, result))
            elif isinstance(result, BaseException):
                raise result
        terminal = [f for f in failures if not f[1].retryable]
        chosen = terminal or failures
        return chosen[0] if chosen else None

    async def _execute(self, request: RequestView, action: Action) -> None:
        log.info("%s/%s: %s", request.namespace, request.name, type(action).__name__)
        match action:
            case CreateNodePool(name=name, plan=plan):
                labels = pool_labels(request.namespace, request.name, request.uid)
                policy = await self._workload_policy(plan)
                pool = render_node_pool(plan, name=name, labels=labels, workload_policy=policy)
                await self.gke.create(pool, request.uid)
            case ScaleNodePoolToZero(name=name):
                await self.gke.scale_to_zero(name)
            case DeleteNodePool(name=name):
                await self.gke.delete(name)
            case CreateService(manifest=manifest):
                await self.kube.create_service(manifest)
            case CreateJob(manifest=manifest) if manifest["kind"] == JOBSET_KIND:
                await self.kube.create_jobset(manifest)
            case CreateJob(manifest=manifest):
                await self.kube.create_job(manifest)
            case DeleteJob(name=name, kind=kind) if kind == JOBSET_KIND:
                await self.kube.delete_jobset(request.namespace, name)
            case DeleteJob(name=name):
                await self.kube.delete_job(request.namespace, name)
            case DeleteService(name=name):
                await self.kube.delete_service(request.namespace, name)

    async def _workload_policy(self, plan: SlicePlan) -> str | None:
        """The workload policy placing the slice (made or reused), when it needs one."""
        placement = plan.node_pool.placement_policy
        if placement is None or placement.type != "WORKLOAD_POLICY":
            return None
        if self._policies is None and self._connect_policies is not None:
            try:
                self._policies = self._connect_policies()
            except GoogleAuthError as error:
                raise GkeError(
                    retryable=False, reason="ComputeUnavailable", message=str(error)
                ) from error
        if self._policies is None or self.config.location is None:
            raise GkeError(
                retryable=False,
                reason="WorkloadPolicyUnavailable",
                message=f"{plan.accelerator} slices need a Compute workload policy, and this "
                "operator has no Compute client",
            )
        region = region_of(self.config.location)
        return await self._policies.ensure_workload_policy(region, placement.tpu_topology)

    async def _gke_failed(
        self, observed: Observed, decision: Decision, action: Action, error: GkeError
    ) -> Decision:
        """A GKE call failed after the client's retries: Failed if it never can succeed,
        otherwise say so in the status and try again after a pause."""
        request = observed.request
        if not error.retryable and isinstance(action, CreateNodePool):
            outcome = failed(observed, error.reason, error.message)
            await self._write_status(request, outcome.status)
            return outcome
        status = decision.status.model_copy(deep=True)
        kind = cond.NODE_POOL_READY if isinstance(action, CreateNodePool) else cond.SCALED_DOWN
        status.conditions = cond.set_condition(
            status.conditions,
            kind,
            "False",
            error.reason,
            error.message,
            observed.now,
            request.generation,
        )
        status.message = f"GKE {error.reason}: {error.message} (retrying)"
        await self._write_status(request, status)
        return Decision(
            status=status,
            requeue_after=GKE_BACKOFF_SECONDS,
            events=[*decision.events, Event("Warning", error.reason, error.message)],
        )
