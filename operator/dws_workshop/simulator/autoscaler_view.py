"""What the emulator's autoscaler reads from the API server, and the questions it asks of it.

Objects arrive as the API server's JSON (camelCase mappings, like manifests); everything
here is pure, so the autoscaler's judgements (which pods wait for which pool, which nodes
are busy, what a disrupted pod's status looks like) are tested without a cluster.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from google.cloud import container_v1

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.gke.ceiling import max_nodes, zone_limit
from dws_operator.kueue_objects import CONSUME_PROVREQ_ANNOTATION
from dws_workshop.simulator.nodes import ZONE_LABEL_KEY, PoolShape, accepts
from dws_workshop.simulator.pool_affinity import PoolOccupants, allowed_pools, places_by_pool

PoolStatus = container_v1.NodePool.Status
POD_DONE_PHASES = ("Succeeded", "Failed")
#: The reason the kubelet's graceful node shutdown gives its pods' DisruptionTarget.
DISRUPTION_REASON = "TerminationByKubelet"

#: A Kubernetes object as the API server sends it (JSON).
Obj = dict[str, Any]


@dataclass
class ScalingPool:
    """One emulated node pool, its node count and the Nodes that exist for it now."""

    pool: container_v1.NodePool
    count: int
    shape: PoolShape
    path: str
    nodes: list[Obj] = field(default_factory=list)
    #: It consumes a calendar block's reservation that is not on now (told once a pass).
    outside_block: bool = False

    @property
    def name(self) -> str:
        return str(self.pool.name)

    @property
    def running(self) -> bool:
        return bool(self.pool.status == PoolStatus.RUNNING)


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def labels_of(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["metadata"].get("labels") or {}
    return labels


def phase_of(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def node_index(name: str) -> int:
    """The trailing number of `gke-<cluster>-<pool>-<n>`; 0 when there is none."""
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else 0


def slice_of(pool: ScalingPool, node: Obj) -> list[Obj]:
    """The nodes of `node`'s slice: itself on a single-host pool. A multi-host slice's
    VMs are made together, in one zone, numbered one after another (scale-up adds whole
    slices), so a zone's nodes in number order fall in slices of `slice_nodes`."""
    size = pool.shape.slice_nodes
    if size <= 1:
        return [node]
    zone = labels_of(node).get(ZONE_LABEL_KEY)
    same_zone = sorted(
        (n for n in pool.nodes if labels_of(n).get(ZONE_LABEL_KEY) == zone),
        key=lambda n: node_index(name_of(n)),
    )
    at = next(i for i, n in enumerate(same_zone) if name_of(n) == name_of(node))
    first = at - at % size
    return same_zone[first : first + size]


def accelerator_of(shape: PoolShape) -> str | None:
    return shape.accelerator[1] if shape.accelerator else None


def zones_with_room(pool: ScalingPool, nodes: int, held: Counter[str] | None = None) -> list[str]:
    """The pool's zones that can take `nodes` more nodes under a per-zone maximum (all of
    them when the pool's limits are its total). `held` counts nodes per zone; default:
    the pool's nodes as they are."""
    zones = list(pool.pool.locations)
    limit = zone_limit(pool.pool)
    if limit is None:
        return zones
    if held is None:
        held = Counter(labels_of(n).get(ZONE_LABEL_KEY, "") for n in pool.nodes)
    return [zone for zone in zones if held[zone] + nodes <= limit]


def place_nodes(
    pool: ScalingPool, count: int, capacity_zone: Callable[[list[str]], str | None]
) -> list[str]:
    """Zones for up to `count` new nodes, one entry per node: each multi-host slice whole
    in one zone, no zone beyond its per-zone maximum, each in the first zone with room
    that `capacity_zone` says has capacity. Fewer than `count` when zones run out."""
    size = pool.shape.slice_nodes
    held = Counter(labels_of(n).get(ZONE_LABEL_KEY, "") for n in pool.nodes)
    placed: list[str] = []
    while len(placed) < count:
        zone = capacity_zone(zones_with_room(pool, size, held))
        if zone is None:
            break
        placed += [zone] * size
        held[zone] += size
    return placed[:count]


def busy_nodes(pods: list[Obj]) -> dict[str, list[Obj]]:
    """Non-terminal pods by the node they are bound to."""
    busy: dict[str, list[Obj]] = {}
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node and phase_of(pod) not in POD_DONE_PHASES:
            busy.setdefault(node, []).append(pod)
    return busy


def unschedulable(pod: Obj) -> bool:
    """Pending, unbound, and the scheduler said no: what triggers a scale-up."""
    if pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
        return False
    if phase_of(pod) != "Pending":
        return False
    return any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") == "Unschedulable"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def extended_resources(spec: Obj) -> set[str]:
    found: set[str] = set()
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        for amounts in (resources.get("requests"), resources.get("limits")):
            found.update(k for k in amounts or {} if "/" in k and not k.startswith("hugepages"))
    return found


def fits(shape: PoolShape, spec: Obj) -> bool:
    return accepts(
        shape,
        spec.get("nodeSelector") or {},
        list(spec.get("tolerations") or []),
        extended_resources(spec),
    )


def _occupants(pools: dict[str, ScalingPool], busy: dict[str, list[Obj]]) -> PoolOccupants:
    """The live pods bound to each pool's nodes."""
    occupants = PoolOccupants()
    for pool in pools.values():
        for node in pool.nodes:
            for pod in busy.get(name_of(node), []):
                occupants.add(pool.name, pod)
    return occupants


