"""The Kubernetes API, as the reconciler uses it: plain JSON over `transport`'s
connection (the operator's login, TLS, token renewal, typed errors).

Why no generated client: every call would validate its arguments and turn the answer
into models that the operator turns straight back into dicts (its caches keep JSON as
the watches deliver it), and kopf imports 39 of its modules once it is importable: 96.0
against 91.1 MiB of RSS at import (measured at 8b4c447; README, "Performance"). The few
calls it makes are written here once.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from dws_operator import rfc3339
from dws_operator.api import GROUP, KIND, PLURAL, VERSION
from dws_operator.api.policy import POLICY_PLURAL
from dws_operator.identity import FIELD_MANAGER
from dws_operator.kubekit.fence import FENCE
from dws_operator.kubekit.transport import (
    ApiError,
    Conflict,
    Connection,
    Invalid,
    NotFound,
    Requests,
)
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_operator.multislice import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

#: Kueue's LocalQueues (plural), watched to tell a request whose queue does not exist.
LOCAL_QUEUES = "localqueues"
#: Kueue's Workloads (plural), watched to tell a request whose workload Kueue deactivated.
WORKLOADS = "workloads"
#: TrainingPolicies (plural): the limits of a namespace's requests.
POLICIES = POLICY_PLURAL

#: Connections kept to the API server, shared by the reconcile workers and the Event
#: poster: a pass makes a call or two, a few milliseconds each, so five carry hundreds
#: of calls a second. Each TLS connection holds a 256 KiB read buffer (asyncio's), and
#: kopf keeps one more per watched kind: with ten of ours, buffers were 4.5 MiB of the
#: operator's memory (tracemalloc, 300 requests waiting).
CONNECTIONS = 5

__all__ = [
    "FIELD_MANAGER",
    "LOCAL_QUEUES",
    "POLICIES",
    "WORKLOADS",
    "ApiError",
    "Conflict",
    "Connection",
    "Invalid",
    "KubeApi",
    "Listed",
    "NotFound",
    "WorkloadRejected",
    "connect",
]

log = logging.getLogger(__name__)


async def connect(kubeconfig: str | None = None) -> Connection:
    """A connection with the operator's login (see `login.log_in`)."""
    return await Connection.open(kubeconfig, CONNECTIONS)


class WorkloadRejected(Exception):
    """The API server (or an admission webhook) refused the workload as invalid: the
    same object will never be accepted, so the request fails instead of retrying."""

    def __init__(self, kind: str, name: str, error: ApiError) -> None:
        self.reason = "WorkloadRejected"
        self.message = f"{kind} {name} refused ({error.status}): {error.message}"
        super().__init__(self.message)


def _path(group: str, version: str, plural: str, namespace: str | None, name: str = "") -> str:
    base = f"/api/{version}" if group == "" else f"/apis/{group}/{version}"
    if namespace is not None:
        base += f"/namespaces/{quote(namespace, safe='')}"
    base += f"/{plural}"
    return f"{base}/{quote(name, safe='')}" if name else base


#: group, version of the kinds the operator makes and lists.
_KINDS = {
    "jobs": ("batch", "v1"),
    "services": ("", "v1"),
    "nodes": ("", "v1"),
    "events": ("", "v1"),
    PLURAL: (GROUP, VERSION),
    JOBSET_PLURAL: (JOBSET_GROUP, JOBSET_VERSION),
    LOCAL_QUEUES: (KUEUE_GROUP, KUEUE_API_VERSION),
    WORKLOADS: (KUEUE_GROUP, KUEUE_API_VERSION),
    POLICIES: (GROUP, VERSION),
}


#: Objects per list call. A thousand requests (or their Jobs, with their pod templates)
#: decoded in one answer made a spike of tens of MiB every relist, and the heap stayed
#: fragmented after it; a page at a time it is a few MiB.
LIST_PAGE = 100


@dataclass(frozen=True)
class Listed:
    """One list call's answer: the items, and the resourceVersion the list is at (None
    when the server's versions are not integers)."""

    kind: str
    namespace: str | None
    items: list[dict[str, Any]]
    version: int | None


