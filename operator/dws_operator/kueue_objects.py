"""The Kueue objects that queue DWS work: ResourceFlavors, a ClusterQueue, a LocalQueue and,
for queued provisioning, the ProvisioningRequest AdmissionCheck with its
ProvisioningRequestConfig.

The builders are pure and return manifests in `kueue.x-k8s.io/v1beta2`, served since Kueue
v0.15 and stored since v0.16 (v1beta1, deprecated since v0.15, is no longer served from
v0.20; see `kueue_versions`), so only v1beta2 is written. Nothing here talks to a
cluster (the workshop's `devcluster.kueue.apply_kueue_objects` applies them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dws_operator.catalog import (
    GPU_ACCELERATOR_LABEL_KEY,
    GPU_ACCELERATORS,
    GPU_RESOURCE,
    TPU_ACCELERATOR_LABEL_KEY,
    TPU_GENERATIONS,
    TPU_RESOURCE,
)
from dws_operator.identity import MANAGED_BY

Manifest = dict[str, Any]

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_API_VERSION = "v1beta2"
KUEUE_GROUP_VERSION = f"{KUEUE_GROUP}/{KUEUE_API_VERSION}"

#: AdmissionCheck controller name of Kueue's built-in ProvisioningRequest check.
PROVISIONING_CHECK_CONTROLLER = "kueue.x-k8s.io/provisioning-request"
#: GKE's DWS queued-provisioning ProvisioningRequest class.
QUEUED_PROVISIONING_CLASS = "queued-provisioning.gke.io"
#: Annotations Kueue puts on the pod template of a Job admitted through a ProvisioningRequest.
CONSUME_PROVREQ_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
PROVREQ_CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
#: Job annotations with this prefix become the ProvisioningRequest's `spec.parameters`.
PROVREQ_PARAMETER_PREFIX = "provreq.kueue.x-k8s.io/"

#: ClusterQueue resources: every flavor lists quota for all of them, in this order. Kueue
#: admits no workload whose pods request a resource its ClusterQueue does not cover, and
#: pod templates often request `ephemeral-storage` (GKE's example queue covers it too).
COVERED_RESOURCES: tuple[str, ...] = (
    "cpu",
    "memory",
    "ephemeral-storage",
    GPU_RESOURCE,
    TPU_RESOURCE,
)
#: Generous quotas: DWS, not Kueue, is what limits capacity; Kueue only queues and gates.
DEFAULT_QUOTAS: Mapping[str, str] = {
    "cpu": "100000",
    "memory": "1000Ti",
    "ephemeral-storage": "1000Ti",
    GPU_RESOURCE: "100000",
    TPU_RESOURCE: "100000",
}
ACCELERATOR_RESOURCES = frozenset({GPU_RESOURCE, TPU_RESOURCE})

#: Kind -> plural, in the order objects must be applied (referenced objects first).
PLURALS: Mapping[str, str] = {
    "ProvisioningRequestConfig": "provisioningrequestconfigs",
    "AdmissionCheck": "admissionchecks",
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "LocalQueue": "localqueues",
}


@dataclass(frozen=True)
class Flavor:
    """A ResourceFlavor: the node labels of one kind of accelerator node.

    `accelerator` (nvidia.com/gpu or google.com/tpu) gets quota in this flavor; the other
    accelerator gets none, so a GPU workload can never be assigned a TPU flavor.
    """

    name: str
    node_labels: Mapping[str, str] = field(default_factory=dict)
    accelerator: str | None = None


def gpu_flavor(accelerator_label: str) -> Flavor:
    """GPU nodes of one type, e.g. `nvidia-l4` (the `cloud.google.com/gke-accelerator` value)."""
    return Flavor(accelerator_label, {GPU_ACCELERATOR_LABEL_KEY: accelerator_label}, GPU_RESOURCE)


def tpu_flavor(accelerator_label: str) -> Flavor:
    """TPU nodes of one type, e.g. `tpu-v6e-slice` (`cloud.google.com/gke-tpu-accelerator`)."""
    return Flavor(accelerator_label, {TPU_ACCELERATOR_LABEL_KEY: accelerator_label}, TPU_RESOURCE)


@dataclass(frozen=True)
class RetryStrategy:
    """ProvisioningRequestConfig `retryStrategy`; the defaults are Kueue's."""

    backoff_limit_count: int = 3
    backoff_base_seconds: int = 60
    backoff_max_seconds: int = 1800


