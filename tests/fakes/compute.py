"""Compute Engine's REST API answered in process, for the virtual tier: the operator's
`ComputeApis` (operator/dws_operator/gke/compute_rest.py) over a session whose `call`
hands the request to the Compute emulator's own methods (`ComputeEmulator.answer`: its
rules, faults, operations and call log), with no HTTP between. An error status raises
what `ComputeSession.call` raises for it. tests/gke/test_compute_in_process.py holds it
to the served emulator behind the real session, call by call.

The operator runs each Compute call in a worker thread (`call_compute`), as it runs the
real session's blocking HTTP; `answer` runs there too, under the emulator's lock, and
returns at once. So a `wait` answers its operation as it stands (DONE or not: Compute's
wait may answer early, and the operator asks again after a pause on its own clock), and
a fault's `latency_seconds` is refused: a worker thread cannot wait on looptime's
virtual clock (while the thread runs, the loop waits for it in real time).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import requests
from google.api_core import exceptions as core_exceptions

from dws_operator.gke.compute_rest import (
    Advice,
    ComputeApis,
    FutureReservations,
    RegionOperations,
    ResourcePolicies,
)
from dws_workshop.emulator import ComputeEmulator

__all__ = ["ENDPOINT", "InProcessSession", "in_process_compute"]

#: The endpoint the in-process session's URLs (in its errors' messages) name.
ENDPOINT = "http://compute.in-process"


class InProcessSession:
    """A `ComputeTransport` answered by `emulator`; the emulator need not be serving."""

    def __init__(self, emulator: ComputeEmulator) -> None:
        self.emulator = emulator
        self.root = ENDPOINT + "/compute/v1"

    def call(
        self,
        verb: str,
        *path: str,
        timeout: float,
        body: dict[str, Any] | None = None,
        query: dict[str, str] | None = None,
    ) -> dict[str, Any]:
        """As `ComputeSession.call`: the JSON object answered, or `GoogleAPICallError`
        (its subclass for the status) for an error status. `timeout` is not needed:
        the answer comes at once."""
        # The body as requests sends it (`json=`), read back by the emulator.
        text = json.dumps(body, allow_nan=False) if body is not None else ""
        status, answer = self.emulator.answer(verb, path, query=query, text=text)
        # A copy, as read off the wire: not the object the emulator's call log holds.
        wire = json.dumps(answer).encode()
        if status >= 400:
            url = "/".join([self.root, *(quote(part, safe="") for part in path)])
            raise core_exceptions.from_http_response(  # type: ignore[no-untyped-call]
                _response(verb, url, query, status, wire)
            )
        read: dict[str, Any] = json.loads(wire)
        return read

    def close(self) -> None:
        return None


def _response(
    verb: str, url: str, query: dict[str, str] | None, status: int, content: bytes
) -> requests.Response:
    """The `requests.Response` the real session gets for an error answer (the request
    with its query, as `ComputeSession.call` sends it)."""
    response = requests.Response()
    response.status_code = status
    response.reason = HTTPStatus(status).phrase
    response.headers["Content-Type"] = "application/json; charset=utf-8"
    response._content = content
    response.encoding = "utf-8"
    response.request = requests.Request(verb, url, params=query).prepare()
    response.url = str(response.request.url)
    return response


def in_process_compute(emulator: ComputeEmulator) -> ComputeApis:
    """What `connect_compute(endpoint)` returns, over `emulator` in process."""
    session = InProcessSession(emulator)
    return ComputeApis(
        ResourcePolicies(session),
        RegionOperations(session),
        FutureReservations(session),
        Advice(session),
        session,
    )