class KubeApi:
    """Workloads, Services, Events and TrainingRequest status, as JSON."""

    def __init__(self, api: Requests) -> None:
        self.api = api

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        fenced: bool = True,
    ) -> Any:
        """One request; the answer's JSON. Raises `ApiError` (`NotFound`, `Conflict`,
        `Invalid`, ...) for an answer that is not 2xx."""
        if fenced and method != "GET":
            FENCE.check()  # a replica that lost its Lease writes nothing
        await self.api.keep_logged_in()
        if fenced and method != "GET":
            FENCE.check()  # again: renewing the login may have taken a while
        data = await self.api.request(
            method, path, query=query, body=body, content_type=content_type
        )
        return json.loads(data) if data else None

    # -- Workloads and Services -----------------------------------------------------

    async def create(self, plural: str, manifest: Mapping[str, Any]) -> dict[str, Any] | None:
        """Create (a Job, JobSet or Service): the object as the server made it; None for
        one that exists already (left for the next observation to judge). One the server
        refuses as invalid raises `WorkloadRejected`; the rest is retried by the caller."""
        group, version = _KINDS[plural]
        namespace = str(manifest["metadata"]["namespace"])
        try:
            created = await self.call(
                "POST",
                _path(group, version, plural, namespace),
                query={"fieldManager": FIELD_MANAGER},
                body=manifest,
            )
        except Conflict:
            return None
        except Invalid as error:
            kind = str(manifest.get("kind") or plural)
            raise WorkloadRejected(kind, manifest["metadata"]["name"], error) from error
        return created if isinstance(created, dict) else None

    async def delete(
        self,
        plural: str,
        namespace: str,
        name: str,
        uid: str | None = None,
        *,
        foreground: bool = False,
    ) -> bool:
        """Delete if there (False: it was not); what the object owns goes through
        garbage collection in the background (a Job's pods; a JobSet's Jobs, so the next
        attempt need not wait), or first (`foreground`: the object stays, deleting, until
        they are gone). With `uid`, only that object: one made since under the same name
        is not deleted (False, as if gone: the one meant is)."""
        group, version = _KINDS[plural]
        policy = "Foreground" if foreground else "Background"
        body: dict[str, Any] = {"propagationPolicy": policy}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            await self.call("DELETE", _path(group, version, plural, namespace, name), body=body)
        except NotFound:
            return False
        except Conflict:
            if not uid:
                raise
            return False  # "Precondition failed: UID in precondition ..."
        return True

    async def service_owners(self, namespace: str, name: str) -> list[str] | None:
        """The owner uids of the Service, or None when there is no such Service."""
        try:
            service = await self.call("GET", _path("", "v1", "services", namespace, name))
        except NotFound:
            return None
        owners = (service.get("metadata") or {}).get("ownerReferences") or []
        return [str(o.get("uid")) for o in owners]

    # -- TrainingRequests -----------------------------------------------------------

    async def training_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body = await self.call("GET", _path(GROUP, VERSION, PLURAL, namespace, name))
        except NotFound:
            return None
        return dict(body)

    async def patch_status(
        self,
        namespace: str,
        name: str,
        status: dict[str, Any],
        resource_version: str | None = None,
    ) -> dict[str, Any] | None:
        """Merge `status` in; the request as stored after, or None if it is gone. With
        `resource_version`, only over that version of the request (else `Conflict`)."""
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        return await self._merge(namespace, name, body, "/status")

    async def patch_metadata(
        self, namespace: str, name: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Merge `metadata` into the request's; as stored after, or None if it is gone."""
        return await self._merge(namespace, name, {"metadata": metadata}, "")

    async def _merge(
        self, namespace: str, name: str, body: dict[str, Any], subresource: str
    ) -> dict[str, Any] | None:
        try:
            stored = await self.call(
                "PATCH",
                _path(GROUP, VERSION, PLURAL, namespace, name) + subresource,
                query={"fieldManager": FIELD_MANAGER},
                body=body,
                content_type="application/merge-patch+json",
            )
        except NotFound:
            return None
        return dict(stored)

    async def post_event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        at: datetime,
    ) -> None:
        """An Event about `involved` (a TrainingRequest body). Events are for people:
        one that cannot be posted is logged, never allowed to fail the pass."""
        metadata = involved.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        now = rfc3339.seconds(at)
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{metadata.get('name')}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
            },
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": KIND,
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": metadata.get("uid"),
                "resourceVersion": metadata.get("resourceVersion"),
            },
            "type": type_,
            "reason": reason,
            # The API server refuses longer messages; the status keeps the whole text.
            "message": message[:1024],
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "source": {"component": FIELD_MANAGER},
            "reportingComponent": FIELD_MANAGER,
            "reportingInstance": FIELD_MANAGER,
        }
        try:
            await self.call("POST", _path("", "v1", "events", namespace), body=event)
        except ApiError as error:
            log.warning("posting event %s about %s: %s", reason, metadata.get("name"), error)

    # -- Discovery and listing ------------------------------------------------------

    async def served_versions(self, group: str) -> tuple[str, ...]:
        """The versions the API server serves of `group` (discovery); () when none."""
        groups = (await self.call("GET", "/apis")).get("groups") or []
        found = next((g for g in groups if g.get("name") == group), None)
        return tuple(str(v.get("version")) for v in (found or {}).get("versions") or [])

    async def listing(
        self, kind: str, label: str, namespaces: tuple[str, ...] = ()
    ) -> AsyncIterator[dict[str, Any]]:
        """Every object of `kind` carrying `label` (any value; "" for all), in
        `namespaces` (all when empty), as plain JSON: what the caches start from before
        the watches take over. `kind`: trainingrequests, jobs, jobsets, services, nodes."""
        async for listed in self.snapshots(kind, label, namespaces):
            for item in listed.items:
                yield item

    async def snapshots(
        self, kind: str, label: str, namespaces: tuple[str, ...] = ()
    ) -> AsyncIterator[Listed]:
        """As `listing`, a page at a time, each with the resourceVersion the list is at
        (the same for every page of one list)."""
        scopes: tuple[str | None, ...] = (
            (None,) if kind == "nodes" or not namespaces else namespaces
        )
        for namespace in scopes:
            async for listed in self._pages(kind, label, namespace):
                yield listed

    async def _pages(self, kind: str, label: str, namespace: str | None) -> AsyncIterator[Listed]:
        group, version = _KINDS[kind]
        query = {"limit": str(LIST_PAGE)}
        if label:
            query["labelSelector"] = label
        while True:
            try:
                listed = await self.call("GET", _path(group, version, kind, namespace), query=query)
            except NotFound:
                if kind in (JOBSET_PLURAL, POLICIES):  # no such API here: none of them either
                    yield Listed(kind, namespace, [], None)
                    return
                raise
            metadata = listed.get("metadata") or {}
            at = str(metadata.get("resourceVersion") or "")
            yield Listed(
                kind, namespace, listed.get("items") or [], int(at) if at.isdigit() else None
            )
            token = metadata.get("continue")
            if not token:
                return
            # A token the server has compacted away answers 410 Gone: raised, and the
            # caller lists again from the start later.
            query = {**query, "continue": str(token)}
