"""Running the operator: in the foreground (`dws-operator run`) or, for tests and the
sandbox, in a background thread that can be stopped and started again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import urllib.parse
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import TracebackType

import kopf
from aiohttp import web

from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.handlers import build_registry
from dws_operator.controller.kube import KubeApi, connect
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.stopping import Stopping
from dws_operator.gke.pool_defaults import default_service_account_warning
from dws_operator.kubekit.fence import FENCE, LeaseLost
from dws_operator.kubekit.leader import LeaderElector, LeaseSettings

log = logging.getLogger(__name__)

#: The exit code of a replica that lost the Lease (the container is restarted).
LEASE_LOST_EXIT_CODE = 3


def warn_about_settings(config: OperatorConfig) -> None:
    """Settings that work but that a security review would flag, said once at start."""
    warning = default_service_account_warning(config.pool_defaults)
    if warning is not None:
        log.warning("%s", warning)


async def run_operator(
    config: OperatorConfig,
    *,
    kubeconfig: Path | None = None,
    stop_flag: threading.Event | asyncio.Event | None = None,
    ready_flag: threading.Event | asyncio.Event | None = None,
    liveness_endpoint: str | None = None,
    lease: LeaseSettings | None = None,
    lease_lost: Callable[[LeaseLost], None] | None = None,
    metrics: OperatorMetrics | None = None,
) -> None:
    """Run until `stop_flag`. With `lease`, first wait to hold it (answering liveness
    probes meanwhile), then reconcile while it is renewed; when it is lost,
    `lease_lost` is called (default: `exit_at_once`), which must stop every action now.
    `/metrics` is served on `config.metrics_port` (a standby replica's too: it says
    `dws_leader 0`)."""
    metrics = metrics or OperatorMetrics()
    warn_about_settings(config)
    if config.metrics_port is not None and metrics.port is None:
        port = metrics.serve(config.metrics_port, config.metrics_address)
        log.info("metrics at http://%s:%d/metrics", config.metrics_address, port)
    try:
        await _run(
            config, kubeconfig, stop_flag, ready_flag, liveness_endpoint, lease, lease_lost, metrics
        )
    finally:
        metrics.leader.set(0)
        metrics.close()


async def _run(
    config: OperatorConfig,
    kubeconfig: Path | None,
    stop_flag: threading.Event | asyncio.Event | None,
    ready_flag: threading.Event | asyncio.Event | None,
    liveness_endpoint: str | None,
    lease: LeaseSettings | None,
    lease_lost: Callable[[LeaseLost], None] | None,
    metrics: OperatorMetrics,
) -> None:
    if lease is None:
        metrics.leader.set(1)
        await _reconcile(config, kubeconfig, stop_flag, ready_flag, liveness_endpoint, metrics)
        return
    api = await connect(str(kubeconfig) if kubeconfig else None)
    tasks: list[asyncio.Task[None]] = []
    try:
        elector = LeaderElector(KubeApi(api), lease)
        async with standing_by(liveness_endpoint):
            if not await elector.acquire(stop_flag):
                return
        lost = lease_lost or exit_at_once
        FENCE.arm(elector, lost)
        metrics.leader.set(1)
        keeping = asyncio.create_task(elector.keep(), name="dws-lease")
        operating = asyncio.create_task(
            _reconcile(config, kubeconfig, stop_flag, ready_flag, liveness_endpoint, metrics)
        )
        tasks += [keeping, operating]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if keeping.done():
            # Only LeaseLost ends keep(); anything else is a bug, and as final: nobody
            # renews the Lease any more.
            error = keeping.exception()
            why = error if isinstance(error, LeaseLost) else LeaseLost(f"renewing: {error!r}")
            lost(why)
        keeping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await keeping
        if operating.done():
            await elector.release()
        await operating
    finally:
        # Nothing may act after the fence opens: stop whatever still runs first (on an
        # error or a cancellation they may be running yet).
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        FENCE.disarm()
        await api.close()


async def _reconcile(
    config: OperatorConfig,
    kubeconfig: Path | None,
    stop_flag: threading.Event | asyncio.Event | None,
    ready_flag: threading.Event | asyncio.Event | None,
    liveness_endpoint: str | None,
    metrics: OperatorMetrics,
) -> None:
    # In the main thread kopf answers SIGINT and SIGTERM itself, replacing the handlers
    # that raise `stop_flag` (`dws-operator run`'s): the registry raises it as kopf ends.
    # Tasks there before kopf starts run it; a slow stop reports the others.
    ending = None if stop_flag is None else Stopping(stop_flag, asyncio.all_tasks())
    await kopf.operator(
        registry=build_registry(config, kubeconfig, metrics, ending=ending),
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        # Replicas are kept apart by the Lease (kopf's peering only pauses others).
        standalone=True,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
        liveness_endpoint=liveness_endpoint,
    )


def exit_at_once(why: LeaseLost) -> None:
    """Another replica may take the Lease `duration - renew_deadline` after this one
    gave up: no clean shutdown (it waits for calls in flight) fits that surely. Nothing
    is lost by stopping hard: every action is idempotent and re-decided from what is
    observed, and the container is restarted as a candidate."""
    log.critical("leader election: %s; exiting now", why)
    logging.shutdown()
    os._exit(LEASE_LOST_EXIT_CODE)


@contextlib.asynccontextmanager
async def standing_by(endpoint: str | None) -> AsyncIterator[None]:
    """Answer liveness probes on `endpoint` while waiting for the Lease (kopf's own
    endpoint takes the port over once this replica leads)."""
    if endpoint is None:
        yield
        return
    url = urllib.parse.urlsplit(endpoint)

    async def alive(request: web.Request) -> web.Response:
        return web.json_response({"standby": True})

    app = web.Application()
    app.router.add_get(url.path or "/", alive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, url.hostname, url.port or 80, reuse_address=True).start()
        yield
    finally:
        await runner.cleanup()


class _ThreadSignalsNotice(logging.Filter):
    """Drops kopf's warning that a thread cannot take OS signals: in a thread that is the
    point (`stop()` ends it), and the sandbox should not greet newcomers with it."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("OS signals are ignored")