def _pool_chosen_by_scheduling(
    pod: Obj,
    candidates: list[ScalingPool],
    occupants: PoolOccupants,
    free: dict[str, int],
) -> ScalingPool | None:
    """The pool a pod whose pool is picked at scheduling time lands on (see
    `pool_affinity`): of the pools its node affinity allows, that it fits and whose
    occupants its pod (anti-)affinity accepts, one with a free node (the scheduler
    would bind it there, no scale-up), else an empty one (no nodes: unclaimed), else
    any; the first by name within each. None when no pool can take it."""
    spec = pod["spec"]
    allowed = allowed_pools(spec)
    names = [p.name for p in candidates]
    eligible = [
        p
        for p in candidates
        if (allowed is None or p.name in allowed)
        # A pool at its maximum takes a pod only on a free node (the autoscaler
        # never grows a node group past its maximum).
        and (free.get(p.name, 0) > 0 or max_nodes(p.pool) > len(p.nodes))
        and fits(p.shape, spec)
        and occupants.admits(pod, p.name, names)
    ]

    def rank(pool: ScalingPool) -> tuple[int, str]:
        if free.get(pool.name, 0) > 0:
            return 0, pool.name
        return (1 if not pool.nodes and pool.count == 0 else 2), pool.name

    return min(eligible, key=rank, default=None)


def schedulable_pending(
    pools: dict[str, ScalingPool], pending: dict[str, list[Obj]], busy: dict[str, list[Obj]]
) -> bool:
    """Whether a pod the scheduler turned down now fits a node already there: a pool with
    pending pods has a node without a pod (one pod per node). The scheduler will bind it on
    its next try, so the node is about to be used, however long that try takes."""
    return any(
        pending.get(pool.name) and any(name_of(n) not in busy for n in pool.nodes)
        for pool in pools.values()
    )


def pending_by_pool(pools: dict[str, ScalingPool], pods: list[Obj]) -> dict[str, list[Obj]]:
    """Unschedulable pods by the (running, non-queued) pool that would take them: the one
    their `cloud.google.com/gke-nodepool` selector names; for a pod whose pool is chosen
    by scheduling (a node affinity list of pools, pod (anti-)affinity on the pool label:
    a multi-slice JobSet's leader pods), the pool `_pool_chosen_by_scheduling` picks,
    the pods taken in name order, each counting for the next; else the first pool by
    name they fit. Pods that consume a ProvisioningRequest wait for that, not for the
    autoscaler."""
    candidates = sorted(
        (p for p in pools.values() if p.running and not p.shape.queued), key=lambda p: p.name
    )
    busy = busy_nodes(pods)
    occupants = _occupants(pools, busy)
    free = {p.name: sum(1 for n in p.nodes if name_of(n) not in busy) for p in candidates}
    found: dict[str, list[Obj]] = {}
    for pod in sorted(pods, key=lambda p: (p["metadata"].get("namespace", ""), name_of(p))):
        if not unschedulable(pod):
            continue
        annotations = pod["metadata"].get("annotations") or {}
        if CONSUME_PROVREQ_ANNOTATION in annotations:
            continue
        selector = pod["spec"].get("nodeSelector") or {}
        named = selector.get(NODE_POOL_LABEL_KEY)
        if named is not None:
            if named in pools:
                found.setdefault(named, []).append(pod)
                occupants.add(named, pod)
            continue
        if places_by_pool(pod["spec"]):
            chosen = _pool_chosen_by_scheduling(pod, candidates, occupants, free)
            if chosen is not None:
                found.setdefault(chosen.name, []).append(pod)
                occupants.add(chosen.name, pod)
                free[chosen.name] = max(free[chosen.name] - 1, 0)
            continue
        match = next((p for p in candidates if fits(p.shape, pod["spec"])), None)
        if match is not None:
            found.setdefault(match.name, []).append(pod)
    return found


def queued_pools_for(pools: dict[str, ScalingPool], spec: Obj) -> list[ScalingPool]:
    """The running queued-provisioning pools a ProvisioningRequest's pod template lands on,
    by name: the one its `cloud.google.com/gke-nodepool` selector names, or all it fits."""
    queued = sorted(
        (p for p in pools.values() if p.running and p.shape.queued), key=lambda p: p.name
    )
    named = (spec.get("nodeSelector") or {}).get(NODE_POOL_LABEL_KEY)
    if named is not None:
        return [p for p in queued if p.name == named]
    return [p for p in queued if fits(p.shape, spec)]


def consumed(key: tuple[str, str], pods: list[Obj]) -> bool:
    """Whether a live pod consumes the ProvisioningRequest `key` (namespace, name)."""
    namespace, name = key
    return any(
        p["metadata"].get("namespace") == namespace
        and (p["metadata"].get("annotations") or {}).get(CONSUME_PROVREQ_ANNOTATION) == name
        and phase_of(p) not in POD_DONE_PHASES
        for p in pods
    )


def disrupted_status(pod: Obj, message: str, stamp: str) -> dict[str, Any]:
    """The status the kubelet's graceful node shutdown leaves on a pod: Failed, containers
    terminated with 137, and a DisruptionTarget condition (which podFailurePolicy reads)."""
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
    return status
