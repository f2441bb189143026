"""kopf handlers (thin): watches fill the caches and wake requests; workers run passes.

kopf watches TrainingRequests, our Jobs, JobSets and Services, and GKE's Nodes; each
event updates the cache and puts the request it concerns on the work queue. GKE's node
pools come from one shared snapshot, and pool operations go through the cluster's
operation scheduler. A request that only waits costs nothing: it is looked at when
something it depends on changes, at its deadline, or now and then as a safety net.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import kopf

# kopf exports no name for its per-object memories; `kopf.operator(memories=...)` takes one.
from kopf._core.reactor.inventory import ResourceMemories, ResourceMemory

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller.config import KueueMode, OperatorConfig
from dws_operator.controller.finalizers import FINALIZER
from dws_operator.controller.kube import LOCAL_QUEUES, POLICIES, WORKLOADS, KubeApi, connect
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.runtime import Controller, build_controller
from dws_operator.gke import GkeError
from dws_operator.kubekit.login import log_in
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_operator.kueue_versions import unsupported_kueue
from dws_operator.multislice import (
    JOBSET_GROUP,
    JOBSET_NAME_LABEL,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from dws_operator.workload import REQUEST_LABEL

log = logging.getLogger(__name__)

__all__ = ["FINALIZER", "build_registry"]


async def _login(kubeconfig: Path | None) -> kopf.ConnectionInfo:
    """kopf's connection from the same login as the operator's own client; kopf logs in
    again when it expires (or when the server answers 401)."""
    login = await log_in(str(kubeconfig) if kubeconfig else None)
    return kopf.ConnectionInfo(
        server=login.server,
        # base64, as in a kubeconfig: what every kopf release takes (1.42 takes only that).
        ca_data=_b64(login.ca_data),
        insecure=login.insecure or None,
        scheme="Bearer" if login.token else None,
        token=login.token,
        certificate_data=_b64(login.certificate_data),
        private_key_data=_b64(login.private_key_data),
        default_namespace=login.namespace,
        # A real expiry only (an exec plugin's): for a token read from a file, kopf would
        # otherwise drop its watches at every re-read; it logs in again on a 401 instead.
        expiration=login.expires_at,
    )


def _b64(data: bytes | None) -> bytes | None:
    return None if data is None else base64.b64encode(data)


#: Seconds between tries of a start-up that failed.
STARTUP_BACKOFF_SECONDS = 2.0

#: How long kopf keeps an object's worker task after its last event (kopf's default: 5).
#: The handlers only update the cache and wake a request, so a worker has nothing to
#: wait for; in a burst of a thousand new requests, five seconds of idle workers (each
#: with its queue and coroutine frames) came to ~10 MiB of the operator's memory that
#: stayed fragmented after the burst (measured at 1,000 requests: 154 -> 144 MiB RSS).
#: Events of one object within the batch window are still handled together.
WORKER_IDLE_SECONDS = 0.5


class _NoDiffBase(kopf.DiffBaseStorage):
    """No diff base. kopf keeps a copy of each object's essence to tell `on.update`
    handlers what changed, and builds it (a deep copy of the object) on every watch
    event of every kind. This operator has only `on.event` handlers: its cache knows
    what changed, and the copies cost a tenth of its CPU in a burst of new requests."""

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None
    ) -> kopf.BodyEssence:
        return kopf.BodyEssence()

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


class EventMemories(ResourceMemories):
    """Per-object memories that are not kept. kopf keeps one (~1 KB) for every object
    it watches, for state of its own: daemons, timers, indexes, change handlers'
    progress, error throttling. This operator has `on.event` handlers only, whose state
    is its cache; kept, the memories came to a few MiB at a thousand requests (each
    with its Job) and were never read again. Each event gets a fresh one."""

    async def recall(
        self,
        raw_body: kopf.RawBody,
        *,
        memobase: Any = None,  # kopf's AnyMemo (not exported either)
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> ResourceMemory:
        return await super().recall(
            raw_body, memobase=memobase, noticed_by_listing=noticed_by_listing, ephemeral=True
        )


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


def build_registry(
    config: OperatorConfig,
    kubeconfig: Path | None = None,
    metrics: OperatorMetrics | None = None,
) -> kopf.OperatorRegistry:
    """Handlers bound to `config`; a registry of their own, so tests can run several."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        # Async: kopf runs sync handlers in a thread pool, a thread (and its malloc
        # arena) kept for the operator's whole life for one call at start-up.
        # Called again by kopf when the API server refuses the credentials (an expired
        # token): an exec plugin's token is then refreshed.
        return await _login(kubeconfig)

    # A failed start (the API server restarting: 429 "storage is (re)initializing") is
    # tried again in seconds, not kopf's default minute: a leader that cannot start
    # holds the Lease all that while.
    @kopf.on.startup(registry=registry, backoff=STARTUP_BACKOFF_SECONDS)
    async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
        # Our own transitions are Events; kopf's handler chatter only when it goes wrong.
        settings.posting.level = logging.WARNING
        # kopf logs every watch event it hands to a handler ("succeeded"): thousands a
        # minute at scale, all of them normal. Its warnings and errors still show.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        settings.watching.server_timeout = 300
        settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
        settings.persistence.diffbase_storage = _NoDiffBase()
        api = await connect(str(kubeconfig) if kubeconfig else None)
        kube = KubeApi(api)
        controller: Controller | None = None
        try:
            installed = await _use_kueue(config.kueue, kube)
            # Several slices run as a JobSet: without its API they fail at once, clearly.
            jobset = JOBSET_VERSION in await kube.served_versions(JOBSET_GROUP)
            controller = build_controller(config, api, kube, installed, jobset, metrics)
            await controller.fill(kube, config.namespaces, jobset, kueue=installed)
        except BaseException:
            # Tried again (or the operator stops); the cleanup handler never sees these
            # clients, so they are closed here, GKE's channel too.
            await api.close()
            if controller is not None:
                await controller.gke_api.transport.close()
            raise
        try:
            await controller.snapshot.refresh()
        except GkeError as error:
            log.warning("listing node pools at start-up failed (retrying): %s", error)
        controller.start()
        memo.controller = controller

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        if "controller" in memo:
            await memo.controller.stop()

    _watch(registry)
    return registry


