"""Running the operator: in the foreground (`dws-operator run`) or, for tests and the
sandbox, in a background thread that can be stopped and started again."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path
from types import TracebackType

import kopf

from dws_operator.controller.config import OperatorConfig
from dws_operator.controller.handlers import build_registry


async def run_operator(
    config: OperatorConfig,
    *,
    kubeconfig: Path | None = None,
    stop_flag: threading.Event | asyncio.Event | None = None,
    ready_flag: threading.Event | asyncio.Event | None = None,
    liveness_endpoint: str | None = None,
) -> None:
    await kopf.operator(
        registry=build_registry(config, kubeconfig),
        clusterwide=not config.namespaces,
        namespaces=list(config.namespaces),
        # One replica: no peering objects needed (leader election comes with HA).
        standalone=True,
        stop_flag=stop_flag,
        ready_flag=ready_flag,
        liveness_endpoint=liveness_endpoint,
    )


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
