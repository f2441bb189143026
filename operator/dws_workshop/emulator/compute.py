"""A real HTTP server for the part of the Compute Engine REST API that workload policies need.

`resourcePolicies` insert, get, list and delete, and the region operations they start
(get and wait), at Compute's own paths (`/compute/v1/projects/P/regions/R/...`), with
Compute's JSON bodies and error shape. Bodies are read and written with the proto-plus
types of google-cloud-compute, so the unmodified `compute_v1` REST clients talk to it
exactly as they talk to Compute. Faults (seeded errors, latency, failing operations)
come from `EmulatorConfig.compute_faults`; every call is recorded.

It shares its state and lock with the ClusterManager emulator, which serves both: a
node pool can name a policy only if this side holds it, and this side refuses to
delete a policy a node pool still uses.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import web
from google.cloud import compute_v1

from dws_workshop.emulator.calendar_rules import Window, validate_zone
from dws_workshop.emulator.calllog import CallLog
from dws_workshop.emulator.compute_api import (
    COMPUTE_ROOT,
    ComputeApiError,
    ComputeRequest,
    page_bounds,
    parse_body,
    to_json,
)
from dws_workshop.emulator.compute_calendar import CalendarApi
from dws_workshop.emulator.compute_rules import validate_location, validate_name, validate_policy
from dws_workshop.emulator.compute_state import ComputeState, OperationError, OperationRecord, Scope
from dws_workshop.emulator.config import (
    CalendarReview,
    ComputeMethodName,
    EmulatorConfig,
    MethodFaults,
    compute_faults_for,
)
from dws_workshop.emulator.ruleids import behaviour

_REGION = "/compute/v1/projects/{project}/regions/{region}"
_ZONE = "/compute/v1/projects/{project}/zones/{zone}"
#: Compute's `wait` returns when the operation is DONE or after about two minutes.
WAIT_LIMIT_SECONDS = 120.0
#: A fault's gRPC code name -> the HTTP status, error reason and operation error code
#: Compute uses for the same kind of failure.
_FAULTS: dict[str, tuple[int, str, str]] = {
    "INVALID_ARGUMENT": (400, "invalid", "INVALID_FIELD_VALUE"),
    "OUT_OF_RANGE": (400, "invalid", "INVALID_FIELD_VALUE"),
    "FAILED_PRECONDITION": (412, "conditionNotMet", "CONDITION_NOT_MET"),
    "UNAUTHENTICATED": (401, "required", "UNAUTHENTICATED"),
    "PERMISSION_DENIED": (403, "forbidden", "FORBIDDEN"),
    "NOT_FOUND": (404, "notFound", "RESOURCE_NOT_FOUND"),
    "ALREADY_EXISTS": (409, "alreadyExists", "RESOURCE_ALREADY_EXISTS"),
    "ABORTED": (409, "aborted", "ABORTED"),
    "RESOURCE_EXHAUSTED": (429, "rateLimitExceeded", "RATE_LIMIT_EXCEEDED"),
    "CANCELLED": (499, "cancelled", "CANCELLED"),
    "UNIMPLEMENTED": (501, "notImplemented", "NOT_IMPLEMENTED"),
    "INTERNAL": (500, "backendError", "INTERNAL_ERROR"),
    "UNKNOWN": (500, "backendError", "INTERNAL_ERROR"),
    "DATA_LOSS": (500, "backendError", "INTERNAL_ERROR"),
    "UNAVAILABLE": (503, "backendError", "SERVICE_UNAVAILABLE"),
    "DEADLINE_EXCEEDED": (504, "deadlineExceeded", "DEADLINE_EXCEEDED"),
}


class ComputeBindError(OSError):
    """The Compute API's port could not be bound."""


@dataclass(frozen=True)
class ComputeCall:
    """One HTTP request as the emulator saw it."""

    method: str
    #: project, region and the resource or operation name, from the path.
    params: dict[str, str]
    query: dict[str, str]
    body: dict[str, Any] | None
    #: The HTTP status answered; the reason and message are empty on success.
    status: int
    reason: str
    message: str
    response: dict[str, Any] | None
    started: float
    duration: float

    @property
    def ok(self) -> bool:
        return self.status < 400


