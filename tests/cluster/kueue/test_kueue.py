"""The real Kueue manager against the devcluster: readiness, the DWS queue objects, plain
admission, and admission gated by a ProvisioningRequest (the test stands in for GKE),
which the operator finds by Kueue's naming."""

from __future__ import annotations

import datetime
import socket
import uuid
from typing import Any

import yaml
from kubernetes import client as k8s

from dws_operator.catalog import GPU_RESOURCE, TPU_RESOURCE
from dws_operator.controller.provreqs import provisioning_request_of
from dws_operator.kueue_objects import (
    CONSUME_PROVREQ_ANNOTATION,
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    PROVISIONING_CHECK_CONTROLLER,
    PROVREQ_CLASS_ANNOTATION,
    PROVREQ_PARAMETER_PREFIX,
    QUEUED_PROVISIONING_CLASS,
    ProvisioningCheck,
    QueueSetup,
    gpu_flavor,
    tpu_flavor,
)
from dws_operator.workload import MAX_RUN_ANNOTATION, QUEUE_LABEL
from dws_workshop.devcluster.kueue import METRICS_CERT_DIR, KueueManager
from tests.cluster.kueue.conftest import condition, is_true, wait_for
from tests.polling import never

PROVREQ_GROUP = "autoscaling.x-k8s.io"
PROVREQ_VERSION = "v1"
PROVREQ_PLURAL = "provisioningrequests"
#: How long a gated Workload must stay un-admitted to show the gate, not slowness, holds it.
GATE_HOLD_SECONDS = 3.0

Obj = dict[str, Any]


def _names(namespace: str) -> tuple[str, str]:
    """Cluster-scoped names unique to one test."""
    suffix = namespace.removeprefix("t-")
    return f"cq-{suffix}", f"check-{suffix}"


def _setup(namespace: str, check: ProvisioningCheck | None) -> QueueSetup:
    cluster_queue, _ = _names(namespace)
    return QueueSetup(
        cluster_queue=cluster_queue,
        local_queue="dws",
        namespace=namespace,
        flavors=(gpu_flavor(f"nvidia-l4-{namespace.removeprefix('t-')}"),),
        check=check,
    )


def _check(namespace: str) -> ProvisioningCheck:
    _, name = _names(namespace)
    return ProvisioningCheck(name=name, config_name=f"{name}-config")


def _get(api: k8s.ApiClient, plural: str, name: str, namespace: str | None = None) -> Obj:
    custom = k8s.CustomObjectsApi(api)
    if namespace is None:
        result: Obj = custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_API_VERSION, plural, name)
    else:
        result = custom.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_API_VERSION, namespace, plural, name
        )
    return result


def _job(name: str, queue: str, gpus: int, annotations: dict[str, str] | None = None) -> Obj:
    resources: Obj = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    if gpus:
        resources["requests"][GPU_RESOURCE] = str(gpus)
        resources["limits"] = {GPU_RESOURCE: str(gpus)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "labels": {QUEUE_LABEL: queue},
            "annotations": annotations or {},
        },
        "spec": {
            "suspend": True,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "train",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": resources,
                        }
                    ],
                }
            },
        },
    }


def _workload_of(api: k8s.ApiClient, namespace: str, job: str) -> Obj | None:
    listing = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_API_VERSION, namespace, "workloads"
    )
    for item in listing["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "Job" and o.get("name") == job for o in owners):
            return dict(item)
    return None


def _read_job(api: k8s.ApiClient, namespace: str, name: str) -> Obj:
    job: Obj = k8s.BatchV1Api(api).read_namespaced_job(name, namespace).to_dict()
    return job


def _provisioning_requests(api: k8s.ApiClient, namespace: str) -> list[Obj]:
    listing = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        PROVREQ_GROUP, PROVREQ_VERSION, namespace, PROVREQ_PLURAL
    )
    return [dict(item) for item in listing["items"]]


def _if_true(obj: Obj | None, kind: str) -> Obj | None:
    return obj if is_true(obj, kind) else None


