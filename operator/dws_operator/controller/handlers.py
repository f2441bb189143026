"""kopf handlers (thin): a daemon per TrainingRequest runs reconcile passes; a delete
handler holds the finalizer until the Job, Service and node pool are gone; any change to
one of our Jobs wakes its request's daemon at once, so a finished Job's pool is scaled
down without waiting for the next poll."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from collections.abc import Awaitable, Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import kopf
import yaml
from kubernetes.aio.client.exceptions import ApiException

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.controller.config import KueueMode, OperatorConfig
from dws_operator.controller.kube import KubeApi, connect
from dws_operator.controller.reconciler import Reconciler
from dws_operator.gke import (
    GkeError,
    NodePoolClient,
    WorkloadPolicyClient,
    connect_compute,
)
from dws_operator.gke import connect as connect_gke
from dws_operator.kueue_objects import KUEUE_GROUP
from dws_operator.kueue_versions import unsupported_kueue
from dws_operator.multislice import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION
from dws_operator.reconcile import Event, ReconcileConfig
from dws_operator.workload import REQUEST_LABEL

FINALIZER = "dws-operator.dev/cleanup"
ANNOTATION_PREFIX = "dws-operator.dev"
#: A request with nothing in flight is still looked at now and then (drift, lost events).
IDLE_SECONDS = 30.0
MAX_BACKOFF_SECONDS = 60.0
#: Job status changes come in bursts (one per pod transition): at most one pass per this.
MIN_PASS_SECONDS = 0.5
CANCELLATION_BACKOFF_SECONDS = 3.0


def _connection_from_kubeconfig(path: Path) -> kopf.ConnectionInfo:
    config = yaml.safe_load(path.read_text()) or {}
    context_name = config.get("current-context")
    context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])

    def data(key: str) -> bytes | None:
        value = cluster.get(key) if key.startswith("certificate-authority") else user.get(key)
        return base64.b64decode(value) if value else None

    return kopf.ConnectionInfo(
        server=cluster["server"],
        ca_data=data("certificate-authority-data"),
        certificate_data=data("client-certificate-data"),
        private_key_data=data("client-key-data"),
        scheme="Bearer" if user.get("token") else None,
        token=user.get("token"),
        default_namespace=context.get("namespace"),
    )


def post_event(body: Mapping[str, Any], event: Event) -> None:
    # kopf reads only the object reference (apiVersion, kind, metadata) from the body.
    kopf.event(cast(kopf.Body, body), type=event.type, reason=event.reason, message=event.message)


class Wakeups:
    """One flag per followed TrainingRequest (namespace, name), raised by its Job's events."""

    def __init__(self) -> None:
        self._flags: dict[tuple[str, str], asyncio.Event] = {}

    def register(self, namespace: str, name: str) -> asyncio.Event:
        flag = self._flags[namespace, name] = asyncio.Event()
        return flag

    def forget(self, namespace: str, name: str, flag: asyncio.Event) -> None:
        # A request deleted and created again under the same name has a new daemon and flag.
        if self._flags.get((namespace, name)) is flag:
            del self._flags[namespace, name]

    def wake(self, namespace: str, name: str) -> None:
        flag = self._flags.get((namespace, name))
        if flag is not None:
            flag.set()


