"""The watch cache's records: an object's key and version order, what is kept of a Job
(`JobRecord`) and of a TrainingRequest for looks across requests (`RequestSummary`),
and the owner index of the kinds a request owns."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from dws_operator import rfc3339
from dws_operator.api import TERMINAL_PHASES
from dws_operator.catalog import TERMINATION_ANNOTATION
from dws_operator.guardrails import Size
from dws_operator.multislice import JOBSET_NAME_LABEL
from dws_operator.reconcile import ADMITTED, POLICY_LIMIT
from dws_operator.workload import REQUEST_LABEL

#: (namespace, name) of a namespaced object.
Key = tuple[str, str]


def key_of(body: Mapping[str, Any]) -> Key:
    metadata = body.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def version_of(body: Mapping[str, Any]) -> int | None:
    text = (body.get("metadata") or {}).get("resourceVersion")
    # Opaque to clients by contract; etcd-backed servers give integers, compared as such.
    return int(text) if isinstance(text, str) and text.isdigit() else None


def newer(incoming: Mapping[str, Any], known: Mapping[str, Any] | None) -> bool:
    """Whether `incoming` is a later state of the object than `known`."""
    if known is None:
        return True
    if (incoming.get("metadata") or {}).get("uid") != (known.get("metadata") or {}).get("uid"):
        return True  # deleted and created again under the same name
    new, old = version_of(incoming), version_of(known)
    return new is None or old is None or new > old


@dataclass(frozen=True)
class JobRecord:
    """The fields of a batch Job the decision reads (see `observe.job_view`)."""

    name: str
    request: str | None
    jobset: str | None
    owners: tuple[str, ...]
    conditions: tuple[Mapping[str, Any], ...]
    ready: int
    #: Being deleted (`workload_deleting`): asked to go already.
    deleting: bool = False

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> JobRecord:
        metadata = body.get("metadata") or {}
        labels = metadata.get("labels") or {}
        status = body.get("status") or {}
        return cls(
            name=str(metadata.get("name") or ""),
            request=labels.get(REQUEST_LABEL),
            jobset=labels.get(JOBSET_NAME_LABEL),
            owners=tuple(str(o.get("uid")) for o in metadata.get("ownerReferences") or []),
            conditions=tuple(
                {k: c.get(k) for k in ("type", "status", "reason", "message")}
                for c in status.get("conditions") or []
            ),
            ready=int(status.get("ready") or 0),
            deleting=workload_deleting(metadata),
        )


#: The garbage collector's finalizer on an object deleted with propagationPolicy Orphan.
ORPHAN_FINALIZER = "orphan"


def workload_deleting(metadata: Mapping[str, Any]) -> bool:
    """A Job or JobSet on its way out with its pods: deleted, and not so as to orphan
    them (`kubectl delete --cascade=orphan` leaves its pods running: the operator deletes
    it again, its way, which puts the collector's own finalizer in place of "orphan")."""
    finalizers = metadata.get("finalizers") or []
    return metadata.get("deletionTimestamp") is not None and ORPHAN_FINALIZER not in finalizers


class OwnerIndex:
    """Objects of one kind by key, plus which request (namespace, label) each belongs to."""

    def __init__(self) -> None:
        self.bodies: dict[Key, Any] = {}
        self.versions: dict[Key, Mapping[str, Any]] = {}
        self.by_group: defaultdict[Key, set[str]] = defaultdict(set)
        self._group: dict[Key, Key] = {}

    def put(self, key: Key, stored: Any, body: Mapping[str, Any], group: str | None) -> bool:
        if not newer(body, self.versions.get(key)):
            return False
        self.remove(key)
        self.bodies[key] = stored
        self.versions[key] = {"metadata": _identity(body)}
        if group is not None:
            self._group[key] = (key[0], group)
            self.by_group[key[0], group].add(key[1])
        return True

    def owner(self, key: Key) -> str | None:
        """The group (request, or JobSet) `key` was filed under."""
        group = self._group.get(key)
        return group[1] if group is not None else None

    def versions_in(self, namespace: str | None) -> dict[Key, int | None]:
        return {
            key: version_of(identity)
            for key, identity in self.versions.items()
            if namespace is None or key[0] == namespace
        }

    def remove(self, key: Key) -> None:
        self.bodies.pop(key, None)
        self.versions.pop(key, None)
        group = self._group.pop(key, None)
        if group is not None:
            names = self.by_group[group]
            names.discard(key[1])
            if not names:
                del self.by_group[group]


#: What the decision never reads of a request's metadata, and the bulk of it: the
#: server's field ownership and annotations (`kubectl apply` keeps a whole copy of the
#: object in one). Dropped from the cached copy; a thousand requests are kept in memory.
_UNREAD_METADATA = ("managedFields", "annotations")


def slim(body: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata = body.get("metadata") or {}
    if not any(field in metadata for field in _UNREAD_METADATA):
        return body
    kept = {k: v for k, v in metadata.items() if k not in _UNREAD_METADATA}
    return {**body, "metadata": kept}


def _identity(body: Mapping[str, Any]) -> dict[str, Any]:
    metadata = body.get("metadata") or {}
    return {"uid": metadata.get("uid"), "resourceVersion": metadata.get("resourceVersion")}


@dataclass(frozen=True)
class RequestSummary:
    """What other requests' decisions read of a request, kept beside its stored body so
    that looking across requests (who holds a pool, who is finished) decodes nothing."""

    uid: str
    resource_version: str
    phase: str | None
    deleting: bool
    #: status.nodePool.name: the pool the request says it holds ("" when none).
    pool: str
    #: Nodes its plan needs (status.plan.nodes).
    nodes: int
    #: When its pool was let go: status.scaledDownAt, else status.finishedAt.
    released_at: str | None
    #: The operator scaled its pools down (status.scaledDownAt): not so under
    #: `cleanup: Keep`, whose pools stay the request's.
    scaled_down: bool = False
    #: metadata.creationTimestamp as stored (RFC 3339, so its order is time's).
    created: str = ""
    #: Past its namespace's TrainingPolicies (`reconcile.policy.admitted`): it asked for
    #: capacity, holds a pool or booking, or its Admitted condition is True.
    admitted: bool = False
    #: Its size by its status's plan (every slice): what it holds or asks for.
    size: Size = Size(0, 0)  # noqa: RUF009 (frozen, so shared safely)
    #: Held by its namespace's in-flight limits (Admitted False, PolicyLimit).
    held: bool = False
    #: It asked GKE for capacity (status.requestedAt).
    requested: bool = False
    #: Its pool is the operator's (status.nodePool.managed), not one the user made.
    managed: bool = False

    @classmethod
    def of(cls, body: Mapping[str, Any]) -> RequestSummary:
        metadata = body.get("metadata") or {}
        status = body.get("status") or {}
        pool = (status.get("nodePool") or {}).get("name")
        released = status.get("scaledDownAt") or status.get("finishedAt")
        return cls(
            uid=str(metadata.get("uid") or ""),
            resource_version=str(metadata.get("resourceVersion") or ""),
            phase=status.get("phase") if isinstance(status.get("phase"), str) else None,
            deleting=metadata.get("deletionTimestamp") is not None,
            pool=pool if isinstance(pool, str) else "",
            nodes=int((status.get("plan") or {}).get("nodes") or 0),
            released_at=released if isinstance(released, str) else None,
            scaled_down=isinstance(status.get("scaledDownAt"), str),
            created=str(metadata.get("creationTimestamp") or ""),
            admitted=_admitted(status),
            held=_condition(status, ADMITTED, "False", POLICY_LIMIT),
            requested=bool(status.get("requestedAt")),
            managed=(status.get("nodePool") or {}).get("managed") is True,
            size=_planned_size(status.get("plan")),
        )

    @property
    def ended(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def holding(self) -> bool:
        """Past its policies and still holding capacity: not ended, or ended having asked
        for a pool not yet scaled down (draining, or kept by `cleanup: Keep` until
        deleted). One that failed before asking holds nothing, whatever pool it names."""
        if not self.admitted:
            return False
        if not self.ended:
            return True
        # A user's own pool (nodePool.existing) is never the operator's to scale down.
        return self.requested and self.managed and bool(self.pool) and not self.scaled_down


def _admitted(status: Mapping[str, Any]) -> bool:
    if status.get("requestedAt") or status.get("nodePool") or status.get("booking"):
        return True
    return _condition(status, ADMITTED, "True")


def _condition(status: Mapping[str, Any], kind: str, value: str, reason: str = "") -> bool:
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") == kind
        and c.get("status") == value
        and (not reason or c.get("reason") == reason)
        for c in conditions
    )


def _planned_size(plan: object) -> Size:
    if not isinstance(plan, dict):
        return Size()
    numbers = [plan.get(k) for k in ("totalChips", "slices", "totalNodes", "nodes")]
    chips, slices, total, nodes = (n if isinstance(n, int) else 0 for n in numbers)
    return Size(chips=chips * max(slices, 1), nodes=total or nodes * max(slices, 1))


def termination_of(metadata: Mapping[str, Any]) -> datetime | None:
    """GKE's `node.gke.io/machine-termination-datetime` on a Node (a flex-start VM's
    end); None when absent or unreadable."""
    stamp = (metadata.get("annotations") or {}).get(TERMINATION_ANNOTATION)
    if not isinstance(stamp, str):
        return None
    try:
        moment = rfc3339.parse(stamp)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