def _unsuspended(job: Obj) -> Obj | None:
    return job if job["spec"]["suspend"] is False else None


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_manager_is_ready_on_loopback(kueue: KueueManager) -> None:
    assert kueue.pid is not None
    assert kueue.ready()
    config = yaml.safe_load(kueue.config_path.read_text())
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["integrations"]["frameworks"] == ["batch/job", "jobset.x-k8s.io/jobset"]
    for address in (config["health"]["healthProbeBindAddress"], config["metrics"]["bindAddress"]):
        assert address.startswith("127.0.0.1:")
    # The metrics endpoint serves on loopback (TLS with our certificate; it needs auth).
    with socket.create_connection(("127.0.0.1", kueue.metrics_port), timeout=2):
        pass
    if kueue.private_mounts:
        # The certificate path exists only inside the manager's mount namespace.
        assert not METRICS_CERT_DIR.exists()


def test_dws_objects_apply_and_cluster_queue_becomes_active(
    api: k8s.ApiClient, kueue: KueueManager, namespace: str, apply_queue: Any
) -> None:
    check = _check(namespace)
    setup = _setup(namespace, check)
    applied = apply_queue(setup)
    assert [o["kind"] for o in applied] == [
        "ProvisioningRequestConfig",
        "AdmissionCheck",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
    ]
    assert all(o["apiVersion"] == f"{KUEUE_GROUP}/{KUEUE_API_VERSION}" for o in applied)

    config = _get(api, "provisioningrequestconfigs", check.config_name)
    assert config["spec"]["provisioningClassName"] == QUEUED_PROVISIONING_CLASS
    assert config["spec"]["managedResources"] == [GPU_RESOURCE, TPU_RESOURCE]
    assert config["spec"]["retryStrategy"] == {
        "backoffLimitCount": 3,
        "backoffBaseSeconds": 60,
        "backoffMaxSeconds": 1800,
    }
    ac = wait_for(
        lambda: _if_true(_get(api, "admissionchecks", check.name), "Active"),
        "the AdmissionCheck to become Active",
        kueue,
    )
    assert ac["spec"]["controllerName"] == PROVISIONING_CHECK_CONTROLLER
    cq = wait_for(
        lambda: _if_true(_get(api, "clusterqueues", setup.cluster_queue), "Active"),
        "the ClusterQueue to become Active",
        kueue,
    )
    assert cq["spec"]["admissionChecksStrategy"]["admissionChecks"] == [{"name": check.name}]
    wait_for(
        lambda: is_true(_get(api, "localqueues", setup.local_queue, namespace), "Active"),
        "the LocalQueue to become Active",
        kueue,
    )
    # Server-side apply is idempotent: applying again changes nothing Kueue cares about.
    again = apply_queue(setup)
    assert [o["metadata"]["uid"] for o in again] == [o["metadata"]["uid"] for o in applied]


def test_plain_queue_admits_and_unsuspends_job(
    api: k8s.ApiClient, kueue: KueueManager, namespace: str, apply_queue: Any
) -> None:
    setup = _setup(namespace, check=None)
    apply_queue(setup)
    wait_for(
        lambda: is_true(_get(api, "clusterqueues", setup.cluster_queue), "Active"),
        "the ClusterQueue to become Active",
        kueue,
    )
    name = f"job-{uuid.uuid4().hex[:6]}"
    k8s.BatchV1Api(api).create_namespaced_job(namespace, _job(name, setup.local_queue, gpus=1))

    workload = wait_for(
        lambda: _if_true(_workload_of(api, namespace, name), "Admitted"),
        "the Job's Workload to be admitted",
        kueue,
    )
    admission = workload["status"]["admission"]
    assert admission["clusterQueue"] == setup.cluster_queue
    flavor = setup.flavors[0]
    assert admission["podSetAssignments"][0]["flavors"][GPU_RESOURCE] == flavor.name
    job = wait_for(
        lambda: _unsuspended(_read_job(api, namespace, name)),
        "Kueue to unsuspend the Job",
        kueue,
    )
    # Admission injects the flavor's node labels.
    assert job["spec"]["template"]["spec"]["node_selector"] == dict(flavor.node_labels)
    assert not _provisioning_requests(api, namespace)


