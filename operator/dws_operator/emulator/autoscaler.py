"""The emulator's cluster autoscaler: Nodes in a real API server for the emulated pools.

    with EmulatorThread(config) as emulator, DevCluster(options) as cluster:
        with Autoscaler(emulator, cluster.kubeconfig, SimScenario(clock_factor=60)):
            ...

A background thread reconciles, every `interval` seconds, the Nodes of each pool of
one emulated cluster (named `gke-<cluster>-<pool>-<n>`, rendered by `nodes`, managed
by kwok) with the pool as the emulator holds it:

- The pool's node count (`ClusterManagerEmulator.node_count`) is what the nodes must
  be: a resize or a lower autoscaling maximum removes nodes, a larger count adds them
  once there is capacity. Nodes of a pool that is deleted (or being deleted) go.
- Scale-up (RUNNING pools with autoscaling max > 0, not queued): unschedulable pending
  pods that select the pool (a `cloud.google.com/gke-nodepool` node selector, or, without
  one, the first pool by name whose nodes they fit, see `nodes.accepts`) raise the
  count by one node per pending pod beyond the pool's empty nodes (a multi-host TPU
  slice comes whole: all its VMs at once), never above the pool's maximum. The nodes
  appear when the scenario's capacity model says so, in the first of the pool's zones
  with capacity.
- Scale-down: a node without non-terminal pods for `scale_down_unneeded_seconds`
  (simulated; a multi-host slice only as a whole) is removed and the count lowered.
- Flex-start VMs end at the pool's max run duration; Spot VMs are preempted at the
  scenario's times. Either way the node's pods are first marked Failed with a
  `DisruptionTarget` condition (reason `TerminationByKubelet`, as the kubelet's
  graceful node shutdown does), then the node is deleted and the count lowered.
- Queued pools scale up only through ProvisioningRequests (see `provreq`): Accepted,
  then Provisioned (with NodePoolName, ResizeRequestName and SelectedZone) once the
  nodes exist, BookingExpired `booking_seconds` later if no pod consumes it (until then
  its nodes are never idle-removed), CapacityRevoked at `maxRunDurationSeconds` (the
  nodes go), Failed (`WaitTimeExceeded`) after `provisioning_timeout_seconds` unprovisioned.

Errors in a pass are logged and kept in `errors`; the next pass starts afresh.
"""

from __future__ import annotations

import json
import logging
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import TracebackType
from typing import Any

from google.cloud import container_v1
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.emulator import provreq
from dws_operator.emulator.config import DEFAULT_CLUSTER
from dws_operator.emulator.nodes import (
    HOSTNAME_LABEL_KEY,
    KWOK_ANNOTATION,
    ZONE_LABEL_KEY,
    PoolShape,
    accepts,
    max_nodes,
    node_name,
    pool_shape,
    render_node,
)
from dws_operator.emulator.scenario import Preemption, SimClock, SimScenario
from dws_operator.emulator.server import ClusterManagerEmulator

log = logging.getLogger(__name__)

PoolStatus = container_v1.NodePool.Status
TERMINAL_PHASES = ("Succeeded", "Failed")
DISRUPTION_REASON = "TerminationByKubelet"
MAX_ERRORS = 100
#: Seconds any one API call may take.
REQUEST_TIMEOUT = 10.0

#: A Kubernetes object as the API server sends it (JSON).
Obj = dict[str, Any]


@dataclass
class Booking:
    """Nodes provisioned for one ProvisioningRequest."""

    pool: str
    nodes: list[str]
    provisioned_at: float
    max_run: float | None
    expired: bool = False


@dataclass
class _Pool:
    pool: container_v1.NodePool
    count: int
    shape: PoolShape
    path: str
    nodes: list[Obj] = field(default_factory=list)

    @property
    def name(self) -> str:
        return str(self.pool.name)

    @property
    def running(self) -> bool:
        return bool(self.pool.status == PoolStatus.RUNNING)


