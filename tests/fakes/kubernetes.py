"""An in-memory Kubernetes API server for the fast test tier: `KubeApi(MemoryKube())`.

It answers the calls `controller.kube.KubeApi` makes the way kube-apiserver does, and
no others: create, get, list (label selectors, pages), JSON merge patch and replacement
(PUT) of an object or of its status, delete (uid precondition, finalizers), Events,
discovery. Its errors are the transport's typed ones, with the real server's messages.
Instead of HTTP watches it calls back with every change, as a watch tells it
(`MemoryKube.watch`). It has no schema validation or defaulting (a CRD's defaults, a
Job's selector, a Service's clusterIP), no managedFields, no admission, no
namespaces of its own (every namespace exists), no generateName (the operator names
what it makes), and of the garbage collector only this: its finalizer comes off at once
(owner references are not followed), or, on an object a test says has dependents the fake
does not store (`hold`), once the test says they are gone (`let_go`). metadata.generation is
kept for custom resources only (the operator reads its own kind's): 1 at creation, one more
for each write that changes anything but the metadata (and the status, of a kind with a
/status subresource), and once more when a delete marks the object deleting.
tests/cluster/contract runs the same assertions against it and against a real
kube-apiserver; where they disagree, the fake is wrong.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from http import HTTPStatus
from typing import Any, Literal
from urllib.parse import unquote

from dws_operator import rfc3339
from dws_operator.api import GROUP, KIND, PLURAL, VERSION
from dws_operator.api.policy import POLICY_KIND, POLICY_PLURAL
from dws_operator.kubekit.transport import ApiError, api_error

__all__ = ["DEFAULT_RESOURCES", "EventType", "MemoryKube", "Resource", "Unwatch", "Watcher"]

Object = dict[str, Any]

#: A watch event's type, as the server names it.
EventType = Literal["ADDED", "MODIFIED", "DELETED"]
#: Told of one change: the resource's plural ("jobs"), the event's type, and the object
#: as a watch event carries it (the callback's own copy).
Watcher = Callable[[str, EventType, Object], None]
#: Ends a watch; calling it again does nothing.
Unwatch = Callable[[], None]


@dataclass(frozen=True)
class Resource:
    """A kind the fake serves, as its API group registers it."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    #: Served with a /status subresource: status is written there and only there.
    status: bool = False
    #: Compiled into the API server (not a CRD): its list items carry no kind or
    #: apiVersion (a typed list's items are encoded without them).
    builtin: bool = False
    #: A PUT to a name not there creates the object (a Lease's registry allows it; most
    #: answer 404).
    create_on_update: bool = False

    @property
    def unconditional_update(self) -> bool:
        """Whether a PUT without a resourceVersion replaces whatever is stored: so for the
        compiled-in kinds served here; a CRD's object refuses it (422)."""
        return self.builtin

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """As the server names the resource in its messages: `jobs.batch`, `services`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        """As the server names the kind in its messages: `Job.batch`, `Service`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


#: What a cluster with the project's CRDs serves of the kinds KubeApi reads and writes.
#: Kueue's and JobSet's kinds are third-party CRDs: pass them in where a test has them
#: (without them, KubeApi's lists of them find the API absent, as in a cluster).
DEFAULT_RESOURCES = (
    Resource("", "v1", "services", "Service", status=True, builtin=True),
    Resource("", "v1", "events", "Event", builtin=True),
    Resource("", "v1", "configmaps", "ConfigMap", builtin=True),
    Resource("", "v1", "nodes", "Node", namespaced=False, status=True, builtin=True),
    Resource("batch", "v1", "jobs", "Job", status=True, builtin=True),
    Resource("coordination.k8s.io", "v1", "leases", "Lease", builtin=True, create_on_update=True),
    Resource(GROUP, VERSION, PLURAL, KIND, status=True),
    Resource(GROUP, VERSION, POLICY_PLURAL, POLICY_KIND),
)

#: Continue tokens outlive their list only so long: etcd compacts the history a paged
#: list reads from (every five minutes by default), then the token answers 410 Gone.
#: Here the newest hundred paged lists keep theirs.
KEPT_SNAPSHOTS = 100