def test_provisioning_request_gates_admission(
    api: k8s.ApiClient, kueue: KueueManager, namespace: str, apply_queue: Any
) -> None:
    check = _check(namespace)
    setup = _setup(namespace, check)
    apply_queue(setup)
    wait_for(
        lambda: is_true(_get(api, "clusterqueues", setup.cluster_queue), "Active"),
        "the ClusterQueue to become Active",
        kueue,
    )
    annotations = {f"{PROVREQ_PARAMETER_PREFIX}maxRunDurationSeconds": "3600"}
    assert list(annotations) == [MAX_RUN_ANNOTATION]
    name = f"job-{uuid.uuid4().hex[:6]}"
    k8s.BatchV1Api(api).create_namespaced_job(
        namespace, _job(name, setup.local_queue, gpus=2, annotations=annotations)
    )

    # Kueue reserves quota, then asks for capacity with a ProvisioningRequest.
    provreq = wait_for(
        lambda: (items := _provisioning_requests(api, namespace)) and items[0],
        "Kueue to create a ProvisioningRequest",
        kueue,
    )
    assert len(_provisioning_requests(api, namespace)) == 1
    spec = provreq["spec"]
    assert spec["provisioningClassName"] == QUEUED_PROVISIONING_CLASS
    assert spec["parameters"] == {"maxRunDurationSeconds": "3600"}
    assert [p["count"] for p in spec["podSets"]] == [1]
    template = k8s.CoreV1Api(api).read_namespaced_pod_template(
        spec["podSets"][0]["podTemplateRef"]["name"], namespace
    )
    container = template.template.spec.containers[0]
    assert container.resources.requests[GPU_RESOURCE] == "2"
    provreq_name = provreq["metadata"]["name"]
    assert check.name in provreq_name
    # The stuck guard finds it by Kueue's naming: `<Workload>-<check>-<try>`, the Workload
    # `job-<Job>-<5 hex digits>` (controller/provreqs.py).
    found = provisioning_request_of([provreq], "Job", name)
    assert found is not None
    assert found.name == provreq_name
    assert provisioning_request_of([provreq], "Job", name[:-1]) is None

    # Until GKE says Provisioned, the Workload holds quota but is not admitted.
    workload = wait_for(
        lambda: _if_true(_workload_of(api, namespace, name), "QuotaReserved"),
        "the Workload to reserve quota",
        kueue,
    )

    def admitted_or_running() -> object:
        nonlocal workload
        workload = _workload_of(api, namespace, name) or {}
        if is_true(workload, "Admitted"):
            return workload.get("status")
        return not _read_job(api, namespace, name)["spec"]["suspend"]

    never(admitted_or_running, GATE_HOLD_SECONDS, "admitted before GKE said Provisioned")
    states = {c["name"]: c["state"] for c in workload["status"]["admissionChecks"]}
    assert states == {check.name: "Pending"}

    # Stand in for GKE: the capacity is there.
    now = _now()
    conditions = [
        {
            "type": kind,
            "status": "True",
            "reason": reason,
            "message": "set by the dws-operator test standing in for GKE",
            "lastTransitionTime": now,
        }
        for kind, reason in (("Accepted", "Accepted"), ("Provisioned", "Provisioned"))
    ]
    k8s.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        PROVREQ_GROUP,
        PROVREQ_VERSION,
        namespace,
        PROVREQ_PLURAL,
        provreq_name,
        {"status": {"conditions": conditions}},
        _content_type="application/merge-patch+json",
    )

    workload = wait_for(
        lambda: _if_true(_workload_of(api, namespace, name), "Admitted"),
        "the Workload to be admitted once the ProvisioningRequest is Provisioned",
        kueue,
    )
    states = {c["name"]: c["state"] for c in workload["status"]["admissionChecks"]}
    assert states == {check.name: "Ready"}
    job = wait_for(
        lambda: _unsuspended(_read_job(api, namespace, name)),
        "Kueue to unsuspend the Job",
        kueue,
    )
    pod_annotations = job["spec"]["template"]["metadata"]["annotations"] or {}
    assert pod_annotations.get(CONSUME_PROVREQ_ANNOTATION) == provreq_name
    assert pod_annotations.get(PROVREQ_CLASS_ANNOTATION) == QUEUED_PROVISIONING_CLASS
    assert condition(workload, "Admitted") is not None


