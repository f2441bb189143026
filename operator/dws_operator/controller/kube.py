"""The Kubernetes API, as the reconciler uses it: plain JSON over the official async
client's transport (kubernetes.aio's ApiClient: its kubeconfig and in-cluster login,
TLS, token refresh and typed errors).

Why not the generated `CoreV1Api`-style classes: importing and building them costs
~29 MiB of the operator's memory (a pydantic `validate_call` schema per method, a model
class per type), and every call pays a validation of its arguments and a conversion of
the answer into models, which the operator turns straight back into dicts: its caches
keep JSON as the watches deliver it. The few calls it makes are written here once.
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config
from kubernetes.aio.client.exceptions import (
    ApiException,
    ConflictException,
    NotFoundException,
    UnprocessableEntityException,
)

from dws_operator import rfc3339
from dws_operator.api import GROUP, KIND, PLURAL, VERSION
from dws_operator.controller.fence import FENCE
from dws_operator.identity import FIELD_MANAGER
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_operator.multislice import JOBSET_GROUP, JOBSET_PLURAL, JOBSET_VERSION

#: Kueue's LocalQueues (plural), watched to tell a request whose queue does not exist.
LOCAL_QUEUES = "localqueues"

#: Connections kept to the API server, shared by the reconcile workers and the Event
#: poster: a pass makes a call or two, a few milliseconds each, so ten carry hundreds
#: of calls a second; each TLS connection holds 256 KiB of buffers (not the client's
#: default of 100).
CONNECTIONS = 10

__all__ = [
    "FIELD_MANAGER",
    "LOCAL_QUEUES",
    "ApiException",
    "ConflictException",
    "KubeApi",
    "Listed",
    "NotFoundException",
    "UnprocessableEntityException",
    "WorkloadRejected",
    "bearer_token",
    "connect",
    "load_configuration",
]

log = logging.getLogger(__name__)


async def load_configuration(kubeconfig: str | None = None) -> k8s.Configuration:
    """The one login path of the operator (its own client and kopf's): in-cluster
    credentials when running in a pod, else the kubeconfig (KUBECONFIG), read by the
    official client, so whatever it accepts works (embedded or file certificates, tokens,
    exec credential plugins such as gke-gcloud-auth-plugin)."""
    configuration = k8s.Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        await k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig or os.environ.get("KUBECONFIG"),
            client_configuration=configuration,
        )
    return configuration


async def bearer_token(configuration: k8s.Configuration) -> str | None:
    """The current token (an exec plugin's is refreshed when due), without its scheme."""
    header = await configuration.get_api_key_with_prefix("BearerToken")
    if not header:
        return None
    scheme, _, token = str(header).partition(" ")
    return token if token else scheme


async def connect(kubeconfig: str | None = None) -> k8s.ApiClient:
    """A client logged in through `load_configuration`."""
    configuration = await load_configuration(kubeconfig)
    configuration.connection_pool_maxsize = CONNECTIONS
    # The proxy settings are read once here. With aiohttp's trust_env every request
    # would read them again, and ~/.netrc, in a thread of its own.
    configuration.proxy = configuration.proxy or _proxy_for(str(configuration.host))
    configuration.client_session_kwargs = {"trust_env": False}
    return k8s.ApiClient(configuration)


def _proxy_for(url: str) -> str | None:
    scheme = url.split("://", 1)[0]
    host = url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]
    proxies = urllib.request.getproxies()
    if scheme not in proxies or urllib.request.proxy_bypass(host):
        return None
    return proxies[scheme]


class WorkloadRejected(Exception):
    """The API server (or an admission webhook) refused the workload as invalid: the
    same object will never be accepted, so the request fails instead of retrying."""

    def __init__(self, kind: str, name: str, error: ApiException) -> None:
        self.reason = "WorkloadRejected"
        self.message = f"{kind} {name} refused ({error.status}): {_server_message(error)}"
        super().__init__(self.message)


def _server_message(error: ApiException) -> str:
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or error.reason or "no message")


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
}


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

    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api

    async def call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        fenced: bool = True,
    ) -> Any:
        """One request; the answer's JSON. Raises the client's typed `ApiException`s
        (`NotFoundException`, `ConflictException`, ...) for an answer that is not 2xx."""
        if fenced and method != "GET":
            FENCE.check()  # a replica that lost its Lease writes nothing
        headers = {"Accept": "application/json"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        serialized = await self.api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        if fenced and method != "GET":
            FENCE.check()  # again: refreshing credentials above may have taken a while
        response = await self.api.call_api(*serialized)
        data = await response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(
                http_resp=response, body=data.decode("utf-8", "replace"), data=None
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
        except ConflictException:
            return None
        except ApiException as error:
            if error.status in (400, 422):
                kind = str(manifest.get("kind") or plural)
                raise WorkloadRejected(kind, manifest["metadata"]["name"], error) from error
            raise
        return created if isinstance(created, dict) else None

    async def delete(self, plural: str, namespace: str, name: str) -> bool:
        """Delete if there (False: it was not); what the object owns goes through
        garbage collection in the background (a Job's pods; a JobSet's Jobs, so the next
        attempt need not wait)."""
        group, version = _KINDS[plural]
        try:
            await self.call(
                "DELETE",
                _path(group, version, plural, namespace, name),
                body={"propagationPolicy": "Background"},
            )
        except NotFoundException:
            return False
        return True

    async def service_owners(self, namespace: str, name: str) -> list[str] | None:
        """The owner uids of the Service, or None when there is no such Service."""
        try:
            service = await self.call("GET", _path("", "v1", "services", namespace, name))
        except NotFoundException:
            return None
        owners = (service.get("metadata") or {}).get("ownerReferences") or []
        return [str(o.get("uid")) for o in owners]

    # -- TrainingRequests -----------------------------------------------------------

    async def training_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body = await self.call("GET", _path(GROUP, VERSION, PLURAL, namespace, name))
        except NotFoundException:
            return None
        return dict(body)

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Merge `status` in; the request as stored after, or None if it is gone."""
        return await self._merge(namespace, name, {"status": status}, "/status")

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
        except NotFoundException:
            return None
        return dict(stored)

    async def post_event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        """An Event about `involved` (a TrainingRequest body). Events are for people:
        one that cannot be posted is logged, never allowed to fail the pass."""
        metadata = involved.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        now = rfc3339.seconds(rfc3339.now())
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
        except ApiException as error:
            log.warning("posting event %s about %s: %s", reason, metadata.get("name"), error)

    # -- Discovery and listing ------------------------------------------------------

    async def served_versions(self, group: str) -> tuple[str, ...]:
        """The versions the API server serves of `group` (discovery); () when none."""
        groups = (await self.call("GET", "/apis")).get("groups") or []
        found = next((g for g in groups if g.get("name") == group), None)
        return tuple(str(v.get("version")) for v in (found or {}).get("versions") or [])

    async def listing(
        self, kind: str, label: str, namespaces: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """Every object of `kind` carrying `label` (any value; "" for all), in
        `namespaces` (all when empty), as plain JSON: what the caches start from before
        the watches take over. `kind`: trainingrequests, jobs, jobsets, services, nodes."""
        if kind == "nodes" or not namespaces:
            return await self._list(kind, label, None)
        items: list[dict[str, Any]] = []
        for namespace in namespaces:
            items += await self._list(kind, label, namespace)
        return items

    async def snapshots(
        self, kind: str, label: str, namespaces: tuple[str, ...] = ()
    ) -> list[Listed]:
        """As `listing`, one `Listed` per list call, with the resourceVersion it is at."""
        if kind == "nodes" or not namespaces:
            return [await self._snapshot(kind, label, None)]
        return [await self._snapshot(kind, label, namespace) for namespace in namespaces]

    async def _list(self, kind: str, label: str, namespace: str | None) -> list[dict[str, Any]]:
        return (await self._snapshot(kind, label, namespace)).items

    async def _snapshot(self, kind: str, label: str, namespace: str | None) -> Listed:
        group, version = _KINDS[kind]
        query = {"labelSelector": label} if label else {}
        try:
            listed = await self.call("GET", _path(group, version, kind, namespace), query=query)
        except NotFoundException:
            if kind == JOBSET_PLURAL:  # no JobSet API in this cluster: no JobSets either
                return Listed(kind, namespace, [], None)
            raise
        at = str((listed.get("metadata") or {}).get("resourceVersion") or "")
        return Listed(kind, namespace, listed.get("items") or [], int(at) if at.isdigit() else None)