#: Metadata an update cannot change: the server puts the stored values back.
_KEPT_ON_UPDATE = ("creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
#: Metadata an update may not change: the server refuses the update (422).
_IMMUTABLE = ("name", "namespace", "uid")

#: The garbage collector's finalizer for each propagationPolicy that needs it.
_COLLECTOR = {"Foreground": "foregroundDeletion", "Orphan": "orphan"}

_OPTIMISTIC_LOCK = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


class MemoryKube:
    """Objects in memory behind the `Connection` surface KubeApi uses (`request`,
    `keep_logged_in`, `close`, `on_error`). Every write moves one integer resource
    version, as etcd's revision moves. `calls` records each request as (method, path);
    `watch` tells a callback of every change."""

    def __init__(
        self,
        resources: Iterable[Resource] = DEFAULT_RESOURCES,
        now: Callable[[], datetime] = rfc3339.now,
    ) -> None:
        self.resources = {(r.group, r.version, r.plural): r for r in resources}
        self.now = now
        self.calls: list[tuple[str, str]] = []
        #: Told the HTTP status of every answer that is an error, as `Connection` tells.
        self.on_error: Callable[[int], None] | None = None
        self.version = 1
        # Stored objects are never changed in place (a write stores a new dict), so a
        # list's snapshot can hold them as they are.
        self._objects: dict[Resource, dict[tuple[str, str], Object]] = {}
        self._snapshots: dict[tuple[Resource, str | None, int], list[tuple[str, Object]]] = {}
        self._watchers: dict[object, Watcher] = {}  # by a token of each watch, in order
        #: The changes the request being answered made, told once it is answered.
        self._changes: list[tuple[str, EventType, Object]] = []
        #: Objects whose dependents the fake does not store hold them (`hold`).
        self._held: set[tuple[str, str, str]] = set()

    def watch(self, callback: Watcher) -> Unwatch:
        """Tell `callback` of every change from now on, of every resource, in the order
        made, as a watch from the current version would: ADDED for a create (or a PUT
        that creates); MODIFIED for every other write that moves the object's
        resourceVersion (a patch or PUT of the object or its status, a finalizer on or
        off, a delete held back by finalizers, the garbage collector's own finalizer
        taken off); DELETED when the object goes, carrying its last stored state at the
        version of the delete (newer than any it was stored at), as the real server's
        does. A write that changes nothing moves no version and tells nothing.

        Callbacks are called synchronously, in the order subscribed, after the request
        that made the changes has made all of them and before its answer returns; each
        gets its own deep copy. What a callback raises comes out of that request (its
        changes made, and told to every other callback first). Returns the function that
        ends this watch."""
        token = object()
        self._watchers[token] = callback

        def unwatch() -> None:
            self._watchers.pop(token, None)

        return unwatch

    def hold(self, plural: str, namespace: str, name: str) -> None:
        """The object has dependents the fake does not store (a Job's pods): a delete in
        the foreground keeps the collector's "foregroundDeletion" on it until `let_go`,
        as the garbage collector keeps it until they are gone."""
        self._held.add((plural, namespace, name))

    def let_go(self, plural: str, namespace: str, name: str) -> None:
        """Its dependents are gone: a foreground delete waiting on them ends (the
        collector's finalizer comes off, and the object goes if nothing else holds
        it), and watchers are told."""
        self._held.discard((plural, namespace, name))
        for resource, objects in self._objects.items():
            body = objects.get((namespace, name)) if resource.plural == plural else None
            finalizers = (body or {}).get("metadata", {}).get("finalizers") or []
            if body is not None and _COLLECTOR["Foreground"] in finalizers:
                kept = [f for f in finalizers if f != _COLLECTOR["Foreground"]]
                self._collect(resource, body, kept)
        self._tell()

    def writes(self) -> list[tuple[str, str]]:
        """The requests that were not reads."""
        return [call for call in self.calls if call[0] != "GET"]

    async def keep_logged_in(self) -> None:
        """Nothing expires here."""

    async def close(self) -> None:
        """Nothing to close."""

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> bytes:
        # A real call gives the event loop to other tasks while it is on the wire; the
        # answer is then made at once, so each request is atomic, as each is on etcd.
        await asyncio.sleep(0)
        self.calls.append((method, path))
        # Through JSON, as over the wire: nothing the caller keeps is shared with the store.
        sent = None if body is None else json.loads(json.dumps(body))
        try:
            answer = self._answer(method, path, dict(query or {}), sent, content_type)
        except ApiError as error:
            if self.on_error is not None:
                self.on_error(error.status)
            raise
        finally:
            self._tell()
        return json.dumps(answer).encode()

    def _tell(self) -> None:
        changes, self._changes = self._changes, []
        raised: Exception | None = None
        for plural, type_, body in changes:
            for watcher in list(self._watchers.values()):
                try:
                    watcher(plural, type_, copy.deepcopy(body))
                except Exception as error:
                    raised = raised or error
        if raised is not None:
            raise raised

    # -- routing ----------------------------------------------------------------------

    def _answer(
        self, method: str, path: str, query: dict[str, str], body: Any, content_type: str
    ) -> Any:
        if path == "/apis" and method == "GET":
            return self._discovery()
        resource, namespace, name, subresource = self._route(path)
        if not name:
            if method == "GET":
                return self._list(resource, namespace, query)
            if method == "POST" and (namespace is not None or not resource.namespaced):
                return self._create(resource, namespace, body)
        elif method == "GET":
            return self._get(resource, namespace, name)
        elif method == "PATCH":
            return self._patch(resource, namespace, name, subresource, body, content_type)
        elif method == "PUT":
            return self._put(resource, namespace, name, subresource, body)
        elif method == "DELETE" and not subresource:
            return self._delete(resource, namespace, name, body)
        raise _error(405, "MethodNotAllowed", f"MemoryKube does not serve {method} {path}")

    def _route(self, path: str) -> tuple[Resource, str | None, str, str]:
        """The resource, namespace, name and subresource a path names; 404 as the real
        server answers a path it serves nothing at."""
        parts = path.strip("/").split("/")
        if parts[0] == "api" and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise _unserved(plain=True)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = unquote(rest[1]), rest[2:]
        resource = self.resources.get((group, version, rest[0]))
        # A group of CRDs is served by a handler that hands what it does not serve to
        # the server's last resort, a plain "404 page not found"; a compiled-in group
        # version answers a Status for a resource it does not have.
        builtin = any(
            r.builtin for r in self.resources.values() if (r.group, r.version) == (group, version)
        )
        if resource is None or len(rest) > 3:
            raise _unserved(plain=not builtin)
        if namespace is not None and not resource.namespaced:
            raise _unserved(plain=not resource.builtin)
        if namespace is None and resource.namespaced and len(rest) > 1:
            # An object of a namespaced kind is named in its namespace.
            raise _unserved(plain=not resource.builtin)
        name = unquote(rest[1]) if len(rest) > 1 else ""
        subresource = rest[2] if len(rest) > 2 else ""
        if subresource and (subresource != "status" or not resource.status):
            raise _unserved(plain=not resource.builtin)
        return resource, namespace, name, subresource

    def _discovery(self) -> Object:
        """GET /apis: each named group and its versions, in the order registered."""
        groups: dict[str, list[str]] = {}
        for resource in self.resources.values():
            if resource.group:
                versions = groups.setdefault(resource.group, [])
                if resource.version not in versions:
                    versions.append(resource.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in versions],
                    "preferredVersion": {
                        "groupVersion": f"{group}/{versions[0]}",
                        "version": versions[0],
                    },
                }
                for group, versions in groups.items()
            ],
        }

    # -- reads --------------------------------------------------------------------------

    def _get(self, resource: Resource, namespace: str | None, name: str) -> Object:
        found = self._objects.get(resource, {}).get((namespace or "", name))
        if found is None:
            raise _error(
                404,
                "NotFound",
                f'{resource.qualified} "{name}" not found',
                _details(resource, name),
            )
        return found

    def _list(self, resource: Resource, namespace: str | None, query: dict[str, str]) -> Object:
        """A list (one namespace, or all), by label, a page at a time: every page of one
        list is read at the version of its first, whatever was written since, and a page
        is cut at `limit` matches; another page is promised while any object (matching
        or not) follows the last one given, so a last page may come empty."""
        matches = _selector(query.get("labelSelector", ""))
        limit = int(query.get("limit") or 0)
        token = query.get("continue")
        if token:
            at, start = _decode(token)
            snapshot = self._snapshots.get((resource, namespace, at))
            if snapshot is None:
                raise _error(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent "
                    "list result. You can start a new list without the continue parameter.",
                )
        else:
            at, start = self.version, ""
            stored = self._objects.get(resource, {})
            snapshot = sorted(
                (f"{ns}/{name}" if resource.namespaced else name, body)
                for (ns, name), body in stored.items()
                if namespace is None or ns == namespace
            )
        items: list[Object] = []
        last, more = "", False
        for key, body in snapshot:
            if key <= start:
                continue
            if limit and len(items) >= limit:
                more = True
                break
            if matches(body["metadata"].get("labels") or {}):
                items.append(_listed(resource, body))
                last = key
        metadata: dict[str, Any] = {"resourceVersion": str(at)}
        if not resource.builtin:
            metadata["continue"] = ""  # a CRD's list says "" where a typed list says nothing
        if more:
            self._snapshots[(resource, namespace, at)] = snapshot
            while len(self._snapshots) > KEPT_SNAPSHOTS:
                del self._snapshots[next(iter(self._snapshots))]
            metadata["continue"] = _encode(at, last)
            if not query.get("labelSelector"):
                # Counted only without a selector (with one, the server cannot know).
                metadata["remainingItemCount"] = sum(1 for key, _ in snapshot if key > last)
        return {
            "kind": f"{resource.kind}List",
            "apiVersion": resource.api_version,
            "metadata": metadata,
            "items": items,
        }

    # -- writes -------------------------------------------------------------------------

    def _store(self, resource: Resource, body: Object) -> Object:
        """Stores `body` at the next resource version."""
        self.version += 1
        body["metadata"]["resourceVersion"] = str(self.version)
        metadata = body["metadata"]
        stored = self._objects.setdefault(resource, {})
        key = (metadata.get("namespace", ""), metadata["name"])
        type_: EventType = "MODIFIED" if key in stored else "ADDED"
        stored[key] = body
        self._changes.append((resource.plural, type_, body))
        return body

    def _remove(self, resource: Resource, body: Object) -> None:
        self.version += 1  # a delete is a write: it moves the version too
        metadata = body["metadata"]
        last = self._objects[resource].pop((metadata.get("namespace", ""), metadata["name"]))
        # The DELETED event carries the object as last stored (a patch or PUT that took
        # the last finalizer off is not stored: its finalizers are still on), at the
        # version of the delete.
        told = {**last, "metadata": {**last["metadata"], "resourceVersion": str(self.version)}}
        self._changes.append((resource.plural, "DELETED", told))

    def _create(self, resource: Resource, namespace: str | None, body: Any) -> Object:
        if not isinstance(body, dict):
            raise _error(400, "BadRequest", "the body of the request was not an object")
        metadata = dict(body.get("metadata") or {})
        name = str(metadata.get("name") or "")
        if not name:
            raise _invalid(
                resource, "", "metadata.name", "Required", "name or generateName is required"
            )
        if resource.namespaced:
            if metadata.get("namespace") not in (None, "", namespace):
                raise _error(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            metadata["namespace"] = namespace
        if (namespace or "", name) in self._objects.get(resource, {}):
            raise _error(
                409,
                "AlreadyExists",
                f'{resource.qualified} "{name}" already exists',
                _details(resource, name),
            )
        for system in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            metadata.pop(system, None)
        metadata["uid"] = str(uuid.uuid4())
        metadata["creationTimestamp"] = rfc3339.seconds(self.now())
        metadata.pop("generation", None)
        if not resource.builtin:
            metadata["generation"] = 1
        created = {
            **body,
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": _omit_empty(metadata),
        }
        if resource.status:
            # A create cannot set the status of a kind with a /status subresource: a CRD's
            # is dropped (the compiled-in kinds reset theirs to an empty one).
            created.pop("status", None)
        return self._store(resource, created)

    def _patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        subresource: str,
        patch: Any,
        content_type: str,
    ) -> Object:
        if content_type != "application/merge-patch+json":
            raise _error(
                415,
                "UnsupportedMediaType",
                f"MemoryKube applies merge patches only: {content_type}",
            )
        old = self._get(resource, namespace, name)
        if not isinstance(patch, dict):
            raise _error(400, "BadRequest", "the patch is not a JSON object")
        merged: Object = _merge(old, patch)
        if not isinstance(merged.get("metadata"), dict):
            raise _error(400, "BadRequest", "the patched object has no metadata")
        # A resourceVersion in the patch is a precondition: the update is made only over
        # that version (left out, the patch applies to whatever is stored).
        self._check_version(resource, name, old, merged["metadata"].get("resourceVersion"))
        return self._update(resource, name, old, merged, subresource)

    def _put(
        self, resource: Resource, namespace: str | None, name: str, subresource: str, body: Any
    ) -> Object:
        """A replacement: the object (or its status) as sent, over the resourceVersion
        sent. Metadata left out of it (labels, finalizers, ...) is gone afterwards."""
        if not isinstance(body, dict):
            raise _error(400, "BadRequest", "the body of the request was not an object")
        metadata = body.get("metadata")
        metadata = dict(metadata) if isinstance(metadata, dict) else {}
        given = metadata.get("name")
        if not given:
            raise _error(
                400,
                "BadRequest",
                f"the name of the object ({name} based on URL) was undeterminable: name must "
                "be provided",
            )
        if given != name:
            raise _error(
                400,
                "BadRequest",
                f"the name of the object ({given}) does not match the name on the URL ({name})",
            )
        if resource.namespaced:
            if metadata.get("namespace") not in (None, "", namespace):
                raise _error(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent "
                    "on the request",
                )
            metadata["namespace"] = namespace
        stored = self._objects.get(resource, {}).get((namespace or "", name))
        if stored is None and resource.create_on_update and not subresource:
            # Created as by a POST, whatever resourceVersion the body names.
            return self._create(resource, namespace, body)
        old = self._get(resource, namespace, name)
        uid = metadata.get("uid")
        if uid and uid != old["metadata"]["uid"]:
            # A uid in the body is a precondition, checked by the storage layer before
            # anything else (a stale resourceVersion too answers this).
            key = "/".join(
                part for part in (_storage_prefix(resource), namespace, name) if part is not None
            )
            raise _error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.qualified} "{name}": StorageError: '
                f"invalid object, Code: 4, Key: /registry/{key}, ResourceVersion: 0, "
                f"AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in "
                f"object meta: {old['metadata']['uid']}",
                _details(resource, name),
            )
        version = metadata.get("resourceVersion")
        if not version and not resource.unconditional_update:
            raise _invalid(
                resource,
                name,
                "metadata.resourceVersion",
                "Invalid",
                "0: must be specified for an update",
                by_resource=True,
            )
        self._check_version(resource, name, old, version)
        metadata["uid"] = old["metadata"]["uid"]
        return self._update(resource, name, old, {**body, "metadata": metadata}, subresource)

    def _check_version(
        self, resource: Resource, name: str, old: Object, version: str | None
    ) -> None:
        """A resourceVersion sent with a write must be the stored one."""
        if version and version != old["metadata"]["resourceVersion"]:
            raise _error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.qualified} "{name}": '
                f"{_OPTIMISTIC_LOCK}",
                _details(resource, name),
            )

    def _update(
        self, resource: Resource, name: str, old: Object, new: Object, subresource: str
    ) -> Object:
        """Stores `new` over `old` (a patch's result, or a PUT's body) as the server
        updates an object: what an update may not change is kept or refused."""
        if subresource == "status":
            # /status writes the status alone: everything else is kept as stored.
            sent = new
            new = {key: value for key, value in old.items() if key != "status"}
            if "status" in sent:
                new["status"] = sent["status"]
        elif resource.status:
            # The object itself cannot write the status of a kind with a /status.
            new = dict(new)
            new.pop("status", None)
            if "status" in old:
                new["status"] = old["status"]
        metadata = new["metadata"] = dict(new["metadata"])
        for field in _IMMUTABLE:
            if metadata.get(field) != old["metadata"].get(field):
                raise _invalid(resource, name, f"metadata.{field}", "Invalid", "field is immutable")
        for field in _KEPT_ON_UPDATE:
            metadata.pop(field, None)
            if field in old["metadata"]:
                metadata[field] = old["metadata"][field]
        metadata["resourceVersion"] = old["metadata"]["resourceVersion"]
        if "generation" in old["metadata"]:
            # The server's to keep: a spec change (anything but metadata and status) is
            # a new generation.
            # A kind without /status counts its status as any other field.
            skipped = ("metadata", "status") if resource.status else ("metadata",)
            spec = {k: v for k, v in new.items() if k not in skipped}
            was = {k: v for k, v in old.items() if k not in skipped}
            metadata["generation"] = old["metadata"]["generation"] + (spec != was)
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        new["metadata"] = metadata = _omit_empty(metadata)
        finalizers = list(metadata.get("finalizers") or [])
        if "deletionTimestamp" in old["metadata"]:
            added = sorted(set(finalizers) - set(old["metadata"].get("finalizers") or []))
            if added:
                listed = ", ".join(f'"{f}"' for f in added)
                raise _invalid(
                    resource,
                    name,
                    "metadata.finalizers",
                    "Forbidden",
                    "no new finalizers can be added if the object is being "
                    f"deleted, found new finalizers []string{{{listed}}}",
                )
            if not finalizers:
                # The last finalizer off an object being deleted deletes it; the answer
                # is the object as the update left it (at the version it had).
                self._remove(resource, old)
                return new
        if new == old:
            return old  # nothing changed: nothing written, the version stays
        return self._store(resource, new)

    def _delete(self, resource: Resource, namespace: str | None, name: str, options: Any) -> Object:
        old = self._get(resource, namespace, name)
        options = options if isinstance(options, dict) else {}
        uid = (options.get("preconditions") or {}).get("uid")
        if uid is not None and uid != old["metadata"]["uid"]:
            # The server checks this before anything else, with the kind (not the
            # resource) in its message.
            raise _error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.qualified_kind} "{name}": the UID '
                f"in the precondition ({uid}) does not match the UID in record "
                f"({old['metadata']['uid']}). The object might have been deleted and then "
                "recreated",
                {"name": name, "group": resource.group, "kind": resource.kind},
            )
        # propagationPolicy: Foreground and Orphan are the garbage collector's work, asked
        # for by a finalizer of its own, which it takes off once the object's dependents
        # are gone or let go ("foregroundDeletion" stays on a Job until its pods are
        # gone); Background clears them.
        kept = [f for f in old["metadata"].get("finalizers") or [] if f not in _COLLECTOR.values()]
        policy = options.get("propagationPolicy")
        finalizers = kept + ([_COLLECTOR[policy]] if policy in _COLLECTOR else [])
        if not finalizers:
            self._remove(resource, old)
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {**_details(resource, name), "uid": old["metadata"]["uid"]},
            }
        deleting = copy.deepcopy(old)
        deleting["metadata"]["finalizers"] = finalizers
        if "deletionTimestamp" not in old["metadata"] and "generation" in old["metadata"]:
            # Marked deleting: its controllers must act differently, a new generation.
            deleting["metadata"]["generation"] += 1
        deleting["metadata"].setdefault("deletionTimestamp", rfc3339.seconds(self.now()))
        deleting["metadata"]["deletionGracePeriodSeconds"] = 0
        if deleting == old:
            return old  # being deleted already, as asked: nothing written
        answer = self._store(resource, deleting)
        held = (resource.plural, namespace or "", name) in self._held
        if finalizers != kept and not (held and policy == "Foreground"):
            self._collect(resource, answer, kept)
        return answer

    def _collect(self, resource: Resource, deleting: Object, kept: list[str]) -> None:
        """The garbage collector's turn, at once after the delete that asked for it: the
        fake has no dependents to wait for or let go, so it takes its finalizer off at
        once (the object goes if no other finalizer holds it). The delete's answer still
        shows the finalizer, as the real server's does."""
        if not kept:
            self._remove(resource, deleting)
            return
        collected = copy.deepcopy(deleting)
        collected["metadata"]["finalizers"] = kept
        self._store(resource, collected)