_Request = ComputeRequest
Answer = Callable[[_Request], Awaitable[dict[str, Any]]]


class ComputeEmulator(CallLog[ComputeCall]):
    """The emulated Compute resource-policies API on `http://host:port`.

    Started and stopped by `ClusterManagerEmulator`, with whose state and lock it is
    built; `endpoint` is what `compute_v1` clients take as `api_endpoint`.
    """

    def __init__(
        self,
        config: EmulatorConfig,
        state: ComputeState,
        lock: threading.RLock,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.host = host
        self.port = port
        self._state = state
        self._lock = lock
        self._clock = clock
        self._rngs: dict[str, random.Random] = {}
        #: Answers lost so far under each method's `lost_answers` (since set_faults).
        self._answers_lost: Counter[str] = Counter()
        CallLog.__init__(self, lock)
        self._runner: web.AppRunner | None = None

    # Lifecycle --------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        if self._runner is None:
            raise RuntimeError("the Compute emulator is not serving; start it first")
        return f"http://{self.host}:{self.port}"

    async def start(self) -> None:
        if self._runner is not None:
            raise RuntimeError("the Compute emulator is already serving")
        app = web.Application()
        policies = f"{_REGION}/resourcePolicies"
        operations = f"{_REGION}/operations/{{name}}"
        app.router.add_post(policies, self._route("resourcePolicies.insert", self._insert))
        app.router.add_get(policies, self._route("resourcePolicies.list", self._list))
        app.router.add_get(f"{policies}/{{name}}", self._route("resourcePolicies.get", self._get))
        app.router.add_delete(
            f"{policies}/{{name}}", self._route("resourcePolicies.delete", self._delete)
        )
        app.router.add_get(operations, self._route("regionOperations.get", self._operation))
        app.router.add_post(f"{operations}/wait", self._route("regionOperations.wait", self._wait))
        calendar = CalendarApi(self._state, self._lock, self._latency, self._operation_error)
        bookings = f"{_ZONE}/futureReservations"
        booking = f"{bookings}/{{name}}"
        zone_operations = f"{_ZONE}/operations/{{name}}"
        app.router.add_post(bookings, self._route("futureReservations.insert", calendar.insert))
        app.router.add_get(bookings, self._route("futureReservations.list", calendar.list))
        app.router.add_get(booking, self._route("futureReservations.get", calendar.get))
        app.router.add_delete(booking, self._route("futureReservations.delete", calendar.delete))
        app.router.add_post(
            f"{booking}/cancel", self._route("futureReservations.cancel", calendar.cancel)
        )
        app.router.add_post(
            f"{_REGION}/advice/calendarMode", self._route("advice.calendarMode", calendar.advise)
        )
        app.router.add_get(zone_operations, self._route("zoneOperations.get", self._operation))
        app.router.add_post(
            f"{zone_operations}/wait", self._route("zoneOperations.wait", self._wait)
        )
        app.router.add_route("*", "/{tail:.*}", self._unknown)
        # A `wait` in flight must not hold up shutdown for aiohttp's default minute.
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, self.host, self.port, reuse_port=False)
            await site.start()
        except OSError as error:
            await runner.cleanup()
            raise ComputeBindError(f"cannot bind {self.host}:{self.port}: {error}") from error
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # Call log, faults and state --------------------------------------------

    def set_faults(self, method: ComputeMethodName, faults: MethodFaults | None) -> None:
        with self._lock:
            self._answers_lost.pop(method, None)
            if faults is None:
                self.config.compute_faults.pop(method, None)
            else:
                self.config.compute_faults[method] = faults

    def policy(self, project: str, region: str, name: str) -> compute_v1.ResourcePolicy | None:
        """The policy as `resourcePolicies.get` sees it now, or None."""
        with self._lock:
            self._state.advance()
            record = self._state.policies.get((project, region, name))
            return _clone(record.policy) if record else None

    def policies(self) -> list[tuple[str, str, compute_v1.ResourcePolicy]]:
        """Every policy, as (project, region, policy)."""
        with self._lock:
            self._state.advance()
            return [(p, r, _clone(rec.policy)) for (p, r, _), rec in self._state.policies.items()]

    def bookings(self) -> list[tuple[str, str, compute_v1.FutureReservation]]:
        """Every future reservation, as (project, zone, request), as `get` sees it now."""
        with self._lock:
            self._state.advance()
            return [
                (b.project, b.zone, _clone_booking(b.reservation))
                for b in self._state.calendar.bookings.values()
            ]

    def set_calendar_review(self, review: CalendarReview) -> None:
        """How Google's review answers requests submitted from now on."""
        with self._lock:
            self.config.calendar_review = review

    def reservation_window(self, project: str, zone: str, name: str) -> Window | None:
        """The window of `name` if a calendar-mode request here delivers it (whether it
        has started, is on or has ended); None for a reservation the emulator does not
        hold (one the test or the user made elsewhere)."""
        with self._lock:
            self._state.advance()
            for booking in self._state.calendar.bookings.values():
                if (booking.project, booking.zone, booking.delivered_name) == (project, zone, name):
                    return booking.window
            return None

    def reservation_active(self, project: str, zone: str, name: str) -> bool:
        """Whether `name` is a reservation a calendar-mode request delivered, in its window."""
        with self._lock:
            return self._state.calendar.active(project, zone, name) is not None

    # Methods ----------------------------------------------------------------

    async def _insert(self, request: _Request) -> dict[str, Any]:
        policy = parse_body(request, compute_v1.ResourcePolicy)
        validate_policy(policy)
        params = request.params
        with self._lock:
            operation = self._state.insert(
                params["project"],
                params["region"],
                policy,
                self._latency("resourcePolicies.insert"),
                self._operation_error("resourcePolicies.insert", request.faults),
            )
            return to_json(operation)

    async def _get(self, request: _Request) -> dict[str, Any]:
        params = request.params
        validate_name("resourcePolicy", params["name"])
        with self._lock:
            record = self._state.policy(params["project"], params["region"], params["name"])
            return to_json(record.policy)

    async def _list(self, request: _Request) -> dict[str, Any]:
        project, region = request.params["project"], request.params["region"]
        start, size = page_bounds(request)
        with self._lock:
            records = self._state.region_policies(project, region)
            page = records[start : start + size]
            answer: dict[str, Any] = {
                "kind": "compute#resourcePolicyList",
                "id": f"projects/{project}/regions/{region}/resourcePolicies",
                "items": [to_json(r.policy) for r in page],
                "selfLink": f"{COMPUTE_ROOT}/projects/{project}/regions/{region}/resourcePolicies",
            }
            if start + size < len(records):
                answer["nextPageToken"] = str(start + size)
            return answer

    async def _delete(self, request: _Request) -> dict[str, Any]:
        params = request.params
        validate_name("resourcePolicy", params["name"])
        with self._lock:
            operation = self._state.delete(
                params["project"],
                params["region"],
                params["name"],
                self._latency("resourcePolicies.delete"),
                self._operation_error("resourcePolicies.delete", request.faults),
            )
            return to_json(operation)

    async def _operation(self, request: _Request) -> dict[str, Any]:
        with self._lock:
            return to_json(self._find_operation(request).operation)

    @behaviour("CE-WAIT-LIMIT")
    async def _wait(self, request: _Request) -> dict[str, Any]:
        """Return once the operation is DONE, or after `WAIT_LIMIT_SECONDS` as it stands."""
        deadline = time.monotonic() + WAIT_LIMIT_SECONDS
        while True:
            with self._lock:
                self._state.advance()
                record = self._find_operation(request)
                if record.done or time.monotonic() >= deadline:
                    return to_json(record.operation)
                remaining = record.done_at - self._clock()
            # Short naps, so a clock driven by hand (tests) is followed closely.
            await asyncio.sleep(min(max(remaining, 0.005), 0.25))

    def _find_operation(self, request: _Request) -> OperationRecord:
        params = request.params
        scope: Scope = "zones" if "zone" in params else "regions"
        location = params["zone"] if scope == "zones" else params["region"]
        return self._state.operation(params["project"], location, params["name"], scope)

    # Serving ----------------------------------------------------------------

    def _route(
        self, method: ComputeMethodName, answer: Answer
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(http: web.Request) -> web.Response:
            started = self._clock()
            faults = compute_faults_for(self.config, method)
            text = await http.text() if http.can_read_body else ""
            request = _Request(
                params=dict(http.match_info),
                query=dict(http.query),
                text=text,
                faults=faults,
                body=_json_or_none(text),
            )
            if faults.latency_seconds:
                await asyncio.sleep(faults.latency_seconds)
            with self._lock:
                lose = self._answers_lost[method] < faults.lost_answers
                if lose:
                    self._answers_lost[method] += 1
            try:
                with self._lock:
                    if not lose and self._draw(method, faults.error_rate):
                        raise _injected(method, faults)
                    params = request.params
                    if "zone" in params:
                        validate_location(params["project"], params["zone"].rsplit("-", 1)[0])
                        validate_zone(params["zone"])
                    else:
                        validate_location(params["project"], params["region"])
                    self._state.advance()
                response = await answer(request)
            except ComputeApiError as error:
                self._record(method, request, error.status, error, None, started)
                return web.json_response(error.body(), status=error.status)
            if lose or self._draw(f"{method}:lost", faults.lost_answer_rate):
                # Done, but the caller never hears: a gateway timeout, as a load balancer
                # answers when the backend took too long.
                lost = ComputeApiError(
                    504, "deadlineExceeded", "Deadline exceeded", rule="EMU-FAULT-INJECTED"
                )
                self._record(method, request, lost.status, lost, response, started)
                return web.json_response(lost.body(), status=lost.status)
            self._record(method, request, 200, None, response, started)
            return web.json_response(response)

        return handle

    async def _unknown(self, http: web.Request) -> web.Response:
        error = ComputeApiError(
            404,
            "notFound",
            f"The requested URL {http.path} was not found on this server.",
            rule="CE-UNKNOWN-URL",
        )
        return web.json_response(error.body(), status=404)

    def _latency(self, method: str) -> float:
        latency = compute_faults_for(self.config, method).operation_latency_seconds
        if latency is not None:
            return latency
        if self.config.compute_operation_latency_seconds is not None:
            return self.config.compute_operation_latency_seconds
        return self.config.operation_latency_seconds

    def _operation_error(self, method: str, faults: MethodFaults) -> OperationError | None:
        if not self._draw(f"{method}:operation", faults.operation_error_rate):
            return None
        status, _, code = _FAULTS[faults.operation_error_code]
        return OperationError(status, code, faults.operation_error_message)

    def _draw(self, stream: str, rate: float) -> bool:
        # One RNG per stream, so faults on one method do not shift another's sequence.
        if rate <= 0:
            return False
        seed = f"{self.config.seed}:compute:{stream}"
        rng = self._rngs.setdefault(stream, random.Random(seed))
        return rng.random() < rate

    def _record(
        self,
        method: str,
        request: _Request,
        status: int,
        error: ComputeApiError | None,
        response: dict[str, Any] | None,
        started: float,
    ) -> None:
        call = ComputeCall(
            method=method,
            params=request.params,
            query=request.query,
            body=request.body,
            status=status,
            reason=error.reason if error else "",
            message=error.message if error else "",
            response=response,
            started=started,
            duration=self._clock() - started,
        )
        self.record(call)


def _injected(method: str, faults: MethodFaults) -> ComputeApiError:
    status, reason, _ = _FAULTS[faults.error_code]
    message = faults.error_message or f"{method}: {faults.error_code} injected by the emulator"
    return ComputeApiError(status, reason, message, rule="EMU-FAULT-INJECTED")


def _clone(policy: compute_v1.ResourcePolicy) -> compute_v1.ResourcePolicy:
    kind = compute_v1.ResourcePolicy
    return cast("compute_v1.ResourcePolicy", kind.deserialize(kind.serialize(policy)))


def _clone_booking(reservation: compute_v1.FutureReservation) -> compute_v1.FutureReservation:
    kind = compute_v1.FutureReservation
    return cast("compute_v1.FutureReservation", kind.deserialize(kind.serialize(reservation)))


def _json_or_none(text: str) -> dict[str, Any] | None:
    try:
        body = json.loads(text) if text.strip() else None
    except ValueError:
        return None
    return body if isinstance(body, dict) else None
