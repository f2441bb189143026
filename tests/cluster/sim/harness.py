"""Helpers for the simulation tests: pools through the real GKE client, pods and nodes
through the real API server."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from google.cloud import container_v1
from kubernetes import client as k8s
from kubernetes import watch
from urllib3.exceptions import ProtocolError

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.gke import NodePoolClient
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator
from tests.gke.harness import UID, run

CONTAINER_IMAGE = "us-docker.pkg.dev/example/train:1"


class Sim:
    def __init__(
        self, api: k8s.ApiClient, namespace: str, emulator: ClusterManagerEmulator
    ) -> None:
        self.api = api
        self.namespace = namespace
        self.emulator = emulator
        self.core = k8s.CoreV1Api(api)
        self.objects = k8s.CustomObjectsApi(api)

    # GKE --------------------------------------------------------------------

    def create_pool(self, pool: container_v1.NodePool) -> None:
        async def create(client: NodePoolClient) -> None:
            result = await client.create(pool, UID)
            if result.operation is not None:
                await client.wait(result.operation)

        run(self.emulator, create)

    def scale_to_zero(self, name: str) -> None:
        async def scale(client: NodePoolClient) -> None:
            await client.scale_to_zero(name)

        run(self.emulator, scale)

    def delete_pool(self, name: str) -> None:
        async def delete(client: NodePoolClient) -> None:
            operation = await client.delete(name)
            if operation is not None:
                await client.wait(operation)

        run(self.emulator, delete)

    def node_count(self, pool: str) -> int:
        return self.emulator.node_count(f"{DEFAULT_CLUSTER}/nodePools/{pool}")

    # Kubernetes -------------------------------------------------------------

    def nodes(self, pool: str) -> list[k8s.V1Node]:
        selector = f"{NODE_POOL_LABEL_KEY}={pool}"
        return list(self.core.list_node(label_selector=selector).items)

    def create_pod(
        self,
        name: str,
        *,
        node_selector: dict[str, str],
        resources: dict[str, str],
        tolerations: list[dict[str, str]],
        annotations: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": name, "annotations": annotations or {}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": node_selector,
                    "tolerations": tolerations,
                    "containers": [
                        {
                            "name": "train",
                            "image": CONTAINER_IMAGE,
                            "resources": {"requests": resources, "limits": resources},
                            "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                        }
                    ],
                },
            },
        )

    def pod(self, name: str) -> k8s.V1Pod:
        return self.core.read_namespaced_pod(name, self.namespace)

    @contextmanager
    def pod_fates(self) -> Iterator[dict[str, k8s.V1Pod]]:
        """The last state seen of each pod in the namespace, kept from a watch: a pod the
        garbage collector deletes still shows how it ended (its DELETED event carries it)."""
        fates: dict[str, k8s.V1Pod] = {}
        watcher = watch.Watch()  # type: ignore[no-untyped-call]
        started = threading.Event()
        stopping = threading.Event()

        def follow() -> None:
            listed = self.core.list_namespaced_pod(self.namespace)
            for pod in listed.items:
                fates[pod.metadata.name] = pod
            started.set()
            try:
                for event in watcher.stream(
                    self.core.list_namespaced_pod,
                    self.namespace,
                    resource_version=listed.metadata.resource_version,
                ):
                    pod = event["object"]
                    fates[pod.metadata.name] = pod
            except ProtocolError:
                if not stopping.is_set():
                    raise

        thread = threading.Thread(target=follow, name="pod-fates", daemon=True)
        thread.start()
        started.wait()
        try:
            yield fates
        finally:
            # The stream ends at its next event, or when the API server closes it.
            stopping.set()
            watcher.stop()  # type: ignore[no-untyped-call]

    def phase(self, name: str) -> str:
        return str(self.pod(name).status.phase)

    def unschedulable(self, name: str) -> bool:
        conditions = self.pod(name).status.conditions or []
        return any(
            c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
            for c in conditions
        )

    def create_custom(self, plural: str, body: dict[str, Any]) -> None:
        self.objects.create_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", self.namespace, plural, body
        )

    def provisioning_request(self, name: str) -> dict[str, Any]:
        body: dict[str, Any] = self.objects.get_namespaced_custom_object(
            "autoscaling.x-k8s.io", "v1", self.namespace, "provisioningrequests", name
        )
        return body