# -- helpers ----------------------------------------------------------------------------


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: objects merge key by key, null removes a key, anything
    else (lists included) replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = _merge(merged.get(key), value)
    return merged


def _omit_empty(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata as the server stores it: every ObjectMeta field is `omitempty`, so an
    emptied list of finalizers or map of labels is not there at all."""
    return {key: value for key, value in metadata.items() if value not in (None, "", [], {})}


def _listed(resource: Resource, body: Object) -> Object:
    if resource.builtin:
        return {key: value for key, value in body.items() if key not in ("apiVersion", "kind")}
    return body


def _selector(text: str) -> Callable[[Mapping[str, str]], bool]:
    """A label selector's equality requirements, all of which must hold (comma: and):
    `key`, `!key`, `key=value`, `key==value`, `key!=value` (also true without the key).
    Set-based ones (`in`, `notin`) are refused rather than misread."""
    tests: list[Callable[[Mapping[str, str]], bool]] = []
    for raw in text.split(","):
        part = raw.strip()
        if not part and not text.strip():
            continue
        key, operator, value = part, "exists", ""
        if part.startswith("!"):
            key, operator = part[1:].strip(), "absent"
        else:
            for symbol in ("!=", "==", "="):
                if symbol in part:
                    key, value = (s.strip() for s in part.split(symbol, 1))
                    operator = symbol
                    break
        if not key or any(c in key + value for c in " ()<>=!"):
            raise _error(400, "BadRequest", f"unable to parse requirement: {part!r}")
        tests.append(_requirement(key, operator, value))
    return lambda labels: all(test(labels) for test in tests)


def _requirement(key: str, operator: str, value: str) -> Callable[[Mapping[str, str]], bool]:
    if operator == "exists":
        return lambda labels: key in labels
    if operator == "absent":
        return lambda labels: key not in labels
    if operator == "!=":
        return lambda labels: labels.get(key) != value
    return lambda labels: labels.get(key) == value


def _encode(version: int, last: str) -> str:
    # The real token is opaque too (base64 JSON of the list's version and the key to go
    # on after); callers only hand it back.
    text = json.dumps({"rv": version, "start": last})
    return base64.urlsafe_b64encode(text.encode()).decode()


def _decode(token: str) -> tuple[int, str]:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(decoded["rv"]), str(decoded["start"])
    except (ValueError, KeyError, TypeError):
        raise _error(
            400, "BadRequest", f"invalid continue token: continue key is not valid: {token!r}"
        ) from None


#: Where etcd keeps a compiled-in resource, where that is not under its plural.
_STORAGE = {("", "services"): "services/specs", ("", "nodes"): "minions"}


def _storage_prefix(resource: Resource) -> str:
    """The resource's etcd key prefix under /registry: a CRD's under its group."""
    if not resource.builtin:
        return f"{resource.group}/{resource.plural}"
    return _STORAGE.get((resource.group, resource.plural), resource.plural)


def _details(resource: Resource, name: str) -> dict[str, str]:
    # The server's details name the resource (plural) under "kind".
    return {"name": name, "group": resource.group, "kind": resource.plural}


def _error(
    status: int, reason: str, message: str, details: Mapping[str, Any] | None = None
) -> ApiError:
    """The typed error `Connection` raises for the server's answer: a Status object."""
    answer = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": status,
    }
    if details is not None:
        answer["details"] = dict(details)  # the server leaves it out of some answers
    return api_error(status, HTTPStatus(status).phrase, json.dumps(answer))