def _watch(registry: kopf.OperatorRegistry) -> None:
    """Watch events fill the caches and wake the requests they concern."""

    def deliver(memo: kopf.Memo, event: Mapping[str, Any], kind: str) -> None:
        controller: Controller | None = memo.get("controller")
        body = event.get("object") or {}
        if controller is not None and body:
            controller.on_event(kind, event.get("type") == "DELETED", body)

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    async def request_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        deliver(memo, event, PLURAL)

    # Our Jobs, and the Jobs a JobSet controller makes for our JobSets.
    @kopf.on.event("batch", "v1", "jobs", labels={REQUEST_LABEL: kopf.PRESENT}, registry=registry)
    @kopf.on.event(
        "batch", "v1", "jobs", labels={JOBSET_NAME_LABEL: kopf.PRESENT}, registry=registry
    )
    async def job_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        deliver(memo, event, "jobs")

    # kopf watches JobSets only where their CRD is installed.
    @kopf.on.event(
        JOBSET_GROUP,
        JOBSET_VERSION,
        JOBSET_PLURAL,
        labels={REQUEST_LABEL: kopf.PRESENT},
        registry=registry,
    )
    async def jobset_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        deliver(memo, event, JOBSET_PLURAL)

    # Kueue's LocalQueues (where its CRDs are installed): a request whose queue does not
    # exist says so, and goes on when it is made.
    @kopf.on.event(KUEUE_GROUP, KUEUE_API_VERSION, LOCAL_QUEUES, registry=registry)
    async def local_queue_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        controller: Controller | None = memo.get("controller")
        if controller is not None and controller.uses_kueue:
            deliver(memo, event, LOCAL_QUEUES)

    # Kueue's Workloads: one Kueue deactivated (it gave up on it) will never run, and its
    # request need not wait for its time to run out.
    @kopf.on.event(KUEUE_GROUP, KUEUE_API_VERSION, WORKLOADS, registry=registry)
    async def workload_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        controller: Controller | None = memo.get("controller")
        if controller is not None and controller.uses_kueue:
            deliver(memo, event, WORKLOADS)

    # The namespaces' TrainingPolicies (where their CRD is installed).
    @kopf.on.event(GROUP, VERSION, POLICIES, registry=registry)
    async def policy_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        deliver(memo, event, POLICIES)

    @kopf.on.event("", "v1", "services", labels={REQUEST_LABEL: kopf.PRESENT}, registry=registry)
    async def service_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        deliver(memo, event, "services")

    @kopf.on.event("", "v1", "nodes", labels={NODE_POOL_LABEL_KEY: kopf.PRESENT}, registry=registry)
    async def node_event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        deliver(memo, event, "nodes")
