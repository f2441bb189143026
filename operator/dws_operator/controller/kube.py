"""The Kubernetes API, as the reconciler uses it (kubernetes.aio, the official async client)."""

from __future__ import annotations

import json
import logging
import os
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubernetes.aio import client as k8s
from kubernetes.aio import config as k8s_config
from kubernetes.aio.client.exceptions import ApiException

from dws_operator.api import GROUP, KIND, PLURAL, VERSION
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.multislice import (
    JOBSET_GROUP,
    JOBSET_NAME_LABEL,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from dws_operator.workload import REQUEST_LABEL

FIELD_MANAGER = "dws-operator"

log = logging.getLogger(__name__)


async def connect(kubeconfig: str | None = None) -> k8s.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG)."""
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
        return k8s.ApiClient()
    api: k8s.ApiClient = await k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig or os.environ.get("KUBECONFIG")
    )
    return api


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


def _created(kind: str, manifest: dict[str, Any], error: ApiException) -> None:
    """Judge a create that failed: 409 is someone else's (or our earlier) object, which
    the next observation judges; 400/422 is invalid for good; the rest is retried."""
    if error.status == 409:
        return
    if error.status in (400, 422):
        raise WorkloadRejected(kind, manifest["metadata"]["name"], error) from error
    raise error


def _missing(error: ApiException) -> bool:
    return bool(error.status == 404)


def _model(cls: Any, manifest: dict[str, Any]) -> Any:
    model = cls.from_dict(manifest)
    if model is None:
        raise ValueError(f"cannot read {manifest.get('kind')} {manifest['metadata']['name']}")
    return model


class KubeApi:
    """Jobs, Services and TrainingRequest status of the namespaces the operator serves."""

    def __init__(self, api: k8s.ApiClient) -> None:
        self.api = api
        self.batch = k8s.BatchV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.objects = k8s.CustomObjectsApi(api)

    async def job(self, namespace: str, name: str) -> k8s.V1Job | None:
        try:
            return await self.batch.read_namespaced_job(name, namespace)
        except ApiException as error:
            if _missing(error):
                return None
            raise

    async def job_names(self, namespace: str, request: str, uid: str) -> list[str]:
        """The Jobs of the request `request` (owned by `uid`), every attempt."""
        listed = await self.batch.list_namespaced_job(
            namespace, label_selector=f"{REQUEST_LABEL}={request}"
        )
        return [
            job.metadata.name
            for job in listed.items
            if job.metadata
            and job.metadata.name
            and any(o.uid == uid for o in job.metadata.owner_references or [])
        ]

    async def create_job(self, manifest: dict[str, Any]) -> None:
        """Create; an existing Job of that name is left for the next observation to judge."""
        try:
            await self.batch.create_namespaced_job(
                manifest["metadata"]["namespace"],
                _model(k8s.V1Job, manifest),
                field_manager=FIELD_MANAGER,
            )
        except ApiException as error:
            _created("Job", manifest, error)

    async def delete_job(self, namespace: str, name: str) -> None:
        try:
            # Background: the Job goes now, its pods follow through garbage collection.
            await self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background")
        except ApiException as error:
            if not _missing(error):
                raise

    async def service_owners(self, namespace: str, name: str) -> list[str] | None:
        """The owner uids of the Service, or None when there is no such Service."""
        try:
            service = await self.core.read_namespaced_service(name, namespace)
        except ApiException as error:
            if _missing(error):
                return None
            raise
        owners = (service.metadata.owner_references if service.metadata else None) or []
        return [o.uid for o in owners]

    async def jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body: Any = await self.objects.get_namespaced_custom_object(
                JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name
            )
        except ApiException as error:
            if _missing(error):
                return None
            raise
        return dict(body)

    async def jobset_names(self, namespace: str, request: str, uid: str) -> list[str]:
        """The JobSets of the request `request` (owned by `uid`), every attempt."""
        try:
            listed: Any = await self.objects.list_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                label_selector=f"{REQUEST_LABEL}={request}",
            )
        except ApiException as error:
            if _missing(error):  # no JobSet API in this cluster: no JobSets either
                return []
            raise
        return [
            item["metadata"]["name"]
            for item in listed.get("items", [])
            if any(o.get("uid") == uid for o in item["metadata"].get("ownerReferences") or [])
        ]

    async def jobset_children(self, namespace: str, jobset: str) -> list[k8s.V1Job]:
        """The Jobs the JobSet controller made for `jobset`."""
        listed = await self.batch.list_namespaced_job(
            namespace, label_selector=f"{JOBSET_NAME_LABEL}={jobset}"
        )
        return list(listed.items)

    async def create_jobset(self, manifest: dict[str, Any]) -> None:
        """Create; an existing JobSet of that name is left for the next observation to judge."""
        try:
            await self.objects.create_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                manifest["metadata"]["namespace"],
                JOBSET_PLURAL,
                manifest,
                field_manager=FIELD_MANAGER,
            )
        except ApiException as error:
            _created("JobSet", manifest, error)

    async def delete_jobset(self, namespace: str, name: str) -> None:
        try:
            # Foreground would keep the JobSet until its Jobs are gone; background lets
            # the next attempt start while garbage collection removes the old Jobs.
            await self.objects.delete_namespaced_custom_object(
                JOBSET_GROUP,
                JOBSET_VERSION,
                namespace,
                JOBSET_PLURAL,
                name,
                propagation_policy="Background",
            )
        except ApiException as error:
            if not _missing(error):
                raise

    async def nodes_by_pool(self, pools: tuple[str, ...]) -> dict[str, int]:
        """How many Nodes each of `pools` has now (GKE labels every Node with its pool)."""
        listed = await self.core.list_node(
            label_selector=f"{NODE_POOL_LABEL_KEY} in ({','.join(pools)})"
        )
        counts = dict.fromkeys(pools, 0)
        for node in listed.items:
            pool = ((node.metadata.labels if node.metadata else None) or {}).get(
                NODE_POOL_LABEL_KEY
            )
            if pool in counts:
                counts[pool] += 1
        return counts

    async def create_service(self, manifest: dict[str, Any]) -> None:
        try:
            await self.core.create_namespaced_service(
                manifest["metadata"]["namespace"],
                _model(k8s.V1Service, manifest),
                field_manager=FIELD_MANAGER,
            )
        except ApiException as error:
            if error.status != 409:
                raise

    async def delete_service(self, namespace: str, name: str) -> None:
        try:
            await self.core.delete_namespaced_service(name, namespace)
        except ApiException as error:
            if not _missing(error):
                raise

    async def patch_status(
        self, namespace: str, name: str, status: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Merge `status` in; the request as stored after, or None if it is gone."""
        return await self._merge(
            self.objects.patch_namespaced_custom_object_status, namespace, name, {"status": status}
        )

    async def patch_metadata(
        self, namespace: str, name: str, metadata: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Merge `metadata` into the request's; as stored after, or None if it is gone."""
        return await self._merge(
            self.objects.patch_namespaced_custom_object, namespace, name, {"metadata": metadata}
        )

    async def _merge(
        self, patch: Any, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        try:
            stored: Any = await patch(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body,
                field_manager=FIELD_MANAGER,
                _content_type="application/merge-patch+json",
            )
        except ApiException as error:
            if _missing(error):
                return None
            raise
        return dict(stored)

    async def post_event(
        self, involved: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        """An Event about `involved` (a TrainingRequest body). Events are for people:
        one that cannot be posted is logged, never allowed to fail the pass."""
        metadata = involved.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "default")
        now = datetime.now(UTC)
        event = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(
                name=f"{metadata.get('name')}.{uuid.uuid4().hex[:16]}", namespace=namespace
            ),
            involved_object=k8s.V1ObjectReference(
                api_version=f"{GROUP}/{VERSION}",
                kind=KIND,
                name=metadata.get("name"),
                namespace=namespace,
                uid=metadata.get("uid"),
                resource_version=metadata.get("resourceVersion"),
            ),
            type=type_,
            reason=reason,
            # The API server refuses longer messages; the status keeps the whole text.
            message=message[:1024],
            first_timestamp=now,
            last_timestamp=now,
            count=1,
            source=k8s.V1EventSource(component=FIELD_MANAGER),
            reporting_component=FIELD_MANAGER,
            reporting_instance=FIELD_MANAGER,
        )
        try:
            await self.core.create_namespaced_event(namespace, event)
        except ApiException as error:
            log.warning("posting event %s about %s: %s", reason, metadata.get("name"), error)

    async def training_request(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            body: Any = await self.objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name
            )
        except ApiException as error:
            if _missing(error):
                return None
            raise
        return dict(body)

    async def served_versions(self, group: str) -> tuple[str, ...]:
        """The versions the API server serves of `group` (discovery); () when none."""
        groups = (await k8s.ApisApi(self.api).get_api_versions()).groups or []
        found = next((g for g in groups if g.name == group), None)
        return tuple(v.version for v in (found.versions if found else None) or [])

    async def training_requests(self) -> list[dict[str, Any]]:
        listed: Any = await self.objects.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        items: list[dict[str, Any]] = listed.get("items", [])
        return items

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

    async def _list(self, kind: str, label: str, namespace: str | None) -> list[dict[str, Any]]:
        selector = label or None
        raw: Any
        if kind in (PLURAL, JOBSET_PLURAL):
            group, version = (GROUP, VERSION) if kind == PLURAL else (JOBSET_GROUP, JOBSET_VERSION)
            try:
                if namespace is None:
                    raw = await self.objects.list_cluster_custom_object(
                        group, version, kind, label_selector=selector
                    )
                else:
                    raw = await self.objects.list_namespaced_custom_object(
                        group, version, namespace, kind, label_selector=selector
                    )
            except ApiException as error:
                if _missing(error):  # no JobSet API in this cluster: no JobSets either
                    return []
                raise
        else:
            # Plain JSON, not models: the caches keep dicts, as the watches deliver them.
            response: Any
            if kind == "nodes":
                response = await self.core.list_node_without_preload_content(
                    label_selector=selector
                )
            elif namespace is None:
                every = {
                    "jobs": self.batch.list_job_for_all_namespaces_without_preload_content,
                    "services": self.core.list_service_for_all_namespaces_without_preload_content,
                }[kind]
                response = await every(label_selector=selector)
            else:
                one = {
                    "jobs": self.batch.list_namespaced_job_without_preload_content,
                    "services": self.core.list_namespaced_service_without_preload_content,
                }[kind]
                response = await one(namespace, label_selector=selector)
            raw = json.loads(await response.read())
        items: list[dict[str, Any]] = raw.get("items", [])
        return items