def test_mixed_queue_routes_by_accelerator_and_checks_only_gpu_flavors(
    api: k8s.ApiClient, kueue: KueueManager, namespace: str, apply_queue: Any
) -> None:
    """One queue for GPUs and TPUs: each Job lands on its accelerator's flavor, and the
    queued-provisioning check (onFlavors: the GPU flavor) gates only the GPU Job."""
    suffix = namespace.removeprefix("t-")
    gpu, tpu = gpu_flavor(f"nvidia-l4-{suffix}"), tpu_flavor(f"tpu-v6e-slice-{suffix}")
    _, check_name = _names(namespace)
    check = ProvisioningCheck(
        name=check_name, config_name=f"{check_name}-config", on_flavors=(gpu.name,)
    )
    setup = QueueSetup(
        cluster_queue=f"cq-{suffix}",
        local_queue="mixed",
        namespace=namespace,
        flavors=(gpu, tpu),
        check=check,
    )
    apply_queue(setup)
    cq = wait_for(
        lambda: _if_true(_get(api, "clusterqueues", setup.cluster_queue), "Active"),
        "the ClusterQueue to become Active",
        kueue,
    )
    flavors = cq["spec"]["resourceGroups"][0]["flavors"]
    quotas = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]} for f in flavors}
    assert quotas[gpu.name][TPU_RESOURCE] == "0"
    assert quotas[tpu.name][GPU_RESOURCE] == "0"

    batch = k8s.BatchV1Api(api)
    tpu_job = _job("tpu-job", setup.local_queue, gpus=0)
    container = tpu_job["spec"]["template"]["spec"]["containers"][0]
    container["resources"]["requests"][TPU_RESOURCE] = "4"
    container["resources"]["limits"] = {TPU_RESOURCE: "4"}
    batch.create_namespaced_job(namespace, tpu_job)
    batch.create_namespaced_job(namespace, _job("gpu-job", setup.local_queue, gpus=1))

    # The TPU Job is admitted at once, on the TPU flavor, without a ProvisioningRequest.
    workload = wait_for(
        lambda: _if_true(_workload_of(api, namespace, "tpu-job"), "Admitted"),
        "the TPU Job's Workload to be admitted",
        kueue,
    )
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert assignment[TPU_RESOURCE] == tpu.name
    job = wait_for(
        lambda: _unsuspended(_read_job(api, namespace, "tpu-job")), "the TPU Job to run", kueue
    )
    assert job["spec"]["template"]["spec"]["node_selector"] == dict(tpu.node_labels)

    # The GPU Job gets the GPU flavor and waits for its ProvisioningRequest.
    provreq = wait_for(
        lambda: (items := _provisioning_requests(api, namespace)) and items[0],
        "Kueue to create a ProvisioningRequest for the GPU Job",
        kueue,
    )
    assert len(_provisioning_requests(api, namespace)) == 1
    workload = wait_for(
        lambda: _if_true(_workload_of(api, namespace, "gpu-job"), "QuotaReserved"),
        "the GPU Job's Workload to reserve quota",
        kueue,
    )
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["flavors"]
    assert assignment[GPU_RESOURCE] == gpu.name
    assert not is_true(workload, "Admitted")
    assert provreq["spec"]["provisioningClassName"] == QUEUED_PROVISIONING_CLASS
    assert _read_job(api, namespace, "gpu-job")["spec"]["suspend"] is True