_KOPF_REACTOR_LOGGER = "kopf._core.reactor.running"
_THREAD_NOTICE = _ThreadSignalsNotice()


class OperatorThread:
    """The whole operator in a thread with its own event loop; `stop()` ends it cleanly."""

    def __init__(self, config: OperatorConfig, kubeconfig: Path | None = None) -> None:
        self.config = config
        self.kubeconfig = kubeconfig
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="dws-operator", daemon=True)
        #: This operator's metrics (served on `config.metrics_port`; `metrics.port` says
        #: where once it started).
        self.metrics = OperatorMetrics()

    def _main(self) -> None:
        try:
            asyncio.run(self._operate())
        except BaseException as error:  # reported by start()/stop(), not swallowed
            self._error = self._error or error
            self._ready.set()

    async def _operate(self) -> None:
        try:
            await run_operator(
                self.config,
                kubeconfig=self.kubeconfig,
                stop_flag=self._stop,
                ready_flag=self._ready,
                metrics=self.metrics,
            )
        except BaseException as error:
            # Said before asyncio.run returns: it then waits for kopf's thread watching
            # the stop flag, which only stop() ends, so start() would wait out its timeout.
            self._error = error
            self._ready.set()
            raise

    def start(self, timeout: float = 60.0) -> OperatorThread:
        logging.getLogger(_KOPF_REACTOR_LOGGER).addFilter(_THREAD_NOTICE)  # idempotent
        self._thread.start()
        if not self._ready.wait(timeout) or self._error is not None:
            self.stop()
            # kopf wraps a start-up handler's refusal in ActivityError: name the refusal.
            reason = (self._error.__cause__ or self._error) if self._error else None
            raise RuntimeError(f"the operator did not start: {reason!r}")
        return self

    def stop(self, timeout: float = 60.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise RuntimeError("the operator did not stop in time")

    def __enter__(self) -> OperatorThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
