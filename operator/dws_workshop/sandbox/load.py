"""A fleet of TrainingRequests created at a steady rate, and what watches see of them.

    fleet = Fleet(api_factory, "default")
    with fleet:                                   # starts the watches
        fleet.create_wave(1, 100, rate=50.0)      # returns when every create returned
        fleet.records()                           # per request: when things happened

Two watches (TrainingRequests, and the Jobs the operator makes for them, by their
request label) stamp each event with the wall clock as it arrives: the first status the
operator wrote, the phase and pools it reports, when the request's Job was first seen
and when it was first seen complete. Every time is `time.time()` (wall seconds), so it
compares with the emulator's RFC 3339 operation times.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from kubernetes import client as k8s
from kubernetes import watch as k8s_watch

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.workload import REQUEST_LABEL
from dws_workshop.sandbox.shapes import Shape, request_manifest, shape_for

log = logging.getLogger(__name__)

#: Seconds a watch request stays open before it is renewed (and the stop flag read).
WATCH_SECONDS = 5
#: Parallel create calls: one client alone falls behind 50/s on a busy API server.
CREATORS = 4


@dataclass
class RequestRecord:
    """One request as the load run saw it; None: not seen (yet)."""

    name: str
    shape: Shape
    wave: int
    #: The client's create call returned.
    created_at: float | None = None
    #: The first watch event with a status the operator wrote.
    first_status_at: float | None = None
    phase: str | None = None
    #: The node pools its status names (every slice's), as last seen.
    pools: tuple[str, ...] = ()
    job_seen_at: float | None = None
    job_finished_at: float | None = None


def _status_written(status: Any) -> bool:
    # Anything but kopf's own bookkeeping (kept in annotations here, but be sure).
    return isinstance(status, dict) and any(key != "kopf" for key in status)


def _pools_of(status: dict[str, Any]) -> tuple[str, ...]:
    slices = [s.get("nodePool") for s in status.get("slices") or [] if isinstance(s, dict)]
    named = tuple(p for p in slices if isinstance(p, str) and p)
    if named:
        return named
    pool = (status.get("nodePool") or {}).get("name")
    return (pool,) if isinstance(pool, str) and pool else ()


def _interrupt(watcher: k8s_watch.Watch) -> None:
    """End a watch's stream now: urllib3's `HTTPResponse.shutdown` (2.3 on) wakes a read
    blocked in another thread. Without it the stream ends at its timeout, as before."""
    response = getattr(watcher, "_resp", None)
    shutdown = getattr(response, "shutdown", None)
    if callable(shutdown):
        shutdown()


def _job_complete(job: dict[str, Any]) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Complete" and c.get("status") == "True" for c in conditions)


class Fleet:
    """The requests of a load run in `namespace`; thread-safe."""

    def __init__(self, api_factory: Callable[[], k8s.ApiClient], namespace: str) -> None:
        self.api_factory = api_factory
        self.namespace = namespace
        self.errors: list[str] = []
        self._records: dict[str, RequestRecord] = {}
        #: Events for requests not created by us yet (a status can beat the create's reply).
        self._early: dict[str, RequestRecord] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        #: The watches reading now, ended at once by `stop`.
        self._watchers: set[k8s_watch.Watch] = set()

    # Watches -----------------------------------------------------------------

    def __enter__(self) -> Fleet:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        watches = [
            ("training-requests", GROUP, VERSION, PLURAL, None, self._on_request),
            ("jobs", "batch", "v1", "jobs", REQUEST_LABEL, self._on_job),
        ]
        ready = [threading.Event() for _ in watches]
        for (name, group, version, plural, label, handler), listed in zip(
            watches, ready, strict=True
        ):
            thread = threading.Thread(
                target=self._watch,
                args=(group, version, plural, label, handler, listed),
                name=f"load-watch-{name}",
                daemon=True,
            )
            thread.start()
            self._threads.append(thread)
        for listed in ready:
            if not listed.wait(timeout=60):
                self.stop()
                raise RuntimeError(f"the load run's watches did not start: {self.errors[-3:]}")

    def stop(self) -> None:
        self._stop.set()
        # A watch otherwise reads on until its next event or its timeout.
        with self._lock:
            watchers = list(self._watchers)
        for watcher in watchers:
            _interrupt(watcher)
        for thread in self._threads:
            thread.join(timeout=WATCH_SECONDS + 5)

    def _watch(
        self,
        group: str,
        version: str,
        plural: str,
        label: str | None,
        handler: Callable[[dict[str, Any], float], None],
        listed: threading.Event,
    ) -> None:
        api = self.api_factory()
        objects = k8s.CustomObjectsApi(api)
        selector = label or ""
        try:
            while not self._stop.is_set():
                try:
                    listing: dict[str, Any] = objects.list_namespaced_custom_object(  # type: ignore[assignment]
                        group, version, self.namespace, plural, label_selector=selector
                    )
                    now = time.time()
                    for item in listing.get("items", []):
                        handler(item, now)
                    listed.set()
                    self._follow(objects, group, version, plural, selector, handler, listing)
                except Exception as error:
                    if self._stop.is_set():
                        return
                    log.warning("watch of %s restarts after %s", plural, error)
                    with self._lock:
                        self.errors.append(f"watch {plural}: {type(error).__name__}: {error}")
                    self._stop.wait(1.0)
        finally:
            api.close()  # type: ignore[no-untyped-call]

    def _follow(
        self,
        objects: k8s.CustomObjectsApi,
        group: str,
        version: str,
        plural: str,
        selector: str,
        handler: Callable[[dict[str, Any], float], None],
        listing: dict[str, Any],
    ) -> None:
        """Watch from the listing's resourceVersion until stopped; returns to relist when
        the server says the version is gone (or any error ends the stream)."""
        version_seen = listing["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            watcher = k8s_watch.Watch()  # type: ignore[no-untyped-call]
            with self._lock:
                self._watchers.add(watcher)
            try:
                for event in watcher.stream(  # type: ignore[no-untyped-call]
                    objects.list_namespaced_custom_object,
                    group,
                    version,
                    self.namespace,
                    plural,
                    label_selector=selector,
                    resource_version=version_seen,
                    timeout_seconds=WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                ):
                    now = time.time()
                    body = event["object"]
                    if event["type"] == "ERROR":
                        return
                    version_seen = body["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handler(body, now)
                    if self._stop.is_set():
                        watcher.stop()  # type: ignore[no-untyped-call]
                        return
            finally:
                with self._lock:
                    self._watchers.discard(watcher)

    def _record_for(self, name: str) -> RequestRecord | None:
        """The record of `name` (the caller holds the lock); None if not one of ours."""
        return self._records.get(name) or self._early.get(name)

    def _on_request(self, body: dict[str, Any], now: float) -> None:
        name = body["metadata"]["name"]
        status = body.get("status")
        with self._lock:
            record = self._record_for(name)
            if record is None:
                return
            if _status_written(status):
                assert isinstance(status, dict)
                if record.first_status_at is None:
                    record.first_status_at = now
                record.phase = status.get("phase")
                record.pools = _pools_of(status) or record.pools

    def _on_job(self, body: dict[str, Any], now: float) -> None:
        name = (body["metadata"].get("labels") or {}).get(REQUEST_LABEL)
        with self._lock:
            record = self._record_for(name) if isinstance(name, str) else None
            if record is None:
                return
            if record.job_seen_at is None:
                record.job_seen_at = now
            if record.job_finished_at is None and _job_complete(body):
                record.job_finished_at = now

    # Creating ----------------------------------------------------------------

    def create_wave(
        self, wave: int, count: int, rate: float, sim_duration: str | None = None
    ) -> list[str]:
        """Create `count` requests of the round-robin shapes, `rate` per second (on a
        fixed schedule: a slow call does not push the later ones back); returns once
        every create call has returned."""
        names = [f"load-w{wave}-{i:05d}" for i in range(count)]
        with self._lock:
            for index, name in enumerate(names):
                # Registered before the create, so the first watch events are kept.
                self._early[name] = RequestRecord(name, shape_for(index), wave)
        began = time.monotonic()
        local = threading.local()
        clients: list[k8s.ApiClient] = []

        def create(index: int) -> None:
            delay = began + index / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            objects: k8s.CustomObjectsApi | None = getattr(local, "objects", None)
            if objects is None:
                api = self.api_factory()
                with self._lock:
                    clients.append(api)
                objects = local.objects = k8s.CustomObjectsApi(api)
            name = names[index]
            manifest = request_manifest(name, self.namespace, shape_for(index), sim_duration)
            objects.create_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, manifest
            )
            returned = time.time()
            with self._lock:
                record = self._early.pop(name)
                record.created_at = returned
                self._records[name] = record

        pool = ThreadPoolExecutor(CREATORS, thread_name_prefix="load-create")
        try:
            for future in [pool.submit(create, i) for i in range(count)]:
                future.result()
        finally:
            # A failed create ends the wave: the creates not yet started are dropped.
            pool.shutdown(wait=True, cancel_futures=True)
            for api in clients:
                api.close()  # type: ignore[no-untyped-call]
        return names

    def records(self, wave: int | None = None) -> list[RequestRecord]:
        """Copies of the created requests' records (of one wave, or all)."""
        with self._lock:
            return [
                RequestRecord(**vars(r))
                for r in self._records.values()
                if wave is None or r.wave == wave
            ]
