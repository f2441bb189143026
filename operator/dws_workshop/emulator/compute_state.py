"""The emulated Compute Engine resource policies and the region operations that change them.

Time moves lazily, as in `ClusterManagerState`: every call first runs `advance`, which
moves operations whose time has come from PENDING to RUNNING to DONE and only then
applies their change. A policy is visible from its insert on, with status CREATING,
and READY once its operation is DONE (the states Compute's `ResourcePolicy.Status`
names); a failed insert removes it. Deleting marks it DELETING until its operation is
DONE. Compute refuses, at the call, to delete a policy that a resource still uses:
`users` answers that question, and the ClusterManager side (its node pools) sets it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from google.cloud import compute_v1

from dws_workshop.emulator.clock import PENDING_SHARE, now_rfc3339

COMPUTE_ROOT = "https://www.googleapis.com/compute/v1"
Operation = compute_v1.Operation
# mypy reads proto-plus enum members as plain ints; calling the enum gives typed members.
PENDING = Operation.Status(Operation.Status.PENDING)
RUNNING = Operation.Status(Operation.Status.RUNNING)
DONE = Operation.Status(Operation.Status.DONE)
CREATING = "CREATING"
READY = "READY"
DELETING = "DELETING"

#: (project, region, name) of a resource policy.
PolicyKey = tuple[str, str, str]
#: The resources (as Compute paths) that use a policy, given its key.
Users = Callable[[str, str, str], list[str]]


class ComputeApiError(Exception):
    """A Compute call answered with an HTTP error status and Google's JSON error body."""

    def __init__(self, status: int, reason: str, message: str, *, rule: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        #: The RULES.md id of the rule this answer enforces.
        self.rule = rule
        super().__init__(f"{status} {reason}: {message}")

    def body(self) -> dict[str, Any]:
        """`{"error": {code, message, errors: [{message, domain, reason}]}}`, as Compute answers."""
        return {
            "error": {
                "code": self.status,
                "message": self.message,
                "errors": [{"message": self.message, "domain": "global", "reason": self.reason}],
            }
        }


def not_found(resource: str) -> ComputeApiError:
    return ComputeApiError(
        404, "notFound", f"The resource '{resource}' was not found", rule="CE-NOT-FOUND"
    )


def already_exists(resource: str) -> ComputeApiError:
    return ComputeApiError(
        409, "alreadyExists", f"The resource '{resource}' already exists", rule="CE-ALREADY-EXISTS"
    )


def not_ready(resource: str) -> ComputeApiError:
    return ComputeApiError(
        400, "resourceNotReady", f"The resource '{resource}' is not ready", rule="CE-NOT-READY"
    )


def in_use(resource: str, user: str) -> ComputeApiError:
    # Compute's wording for any resource another one still references (disks, addresses...).
    return ComputeApiError(
        400,
        "resourceInUseByAnotherResource",
        f"The resource_policy resource '{resource}' is already being used by '{user}'",
        rule="CE-POLICY-IN-USE",
    )


@dataclass(frozen=True)
class OperationError:
    """How a region operation ends when it fails: its HTTP status, code and message."""

    http_status: int
    #: Compute's operation error code, e.g. `INTERNAL_ERROR` or `QUOTA_EXCEEDED`.
    code: str
    message: str


def policy_path(project: str, region: str, name: str) -> str:
    return f"projects/{project}/regions/{region}/resourcePolicies/{name}"


@dataclass
class PolicyRecord:
    project: str
    region: str
    #: What `get` answers: the policy as inserted plus the fields Compute fills in.
    policy: compute_v1.ResourcePolicy

    @property
    def path(self) -> str:
        return policy_path(self.project, self.region, self.policy.name)


@dataclass
class RegionOperationRecord:
    project: str
    region: str
    operation: Operation
    running_at: float
    done_at: float
    on_success: Callable[[], None]
    on_failure: Callable[[], None]
    error: OperationError | None = None

    @property
    def path(self) -> str:
        return f"projects/{self.project}/regions/{self.region}/operations/{self.operation.name}"

    @property
    def done(self) -> bool:
        return self.operation.status == DONE


class ComputeState:
    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.policies: dict[PolicyKey, PolicyRecord] = {}
        self.operations: list[RegionOperationRecord] = []
        self.users: Users = lambda project, region, name: []
        # Compute ids are 64-bit numbers; any unique ones will do.
        self._ids = itertools.count(7_000_000_000_000_000_001)

    def policy(self, project: str, region: str, name: str) -> PolicyRecord:
        record = self.policies.get((project, region, name))
        if record is None:
            raise not_found(policy_path(project, region, name))
        return record

    def region_policies(self, project: str, region: str) -> list[PolicyRecord]:
        return [r for (p, g, _), r in sorted(self.policies.items()) if (p, g) == (project, region)]

    def operation(self, project: str, region: str, name: str) -> RegionOperationRecord:
        for record in self.operations:
            if (record.project, record.region, record.operation.name) == (project, region, name):
                return record
        raise not_found(f"projects/{project}/regions/{region}/operations/{name}")

    def insert(
        self,
        project: str,
        region: str,
        policy: compute_v1.ResourcePolicy,
        latency: float,
        error: OperationError | None,
    ) -> Operation:
        key = (project, region, policy.name)
        path = policy_path(*key)
        if key in self.policies:
            raise already_exists(path)
        policy.kind = "compute#resourcePolicy"
        policy.id = next(self._ids)
        policy.creation_timestamp = now_rfc3339()
        policy.region = f"{COMPUTE_ROOT}/projects/{project}/regions/{region}"
        policy.self_link = f"{COMPUTE_ROOT}/{path}"
        policy.status = CREATING
        self.policies[key] = PolicyRecord(project, region, policy)

        def created() -> None:
            policy.status = READY

        def failed() -> None:
            self.policies.pop(key, None)

        return self._start("insert", project, region, policy, latency, created, failed, error)

    def delete(
        self, project: str, region: str, name: str, latency: float, error: OperationError | None
    ) -> Operation:
        record = self.policy(project, region, name)
        if record.policy.status != READY:
            raise not_ready(record.path)
        users = self.users(project, region, name)
        if users:
            raise in_use(record.path, users[0])
        policy = record.policy
        before = policy.status
        policy.status = DELETING

        def deleted() -> None:
            self.policies.pop((project, region, name), None)

        def failed() -> None:
            policy.status = before

        return self._start("delete", project, region, policy, latency, deleted, failed, error)

    def _start(
        self,
        kind: str,
        project: str,
        region: str,
        target: compute_v1.ResourcePolicy,
        latency: float,
        on_success: Callable[[], None],
        on_failure: Callable[[], None],
        error: OperationError | None,
    ) -> Operation:
        started = self.clock()
        number = next(self._ids)
        name = f"operation-{int(datetime.now(UTC).timestamp() * 1000)}-{number:016x}"
        region_link = f"{COMPUTE_ROOT}/projects/{project}/regions/{region}"
        operation = Operation(
            kind="compute#operation",
            id=number,
            name=name,
            operation_type=kind,
            target_link=target.self_link,
            target_id=str(target.id),
            status=PENDING,
            progress=0,
            user="emulator@dws-operator.invalid",
            insert_time=now_rfc3339(),
            self_link=f"{region_link}/operations/{name}",
            region=region_link,
        )
        self.operations.append(
            RegionOperationRecord(
                project=project,
                region=region,
                operation=operation,
                running_at=started + latency * PENDING_SHARE,
                done_at=started + latency,
                on_success=on_success,
                on_failure=on_failure,
                error=error,
            )
        )
        # Answered as made, PENDING: a copy taken before `advance`, which may already
        # move the record on if this thread lost the CPU since `started` was read.
        made: Operation = type(operation).deserialize(type(operation).serialize(operation))
        self.advance()
        return made

    def advance(self) -> None:
        """Move every operation whose time has come, oldest first."""
        now = self.clock()
        for record in self.operations:
            if record.done:
                continue
            if now >= record.done_at:
                self._finish(record)
            elif now >= record.running_at and record.operation.status == PENDING:
                record.operation.status = RUNNING
                record.operation.start_time = now_rfc3339()

    def _finish(self, record: RegionOperationRecord) -> None:
        operation = record.operation
        if not operation.start_time:
            operation.start_time = now_rfc3339()
        operation.status = DONE
        operation.progress = 100
        operation.end_time = now_rfc3339()
        error = record.error
        if error is None:
            record.on_success()
            return
        operation.error = compute_v1.Error(
            errors=[compute_v1.Errors(code=error.code, message=error.message)]
        )
        operation.http_error_status_code = error.http_status
        operation.http_error_message = _HTTP_PHRASES.get(error.http_status, "ERROR")
        record.on_failure()


_HTTP_PHRASES = {
    400: "BAD REQUEST",
    403: "FORBIDDEN",
    404: "NOT FOUND",
    409: "CONFLICT",
    412: "PRECONDITION FAILED",
    429: "TOO MANY REQUESTS",
    500: "INTERNAL SERVER ERROR",
    503: "SERVICE UNAVAILABLE",
    504: "GATEWAY TIMEOUT",
}
