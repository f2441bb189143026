"""The emulated `futureReservations` methods (calendar mode) at Compute's own paths:
`/compute/v1/projects/P/zones/Z/futureReservations[/NAME[/cancel]]`.

insert (with `requestId`), get, list, cancel and delete; each change is a zone
operation, served by `ComputeEmulator` with the region ones. And the regional
`advice/calendarMode`: when a block can start (`calendar_advice.py`). The state and its rules
are `calendar.py`, `calendar_rules.py` and `compute_state.py`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from google.cloud import compute_v1

from dws_workshop.emulator.calendar_advice import advise, validate_advice
from dws_workshop.emulator.calendar_rules import validate_request_id
from dws_workshop.emulator.compute_api import (
    COMPUTE_ROOT,
    ComputeRequest,
    page_bounds,
    parse_body,
    to_json,
)
from dws_workshop.emulator.compute_rules import validate_name
from dws_workshop.emulator.compute_state import ComputeState, OperationError
from dws_workshop.emulator.config import MethodFaults

#: A change of one booking by (project, zone, name, latency, error): its operation.
Change = Callable[[str, str, str, float, OperationError | None], compute_v1.Operation]


class CalendarApi:
    """Handlers of the futureReservations methods, on the emulator's state and lock."""

    def __init__(
        self,
        state: ComputeState,
        lock: threading.RLock,
        latency: Callable[[str], float],
        operation_error: Callable[[str, MethodFaults], OperationError | None],
    ) -> None:
        self._state = state
        self._lock = lock
        self._latency = latency
        self._operation_error = operation_error

    def insert(self, request: ComputeRequest) -> dict[str, Any]:
        reservation = parse_body(request, compute_v1.FutureReservation)
        request_id = request.query.get("requestId", "")
        if request_id:
            validate_request_id(request_id)
        method = "futureReservations.insert"
        with self._lock:
            operation = self._state.insert_booking(
                request.params["project"],
                request.params["zone"],
                reservation,
                request_id,
                self._latency(method),
                self._operation_error(method, request.faults),
            )
            return to_json(operation)

    def get(self, request: ComputeRequest) -> dict[str, Any]:
        project, zone, name = _key(request)
        with self._lock:
            return to_json(self._state.calendar.booking(project, zone, name).reservation)

    def list(self, request: ComputeRequest) -> dict[str, Any]:
        project, zone = request.params["project"], request.params["zone"]
        start, size = page_bounds(request)
        link = f"{COMPUTE_ROOT}/projects/{project}/zones/{zone}/futureReservations"
        with self._lock:
            records = self._state.calendar.zone_bookings(project, zone)
            answer: dict[str, Any] = {
                "kind": "compute#futureReservationsListResponse",
                "id": f"projects/{project}/zones/{zone}/futureReservations",
                "items": [to_json(r.reservation) for r in records[start : start + size]],
                "selfLink": link,
            }
            if start + size < len(records):
                answer["nextPageToken"] = str(start + size)
            return answer

    def advise(self, request: ComputeRequest) -> dict[str, Any]:
        """advice.calendarMode: when and where a block can start (`calendar_advice`)."""
        body = parse_body(request, compute_v1.CalendarModeAdviceRequest)
        region = request.params["region"]
        with self._lock:
            calendar = self._state.calendar
            calendar.advance()
            now = calendar.now()
            ask = validate_advice(body, region, now)
            review = calendar.review()
            held = [*calendar.bookings.values(), *calendar.pending.values()]
            answer = advise(
                ask,
                region,
                [b for b in held if b.project == request.params["project"]],
                review.capacity,
                timedelta(seconds=review.advice_lead_seconds),
                now,
            )
            return to_json(answer)

    def cancel(self, request: ComputeRequest) -> dict[str, Any]:
        return self._change(request, "futureReservations.cancel", self._state.cancel_booking)

    def delete(self, request: ComputeRequest) -> dict[str, Any]:
        return self._change(request, "futureReservations.delete", self._state.delete_booking)

    def _change(self, request: ComputeRequest, method: str, change: Change) -> dict[str, Any]:
        """A change of one booking, answered with its zone operation."""
        project, zone, name = _key(request)
        with self._lock:
            latency = self._latency(method)
            operation = change(
                project, zone, name, latency, self._operation_error(method, request.faults)
            )
            return to_json(operation)


def _key(request: ComputeRequest) -> tuple[str, str, str]:
    validate_name("futureReservation", request.params["name"])
    return request.params["project"], request.params["zone"], request.params["name"]
