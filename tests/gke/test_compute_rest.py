"""The operator's Compute REST client (dws_operator.gke.compute_rest): the operator never
loads Google's Compute library (about 93 MiB), credentials reach Compute as a bearer token
refreshed on a 401, and Compute itself is the default endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from google.auth import credentials as auth_credentials

from dws_operator.gke import compute_rest
from dws_operator.gke.compute_rest import ComputeSession, RegionalName, ResourcePolicies
from dws_workshop.emulator import EmulatorConfig
from dws_workshop.emulator.config import CalendarReview
from tests.gke.harness import MakeEmulator

#: Run in a fresh interpreter: what `dws-operator run` imports, `plan --objects` for a
#: tpu7x slice, then a tpu7x slice's workload policy and a calendar block's advice and
#: booking read, against the emulator at argv[1].
SERVE_TPU7X = """
import asyncio, contextlib, io, json, sys
from datetime import UTC, datetime, timedelta

import dws_operator.controller.runtime
from dws_operator.cli import main
from dws_operator.gke import BookingClient, WorkloadPolicyClient, connect_compute
from dws_operator.reconcile import AdviceQuery

printed = io.StringIO()
with contextlib.redirect_stdout(printed):
    main(["plan", "--tpu", "tpu7x", "--topology", "2x2x2", "--project", "dws-sandbox",
          "--location", "us-east5", "--cluster", "c1", "--node-locations", "us-east5-a",
          "--objects", "-o", "json"])
[step] = json.loads(printed.getvalue())["steps"]

async def serve():
    apis = connect_compute(sys.argv[1])
    try:
        policy = await WorkloadPolicyClient(apis, "dws-sandbox").ensure_workload_policy(
            "us-east5", "2x2x2")
        now = datetime.now(UTC)
        query = AdviceQuery("us-east5-a", now + timedelta(days=2), now + timedelta(days=5),
                            timedelta(days=2), 4, "a3-highgpu-8g", None)
        bookings = BookingClient(apis, "dws-sandbox")
        advice = await bookings.advise(query)
        read = await bookings.read("us-east5-a", "dws-none", "uid")
        return policy, advice.window is not None, read
    finally:
        apis.close()

policy, window, read = asyncio.run(serve())
print(json.dumps({
    "planned": [p["resourcePolicyResource"]["name"] for p in step["workloadPolicies"]],
    "policy": policy,
    "window": window,
    "read": read,
    "compute": sorted(m for m in sys.modules if m.startswith("google.cloud.compute")),
}))
"""


def test_serving_tpu7x_never_loads_googles_compute_library(make_emulator: MakeEmulator) -> None:
    review = CalendarReview(review_seconds=600)
    config = EmulatorConfig(compute_operation_latency_seconds=0.05, calendar_review=review)
    emulator = make_emulator(config)
    done = subprocess.run(
        [sys.executable, "-c", SERVE_TPU7X, emulator.compute_endpoint],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {
        "planned": ["dws-high-throughput-2x2x2"],
        "policy": "dws-high-throughput-2x2x2",
        "window": True,
        "read": None,
        "compute": [],
    }
    assert [c.method for c in emulator.compute.calls if c.ok] == [
        "resourcePolicies.insert",
        "regionOperations.wait",
        "advice.calendarMode",
    ]


class Tokens(auth_credentials.Credentials):
    """Credentials that hand out `token-1`, `token-2`... one per refresh."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.issued = 0

    def refresh(self, request: Any) -> None:
        self.issued += 1
        self.token = f"token-{self.issued}"


class Recorder(BaseHTTPRequestHandler):
    """Answers 401 to `token-1` and a READY policy otherwise; records each request's path
    and Authorization header."""

    seen: list[tuple[str, str]]

    def do_GET(self) -> None:
        authorization = self.headers.get("Authorization", "")
        self.seen.append((self.path, authorization))
        if authorization == "Bearer token-1":
            status, body = 401, {"error": {"code": 401, "message": "expired"}}
        else:
            status, body = 200, {"name": "wp", "status": "READY"}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def recorder() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    seen: list[tuple[str, str]] = []
    handler = type("Handler", (Recorder,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_the_token_is_sent_and_refreshed_on_a_401(
    recorder: tuple[str, list[tuple[str, str]]],
) -> None:
    endpoint, seen = recorder
    credentials = Tokens()
    session = ComputeSession(endpoint, credentials)
    try:
        policy = ResourcePolicies(session).get(RegionalName("p", "us-east5", "wp"), 10.0)
    finally:
        session.close()
    assert (policy.name, policy.status) == ("wp", "READY")
    path = "/compute/v1/projects/p/regions/us-east5/resourcePolicies/wp"
    assert seen == [(path, "Bearer token-1"), (path, "Bearer token-2")]


def test_without_an_endpoint_compute_itself_with_default_credentials(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[Any] = []
    credentials = Tokens()

    def default(scopes: Any = None) -> tuple[auth_credentials.Credentials, str]:
        asked.append(scopes)
        return credentials, "a-project"

    monkeypatch.setattr(compute_rest.google.auth, "default", default)
    apis = compute_rest.connect_compute(None)
    try:
        assert isinstance(apis.session, ComputeSession)
        assert apis.session.root == "https://compute.googleapis.com/compute/v1"
    finally:
        apis.close()
    assert asked == [compute_rest.SCOPES]
