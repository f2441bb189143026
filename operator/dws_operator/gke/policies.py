"""Compute Engine workload policies, which place Ironwood (tpu7x) multi-host TPU slices.

GKE builds a tpu7x slice of more than one VM only around a workload policy: a Compute
resource policy `{workloadPolicy: {type: HIGH_THROUGHPUT, acceleratorTopology: 2x2x2}}`
in the cluster's region, named by the node pool's `placement_policy.policy_name` (GKE
concepts/tpu-ironwood; render.py's `workload_policy`). This module makes sure the policy
exists before the pool is created.

One policy per (region, topology), named `dws-high-throughput-<topology>`. Sharing is
safe because a workload policy holds nothing but its type and topology and cannot be
changed once created, so two slices of one topology need exactly the same policy; the
name says all it holds, and the count stays bounded by the topologies in use. Policies
are never deleted here: another pool, perhaps another TrainingRequest's, may be using
one. (Compute itself refuses to delete a policy in use, but a pool being created at the
same moment could still lose its policy between the check and its creation.)

Compute's methods are blocking HTTP calls (compute_rest.py), so every call runs in a
worker thread. As in client.py, each call goes through one bounded `RetryPolicy`;
failures surface as classified `GkeError`s (compute_errors.py).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from dws_operator.gke.compute_errors import COMPUTE_ERRORS, classify_compute, classify_operation
from dws_operator.gke.compute_rest import ComputeApis, RegionalName
from dws_operator.gke.compute_types import (
    InsertResourcePolicyRequest,
    Operation,
    ResourcePolicy,
    WorkloadPolicy,
)
from dws_operator.gke.errors import GkeError
from dws_operator.gke.retry import PollPolicy, RetryPolicy
from dws_operator.naming import workload_policy_name

WORKLOAD_POLICY_TYPE = "HIGH_THROUGHPUT"
#: Compute's `wait` answers within about two minutes, DONE or not.
WAIT_CALL_TIMEOUT = 150.0

#: Each `wait` is one attempt: `WorkloadPolicyClient.wait` rides out its failures.
_ONCE = RetryPolicy(attempts=1)

T = TypeVar("T")
R = TypeVar("R")


def desired_policy(topology: str) -> ResourcePolicy:
    return ResourcePolicy(
        name=workload_policy_name(topology),
        description=f"dws-operator: TPU slices of topology {topology}",
        workload_policy=WorkloadPolicy(type_=WORKLOAD_POLICY_TYPE, accelerator_topology=topology),
    )


def insert_policy_request(project: str, region: str, topology: str) -> InsertResourcePolicyRequest:
    """The insert of the workload policy for `topology` (`dws-operator plan --objects`
    prints it as sent)."""
    return InsertResourcePolicyRequest(
        project=project, region=region, resource_policy_resource=desired_policy(topology)
    )


def mismatch(policy: ResourcePolicy, topology: str) -> str | None:
    """Why `policy` cannot place slices of `topology`; None when it can."""
    workload = policy.workload_policy
    if workload is None:
        return "it is not a workload policy"
    if workload.type_ != WORKLOAD_POLICY_TYPE:
        return f"its type is {workload.type_ or 'unset'}, not {WORKLOAD_POLICY_TYPE}"
    if workload.accelerator_topology != topology:
        found = workload.accelerator_topology or "unset"
        return f"its accelerator topology is {found}, not {topology}"
    if workload.accelerator_topology_mode not in ("", "AUTO_CONNECT"):
        # PROVISION_ONLY leaves the chips unconnected (super-slicing): not a plain slice.
        return f"its accelerator topology mode is {workload.accelerator_topology_mode}"
    if workload.max_topology_distance:
        return f"it sets maxTopologyDistance {workload.max_topology_distance}"
    return None


@dataclass
class WorkloadPolicyClient:
    """Make sure the workload policy for a TPU topology exists in a region of `project`."""

    apis: ComputeApis
    project: str
    call_timeout: float = 30.0
    poll: PollPolicy = field(default_factory=lambda: PollPolicy(timeout=600.0))
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    #: Called before every attempt (as `NodePoolClient.guard`).
    guard: Callable[[], None] | None = None
    #: The monotonic time of the operation's deadline and pauses.
    clock: Callable[[], float] = time.monotonic
    #: The retries' jitter.
    rng: Callable[[], float] = random.random
    _locks: dict[tuple[str, str], asyncio.Lock] = field(
        default_factory=dict, init=False, repr=False
    )

    async def ensure_workload_policy(self, region: str, topology: str) -> str:
        """The name of the READY workload policy for `topology` in `region`, made if missing.

        Idempotent: an existing policy of that name is used when it holds exactly this
        type and topology; one that holds anything else is a terminal
        `WorkloadPolicyConflict` (the operator never changes or replaces it). A policy
        still being created or deleted (by a concurrent call) is a retryable
        `WorkloadPolicyNotReady`.
        """
        name = workload_policy_name(topology)
        lock = self._locks.setdefault((region, name), asyncio.Lock())
        # Concurrent reconciles of one topology share one insert instead of racing.
        async with lock:
            existing = await self.get(region, name)
            if existing is not None:
                return self._adopt(region, existing, topology)
            request = insert_policy_request(self.project, region, topology)
            try:
                operation = await self.call(self.apis.policies.insert, request)
            except GkeError as error:
                if error.reason != "AlreadyExists":
                    raise
                # Made meanwhile (another operator, or a retry after a lost reply).
                return await self._adopt_existing(region, name, topology)
            done = await self.wait(region, operation)
            if done.error.errors:
                failure = classify_operation(done)
                if failure.reason != "AlreadyExists":
                    raise failure
                return await self._adopt_existing(region, name, topology)
            return name

    async def get(self, region: str, name: str) -> ResourcePolicy | None:
        """The policy, or None if there is none of that name in `region`."""
        try:
            return await self.call(self.apis.policies.get, RegionalName(self.project, region, name))
        except GkeError as error:
            if error.code == grpc.StatusCode.NOT_FOUND:
                return None
            raise

    async def wait(self, region: str, operation: Operation) -> Operation:
        """Wait (Compute's `wait`, which answers within ~2 min) until `operation` is DONE.

        Each `wait` is one attempt cut at the deadline; transient errors are ridden out
        until then. Past `poll.timeout` a retryable `OperationTimeout` is raised: the
        operation keeps running in Compute and a later `ensure_workload_policy` finds
        its policy.
        """
        deadline = self.clock() + self.poll.timeout
        delay = self.poll.initial_delay
        current = operation
        request = RegionalName(self.project, region, operation.name)
        while not current.done:
            remaining = deadline - self.clock()
            if remaining <= 0:
                raise GkeError(
                    retryable=True,
                    reason="OperationTimeout",
                    message=f"operation {operation.name} still {current.status or 'PENDING'} "
                    f"after {self.poll.timeout:g}s",
                )
            asked = self.clock()
            try:
                current = await self.call(
                    self.apis.operations.wait,
                    request,
                    timeout=min(WAIT_CALL_TIMEOUT, remaining),
                    retry=_ONCE,
                )
            except GkeError as error:
                if not error.retryable:
                    raise
            if not current.done and self.clock() - asked < delay:
                # A wait that failed or answered early: pause rather than spin on it.
                await asyncio.sleep(min(delay, max(deadline - self.clock(), 0)))
                delay = min(delay * self.poll.multiplier, self.poll.max_delay)
        return current

    async def call(
        self,
        method: Callable[[R, float], T],
        request: R,
        *,
        timeout: float | None = None,
        retry: RetryPolicy | None = None,
    ) -> T:
        """One Compute call (`call_compute`). Retrying an insert is safe: if a lost reply
        hid a success, the retry gets 409 and `ensure_workload_policy` adopts the policy."""
        return await call_compute(
            method,
            request,
            timeout=self.call_timeout if timeout is None else timeout,
            retry=retry or self.retry,
            guard=self.guard,
            rng=self.rng,
        )

    async def _adopt_existing(self, region: str, name: str, topology: str) -> str:
        existing = await self.get(region, name)
        if existing is None:
            raise GkeError(
                retryable=True,
                reason="WorkloadPolicyNotReady",
                message=f"workload policy {self._path(region, name)} was deleted while being "
                "created again",
            )
        return self._adopt(region, existing, topology)

    def _adopt(self, region: str, policy: ResourcePolicy, topology: str) -> str:
        path = self._path(region, policy.name)
        why = mismatch(policy, topology)
        if why is not None:
            raise GkeError(
                retryable=False,
                reason="WorkloadPolicyConflict",
                message=f"resource policy {path} exists but cannot place {topology} TPU "
                f"slices: {why}; delete or rename it",
                code=grpc.StatusCode.ALREADY_EXISTS,
            )
        if policy.status != "READY":
            raise GkeError(
                retryable=True,
                reason="WorkloadPolicyNotReady",
                message=f"workload policy {path} is {policy.status or 'not READY'}",
            )
        return policy.name

    def _path(self, region: str, name: str) -> str:
        return f"projects/{self.project}/regions/{region}/resourcePolicies/{name}"


async def call_compute(
    method: Callable[[R, float], T],
    request: R,
    *,
    timeout: float,
    retry: RetryPolicy,
    guard: Callable[[], None] | None,
    rng: Callable[[], float] = random.random,
) -> T:
    """One Compute call in a worker thread: timeout, classification, bounded retries."""
    pauses = retry.delays()

    def run() -> T:
        # Asked in the worker thread, right before the call: a call queued for a free
        # thread must not go out after the Lease was lost meanwhile.
        if guard is not None:
            guard()
        return method(request, timeout)

    for attempt in range(len(pauses) + 1):
        if guard is not None:
            guard()
        try:
            return await asyncio.to_thread(run)
        except COMPUTE_ERRORS as error:
            classified = classify_compute(error)
            if not classified.retryable or attempt == len(pauses):
                raise classified from error
        pause = pauses[attempt]
        await asyncio.sleep(pause * (1 - retry.jitter * rng()))
    raise AssertionError("unreachable: the last attempt returns or raises")
