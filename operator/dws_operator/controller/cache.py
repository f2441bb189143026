"""What the operator knows of Kubernetes, kept current by watches (informer-style).

Every reconcile pass reads from here instead of the API server, so a request that only
waits costs nothing. The watches feed `put`/`remove`; the operator's own writes go
through `put` too (write-through, with the object the API server returned), so a pass
right after a status write sees that status, and the watch event that echoes the write
is recognised as nothing new (same resourceVersion) and wakes no one.

Objects are kept whole only where the decision needs them whole (TrainingRequests, as
compact JSON; JobSets); Jobs are kept as the few fields a `JobView` is built from, and
Nodes as their pool's name, which keeps the memory of a thousand requests small.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from dws_operator.api.policy import POLICY_PLURAL, TrainingPolicy, TrainingPolicySpec
from dws_operator.controller.node_counts import NodeCounts
from dws_operator.controller.records import (
    JobRecord,
    Key,
    OwnerIndex,
    RequestSummary,
    key_of,
    newer,
    slim,
    version_of,
)
from dws_operator.multislice import JOBSET_PLURAL
from dws_operator.workload import REQUEST_LABEL

log = logging.getLogger(__name__)

__all__ = ["JobRecord", "Key", "KubeCache", "RequestSummary", "key_of", "newer"]


class KubeCache(NodeCounts):
    """TrainingRequests, our Jobs, JobSets and Services, and Nodes counted by pool.

    A TrainingRequest is stored as compact JSON (about a fifth of its size as Python
    dicts: a thousand requests are kept in memory) and decoded when a pass reads it;
    its `RequestSummary` serves the looks across requests."""

    def __init__(self) -> None:
        self._requests: dict[Key, bytes] = {}
        self._summaries: dict[Key, RequestSummary] = {}
        self._by_uid: dict[str, Key] = {}
        self._bound: dict[str, set[Key]] = {}
        self._jobs = OwnerIndex()
        self._jobsets = OwnerIndex()
        self._children = OwnerIndex()
        self._services = OwnerIndex()
        NodeCounts.__init__(self)
        #: Kueue's LocalQueues by namespace; None while Kueue is not used (no check).
        self._local_queues: dict[str, set[str]] | None = None
        #: Our Jobs and JobSets (kind, namespace, name) whose Kueue Workload Kueue
        #: deactivated: Kueue's word why.
        self._deactivated: dict[tuple[str, str, str], str] = {}
        #: TrainingPolicies by namespace, then name, read once as they come.
        self._policies: dict[str, dict[str, TrainingPolicy]] = {}
        self._policy_versions: dict[Key, int | None] = {}

    # -- TrainingRequests -----------------------------------------------------------

    def put_request(self, body: Mapping[str, Any]) -> bool:
        """Keep `body` if it is newer than what is known; whether it was."""
        key = key_of(body)
        known = self._summaries.get(key)
        identity = (
            {"metadata": {"uid": known.uid, "resourceVersion": known.resource_version}}
            if known is not None
            else None
        )
        if not newer(body, identity):
            return False
        self.remove_request(key)
        summary = RequestSummary.of(body)
        self._requests[key] = json.dumps(slim(body), separators=(",", ":")).encode()
        self._summaries[key] = summary
        self._by_uid[summary.uid] = key
        if summary.pool:
            self._bound.setdefault(summary.pool, set()).add(key)
        return True

    def remove_request(self, key: Key) -> None:
        self._requests.pop(key, None)
        summary = self._summaries.pop(key, None)
        if summary is None:
            return
        self._by_uid.pop(summary.uid, None)
        if summary.pool:
            keys = self._bound[summary.pool]
            keys.discard(key)
            if not keys:
                del self._bound[summary.pool]

    def in_namespace(self, namespace: str) -> list[tuple[Key, RequestSummary]]:
        return [(key, s) for key, s in self._summaries.items() if key[0] == namespace]

    # -- TrainingPolicies -------------------------------------------------------------

    def put_policy(self, body: Mapping[str, Any]) -> bool:
        """Keep a TrainingPolicy; whether it is new or changed. One that cannot be read
        (the CRD's schema makes that a bug, said in the log) is not kept."""
        namespace, name = key_of(body)
        known = self._policy_versions.get((namespace, name))
        if known is not None and known == version_of(body):
            return False  # what the cache knew already (a relist)
        try:
            spec = TrainingPolicySpec.model_validate(body.get("spec") or {})
        except ValidationError as error:
            log.error("TrainingPolicy %s/%s unreadable, not applied: %s", namespace, name, error)
            return False
        policy = TrainingPolicy(name=name, namespace=namespace, spec=spec)
        self._policies.setdefault(namespace, {})[name] = policy
        self._policy_versions[namespace, name] = version_of(body)
        return True

    def remove_policy(self, key: Key) -> None:
        namespace, name = key
        self._policy_versions.pop(key, None)
        known = self._policies.get(namespace, {})
        known.pop(name, None)
        if not known:
            self._policies.pop(namespace, None)

    def policies(self, namespace: str) -> tuple[TrainingPolicy, ...]:
        known = self._policies.get(namespace, {})
        return tuple(known[name] for name in sorted(known))

    def key_by_uid(self, uid: str) -> Key | None:
        return self._by_uid.get(uid)

    def bound_to(self, pool: str) -> set[Key]:
        """Requests whose status names `pool` as theirs."""
        return self._bound.get(pool, set())

    def request(self, key: Key) -> Mapping[str, Any] | None:
        """The request as last seen (decoded anew on each call)."""
        stored = self._requests.get(key)
        if stored is None:
            return None
        body: Mapping[str, Any] = json.loads(stored)
        return body

    def summary(self, key: Key) -> RequestSummary | None:
        return self._summaries.get(key)

    def request_keys(self) -> list[Key]:
        return list(self._requests)

    # -- Jobs and JobSets -----------------------------------------------------------

    def put_job(self, body: Mapping[str, Any]) -> bool:
        key = key_of(body)
        record = JobRecord.of(body)
        changed = False
        if record.request is not None:
            changed = self._jobs.put(key, record, body, record.request)
        if record.jobset is not None:
            changed = self._children.put(key, record, body, record.jobset) or changed
        return changed

    def remove_job(self, key: Key) -> None:
        self._jobs.remove(key)
        self._children.remove(key)
        self._deactivated.pop(("jobs", *key), None)

    def job(self, namespace: str, name: str) -> JobRecord | None:
        record: JobRecord | None = self._jobs.bodies.get((namespace, name))
        return record

    def jobs_of(self, namespace: str, request: str) -> list[JobRecord]:
        names = self._jobs.by_group.get((namespace, request), ())
        return [self._jobs.bodies[namespace, n] for n in sorted(names)]

    def jobset_children(self, namespace: str, jobset: str) -> list[JobRecord]:
        names = self._children.by_group.get((namespace, jobset), ())
        return [self._children.bodies[namespace, n] for n in sorted(names)]

    def put_jobset(self, body: Mapping[str, Any]) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        return self._jobsets.put(key_of(body), body, body, labels.get(REQUEST_LABEL))

    def remove_jobset(self, key: Key) -> None:
        self._jobsets.remove(key)
        self._deactivated.pop((JOBSET_PLURAL, *key), None)

    def jobset(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self._jobsets.bodies.get((namespace, name))

    def jobsets_of(self, namespace: str, request: str) -> list[Mapping[str, Any]]:
        names = self._jobsets.by_group.get((namespace, request), ())
        return [self._jobsets.bodies[namespace, n] for n in sorted(names)]

    # -- Services -------------------------------------------------------------------

    def put_service(self, body: Mapping[str, Any]) -> bool:
        metadata = body.get("metadata") or {}
        owners = tuple(str(o.get("uid")) for o in metadata.get("ownerReferences") or [])
        labels = metadata.get("labels") or {}
        return self._services.put(key_of(body), owners, body, labels.get(REQUEST_LABEL))

    def remove_service(self, key: Key) -> None:
        self._services.remove(key)

    def service_owners(self, namespace: str, name: str) -> tuple[str, ...] | None:
        """Owner uids of a Service labelled as a request's; None when none is known."""
        owners: tuple[str, ...] | None = self._services.bodies.get((namespace, name))
        return owners

    # -- Kueue's LocalQueues ------------------------------------------------------------

    def know_local_queues(self) -> None:
        """From now on LocalQueues are watched: a queue not seen does not exist."""
        if self._local_queues is None:
            self._local_queues = {}

    def put_local_queue(self, namespace: str, name: str) -> bool:
        """Whether it is new."""
        self.know_local_queues()
        assert self._local_queues is not None
        names = self._local_queues.setdefault(namespace, set())
        if name in names:
            return False
        names.add(name)
        return True

    def remove_local_queue(self, namespace: str, name: str) -> None:
        if self._local_queues is not None:
            self._local_queues.get(namespace, set()).discard(name)

    def local_queues(self, namespace: str) -> frozenset[str] | None:
        """The namespace's LocalQueues; None when they are not watched."""
        if self._local_queues is None:
            return None
        return frozenset(self._local_queues.get(namespace, ()))

    # -- Kueue's Workloads ---------------------------------------------------------------

    def put_workload(self, kind: str, namespace: str, owner: str, why: str | None) -> bool:
        """Whether the Workload of our `kind` (jobs or jobsets) `owner` is deactivated
        (Kueue's word why) or not (None); whether that changed. Only deactivated ones
        are kept (few: Kueue deactivates a Workload when it gives up on it), the owner
        known or not yet (a Workload may be listed before its Job); until the Workload
        is reactivated or deleted, or its owner removed (a Workload goes after its
        owner, so its own DELETED event may find the owner gone)."""
        key = (kind, namespace, owner)
        before = self._deactivated.get(key)
        if why is None:
            self._deactivated.pop(key, None)
        else:
            self._deactivated[key] = why
        return before != why

    def deactivated(self, kind: str, namespace: str, owner: str) -> str | None:
        """Kueue's word why the Workload of `owner` is deactivated; None when it is not
        (or unknown)."""
        return self._deactivated.get((kind, namespace, owner))

    # -- Relisting ----------------------------------------------------------------------

    def stale(self, kind: str, namespace: str | None, listed: set[Key], version: int) -> list[Key]:
        """What the cache holds of `kind` (in `namespace`; None: all) that a listing at
        resourceVersion `version` did not contain although the cache's copy is no newer
        than the listing: deleted while no watch said so (a watch that broke and started
        again lists what is there, and never reports what went meanwhile)."""
        known: dict[Key, int | None]
        if kind == "trainingrequests":
            known = {
                key: version_of({"metadata": {"resourceVersion": s.resource_version}})
                for key, s in self._summaries.items()
                if namespace is None or key[0] == namespace
            }
        elif kind == "jobs":
            known = {**self._children.versions_in(namespace), **self._jobs.versions_in(namespace)}
        elif kind == "jobsets":
            known = self._jobsets.versions_in(namespace)
        elif kind == "services":
            known = self._services.versions_in(namespace)
        elif kind == "nodes":
            known = {("", name): v for name, v in self._node_versions.items()}
        elif kind == POLICY_PLURAL:
            known = {
                key: v
                for key, v in self._policy_versions.items()
                if namespace is None or key[0] == namespace
            }
        else:
            raise ValueError(f"no relisting of {kind}")
        return sorted(
            key
            for key, cached in known.items()
            if key not in listed and cached is not None and cached <= version
        )

    def holds(self, kind: str, key: Key) -> bool:
        """Whether the cache has an object of `kind` under `key` (("", name) for Nodes)."""
        if kind == "trainingrequests":
            return key in self._summaries
        if kind == "jobs":
            return key in self._jobs.versions or key in self._children.versions
        if kind == "jobsets":
            return key in self._jobsets.versions
        if kind == "services":
            return key in self._services.versions
        if kind == "nodes":
            return key[1] in self._node_versions
        if kind == POLICY_PLURAL:
            return key in self._policy_versions
        return False

    def uid(self, kind: str, key: Key) -> str | None:
        """The uid of the object of `kind` the cache holds under `key` (a Job, a JobSet
        or a Service): what a delete names, so that it removes that object and no other
        made since under the same name."""
        stores = {
            "jobs": (self._jobs, self._children),
            "jobsets": (self._jobsets,),
            "services": (self._services,),
        }
        for store in stores.get(kind, ()):
            identity = store.versions.get(key)
            if identity is not None:
                uid = identity["metadata"].get("uid")
                return str(uid) if uid else None
        return None

    def owner_of(self, kind: str, key: Key) -> Key | None:
        """The request an object of `kind` belongs to, as the cache knows it."""
        if kind == "jobs":
            request = self._jobs.owner(key)
            jobset = self._children.owner(key)
            if request is None and jobset is not None:
                request = self._jobsets.owner((key[0], jobset))
        elif kind == "jobsets":
            request = self._jobsets.owner(key)
        elif kind == "services":
            request = self._services.owner(key)
        else:
            return None
        return (key[0], request) if request is not None else None
