"""The Compute Engine REST methods the operator calls, over HTTP with google-auth.

Compute's generated Python library (google-cloud-compute's `compute_v1`) costs about
93 MiB of RSS once imported, for the handful of methods below; these are the same
calls at Compute's own paths (`/compute/v1/projects/P/regions/R/...`), with its JSON.

Each method is synchronous and blocking, as the library's were: `call_compute`
(policies.py) runs it in a worker thread under one bounded retry policy. Requests go
through google-auth's `AuthorizedSession` (a `requests.Session` that adds the
credentials' bearer token and refreshes it on a 401); TLS is requests' default. An
error answer is raised as google-api-core's exception for its HTTP status, with
Compute's `error.errors[]` (reason, message) kept, for compute_errors.py to classify.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

import google.auth
import requests
from google.api_core import exceptions as core_exceptions
from google.auth.credentials import AnonymousCredentials, Credentials
from google.auth.transport.requests import AuthorizedSession

from dws_operator.gke.compute_types import (
    CalendarModeAdviceResponse,
    CalendarModeAdviceRpcRequest,
    FutureReservation,
    InsertFutureReservationRequest,
    InsertResourcePolicyRequest,
    Operation,
    ResourcePolicy,
)

COMPUTE_ENDPOINT_ENV = "DWS_COMPUTE_ENDPOINT"
DEFAULT_ENDPOINT = "https://compute.googleapis.com"
#: What google-cloud-compute asked Application Default Credentials for.
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


class ComputeTransport(Protocol):
    """What the resources below call Compute through: `ComputeSession` (HTTP), or the
    tests' Compute answered in process (tests/fakes/compute.py)."""

    def call(
        self,
        verb: str,
        *path: str,
        timeout: float,
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]: ...

    def close(self) -> None: ...


class ComputeSession:
    """HTTP to one Compute endpoint with one set of credentials; shared by the resources
    below (and their worker threads, as requests' connection pool allows)."""

    def __init__(self, endpoint: str, credentials: Credentials) -> None:
        self.root = endpoint.rstrip("/") + "/compute/v1"
        self._http = AuthorizedSession(credentials)  # type: ignore[no-untyped-call]

    def call(
        self,
        verb: str,
        *path: str,
        timeout: float,
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """The JSON object Compute answers at `root/projects/...path`; an error status is
        raised as `GoogleAPICallError` (its subclass for the status)."""
        url = "/".join([self.root, *(quote(part, safe="") for part in path)])
        response: requests.Response = self._http.request(  # type: ignore[no-untyped-call]
            verb, url, json=body, params=query, timeout=timeout
        )
        if response.status_code >= 400:
            raise core_exceptions.from_http_response(response)  # type: ignore[no-untyped-call]
        answer = response.json()
        if not isinstance(answer, dict):
            raise ValueError(f"{verb} {url}: expected a JSON object, got {type(answer).__name__}")
        return answer

    def close(self) -> None:
        self._http.close()  # type: ignore[no-untyped-call]


@dataclass(frozen=True)
class RegionalName:
    """A regional resource (a resource policy, a region operation) by name."""

    project: str
    region: str
    name: str


@dataclass(frozen=True)
class ZonalName:
    """A zonal resource (a future reservation) by name."""

    project: str
    zone: str
    name: str


class ResourcePolicies:
    def __init__(self, session: ComputeTransport) -> None:
        self._session = session

    def insert(self, request: InsertResourcePolicyRequest, timeout: float) -> Operation:
        body = request.resource_policy_resource.wire()
        path = ("projects", request.project, "regions", request.region, "resourcePolicies")
        answer = self._session.call("POST", *path, body=body, timeout=timeout)
        return Operation.model_validate(answer)

    def get(self, policy: RegionalName, timeout: float) -> ResourcePolicy:
        path = ("projects", policy.project, "regions", policy.region, "resourcePolicies")
        answer = self._session.call("GET", *path, policy.name, timeout=timeout)
        return ResourcePolicy.model_validate(answer)


class RegionOperations:
    def __init__(self, session: ComputeTransport) -> None:
        self._session = session

    def wait(self, operation: RegionalName, timeout: float) -> Operation:
        """The operation once DONE, or as it stands after Compute's ~2 minutes."""
        path = ("projects", operation.project, "regions", operation.region, "operations")
        answer = self._session.call("POST", *path, operation.name, "wait", timeout=timeout)
        return Operation.model_validate(answer)


class FutureReservations:
    def __init__(self, session: ComputeTransport) -> None:
        self._session = session

    def insert(self, request: InsertFutureReservationRequest, timeout: float) -> Operation:
        body = request.future_reservation_resource.wire()
        query = {"requestId": request.request_id} if request.request_id else None
        path = ("projects", request.project, "zones", request.zone, "futureReservations")
        answer = self._session.call("POST", *path, body=body, query=query, timeout=timeout)
        return Operation.model_validate(answer)

    def get(self, booking: ZonalName, timeout: float) -> FutureReservation:
        path = ("projects", booking.project, "zones", booking.zone, "futureReservations")
        answer = self._session.call("GET", *path, booking.name, timeout=timeout)
        return FutureReservation.model_validate(answer)

    def cancel(self, booking: ZonalName, timeout: float) -> Operation:
        path = ("projects", booking.project, "zones", booking.zone, "futureReservations")
        answer = self._session.call("POST", *path, booking.name, "cancel", timeout=timeout)
        return Operation.model_validate(answer)


class Advice:
    def __init__(self, session: ComputeTransport) -> None:
        self._session = session

    def calendar_mode(
        self, request: CalendarModeAdviceRpcRequest, timeout: float
    ) -> CalendarModeAdviceResponse:
        body = request.calendar_mode_advice_request_resource.wire()
        path = ("projects", request.project, "regions", request.region, "advice", "calendarMode")
        answer = self._session.call("POST", *path, body=body, timeout=timeout)
        return CalendarModeAdviceResponse.model_validate(answer)


@dataclass
class ComputeApis:
    """The Compute methods the operator uses: workload policies (and their region
    operations) and calendar-mode bookings (future reservations). Close with `close()`."""

    policies: ResourcePolicies
    operations: RegionOperations
    bookings: FutureReservations
    #: Calendar-mode advice: when a block can start.
    advice: Advice
    session: ComputeTransport

    def close(self) -> None:
        self.session.close()


def connect_compute(endpoint: str | None = None) -> ComputeApis:
    """Compute itself, or the API served at `endpoint` (`http://host:port`).

    Without an endpoint: compute.googleapis.com over TLS with Application Default
    Credentials (`google.auth.DefaultCredentialsError` when there are none). With one
    (the emulator): that URL and anonymous credentials, so nothing looks for Google
    credentials.
    """
    credentials: Credentials
    if endpoint:
        credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
    else:
        credentials, _ = google.auth.default(scopes=SCOPES)
        endpoint = DEFAULT_ENDPOINT
    session = ComputeSession(endpoint, credentials)
    return ComputeApis(
        ResourcePolicies(session),
        RegionOperations(session),
        FutureReservations(session),
        Advice(session),
        session,
    )
