"""A real gRPC server for `google.container.v1.ClusterManager`, with faults on demand.

No generated code: generic method handlers (de)serialize with the proto-plus types of
google-cloud-container, so the unmodified client library talks to it over a real
channel exactly as it talks to GKE. Beside it, on its own port, the same emulator
serves the Compute resource policies node pools name (`compute.ComputeEmulator`).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import grpc
from google.cloud import container_v1

# googleapis-common-protos ships no type information.
from google.rpc import status_pb2  # type: ignore[import-untyped]

from dws_workshop.emulator.calllog import CallLog
from dws_workshop.emulator.clock import SimClock
from dws_workshop.emulator.compute import ComputeEmulator
from dws_workshop.emulator.compute_state import ComputeState
from dws_workshop.emulator.config import (
    DEFAULT_CLUSTER,
    EmulatorConfig,
    MethodFaults,
    MethodName,
    faults_for,
)
from dws_workshop.emulator.ratelimit import ProjectRateLimit, request_project
from dws_workshop.emulator.service import ClusterManagerService, Method, clone
from dws_workshop.emulator.state import ClusterManagerState, PoolRecord
from dws_workshop.emulator.status import ApiError

SERVICE_NAME = "google.container.v1.ClusterManager"

Handler = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class CallRecord:
    """One RPC as the emulator saw it."""

    method: str
    request: Any
    code: grpc.StatusCode
    #: The error message; empty for OK.
    message: str
    response: Any
    started: float
    duration: float
    #: Who called, as gRPC names the peer (`ipv4:127.0.0.1:PORT`).
    peer: str = ""

    @property
    def ok(self) -> bool:
        return self.code == grpc.StatusCode.OK


class ClusterManagerEmulator(CallLog[CallRecord]):
    """The emulated GKE API on `host`, a free port unless `port` is given.

    Use as `async with ClusterManagerEmulator(config) as emulator:`; `endpoint` is
    then `127.0.0.1:PORT`, and `compute_endpoint` (`http://127.0.0.1:PORT2`, a free
    port unless `compute_port` is given) serves Compute resource policies, with the
    call log and faults of `compute`. Thread-safe: the Python API may be used from a
    thread other than the one serving (see `EmulatorThread`).
    """

    def __init__(
        self,
        config: EmulatorConfig | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        compute_port: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config.model_copy(deep=True) if config else EmulatorConfig()
        self.host = host
        self.port = port
        self._clock = clock
        #: GKE's time as the emulator simulates it: `config.clock_factor` times real time.
        self.sim_clock = SimClock(self.config.clock_factor, clock, self.config.calendar_epoch)
        limit = self.config.api_rate_limit
        self._rate_limit = ProjectRateLimit(limit, self.sim_clock.now) if limit else None
        self._lock = threading.RLock()
        compute = ComputeState(clock, self.sim_clock.utc, lambda: self.config.calendar_review)
        self._state = ClusterManagerState(self.config, clock, compute)
        self.compute = ComputeEmulator(
            self.config, compute, self._lock, host=host, port=compute_port, clock=clock
        )
        self._service = ClusterManagerService(self._state, self.config)
        self._rngs: dict[str, random.Random] = {}
        #: Answers lost so far under each method's `lost_answers` (since set_faults).
        self._answers_lost: Counter[str] = Counter()
        CallLog.__init__(self, self._lock)
        self._server: grpc.aio.Server | None = None

    # Lifecycle --------------------------------------------------------------

    @property
    def endpoint(self) -> str:
        if self._server is None:
            raise RuntimeError("the emulator is not serving; start it first")
        return f"{self.host}:{self.port}"

    @property
    def compute_endpoint(self) -> str:
        """`http://host:port` of the Compute API, for `client_options.api_endpoint`."""
        return self.compute.endpoint

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError("the emulator is already serving")
        # gRPC sets SO_REUSEPORT by default: a second emulator on a taken port would
        # silently share it and answer half the calls.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        handlers = {
            name: grpc.unary_unary_rpc_method_handler(
                self.handler(method),
                request_deserializer=method.request_type.deserialize,
                response_serializer=method.response_type.serialize,
            )
            for name, method in self.service_methods().items()
        }
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(SERVICE_NAME, handlers),)
        )
        try:
            port = server.add_insecure_port(f"{self.host}:{self.port}")
        except RuntimeError as error:
            raise OSError(f"cannot bind {self.host}:{self.port}: {error}") from error
        if port == 0:
            raise OSError(f"cannot bind {self.host}:{self.port}")
        await server.start()
        try:
            await self.compute.start()
        except BaseException:
            await server.stop(None)
            raise
        self.port = port
        self._server = server

    async def stop(self, grace: float | None = None) -> None:
        server, self._server = self._server, None
        if server is not None:
            try:
                await self.compute.stop()
            finally:
                await server.stop(grace)

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()

    async def __aenter__(self) -> ClusterManagerEmulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # Faults and quota -------------------------------------------------------

    def set_faults(self, method: MethodName, faults: MethodFaults | None) -> None:
        with self._lock:
            self._answers_lost.pop(method, None)
            if faults is None:
                self.config.faults.pop(method, None)
            else:
                self.config.faults[method] = faults

    def set_quota(self, accelerator: str, amount: int | None) -> None:
        with self._lock:
            if amount is None:
                self._state.quotas.pop(accelerator, None)
            else:
                self._state.quotas[accelerator] = amount

    # State ------------------------------------------------------------------

    def node_pool(self, path: str) -> container_v1.NodePool | None:
        """The pool at `projects/P/locations/L/clusters/C/nodePools/N`, as GetNodePool sees it."""
        with self._lock:
            self._state.advance()
            record = self._pool_record(path)
            return clone(record.pool) if record else None

    def node_count(self, path: str) -> int:
        """Nodes the pool has now, across its zones (GKE's NodePool does not say)."""
        with self._lock:
            self._state.advance()
            record = self._pool_record(path)
            return record.node_count if record else 0

    def node_pools(self, cluster: str) -> list[tuple[container_v1.NodePool, int]]:
        """Every pool of `cluster`, as GetNodePool sees it, with its node count."""
        with self._lock:
            self._state.advance()
            record = self._state.clusters.get(cluster)
            pools = record.pools.values() if record else []
            return [(clone(p.pool), p.node_count) for p in pools]

    def set_node_count(self, path: str, count: int, expected: int | None = None) -> bool:
        """Record the nodes a pool has (the autoscaler's doing).

        False, and nothing changes, if the pool is gone or its count is no longer
        `expected` (a resize landed in between).
        """
        with self._lock:
            self._state.advance()
            record = self._pool_record(path)
            if record is None or (expected is not None and record.node_count != expected):
                return False
            record.node_count = count
            return True

    def operations(self) -> list[container_v1.Operation]:
        with self._lock:
            self._state.advance()
            return [clone(r.operation) for r in self._state.operations]

    def operations_in_flight(self, cluster: str = DEFAULT_CLUSTER) -> int:
        """The cluster's operations not yet DONE (PENDING or RUNNING) now."""
        with self._lock:
            self._state.advance()
            return self._state.cluster(cluster).in_flight

    def max_operations_in_flight(self, cluster: str = DEFAULT_CLUSTER) -> int:
        """The most operations the cluster has had in flight at once since it started."""
        with self._lock:
            return self._state.cluster(cluster).max_in_flight

    def refusals(self, code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED) -> Counter[str]:
        """Calls answered with `code`, per method (the concurrent-operations quota's and
        the rate limit's RESOURCE_EXHAUSTED by default), from the call log."""
        return Counter(c.method for c in self.calls if c.code == code)

    def _pool_record(self, path: str) -> PoolRecord | None:
        cluster_path, _, name = path.partition("/nodePools/")
        cluster = self._state.clusters.get(cluster_path)
        return cluster.pools.get(name) if cluster else None

    # Serving ----------------------------------------------------------------

    def _draw(self, stream: str, rate: float) -> bool:
        # One RNG per stream, so faults on one method do not shift another's sequence.
        if rate <= 0:
            return False
        rng = self._rngs.setdefault(stream, random.Random(f"{self.config.seed}:{stream}"))
        return rng.random() < rate

    def service_methods(self) -> dict[str, Method]:
        """The ClusterManager methods served, by GKE's name (CreateNodePool, ...)."""
        return self._service.methods()

    def handler(self, method: Method) -> Handler:
        """`method` answered as served: faults, quota, the call log; a refusal through
        `context.abort`. The tests' in-process client calls it without gRPC."""
        name = method.name

        async def handle(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
            started = self._clock()
            faults = faults_for(self.config, name)
            if faults.latency_seconds:
                await asyncio.sleep(faults.latency_seconds)
            with self._lock:
                lose = self._answers_lost[name] < faults.lost_answers
                if lose:
                    self._answers_lost[name] += 1
            try:
                response = self._answer(method, request, faults, errors=not lose)
            except ApiError as error:
                self._record(
                    name, request, error.code, error.message, None, started, context.peer()
                )
                await context.abort(error.code, error.message)
            if lose or self._draw(f"{name}:lost", faults.lost_answer_rate):
                # Done, but the caller never hears: what a deadline running out looks like.
                code, message = grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded"
                self._record(name, request, code, message, response, started, context.peer())
                await context.abort(code, message)
            ok = grpc.StatusCode.OK
            self._record(name, request, ok, "", response, started, context.peer())
            return response

        return handle

    def _answer(
        self, method: Method, request: Any, faults: MethodFaults, errors: bool = True
    ) -> Any:
        with self._lock:
            # The quota is checked at Google's front door, before GKE sees the request.
            project = request_project(request)
            if self._rate_limit is not None and project is not None:
                self._rate_limit.admit(project)
            if errors and self._draw(method.name, faults.error_rate):
                raise ApiError(
                    faults.status,
                    faults.error_message
                    or f"{method.name}: {faults.error_code} injected by the emulator",
                    rule="EMU-FAULT-INJECTED",
                )
            error = None
            if method.long_running and self._draw(
                f"{method.name}:operation", faults.operation_error_rate
            ):
                error = status_pb2.Status(
                    code=faults.operation_status.value[0],
                    message=faults.operation_error_message,
                )
            self._state.advance()
            return method.handler(request, error)

    def _record(
        self,
        method: str,
        request: Any,
        code: grpc.StatusCode,
        message: str,
        response: Any,
        started: float,
        peer: str = "",
    ) -> None:
        record = CallRecord(
            method=method,
            request=request,
            code=code,
            message=message,
            response=response,
            started=started,
            duration=self._clock() - started,
            peer=peer,
        )
        self.record(record)


class EmulatorThread:
    """Serve an emulator from a background thread with its own event loop.

    For synchronous callers (tests, scripts): `with EmulatorThread(config) as emulator:`
    starts it and always stops it, whatever happens inside the block.
    """

    def __init__(self, config: EmulatorConfig | None = None, **options: Any) -> None:
        self.emulator = ClusterManagerEmulator(config, **options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ClusterManagerEmulator:
        if self._loop is not None:
            raise RuntimeError("an EmulatorThread serves only once")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="gke-emulator", daemon=True
        )
        self._thread.start()
        try:
            self._run(self.emulator.start())
        except BaseException:
            self._shutdown()
            raise
        return self.emulator

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._run(self.emulator.stop(grace=None))
        finally:
            self._shutdown()

    def _run(self, coroutine: Coroutine[Any, Any, None]) -> None:
        assert self._loop is not None
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=30)

    def _shutdown(self) -> None:
        assert self._loop is not None
        assert self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        if not self._thread.is_alive():
            self._loop.close()
