"""kopf handlers (thin): watches fill the caches and wake requests; workers run passes.

kopf watches TrainingRequests, our Jobs, JobSets and Services, and GKE's Nodes; each
event updates the cache and puts the request it concerns on the work queue. GKE's node
pools come from one shared snapshot, and pool operations go through the cluster's
operation scheduler. A request that only waits costs nothing: it is looked at when
something it depends on changes, at its deadline, or now and then as a safety net.

The caches are filled by kopf's own listing, once: every watched kind has an index
handler (kopf calls those for each object it lists or is told of, and holds every other
handler back until each kind's first listing went through them), which puts the object
in the cache and keeps nothing in kopf's index. The event handlers, held back that way,
take deletions (kopf calls no index handler for those) and start the controller's
workers at the first call: no pass runs on a half-filled cache, and nothing is listed
twice at the start.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import kopf

from dws_operator.controller.assembly import build_controller
from dws_operator.controller.config import KueueMode, OperatorConfig
from dws_operator.controller.finalizers import FINALIZER
from dws_operator.controller.kube import KubeApi, connect
from dws_operator.controller.metrics import OperatorMetrics
from dws_operator.controller.runtime import Controller
from dws_operator.controller.watched import KUEUE_KINDS, WATCHED
from dws_operator.gke import GkeError
from dws_operator.kubekit.login import log_in
from dws_operator.kueue_objects import KUEUE_GROUP
from dws_operator.kueue_versions import unsupported_kueue
from dws_operator.multislice import (
    JOBSET_GROUP,
    JOBSET_VERSION,
)

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
    *,
    ending: Callable[[], None] | None = None,
) -> kopf.OperatorRegistry:
    """Handlers bound to `config`; a registry of their own, so tests can run several.

    `ending` is called when kopf stops (its cleanup) or will (a start-up refusal): it
    raises the stop flag kopf was given. kopf's exit waits up to 5 s for the tasks still
    running, its own task waiting on that flag among them, so a flag left down (kopf
    stopped by a signal it answers itself, or by the refusal) held every exit 5 s
    (`Stopping` is one that also names what a slow stop still waits for)."""
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
        except BaseException as error:
            # Tried again (or the operator stops); the cleanup handler never sees these
            # clients, so they are closed here, GKE's channel too.
            await api.close()
            if controller is not None:
                await controller.gke_api.transport.close()
            if isinstance(error, kopf.PermanentError) and ending is not None:
                # Once kopf's start-up task has ended with the refusal: raised before,
                # the flag could stop kopf first, and the refusal be lost in the stop.
                task = asyncio.current_task()
                if task is not None:
                    task.add_done_callback(lambda _: ending())
            raise
        try:
            await controller.snapshot.refresh()
        except GkeError as error:
            log.warning("listing node pools at start-up failed (retrying): %s", error)
        # Its workers start once kopf's first listing of every kind is in its cache.
        memo.controller = controller

    @kopf.on.cleanup(registry=registry)
    async def cleanup(memo: kopf.Memo, **_: Any) -> None:
        if "controller" in memo:
            await memo.controller.stop()
        if ending is not None:
            ending()

    _watch(registry)
    return registry


def _watch(registry: kopf.OperatorRegistry) -> None:
    """Watch events fill the caches and wake the requests they concern. kopf watches
    JobSets and Kueue's and our policies' kinds only where their CRDs are."""
    for number, watched in enumerate(WATCHED):
        labels = None if watched.label is None else {watched.label: kopf.PRESENT}
        _watch_kind(
            registry,
            f"{watched.kind}-{number}",
            watched.kind,
            watched.group,
            watched.version,
            watched.plural,
            labels,
        )


def _watch_kind(
    registry: kopf.OperatorRegistry,
    name: str,
    kind: str,
    group: str,
    version: str,
    plural: str,
    labels: Mapping[str, Any] | None,
) -> None:
    def controller_of(memo: kopf.Memo) -> Controller | None:
        controller: Controller | None = memo.get("controller")
        if controller is None or (kind in KUEUE_KINDS and not controller.uses_kueue):
            return None
        return controller

    # An object listed, added or changed. Returns nothing: kopf's index keeps nothing.
    @kopf.index(group, version, plural, labels=labels, registry=registry, id=name)
    async def put(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
        controller = controller_of(memo)
        if controller is not None:
            # A plain copy of kopf's view of the object (its top level; nested values
            # are the event's own).
            controller.on_event(kind, False, dict(body))

    # Every event, once every kind's first listing is in the cache.
    @kopf.on.event(group, version, plural, labels=labels, registry=registry, id=name)
    async def event(event: Mapping[str, Any], memo: kopf.Memo, **_: Any) -> None:
        controller: Controller | None = memo.get("controller")
        if controller is None:
            return
        controller.listed()
        body = event.get("object") or {}
        if event.get("type") == "DELETED" and body and controller_of(memo) is not None:
            controller.on_event(kind, True, body)