class Autoscaler:
    """Nodes for the pools of `cluster` in `emulator`, in the API server of `kubeconfig`."""

    def __init__(
        self,
        emulator: ClusterManagerEmulator,
        kubeconfig: Path | str,
        scenario: SimScenario | None = None,
        *,
        cluster: str = DEFAULT_CLUSTER,
        interval: float = 0.2,
        cleanup: bool = True,
    ) -> None:
        self.emulator = emulator
        self.kubeconfig = Path(kubeconfig)
        self.scenario = scenario or SimScenario()
        self.cluster = cluster
        self.interval = interval
        self.cleanup = cleanup
        self.clock = SimClock(self.scenario.clock_factor)
        self.errors: list[str] = []
        self.project = cluster.split("/")[1]
        self.short_name = cluster.rsplit("/", 1)[-1]
        self._prefix = f"gke-{self.short_name}-"
        self._api: k8s.ApiClient | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._preemptions: list[Preemption] = sorted(
            self.scenario.preemptions, key=lambda p: p.at_seconds
        )
        self._next_index: dict[str, int] = {}
        self._waiting_since: dict[str, float] = {}
        self._idle_since: dict[str, float] = {}
        self._created_at: dict[str, float] = {}
        self._accepted_at: dict[tuple[str, str], float] = {}
        self._bookings: dict[tuple[str, str], Booking] = {}

    # Lifecycle --------------------------------------------------------------

    def __enter__(self) -> Autoscaler:
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
        if self._thread is not None:
            raise RuntimeError("an Autoscaler runs only once")
        self._api = k8s_config.new_client_from_config(config_file=str(self.kubeconfig))  # type: ignore[no-untyped-call]
        self.clock = SimClock(self.scenario.clock_factor)
        self._thread = threading.Thread(target=self._run, name="gke-autoscaler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
        if self._api is not None:
            try:
                if self.cleanup:
                    self._delete_nodes([_name(n) for n in self._our_nodes()])
            finally:
                self._api.close()  # type: ignore[no-untyped-call]
                self._api = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as error:
                log.exception("autoscaler pass failed")
                with self._lock:
                    self.errors.append(f"{type(error).__name__}: {error}")
                    del self.errors[:-MAX_ERRORS]
            self._stop.wait(self.interval)

    @property
    def core(self) -> k8s.CoreV1Api:
        if self._api is None:
            raise RuntimeError("the autoscaler is not running")
        return k8s.CoreV1Api(self._api)

    @property
    def objects(self) -> k8s.CustomObjectsApi:
        if self._api is None:
            raise RuntimeError("the autoscaler is not running")
        return k8s.CustomObjectsApi(self._api)

    def _json(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """Call the API and answer its JSON as plain mappings (camelCase, like manifests)."""
        response = call(*args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        data: Obj = json.loads(response.data or b"{}")
        return data

    # One pass ---------------------------------------------------------------

    def reconcile(self) -> None:
        """One pass over every pool, node and ProvisioningRequest."""
        now = self.clock.now()
        pools = {
            str(pool.name): _Pool(
                pool=pool,
                count=count,
                shape=pool_shape(pool),
                path=f"{self.cluster}/nodePools/{pool.name}",
            )
            for pool, count in self.emulator.node_pools(self.cluster)
        }
        orphans: list[str] = []
        for node in self._our_nodes():
            pool = pools.get(_labels(node).get(NODE_POOL_LABEL_KEY, ""))
            if pool is None or pool.pool.status == PoolStatus.STOPPING:
                orphans.append(_name(node))
            else:
                pool.nodes.append(node)
        self._delete_nodes(orphans)
        pods: list[Obj] = self._json(self.core.list_pod_for_all_namespaces)["items"]
        busy = _busy(pods)
        self._preempt_due(now, pools, busy)
        self._expire_flex_start(now, pools, busy)
        self._provisioning_requests(now, pools, pods)
        pending = self._pending_by_pool(pools, pods)
        for pool in pools.values():
            if pool.running:
                self._scale(now, pool, pending.get(pool.name, []), busy)

    def _scale(
        self, now: float, pool: _Pool, pending: list[Obj], busy: dict[str, list[Obj]]
    ) -> None:
        nodes = sorted(pool.nodes, key=lambda n: _index(_name(n)))
        if len(nodes) > pool.count:
            # Resized down, or the autoscaling maximum lowered: idle nodes go first.
            doomed = sorted(nodes, key=lambda n: (_name(n) in busy, -_index(_name(n))))
            doomed = doomed[: len(nodes) - pool.count]
            self._delete_nodes([_name(n) for n in doomed])
            nodes = [n for n in nodes if n not in doomed]
        ceiling = max_nodes(pool.pool)
        want = pool.count
        if not pool.shape.queued and ceiling > 0 and pending:
            # One pod per node: pending pods land on empty nodes first (the scheduler
            # may not have retried them yet); only the rest need new nodes.
            short = len(pending) - sum(1 for n in nodes if _name(n) not in busy)
            if short > 0:
                # A multi-host TPU slice comes whole: all its VMs at once.
                size = pool.shape.slice_nodes
                want = max(want, min(ceiling, len(nodes) + -(-short // size) * size))
        if want > len(nodes):
            waited = now - self._waiting_since.setdefault(pool.path, now)
            zone = self.scenario.capacity_zone(
                list(pool.pool.locations), _accelerator(pool.shape), waited
            )
            if zone is None:
                return
            if want != pool.count:
                if not self.emulator.set_node_count(pool.path, want, expected=pool.count):
                    return
                pool.count = want
            for _ in range(want - len(nodes)):
                nodes.append(self._create_node(now, pool, zone))
            self._waiting_since.pop(pool.path, None)
            return
        self._waiting_since.pop(pool.path, None)
        self._scale_down_idle(now, pool, nodes, busy)

    def _scale_down_idle(
        self, now: float, pool: _Pool, nodes: list[Obj], busy: dict[str, list[Obj]]
    ) -> None:
        booked = {n for b in self._bookings.values() if not b.expired for n in b.nodes}
        idle: list[Obj] = []
        for node in nodes:
            name = _name(node)
            if name in busy or name in booked:
                self._idle_since.pop(name, None)
                continue
            since = self._idle_since.setdefault(name, now)
            if now - since >= self.scenario.scale_down_unneeded_seconds:
                idle.append(node)
        if not idle or (pool.shape.multi_host and len(idle) < len(nodes)):
            return
        remaining = pool.count - len(idle)
        if not self.emulator.set_node_count(pool.path, max(remaining, 0), expected=pool.count):
            return
        pool.count = max(remaining, 0)
        self._delete_nodes([_name(n) for n in idle])

    # Pods -------------------------------------------------------------------

    def _pending_by_pool(self, pools: dict[str, _Pool], pods: list[Obj]) -> dict[str, list[Obj]]:
        """Unschedulable pods by the (non-queued) pool that would take them."""
        candidates = sorted(
            (p for p in pools.values() if p.running and not p.shape.queued), key=lambda p: p.name
        )
        found: dict[str, list[Obj]] = {}
        for pod in pods:
            if not _unschedulable(pod):
                continue
            annotations = pod["metadata"].get("annotations") or {}
            if provreq.CONSUME_ANNOTATION in annotations:
                continue
            selector = pod["spec"].get("nodeSelector") or {}
            named = selector.get(NODE_POOL_LABEL_KEY)
            if named is not None:
                if named in pools:
                    found.setdefault(named, []).append(pod)
                continue
            match = next((p for p in candidates if _fits(p.shape, pod["spec"])), None)
            if match is not None:
                found.setdefault(match.name, []).append(pod)
        return found

    def _fail_pods(self, node: str, busy: dict[str, list[Obj]], message: str) -> None:
        """Mark the node's running pods Failed with a DisruptionTarget condition."""
        stamp = provreq.now_rfc3339()
        for pod in busy.pop(node, []):
            statuses = [
                {
                    "name": s["name"],
                    "image": s.get("image", ""),
                    "imageID": s.get("imageID", ""),
                    "ready": False,
                    "restartCount": s.get("restartCount", 0),
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "Error",
                            "finishedAt": stamp,
                            "startedAt": stamp,
                        }
                    },
                }
                for s in pod.get("status", {}).get("containerStatuses") or []
            ]
            status: dict[str, Any] = {
                "phase": "Failed",
                "reason": "Terminated",
                "message": message,
                "conditions": [
                    {
                        "type": "DisruptionTarget",
                        "status": "True",
                        "reason": DISRUPTION_REASON,
                        "message": message,
                        "lastTransitionTime": stamp,
                    },
                    {"type": "Ready", "status": "False", "lastTransitionTime": stamp},
                ],
            }
            if statuses:
                status["containerStatuses"] = statuses
            try:
                self._json(
                    self.core.patch_namespaced_pod_status,
                    _name(pod),
                    pod["metadata"]["namespace"],
                    {"status": status},
                )
            except k8s.ApiException as error:
                if error.status != 404:
                    raise

    # Disruptions ------------------------------------------------------------

    def _remove(self, pool: _Pool, node: Obj, busy: dict[str, list[Obj]], why: str) -> None:
        name = _name(node)
        self._fail_pods(name, busy, why)
        self._delete_node(name)
        pool.nodes.remove(node)
        if self.emulator.set_node_count(pool.path, max(pool.count - 1, 0), expected=pool.count):
            pool.count = max(pool.count - 1, 0)

    def _preempt_due(self, now: float, pools: dict[str, _Pool], busy: dict[str, list[Obj]]) -> None:
        for preemption in list(self._preemptions):
            if preemption.at_seconds > now:
                break
            for pool in pools.values():
                if not pool.shape.spot or preemption.pool not in (None, pool.name):
                    continue
                node = next(
                    (
                        n
                        for n in pool.nodes
                        if preemption.zone in (None, _labels(n).get(ZONE_LABEL_KEY))
                    ),
                    None,
                )
                if node is not None:
                    log.info("preempting Spot node %s", _name(node))
                    self._remove(
                        pool,
                        node,
                        busy,
                        "Pod was terminated in response to imminent node shutdown "
                        "(Spot VM preempted).",
                    )
                    self._preemptions.remove(preemption)
                    break

    def _expire_flex_start(
        self, now: float, pools: dict[str, _Pool], busy: dict[str, list[Obj]]
    ) -> None:
        for pool in pools.values():
            limit = pool.shape.max_run_duration_seconds
            if not pool.shape.flex_start or not limit:
                continue
            for node in list(pool.nodes):
                created = self._created_at.get(_name(node))
                if created is not None and now - created >= limit:
                    self._remove(
                        pool,
                        node,
                        busy,
                        "Pod was terminated in response to imminent node shutdown "
                        "(flex-start VM reached its max run duration).",
                    )

    # ProvisioningRequests ---------------------------------------------------

    def _provisioning_requests(self, now: float, pools: dict[str, _Pool], pods: list[Obj]) -> None:
        try:
            listed = self._json(
                self.objects.list_cluster_custom_object,
                provreq.GROUP,
                provreq.VERSION,
                provreq.PLURAL,
            )
        except k8s.ApiException as error:
            if error.status == 404:  # the CRD is not installed
                return
            raise
        seen: set[tuple[str, str]] = set()
        for body in listed.get("items", []):
            if (body.get("spec") or {}).get("provisioningClassName") != provreq.QUEUED_CLASS:
                continue
            meta = body["metadata"]
            key = (meta["namespace"], meta["name"])
            seen.add(key)
            self._provisioning_request(now, key, body, pools, pods)
        for key in set(self._bookings) - seen:
            self._bookings.pop(key)
        for key in set(self._accepted_at) - seen:
            self._accepted_at.pop(key)

    def _provisioning_request(
        self,
        now: float,
        key: tuple[str, str],
        body: dict[str, Any],
        pools: dict[str, _Pool],
        pods: list[Obj],
    ) -> None:
        if provreq.is_true(body, provreq.FAILED) or provreq.is_true(body, provreq.CAPACITY_REVOKED):
            return
        accepted_at = self._accepted_at.setdefault(key, now)
        if provreq.condition(body, provreq.ACCEPTED) is None:
            self._set_conditions(
                key,
                provreq.with_condition(
                    body, provreq.ACCEPTED, True, "Accepted", "The request was accepted."
                ),
            )
            return
        booking = self._bookings.get(key)
        if not provreq.is_true(body, provreq.PROVISIONED) or booking is None:
            if provreq.is_true(body, provreq.PROVISIONED):
                return  # provisioned by an earlier autoscaler: nothing to follow
            self._provision(now, key, body, pools, now - accepted_at)
            return
        pool = pools.get(booking.pool)
        if not booking.expired and now - booking.provisioned_at >= self.scenario.booking_seconds:
            booking.expired = True
            if not _consumed(key, pods):
                self._set_conditions(
                    key,
                    provreq.with_condition(
                        body,
                        provreq.BOOKING_EXPIRED,
                        True,
                        "BookingExpired",
                        "The capacity booking expired; unused nodes may be removed.",
                    ),
                )
                return
        if booking.max_run is not None and now - booking.provisioned_at >= booking.max_run:
            if pool is not None:
                busy = _busy(pods)
                for node in [n for n in pool.nodes if _name(n) in booking.nodes]:
                    self._remove(
                        pool, node, busy, "The ProvisioningRequest's max run duration was reached."
                    )
            self._bookings.pop(key)
            self._set_conditions(
                key,
                provreq.with_condition(
                    body,
                    provreq.CAPACITY_REVOKED,
                    True,
                    "MaxRunDurationReached",
                    "maxRunDurationSeconds reached; the VMs were deleted.",
                ),
            )

    def _provision(
        self,
        now: float,
        key: tuple[str, str],
        body: dict[str, Any],
        pools: dict[str, _Pool],
        waited: float,
    ) -> None:
        timeout = self.scenario.provisioning_timeout_seconds
        if timeout is not None and waited >= timeout:
            self._set_conditions(
                key,
                provreq.with_condition(
                    body,
                    provreq.FAILED,
                    True,
                    "WaitTimeExceeded",
                    f"Capacity was not found within {timeout:g}s.",
                ),
            )
            return
        pod_sets = (body.get("spec") or {}).get("podSets") or []
        if len(pod_sets) != 1:
            return
        count = int(pod_sets[0].get("count", 0))
        template_name = (pod_sets[0].get("podTemplateRef") or {}).get("name", "")
        try:
            template = self._json(self.core.read_namespaced_pod_template, template_name, key[0])
        except k8s.ApiException as error:
            if error.status == 404:
                return
            raise
        pool = _queued_pool(pools, (template.get("template") or {}).get("spec") or {})
        if pool is None or len(pool.nodes) + count > max_nodes(pool.pool):
            return
        zone = self.scenario.capacity_zone(
            list(pool.pool.locations), _accelerator(pool.shape), waited
        )
        if zone is None:
            return
        if not self.emulator.set_node_count(pool.path, pool.count + count, expected=pool.count):
            return
        pool.count += count
        created = [_name(self._create_node(now, pool, zone)) for _ in range(count)]
        self._bookings[key] = Booking(
            pool=pool.name, nodes=created, provisioned_at=now, max_run=provreq.max_run_seconds(body)
        )
        resize = f"{key[1]}-{zlib.crc32('/'.join(key).encode()):08x}"
        conditions = provreq.with_condition(
            body,
            provreq.PROVISIONED,
            True,
            "Provisioned",
            f"Provisioned {count} node(s) in node pool {pool.name} in {zone}.",
        )
        self._patch_status(
            key,
            {
                "conditions": conditions,
                "provisioningClassDetails": provreq.details(pool.name, resize, zone),
            },
        )

    def _set_conditions(self, key: tuple[str, str], conditions: list[dict[str, Any]]) -> None:
        self._patch_status(key, {"conditions": conditions})

    def _patch_status(self, key: tuple[str, str], status: dict[str, Any]) -> None:
        self._json(
            self.objects.patch_namespaced_custom_object_status,
            provreq.GROUP,
            provreq.VERSION,
            key[0],
            provreq.PLURAL,
            key[1],
            {"status": status},
        )

    # Nodes ------------------------------------------------------------------

    def _our_nodes(self) -> list[Obj]:
        listed: list[Obj] = self._json(self.core.list_node, label_selector=NODE_POOL_LABEL_KEY)[
            "items"
        ]
        return [
            n
            for n in listed
            if _name(n).startswith(self._prefix)
            and (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"
        ]

    def _create_node(self, now: float, pool: _Pool, zone: str) -> Obj:
        index = self._next_index.get(pool.path)
        if index is None:
            index = max((_index(_name(n)) for n in pool.nodes), default=0) + 1
        terminates: datetime | None = None
        if pool.shape.max_run_duration_seconds:
            real = self.clock.real_seconds(pool.shape.max_run_duration_seconds)
            terminates = datetime.now(UTC) + timedelta(seconds=real)
        while True:
            name = node_name(self.short_name, pool.name, index)
            index += 1
            manifest = render_node(
                pool.shape, name=name, zone=zone, project=self.project, terminates_at=terminates
            )
            try:
                node = self._json(self.core.create_node, manifest)
            except k8s.ApiException as error:
                if error.status == 409:
                    continue
                raise
            break
        self._next_index[pool.path] = index
        self._created_at[name] = now
        pool.nodes.append(node)
        log.info("created node %s for pool %s in %s", name, pool.name, zone)
        return node

    def _delete_node(self, name: str) -> None:
        self._delete_nodes([name])

    def _delete_nodes(self, names: list[str]) -> None:
        """Delete the nodes in one call, so watchers see a slice go at once."""
        if not names:
            return
        for name in names:
            self._idle_since.pop(name, None)
            self._created_at.pop(name, None)
        selector = f"{HOSTNAME_LABEL_KEY} in ({','.join(sorted(names))})"
        self._json(self.core.delete_collection_node, label_selector=selector)
        log.info("deleted nodes %s", ", ".join(sorted(names)))


def _name(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def _labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _busy(pods: list[Obj]) -> dict[str, list[Obj]]:
    """Non-terminal pods by the node they are bound to."""
    busy: dict[str, list[Obj]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and _phase(pod) not in TERMINAL_PHASES:
            busy.setdefault(node, []).append(pod)
    return busy


def _index(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def _accelerator(shape: PoolShape) -> str | None:
    return shape.accelerator[1] if shape.accelerator else None


def _unschedulable(pod: Obj) -> bool:
    if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    if _phase(pod) != "Pending":
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _extended_resources(spec: Obj) -> set[str]:
    found: set[str] = set()
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for amounts in (resources.get("requests"), resources.get("limits")):
            found.update(k for k in amounts or {} if "/" in k and not k.startswith("hugepages"))
    return found


def _fits(shape: PoolShape, spec: Obj) -> bool:
    return accepts(
        shape,
        spec.get("nodeSelector") or {},
        list(spec.get("tolerations") or []),
        _extended_resources(spec),
    )


def _queued_pool(pools: dict[str, _Pool], spec: Obj) -> _Pool | None:
    queued = sorted(
        (p for p in pools.values() if p.running and p.shape.queued), key=lambda p: p.name
    )
    named = (spec.get("nodeSelector") or {}).get(NODE_POOL_LABEL_KEY)
    if named is not None:
        return next((p for p in queued if p.name == named), None)
    return next((p for p in queued if _fits(p.shape, spec)), None)


def _consumed(key: tuple[str, str], pods: list[Obj]) -> bool:
    namespace, name = key
    return any(
        p["metadata"].get("namespace") == namespace
        and (p["metadata"].get("annotations") or {}).get(provreq.CONSUME_ANNOTATION) == name
        and _phase(p) not in TERMINAL_PHASES
        for p in pods
    )