class StopFlag(Protocol):
    """What a daemon needs of kopf's `stopped`: truthy once stopping, and awaitable."""

    def __bool__(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> Awaitable[Any]: ...


async def pause(stopped: StopFlag, wake: asyncio.Event, delay: float) -> None:
    """Sleep `delay` seconds, less if the daemon is stopped or `wake` is raised."""

    async def stop() -> None:
        await stopped.wait(delay)

    waiters = {asyncio.ensure_future(stop()), asyncio.ensure_future(wake.wait())}
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def run_passes(
    reconciler: Reconciler,
    namespace: str,
    name: str,
    stopped: StopFlag,
    wake: asyncio.Event,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    """Reconcile passes for one request until it needs no more (or the daemon stops)."""
    backoff = 1.0
    while not stopped:
        wake.clear()  # a Job event from here on means another pass
        try:
            decision = await reconciler.reconcile(namespace, name)
        except (ApiException, GkeError, OSError) as error:
            # Never crash or hot-loop: say what failed, wait longer each time.
            logger.warning("reconcile failed, retrying in %.0fs: %s", backoff, error)
            await stopped.wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)
            continue
        backoff = 1.0
        if decision is None:
            return
        delay = decision.requeue_after if decision.requeue_after is not None else IDLE_SECONDS
        await stopped.wait(min(delay, MIN_PASS_SECONDS))
        await pause(stopped, wake, max(delay - MIN_PASS_SECONDS, 0.0))


async def _use_kueue(mode: KueueMode, kube: KubeApi) -> bool:
    """Whether to queue through Kueue; refuses to start (PermanentError) when Kueue is
    required and missing, or installed in a release the operator does not support."""
    if mode == KueueMode.DISABLED:
        return False
    served = await kube.served_versions(KUEUE_GROUP)
    if mode == KueueMode.REQUIRED and not served:
        raise kopf.PermanentError("DWS_KUEUE=required but Kueue's CRDs are not installed")
    too_old = unsupported_kueue(served)
    if too_old is not None:
        raise kopf.PermanentError(too_old)
    return bool(served)


def _reconciler(
    config: OperatorConfig,
    kube: KubeApi,
    kueue: bool,
    jobset: bool,
    gke_api: Any,
    memo: kopf.Memo,
) -> Reconciler:
    def policies() -> WorkloadPolicyClient:
        memo.compute = connect_compute(config.compute_endpoint)
        return WorkloadPolicyClient(memo.compute, config.project)

    return Reconciler(
        kube,
        NodePoolClient(gke_api, config.cluster_path),
        ReconcileConfig(
            kueue=kueue,
            jobset=jobset,
            default_queue=config.default_queue,
            queued_queue=config.queued_queue,
            location=config.location,
            running_poll_seconds=config.running_poll_seconds,
        ),
        post_event,
        policies,
    )


def build_registry(config: OperatorConfig, kubeconfig: Path | None = None) -> kopf.OperatorRegistry:
    """Handlers bound to `config`; a registry of their own, so tests can run several."""
    registry = kopf.OperatorRegistry()
    wakeups = Wakeups()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        if kubeconfig is not None:
            return _connection_from_kubeconfig(kubeconfig)
        if os.environ.get("KUBERNETES_SERVICE_HOST"):
            return kopf.login_with_service_account(**kwargs)
        return kopf.login_with_kubeconfig(**kwargs)

    @kopf.on.startup(registry=registry)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        settings.persistence.finalizer = FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(
            prefix=ANNOTATION_PREFIX
        )
        settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
        )
        # Our own transitions are Events; kopf's handler chatter only when it goes wrong.
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 300
        api = await connect(str(kubeconfig) if kubeconfig else None)
        kube = KubeApi(api)
        try:
            installed = await _use_kueue(config.kueue, kube)
        except kopf.PermanentError:
            # The operator stops here; the cleanup handler never sees this client.
            await api.close()  # type: ignore[no-untyped-call]
            raise
        memo.api = api
        memo.gke_api = connect_gke(config.gke_endpoint)
        # Several slices run as a JobSet: without its API they fail at once, clearly.
        jobset = JOBSET_VERSION in await kube.served_versions(JOBSET_GROUP)
        memo.reconciler = _reconciler(config, kube, installed, jobset, memo.gke_api, memo)

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        if "api" in memo:
            await memo.api.close()
        if "gke_api" in memo:
            await memo.gke_api.transport.close()
        if "compute" in memo:
            memo.compute.close()

    # On exit, a pass in flight gets a moment to finish before it is cancelled (a cancelled
    # one is safe too: every pass is idempotent, but finishing keeps the log quiet).
    @kopf.daemon(
        GROUP,
        VERSION,
        PLURAL,
        registry=registry,
        cancellation_backoff=CANCELLATION_BACKOFF_SECONDS,
        cancellation_timeout=5.0,
    )
    async def follow(
        name: str,
        namespace: str | None,
        stopped: kopf.DaemonStopped,
        memo: kopf.Memo,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **_: Any,
    ) -> None:
        assert namespace is not None  # TrainingRequests are namespaced
        wake = wakeups.register(namespace, name)
        try:
            await run_passes(memo.reconciler, namespace, name, stopped, wake, logger)
        finally:
            wakeups.forget(namespace, name, wake)

    # Our Jobs, and the JobSets of several slices (their own conditions come after their
    # Jobs' last events); kopf watches JobSets only where their CRD is installed.
    @kopf.on.event("batch", "v1", "jobs", labels={REQUEST_LABEL: kopf.PRESENT}, registry=registry)
    @kopf.on.event(
        JOBSET_GROUP,
        JOBSET_VERSION,
        JOBSET_PLURAL,
        labels={REQUEST_LABEL: kopf.PRESENT},
        registry=registry,
    )
    async def workload_changed(
        namespace: str | None, labels: Mapping[str, str], type: str | None, **_: Any
    ) -> None:
        # Async, so the flag is raised on the daemons' own loop (sync handlers run in threads).
        # The initial listing (type None) changes nothing the daemon has not read itself.
        if namespace is not None and type is not None:
            wakeups.wake(namespace, labels[REQUEST_LABEL])

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    async def release(name: str, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
        assert namespace is not None
        reconciler: Reconciler = memo.reconciler
        try:
            decision = await reconciler.reconcile(namespace, name)
        except (ApiException, GkeError, OSError) as error:
            raise kopf.TemporaryError(f"cleaning up: {error}", delay=5) from error
        if decision is not None and not decision.released:
            raise kopf.TemporaryError("waiting for the Job, Service and node pool to go", delay=1)

    return registry
