"""A real HTTP server for the part of the Compute Engine REST API that workload policies need.

`resourcePolicies` insert, get, list and delete, and the region operations they start
(get and wait), at Compute's own paths (`/compute/v1/projects/P/regions/R/...`), with
Compute's JSON bodies and error shape. Bodies are read and written with the proto-plus
types of google-cloud-compute, so the unmodified `compute_v1` REST clients talk to it
exactly as they talk to Compute. Faults (seeded errors, latency, failing operations)
come from `EmulatorConfig.compute_faults`; every call is recorded. `answer` serves the
same methods without HTTP (the tests' in-process Compute, tests/fakes/compute.py).

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
from collections.abc import Awaitable, Callable, Mapping, Sequence
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

_ROOT = "/compute/v1"
_REGION = _ROOT + "/projects/{project}/regions/{region}"
_ZONE = _ROOT + "/projects/{project}/zones/{zone}"
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
#: A method's answer to a request, or its refusal (`ComputeApiError`).
Answer = Callable[[_Request], dict[str, Any]]


@dataclass(frozen=True)
class ComputeRoute:
    """One method at its path: `verb` and aiohttp's template under `/compute/v1`, each
    `{param}` one path segment."""

    verb: str
    path: str
    method: ComputeMethodName
    answer: Answer
    #: Answered once the operation is DONE, or after WAIT_LIMIT_SECONDS (`wait`).
    waits: bool = False

    def match(self, verb: str, parts: Sequence[str]) -> dict[str, str] | None:
        """The path's params if `verb` at `/compute/v1/<parts...>` is this route."""
        template = self.path.removeprefix(_ROOT + "/").split("/")
        if verb != self.verb or len(parts) != len(template):
            return None
        params: dict[str, str] = {}
        for part, pattern in zip(parts, template, strict=True):
            if pattern.startswith("{"):
                if not part:
                    return None
                params[pattern.strip("{}")] = part
            elif part != pattern:
                return None
        return params


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
        self._routes = self._table()

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
        adders = {"GET": app.router.add_get, "POST": app.router.add_post}
        adders["DELETE"] = app.router.add_delete
        for route in self._routes:
            adders[route.verb](route.path, self._serve(route))
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

    def _table(self) -> list[ComputeRoute]:
        """Every method served, at its path."""
        calendar = CalendarApi(self._state, self._lock, self._latency, self._operation_error)
        policies = f"{_REGION}/resourcePolicies"
        operations = f"{_REGION}/operations/{{name}}"
        bookings = f"{_ZONE}/futureReservations"
        booking = f"{bookings}/{{name}}"
        zone_operations = f"{_ZONE}/operations/{{name}}"
        return [
            ComputeRoute("POST", policies, "resourcePolicies.insert", self._insert),
            ComputeRoute("GET", policies, "resourcePolicies.list", self._list),
            ComputeRoute("GET", f"{policies}/{{name}}", "resourcePolicies.get", self._get),
            ComputeRoute("DELETE", f"{policies}/{{name}}", "resourcePolicies.delete", self._delete),
            ComputeRoute("GET", operations, "regionOperations.get", self._operation),
            ComputeRoute(
                "POST", f"{operations}/wait", "regionOperations.wait", self._operation, waits=True
            ),
            ComputeRoute("POST", bookings, "futureReservations.insert", calendar.insert),
            ComputeRoute("GET", bookings, "futureReservations.list", calendar.list),
            ComputeRoute("GET", booking, "futureReservations.get", calendar.get),
            ComputeRoute("DELETE", booking, "futureReservations.delete", calendar.delete),
            ComputeRoute("POST", f"{booking}/cancel", "futureReservations.cancel", calendar.cancel),
            ComputeRoute(
                "POST", f"{_REGION}/advice/calendarMode", "advice.calendarMode", calendar.advise
            ),
            ComputeRoute("GET", zone_operations, "zoneOperations.get", self._operation),
            ComputeRoute(
                "POST",
                f"{zone_operations}/wait",
                "zoneOperations.wait",
                self._operation,
                waits=True,
            ),
        ]

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

    def _insert(self, request: _Request) -> dict[str, Any]:
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

    def _get(self, request: _Request) -> dict[str, Any]:
        params = request.params
        validate_name("resourcePolicy", params["name"])
        with self._lock:
            record = self._state.policy(params["project"], params["region"], params["name"])
            return to_json(record.policy)

    def _list(self, request: _Request) -> dict[str, Any]:
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

    def _delete(self, request: _Request) -> dict[str, Any]:
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

    def _operation(self, request: _Request) -> dict[str, Any]:
        with self._lock:
            return to_json(self._find_operation(request).operation)

    @behaviour("CE-WAIT-LIMIT")
    async def _until_done(self, request: _Request) -> None:
        """Return once the operation is DONE, or after `WAIT_LIMIT_SECONDS` (then `wait`
        answers it as it stands); at once for one not found (`wait` answers 404)."""
        deadline = time.monotonic() + WAIT_LIMIT_SECONDS
        while True:
            with self._lock:
                self._state.advance()
                try:
                    record = self._find_operation(request)
                except ComputeApiError:
                    return
                if record.done or time.monotonic() >= deadline:
                    return
                remaining = record.done_at - self._clock()
            # Short naps, so a clock driven by hand (tests) is followed closely.
            await asyncio.sleep(min(max(remaining, 0.005), 0.25))

    def _find_operation(self, request: _Request) -> OperationRecord:
        params = request.params
        scope: Scope = "zones" if "zone" in params else "regions"
        location = params["zone"] if scope == "zones" else params["region"]
        return self._state.operation(params["project"], location, params["name"], scope)

    # Serving ----------------------------------------------------------------

    def _serve(self, route: ComputeRoute) -> Callable[[web.Request], Awaitable[web.Response]]:
        async def handle(http: web.Request) -> web.Response:
            started = self._clock()
            faults = compute_faults_for(self.config, route.method)
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
            try:
                lose = self._admit(route.method, request)
                if route.waits:
                    await self._until_done(request)
                response = route.answer(request)
            except ComputeApiError as error:
                status, body = self._refused(route.method, request, error, started)
            else:
                status, body = self._answered(route.method, request, response, lose, started)
            return web.json_response(body, status=status)

        return handle

    def answer(
        self,
        verb: str,
        path: Sequence[str],
        *,
        query: Mapping[str, str] | None = None,
        text: str = "",
    ) -> tuple[int, dict[str, Any]]:
        """`verb` at `/compute/v1/<path...>` (each part one path segment, unquoted)
        with the body `text` answered as served (faults, rules, the call log), without
        HTTP: (HTTP status, JSON body). The tests' in-process Compute calls it, from the
        worker thread each of the operator's Compute calls runs in.

        Unlike the served method, a `wait` answers its operation at once as it stands,
        DONE or not (Compute's wait may answer before the operation is done; a worker
        thread cannot wait on an event loop's virtual clock); and a fault's
        `latency_seconds` is refused (ValueError), for the same reason."""
        found = next(
            ((r, params) for r in self._routes if (params := r.match(verb, path)) is not None),
            None,
        )
        if found is None:
            error = _unknown_url("/".join([_ROOT, *path]))
            return error.status, error.body()
        route, params = found
        started = self._clock()
        faults = compute_faults_for(self.config, route.method)
        if faults.latency_seconds:
            raise ValueError(f"{route.method}: latency_seconds is not served in process")
        request = _Request(
            params=params,
            query=dict(query or {}),
            text=text,
            faults=faults,
            body=_json_or_none(text),
        )
        # Under the lock throughout: one call at a time, as on the served event loop,
        # whichever threads call.
        with self._lock:
            try:
                lose = self._admit(route.method, request)
                response = route.answer(request)
            except ComputeApiError as error:
                return self._refused(route.method, request, error, started)
            return self._answered(route.method, request, response, lose, started)

    def _admit(self, method: ComputeMethodName, request: _Request) -> bool:
        """Before the method answers: whether its answer is to be lost, then an injected
        error or the location's refusal (raised); True when the answer is to be lost."""
        faults = request.faults
        with self._lock:
            lose = self._answers_lost[method] < faults.lost_answers
            if lose:
                self._answers_lost[method] += 1
            if not lose and self._draw(method, faults.error_rate):
                raise _injected(method, faults)
            params = request.params
            if "zone" in params:
                validate_location(params["project"], params["zone"].rsplit("-", 1)[0])
                validate_zone(params["zone"])
            else:
                validate_location(params["project"], params["region"])
            self._state.advance()
        return lose

    def _refused(
        self, method: str, request: _Request, error: ComputeApiError, started: float
    ) -> tuple[int, dict[str, Any]]:
        self._record(method, request, error.status, error, None, started)
        return error.status, error.body()

    def _answered(
        self,
        method: str,
        request: _Request,
        response: dict[str, Any],
        lose: bool,
        started: float,
    ) -> tuple[int, dict[str, Any]]:
        if lose or self._draw(f"{method}:lost", request.faults.lost_answer_rate):
            # Done, but the caller never hears: a gateway timeout, as a load balancer
            # answers when the backend took too long.
            lost = ComputeApiError(
                504, "deadlineExceeded", "Deadline exceeded", rule="EMU-FAULT-INJECTED"
            )
            self._record(method, request, lost.status, lost, response, started)
            return lost.status, lost.body()
        self._record(method, request, 200, None, response, started)
        return 200, response

    async def _unknown(self, http: web.Request) -> web.Response:
        error = _unknown_url(http.path)
        return web.json_response(error.body(), status=error.status)

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


def _unknown_url(path: str) -> ComputeApiError:
    return ComputeApiError(
        404,
        "notFound",
        f"The requested URL {path} was not found on this server.",
        rule="CE-UNKNOWN-URL",
    )


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
