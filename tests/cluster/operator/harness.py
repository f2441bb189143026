"""Driving the operator end to end: the real API server (with controllers), the GKE
emulator, and the operator in-process; the test stands in for the kubelet."""

from __future__ import annotations

import uuid
from typing import Any, TypeVar

import grpc
from google.cloud import container_v1
from google.cloud.container_v1.services.cluster_manager.transports import (
    ClusterManagerGrpcTransport,
)
from kubernetes import client as k8s

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_workshop.devcluster.kubeerrors import NotFound, typed_errors
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator
from tests.builders import manifest, spec_body
from tests.polling import HANG_GUARD, eventually

T = TypeVar("T")
OPERATIONS = "projects/dws-sandbox/locations/us-east5/operations"


class Scenario:
    """One TrainingRequest in one namespace, and what it caused."""

    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        emulator: ClusterManagerEmulator,
        cluster: str = DEFAULT_CLUSTER,
    ) -> None:
        self.api = api
        #: The emulated GKE cluster the operator serves.
        self.cluster = cluster
        self.namespace = namespace
        self.emulator = emulator
        self.objects = k8s.CustomObjectsApi(api)
        self.batch = k8s.BatchV1Api(api)
        self.core = k8s.CoreV1Api(api)
        self.name = f"tr-{uuid.uuid4().hex[:6]}"
        #: The settings of the operator serving this scenario, when a fixture made one.
        self.operator_config: Any = None
        self.operator_kubeconfig: Any = None
        #: The simulated GKE autoscaler of an end-to-end stack (None without one).
        self.autoscaler: Any = None
        self._pool_name: str | None = None

    def create(self, accelerator: dict[str, Any], mode: str = "FlexStart", **extra: Any) -> None:
        body = manifest(self.name, spec_body(accelerator, mode=mode, **extra))
        self.objects.create_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, body)

    def get(self) -> dict[str, Any] | None:
        try:
            with typed_errors():
                body: dict[str, Any] = self.objects.get_namespaced_custom_object(
                    GROUP, VERSION, self.namespace, PLURAL, self.name
                )
        except NotFound:
            return None
        return body

    def status(self) -> dict[str, Any]:
        body = self.get() or {}
        status: dict[str, Any] = body.get("status") or {}
        return status

    def phase(self) -> str | None:
        phase: str | None = self.status().get("phase")
        return phase

    def wait_phase(self, *phases: str, timeout: float = HANG_GUARD) -> dict[str, Any]:
        eventually(lambda: self.phase() in phases, timeout, f"phase {phases} (now {self.phase()})")
        return self.status()

    def condition(self, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status().get("conditions", []) if c["type"] == type_), None)

    def delete(self) -> None:
        self.objects.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, self.name
        )

    # -- GKE --------------------------------------------------------------------------

    @property
    def pool_name(self) -> str:
        """From the status, once known (kept: the object may be gone later)."""
        if self._pool_name is None:
            self._pool_name = eventually(
                lambda: (self.status().get("nodePool") or {}).get("name"),
                what="status.nodePool.name",
            )
        return self._pool_name

    def pool(self) -> Any:
        return self.emulator.node_pool(f"{self.cluster}/nodePools/{self.pool_name}")

    def pool_names(self) -> set[str]:
        """Every node pool GKE has in the cluster now."""
        return {str(pool.name) for pool, _ in self.emulator.node_pools(self.cluster)}

    def pool_nodes(self, name: str) -> int:
        """Nodes of pool `name` in GKE now (0 when it does not exist)."""
        counts = {str(pool.name): n for pool, n in self.emulator.node_pools(self.cluster)}
        return counts.get(name, 0)

    def created_pools(self) -> list[Any]:
        """The CreateNodePool requests for this request's pool that GKE accepted."""
        return [
            c.request.node_pool
            for c in self.emulator.calls_for("CreateNodePool")
            if c.ok and c.request.node_pool.name == self.pool_name
        ]

    def emulator_create(self, pool: container_v1.NodePool) -> None:
        """Make a pool in GKE directly, as a platform team would (for `existing`)."""
        channel = grpc.insecure_channel(self.emulator.endpoint)
        gke = container_v1.ClusterManagerClient(
            transport=ClusterManagerGrpcTransport(channel=channel)
        )
        operation = gke.create_node_pool(parent=self.cluster, node_pool=pool)
        eventually(
            lambda: (
                gke.get_operation(name=f"{OPERATIONS}/{operation.name}").status
                == container_v1.Operation.Status.DONE
            ),
            what="the pool created",
        )
        channel.close()

    def create_local_queue(self, name: str) -> None:
        """A Kueue LocalQueue in the scenario's namespace (no Kueue runs: the object only)."""
        k8s.CustomObjectsApi(self.api).create_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_API_VERSION,
            self.namespace,
            "localqueues",
            {
                "apiVersion": f"{KUEUE_GROUP}/{KUEUE_API_VERSION}",
                "kind": "LocalQueue",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"clusterQueue": "dws"},
            },
        )

    def pool_max(self) -> int:
        pool = self.pool()
        if pool is None:
            return -1
        return int(max(pool.autoscaling.max_node_count, pool.autoscaling.total_max_node_count))

    def at_zero(self) -> bool:
        """The request's pool is scaled to zero: its autoscaling maximum is 0, or, for a
        multi-host TPU slice pool (compact placement with a topology, or a workload
        policy), which is never capped because GKE checks its maximum against the slice
        size, it has no Node left and its maximum is still the slice."""
        pool = self.pool()
        if pool is None:
            return False
        placement = pool.placement_policy
        if placement.tpu_topology or placement.policy_name:
            return self.pool_max() > 0 and self.pool_nodes(self.pool_name) == 0
        return self.pool_max() == 0

    # -- Kubernetes -------------------------------------------------------------------

    def jobs(self) -> list[k8s.V1Job]:
        selector = f"dws-operator.dev/training-request={self.name}"
        return list(self.batch.list_namespaced_job(self.namespace, label_selector=selector).items)

    def job(self) -> k8s.V1Job:
        jobs: list[k8s.V1Job] = eventually(self.jobs, what="the Job")
        assert len(jobs) == 1, [j.metadata.name for j in jobs]
        return jobs[0]

    def service(self) -> k8s.V1Service | None:
        try:
            with typed_errors():
                return self.core.read_namespaced_service(self.name, self.namespace)
        except NotFound:
            return None

    def pods(self, attempt: int | None = None) -> list[k8s.V1Pod]:
        selector = f"dws-operator.dev/training-request={self.name}"
        if attempt is not None:
            selector += f",dws-operator.dev/attempt={attempt}"
        return list(self.core.list_namespaced_pod(self.namespace, label_selector=selector).items)

    def mark_pods(self, phase: str, count: int, attempt: int | None = None) -> None:
        """Stand in for the kubelet: the Job's pods reach `phase` (Running: also Ready)."""
        pods = eventually(
            lambda: len(self.pods(attempt)) >= count and self.pods(attempt), what=f"{count} pods"
        )
        for pod in pods:
            status: dict[str, Any] = {"phase": phase}
            if phase == "Running":
                status["conditions"] = [{"type": "Ready", "status": "True"}]
            else:
                status["containerStatuses"] = [
                    {
                        "name": pod.spec.containers[0].name,
                        "image": pod.spec.containers[0].image,
                        "imageID": "",
                        "ready": False,
                        "restartCount": 0,
                        "state": {
                            "terminated": {
                                "exitCode": 0 if phase == "Succeeded" else 1,
                                "reason": "Completed",
                            }
                        },
                    }
                ]
            self.core.patch_namespaced_pod_status(
                pod.metadata.name, self.namespace, {"status": status}
            )

    def finish_pods(self, attempt: int, count: int, timeout: float = HANG_GUARD) -> None:
        """Let an attempt's `count` running pods end: kwok's pod-succeed stage ends a Running
        pod `sim-duration` after it sees the annotation. A test that must act while the
        work runs starts it without a duration (it runs until its node goes away) and calls
        this when it is done acting, so no wall-clock margin decides the test."""

        def running_pods() -> list[k8s.V1Pod] | None:
            pods = [p for p in self.pods(attempt) if p.status.phase == "Running"]
            return pods if len(pods) >= count else None

        running = eventually(
            running_pods, timeout=timeout, what=f"{count} running pods of attempt {attempt}"
        )
        for pod in running:
            self.core.patch_namespaced_pod(
                pod.metadata.name,
                self.namespace,
                {"metadata": {"annotations": {SIM_DURATION_ANNOTATION: "1s"}}},
            )

    def preempt_a_pod(self) -> str:
        """Stand in for GKE reclaiming a spot VM: one running pod fails, disrupted."""
        pod = next(p for p in self.pods() if p.status.phase == "Running")
        self.core.patch_namespaced_pod_status(
            pod.metadata.name,
            self.namespace,
            {
                "status": {
                    "phase": "Failed",
                    "conditions": [
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "reason": "TerminationByKubelet",
                            "message": "spot VM preempted",
                        }
                    ],
                    "containerStatuses": [
                        {
                            "name": pod.spec.containers[0].name,
                            "image": pod.spec.containers[0].image,
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"terminated": {"exitCode": 137, "reason": "Error"}},
                        }
                    ],
                }
            },
        )
        name: str = pod.metadata.name
        return name

    def events(self) -> list[str]:
        """The reasons of the request's Events."""
        return [e.reason for e in self._events()]

    def event_messages(self, reason: str) -> list[str]:
        """The messages of the request's Events with `reason`."""
        return [e.message for e in self._events() if e.reason == reason]

    def _events(self) -> list[Any]:
        selector = f"involvedObject.name={self.name}"
        return list(self.core.list_namespaced_event(self.namespace, field_selector=selector).items)
