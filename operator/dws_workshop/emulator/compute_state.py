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
from typing import Literal

from google.cloud import compute_v1

from dws_workshop.emulator.calendar import CalendarState, future_reservation_path
from dws_workshop.emulator.calendar_rules import validate_future_reservation
from dws_workshop.emulator.clock import PENDING_SHARE, now_rfc3339
from dws_workshop.emulator.compute_api import (
    COMPUTE_ROOT,
    already_exists,
    in_use,
    not_found,
    not_ready,
)
from dws_workshop.emulator.config import CalendarReview
from dws_workshop.emulator.ruleids import behaviour

Operation = compute_v1.Operation
# mypy reads proto-plus enum members as plain ints; calling the enum gives typed members.
PENDING = Operation.Status(Operation.Status.PENDING)
RUNNING = Operation.Status(Operation.Status.RUNNING)
DONE = Operation.Status(Operation.Status.DONE)
CREATING = "CREATING"
READY = "READY"
DELETING = "DELETING"

Scope = Literal["regions", "zones"]
#: (project, region, name) of a resource policy.
PolicyKey = tuple[str, str, str]
#: The resources (as Compute paths) that use a policy, given its key.
Users = Callable[[str, str, str], list[str]]


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
class OperationRecord:
    """A region operation (resource policies) or a zone operation (future reservations)."""

    project: str
    #: The region or zone, as `scope` says.
    location: str
    operation: Operation
    running_at: float
    done_at: float
    on_success: Callable[[], None]
    on_failure: Callable[[], None]
    error: OperationError | None = None
    scope: Scope = "regions"
    #: The insert's `requestId`: a repeated one is answered with this operation.
    request_id: str = ""

    @property
    def path(self) -> str:
        return (
            f"projects/{self.project}/{self.scope}/{self.location}/operations/{self.operation.name}"
        )

    @property
    def done(self) -> bool:
        return self.operation.status == DONE


class ComputeState:
    def __init__(
        self,
        clock: Callable[[], float],
        calendar_now: Callable[[], datetime] = lambda: datetime.now(UTC),
        review: Callable[[], CalendarReview] = CalendarReview,
    ) -> None:
        self.clock = clock
        self.policies: dict[PolicyKey, PolicyRecord] = {}
        self.operations: list[OperationRecord] = []
        #: Future reservations in calendar mode, on the simulated clock.
        self.calendar = CalendarState(calendar_now, review)
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

    def operation(
        self, project: str, location: str, name: str, scope: Scope = "regions"
    ) -> OperationRecord:
        for record in self.operations:
            found = (record.project, record.scope, record.location, record.operation.name)
            if found == (project, scope, location, name):
                return record
        raise not_found(f"projects/{project}/{scope}/{location}/operations/{name}")

    @behaviour("CE-REQUEST-ID")
    def insert_booking(
        self,
        project: str,
        zone: str,
        reservation: compute_v1.FutureReservation,
        request_id: str,
        latency: float,
        error: OperationError | None,
    ) -> Operation:
        """Insert a calendar-mode request (checked already). A `requestId` seen before is
        answered with the operation it started, and nothing is inserted again."""
        self.advance()
        if request_id:
            for record in self.operations:
                if (record.project, record.request_id) == (project, request_id):
                    return _copy(record.operation)
        key = (project, zone, reservation.name)
        if self.calendar.taken(key):
            raise already_exists(future_reservation_path(*key))
        window = validate_future_reservation(reservation, zone, self.calendar.now())
        booking = self.calendar.add(project, zone, reservation, window, next(self._ids))

        def made() -> None:
            self.calendar.made(key)

        def failed() -> None:
            self.calendar.remove(key)

        return self._start(
            "insert",
            project,
            zone,
            booking.reservation,
            latency,
            made,
            failed,
            error,
            scope="zones",
            request_id=request_id,
        )

    def delete_booking(
        self, project: str, zone: str, name: str, latency: float, error: OperationError | None
    ) -> Operation:
        booking = self.calendar.check_delete(project, zone, name)
        key = booking.key
        return self._start(
            "delete",
            project,
            zone,
            booking.reservation,
            latency,
            lambda: self.calendar.remove(key),
            lambda: None,
            error,
            scope="zones",
        )

    def cancel_booking(
        self, project: str, zone: str, name: str, latency: float, error: OperationError | None
    ) -> Operation:
        booking = self.calendar.cancel(project, zone, name)
        return self._start(
            "cancel",
            project,
            zone,
            booking.reservation,
            latency,
            lambda: None,
            lambda: None,
            error,
            scope="zones",
        )

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
        location: str,
        target: compute_v1.ResourcePolicy | compute_v1.FutureReservation,
        latency: float,
        on_success: Callable[[], None],
        on_failure: Callable[[], None],
        error: OperationError | None,
        *,
        scope: Scope = "regions",
        request_id: str = "",
    ) -> Operation:
        started = self.clock()
        number = next(self._ids)
        name = f"operation-{int(datetime.now(UTC).timestamp() * 1000)}-{number:016x}"
        location_link = f"{COMPUTE_ROOT}/projects/{project}/{scope}/{location}"
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
            self_link=f"{location_link}/operations/{name}",
        )
        if scope == "zones":
            operation.zone = location_link
        else:
            operation.region = location_link
        self.operations.append(
            OperationRecord(
                project=project,
                location=location,
                scope=scope,
                request_id=request_id,
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
        made = _copy(operation)
        self.advance()
        return made

    def advance(self) -> None:
        """Move every operation whose time has come, oldest first; then the calendar."""
        self._advance_operations()
        self.calendar.advance()

    def _advance_operations(self) -> None:
        now = self.clock()
        for record in self.operations:
            if record.done:
                continue
            if now >= record.done_at:
                self._finish(record)
            elif now >= record.running_at and record.operation.status == PENDING:
                record.operation.status = RUNNING
                record.operation.start_time = now_rfc3339()

    def _finish(self, record: OperationRecord) -> None:
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


def _copy(operation: Operation) -> Operation:
    copied: Operation = type(operation).deserialize(type(operation).serialize(operation))
    return copied


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