@dataclass(frozen=True)
class ProvisioningCheck:
    """The DWS admission check: Kueue creates a ProvisioningRequest per admitted workload."""

    name: str = "dws-queued-provisioning"
    config_name: str = "dws-queued-provisioning"
    provisioning_class: str = QUEUED_PROVISIONING_CLASS
    #: GPUs and TPU slices alike: GKE serves both through queued provisioning.
    managed_resources: tuple[str, ...] = (GPU_RESOURCE, TPU_RESOURCE)
    parameters: Mapping[str, str] = field(default_factory=dict)
    retry: RetryStrategy = field(default_factory=RetryStrategy)
    #: Flavors the check applies to; empty means all flavors of the ClusterQueue.
    on_flavors: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueSetup:
    """One ClusterQueue with its LocalQueue; `check` set makes it a queued-provisioning queue."""

    cluster_queue: str
    local_queue: str
    namespace: str
    flavors: tuple[Flavor, ...]
    check: ProvisioningCheck | None = None
    quotas: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_QUOTAS))


def _object(kind: str, name: str, spec: Manifest, namespace: str | None = None) -> Manifest:
    metadata: Manifest = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {"apiVersion": KUEUE_GROUP_VERSION, "kind": kind, "metadata": metadata, "spec": spec}


def resource_flavor(flavor: Flavor) -> Manifest:
    spec: Manifest = {}
    if flavor.node_labels:
        spec["nodeLabels"] = dict(flavor.node_labels)
    return _object("ResourceFlavor", flavor.name, spec)


def provisioning_request_config(check: ProvisioningCheck) -> Manifest:
    spec: Manifest = {
        "provisioningClassName": check.provisioning_class,
        "retryStrategy": {
            "backoffLimitCount": check.retry.backoff_limit_count,
            "backoffBaseSeconds": check.retry.backoff_base_seconds,
            "backoffMaxSeconds": check.retry.backoff_max_seconds,
        },
    }
    if check.managed_resources:
        spec["managedResources"] = list(check.managed_resources)
    if check.parameters:
        spec["parameters"] = dict(check.parameters)
    return _object("ProvisioningRequestConfig", check.config_name, spec)


def admission_check(check: ProvisioningCheck) -> Manifest:
    return _object(
        "AdmissionCheck",
        check.name,
        {
            "controllerName": PROVISIONING_CHECK_CONTROLLER,
            "parameters": {
                "apiGroup": KUEUE_GROUP,
                "kind": "ProvisioningRequestConfig",
                "name": check.config_name,
            },
        },
    )


def _flavor_quotas(flavor: Flavor, quotas: Mapping[str, str]) -> Manifest:
    resources = []
    for resource in COVERED_RESOURCES:
        quota = quotas.get(resource, "0")
        if resource in ACCELERATOR_RESOURCES and resource != flavor.accelerator:
            quota = "0"
        resources.append({"name": resource, "nominalQuota": quota})
    return {"name": flavor.name, "resources": resources}


def cluster_queue(setup: QueueSetup) -> Manifest:
    if not setup.flavors:
        raise ValueError(f"ClusterQueue {setup.cluster_queue} needs at least one flavor")
    spec: Manifest = {
        # {} admits workloads from every namespace (null would admit none).
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(COVERED_RESOURCES),
                "flavors": [_flavor_quotas(f, setup.quotas) for f in setup.flavors],
            }
        ],
    }
    if setup.check is not None:
        rule: Manifest = {"name": setup.check.name}
        if setup.check.on_flavors:
            rule["onFlavors"] = list(setup.check.on_flavors)
        spec["admissionChecksStrategy"] = {"admissionChecks": [rule]}
    return _object("ClusterQueue", setup.cluster_queue, spec)