#: The server's words for each kind of field error, before the error's own.
_FIELD_ERRORS = {"Required": "Required value", "Forbidden": "Forbidden", "Invalid": "Invalid value"}


def _invalid(
    resource: Resource, name: str, field: str, kind: str, detail: str, by_resource: bool = False
) -> ApiError:
    """422, as the server refuses an object breaking a rule: one field's error. Most name
    the kind (`Job.batch`); `by_resource`: the resource (`jobs.batch`), as the registry's
    own refusal of an update without a resourceVersion does."""
    problem = f"{_FIELD_ERRORS[kind]}: {detail}"
    return _error(
        422,
        "Invalid",
        f'{resource.qualified if by_resource else resource.qualified_kind} "{name}" is '
        f"invalid: {field}: {problem}",
        {
            "name": name,
            "group": resource.group,
            "kind": resource.plural if by_resource else resource.kind,
            "causes": [{"reason": f"FieldValue{kind}", "message": problem, "field": field}],
        },
    )


def _unserved(plain: bool) -> ApiError:
    """404 for a path the server serves nothing at: its catch-all's plain text (whose
    message `ApiError` takes from the reason, "Not Found"), or a Status."""
    if plain:
        return api_error(404, HTTPStatus(404).phrase, "404 page not found\n")
    return _error(404, "NotFound", "the server could not find the requested resource", {})
