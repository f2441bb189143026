"""The Nodes of one emulated GKE cluster in a real API server: the autoscaler's only I/O.

Nodes are named `gke-<cluster>-<pool>-<n>` and rendered by `nodes` (kwok manages them).
Besides creating and deleting them, the fleet marks the pods of a node that goes away as
disrupted (telling `on_disrupted` of each), marks the pods of a finished simulated
workload Succeeded (`workload`), and reads and writes the ProvisioningRequests that
queued pools answer.

A flex-start node's `node.gke.io/machine-termination-datetime` is written on the clock
the readers of it decide on: with `calendar=True` (the autoscaler was given the clock the
operator runs on), that clock's calendar (`SimClock.utc`) at the node's creation plus
the max run duration, the very moment the simulator ends the VM; otherwise real time
(the operator runs on the wall clock), when the sped-up simulated duration ends.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_workshop.devcluster.kubeerrors import Conflict, NotFound, typed_errors
from dws_workshop.emulator.clock import SimClock
from dws_workshop.emulator.server import ClusterManagerEmulator
from dws_workshop.simulator import provreq, workload
from dws_workshop.simulator.autoscaler_view import (
    Obj,
    ScalingPool,
    busy_nodes,
    disrupted_status,
    name_of,
    node_index,
)
from dws_workshop.simulator.nodes import HOSTNAME_LABEL_KEY, KWOK_ANNOTATION, node_name, render_node

log = logging.getLogger(__name__)

#: Seconds any one API call may take.
REQUEST_TIMEOUT = 10.0


class Fleet:
    """Nodes for the pools of `cluster` (a GKE resource path) through `api`."""

    def __init__(
        self,
        api: k8s.ApiClient,
        emulator: ClusterManagerEmulator,
        cluster: str,
        clock: SimClock,
        *,
        calendar: bool = False,
        on_disrupted: Callable[[Obj], None] | None = None,
    ) -> None:
        self.api = api
        self.emulator = emulator
        self.clock = clock
        self.calendar = calendar
        self.on_disrupted = on_disrupted
        self.project = cluster.split("/")[1]
        self.short_name = cluster.rsplit("/", 1)[-1]
        self._prefix = f"gke-{self.short_name}-"
        self._next_index: dict[str, int] = {}
        self._created_at: dict[str, float] = {}

    @property
    def core(self) -> k8s.CoreV1Api:
        return k8s.CoreV1Api(self.api)

    @property
    def objects(self) -> k8s.CustomObjectsApi:
        return k8s.CustomObjectsApi(self.api)

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """Call the API and answer its JSON as plain mappings (camelCase, like manifests):
        the autoscaler reads fields the generated models would rename or drop."""
        with typed_errors():
            response = method(
                *args, _preload_content=False, _request_timeout=REQUEST_TIMEOUT, **kwargs
            )
        data: Obj = json.loads(response.data or b"{}")
        return data

    # Nodes ------------------------------------------------------------------

    def nodes(self) -> list[Obj]:
        """This cluster's kwok Nodes (never a real node that happens to carry the label)."""
        listed: list[Obj] = self.call(self.core.list_node, label_selector=NODE_POOL_LABEL_KEY)[
            "items"
        ]
        return [
            n
            for n in listed
            if name_of(n).startswith(self._prefix)
            and (n["metadata"].get("annotations") or {}).get(KWOK_ANNOTATION) == "fake"
        ]

    def created_at(self, name: str) -> float | None:
        """When (simulated seconds) this fleet created the node; None for older nodes."""
        return self._created_at.get(name)

    def create_node(self, now: float, pool: ScalingPool, zone: str) -> Obj:
        index = self._next_index.get(pool.path)
        if index is None:
            index = max((node_index(name_of(n)) for n in pool.nodes), default=0) + 1
        terminates = self.terminates_at(now, pool.shape.max_run_duration_seconds)
        while True:
            name = node_name(self.short_name, pool.name, index)
            index += 1
            manifest = render_node(
                pool.shape, name=name, zone=zone, project=self.project, terminates_at=terminates
            )
            # Known before the create returns: a watcher may see the Node first.
            self._created_at[name] = now
            try:
                node = self.call(self.core.create_node, manifest)
            except BaseException as error:
                del self._created_at[name]  # no Node of that name was made
                if isinstance(error, Conflict):
                    continue  # left by an earlier run: take the next number
                raise
            break
        self._next_index[pool.path] = index
        pool.nodes.append(node)
        log.info("created node %s for pool %s in %s", name, pool.name, zone)
        return node

    def terminates_at(self, now: float, limit: float | None) -> datetime | None:
        """When a VM made at simulated second `now` with a max run of `limit` simulated
        seconds ends, on the readers' clock (see the module docstring)."""
        if not limit:
            return None
        if self.calendar:
            return self.clock.epoch + timedelta(seconds=now + limit)
        return datetime.now(UTC) + timedelta(seconds=self.clock.real_seconds(limit))

    def delete_nodes(self, names: list[str]) -> None:
        """Delete the nodes in one call, so watchers see a slice go at once."""
        if not names:
            return
        for name in names:
            self._created_at.pop(name, None)
        selector = f"{HOSTNAME_LABEL_KEY} in ({','.join(sorted(names))})"
        self.call(self.core.delete_collection_node, label_selector=selector)
        log.info("deleted nodes %s", ", ".join(sorted(names)))

    def remove(self, pool: ScalingPool, node: Obj, busy: dict[str, list[Obj]], why: str) -> None:
        """A VM goes away under its pods (preemption, end of run): the pods fail as
        disrupted, the Node goes, and the pool's count drops by one."""
        name = name_of(node)
        self.fail_pods(name, busy, why)
        self.delete_nodes([name])
        pool.nodes.remove(node)
        if self.emulator.set_node_count(pool.path, max(pool.count - 1, 0), expected=pool.count):
            pool.count = max(pool.count - 1, 0)

    # Pods -------------------------------------------------------------------

    def pods(self) -> list[Obj]:
        items: list[Obj] = self.call(self.core.list_pod_for_all_namespaces)["items"]
        return items

    def fail_pods(self, node: str, busy: dict[str, list[Obj]], message: str) -> None:
        """Mark the node's running pods Failed with a DisruptionTarget condition.

        The pods are read again here rather than taken from the pass's snapshot: a pod
        bound after the snapshot goes down with its VM too (left alone, it would stay
        Running on a deleted node until the pod garbage collector's 40 s quarantine ends)."""
        stamp = provreq.now_rfc3339()
        busy.pop(node, None)
        listed = self.call(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}"
        )
        for pod in busy_nodes(listed["items"]).get(node, []):
            with contextlib.suppress(NotFound):  # gone already
                self.call(
                    self.core.patch_namespaced_pod_status,
                    name_of(pod),
                    pod["metadata"]["namespace"],
                    {"status": disrupted_status(pod, message, stamp)},
                )
                if self.on_disrupted is not None:
                    self.on_disrupted(pod)

    def finish_pods(self, pods: list[Obj]) -> None:
        """Mark pods Succeeded as kwok ends a pod whose `sim-duration` is up (their
        simulated work is done); times are real ones, as on every other pod status."""
        stamp = provreq.now_rfc3339()
        for pod in pods:
            with contextlib.suppress(NotFound):  # gone already
                self.call(
                    self.core.patch_namespaced_pod_status,
                    name_of(pod),
                    pod["metadata"]["namespace"],
                    {"status": workload.completed_status(pod, stamp)},
                )
            log.info(
                "pod %s/%s finished its simulated work", pod["metadata"]["namespace"], name_of(pod)
            )

    def pod_template(self, namespace: str, name: str) -> Obj | None:
        try:
            return self.call(self.core.read_namespaced_pod_template, name, namespace)
        except NotFound:
            return None

    # ProvisioningRequests ---------------------------------------------------

    def provisioning_requests(self) -> list[Obj]:
        """Every ProvisioningRequest; none when their CRD is not installed."""
        try:
            listed = self.call(
                self.objects.list_cluster_custom_object,
                provreq.GROUP,
                provreq.VERSION,
                provreq.PLURAL,
            )
        except NotFound:
            return []
        items: list[Obj] = listed.get("items", [])
        return items

    def patch_provisioning_request(self, key: tuple[str, str], status: dict[str, Any]) -> None:
        self.call(
            self.objects.patch_namespaced_custom_object_status,
            provreq.GROUP,
            provreq.VERSION,
            key[0],
            provreq.PLURAL,
            key[1],
            {"status": status},
        )