def local_queue(setup: QueueSetup) -> Manifest:
    return _object(
        "LocalQueue", setup.local_queue, {"clusterQueue": setup.cluster_queue}, setup.namespace
    )


def kueue_objects(setup: QueueSetup) -> list[Manifest]:
    """Every object of `setup`, referenced objects first (the order to apply them in)."""
    objects: list[Manifest] = []
    if setup.check is not None:
        objects += [provisioning_request_config(setup.check), admission_check(setup.check)]
    objects += [resource_flavor(f) for f in setup.flavors]
    objects += [cluster_queue(setup), local_queue(setup)]
    return objects


# -- the DWS queues ------------------------------------------------------------------------
# One source for the Kueue objects the chart installs (`kueue.createObjects`; its template
# is generated from `dws_objects` by hack/gen_manifests.py) and the sandbox, load runs and
# e2e tests apply.

#: The ClusterQueue for flex-start and spot work; `<it>-queued` adds the check.
CLUSTER_QUEUE = "dws"
LOCAL_QUEUE = "dws-queue"
#: For queued provisioning: its ClusterQueue has the ProvisioningRequest admission check.
QUEUED_LOCAL_QUEUE = "dws-queued"


def dws_flavors() -> tuple[Flavor, ...]:
    """A flavor per TPU generation and GPU type the operator knows: Kueue then tells
    accelerators apart by their node labels, and each gets quota only for its own."""
    tpus = tuple(tpu_flavor(g.accelerator_label) for g in TPU_GENERATIONS.values())
    gpus = tuple(gpu_flavor(t.value) for t in GPU_ACCELERATORS)
    return tpus + gpus


def dws_queues(
    namespace: str,
    cluster_queue: str = CLUSTER_QUEUE,
    local_queue: str = LOCAL_QUEUE,
    queued_local_queue: str = QUEUED_LOCAL_QUEUE,
    quotas: Mapping[str, str] = DEFAULT_QUOTAS,
) -> list[QueueSetup]:
    """The two queues in `namespace`: one for flex-start and spot (no check), one for
    queued provisioning (Kueue creates a ProvisioningRequest for each admitted workload,
    TPU slices and GPUs alike)."""
    flavors = dws_flavors()
    return [
        QueueSetup(cluster_queue, local_queue, namespace, flavors, quotas=quotas),
        QueueSetup(
            f"{cluster_queue}-queued",
            queued_local_queue,
            namespace,
            flavors,
            check=ProvisioningCheck(),
            quotas=quotas,
        ),
    ]


def dws_objects(
    namespaces: Sequence[str],
    cluster_queue: str = CLUSTER_QUEUE,
    local_queue: str = LOCAL_QUEUE,
    queued_local_queue: str = QUEUED_LOCAL_QUEUE,
    quotas: Mapping[str, str] = DEFAULT_QUOTAS,
) -> list[Manifest]:
    """Every object of the DWS queues once, with LocalQueues in each of `namespaces`
    (none: the cluster-wide objects only), referenced objects first."""
    setups = [
        setup
        for namespace in namespaces or [""]
        for setup in dws_queues(namespace, cluster_queue, local_queue, queued_local_queue, quotas)
    ]
    objects: dict[tuple[str, str, str], Manifest] = {}
    for setup in setups:
        for manifest in kueue_objects(setup):
            metadata = manifest["metadata"]
            if manifest["kind"] == "LocalQueue" and not namespaces:
                continue
            key = (manifest["kind"], metadata.get("namespace", ""), metadata["name"])
            objects.setdefault(key, manifest)
    return sorted(objects.values(), key=lambda m: list(PLURALS).index(m["kind"]))
