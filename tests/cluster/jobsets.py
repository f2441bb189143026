"""JobSets for multi-slice TPU training, TPU slices as kwok nodes for them to run on, and
reading JobSets back: shared by the JobSet and Kueue tests.

Two shapes: `multislice_manifest` is the operator's (dws_operator.multislice): one
replicatedJob of `replicas: N`, JobSet's exclusive placement on the node pool label and a
node affinity list of the slices' pools. `jobset_manifest` is the earlier one: one
replicatedJob per slice, pinned to its pool by nodeSelector (one Kueue PodSet per slice).

The JobSets are fully defaulted (network, successPolicy, failurePolicy, startupPolicy,
completionMode, restartPolicy), as the operator renders them, although the devcluster's
JobSet manager registers JobSet's defaulting webhook (see
dws_workshop.devcluster.jobset).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s

from dws_operator.catalog import (
    NODE_POOL_LABEL_KEY,
    TPU_ACCELERATOR_LABEL_KEY,
    TPU_RESOURCE,
    TPU_TAINT_KEY,
    TPU_TAINT_VALUE,
)
from dws_operator.multislice import (
    EXCLUSIVE_TOPOLOGY_ANNOTATION,
    JOBSET_GROUP,
    JOBSET_PLURAL,
    JOBSET_VERSION,
    REPLICATED_JOB_NAME,
)
from dws_operator.workload import QUEUE_LABEL
from dws_workshop.devcluster.kubeerrors import NotFound, typed_errors
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION, SIM_EXIT_CODE_ANNOTATION
from dws_workshop.simulator.nodes import PoolShape, Taint, render_node

Obj = dict[str, Any]

TPU_ACCELERATOR = "tpu-v6e-slice"
#: v6e 2x4: 8 chips on two ct6e-standard-4t hosts (4 chips each).
TPU_MACHINE = "ct6e-standard-4t"
TPU_TOPOLOGY = "2x4"
CHIPS_PER_HOST = 4
HOSTS_PER_SLICE = 2
ZONE = "us-east5-b"
IMAGE = "us-docker.pkg.dev/example/train:1"


@dataclass(frozen=True)
class Slice:
    """One replicatedJob: a TPU slice of `hosts` pods, pinned to `pool` by nodeSelector.
    kwok ends each pod after `run_for`, Failed when `exit_code` is non-zero."""

    name: str
    pool: str
    hosts: int = HOSTS_PER_SLICE
    run_for: str = "1s"
    exit_code: int | None = None

    @property
    def pod_annotations(self) -> dict[str, str]:
        annotations = {SIM_DURATION_ANNOTATION: self.run_for}
        if self.exit_code is not None:
            annotations[SIM_EXIT_CODE_ANNOTATION] = str(self.exit_code)
        return annotations


def jobset_manifest(
    name: str,
    slices: tuple[Slice, ...],
    *,
    max_restarts: int = 0,
    queue: str | None = None,
    suspend: bool = False,
) -> Obj:
    """A JobSet with one replicatedJob (replicas 1, an Indexed Job of `hosts` pods) per
    slice, labelled for Kueue's `queue` when given."""

    def replicated_job(part: Slice) -> Obj:
        pod = _slice_pod(part.pod_annotations)
        pod["spec"]["nodeSelector"][NODE_POOL_LABEL_KEY] = part.pool
        return {
            "name": part.name,
            "replicas": 1,
            "template": {
                "spec": {
                    "completionMode": "Indexed",
                    "completions": part.hosts,
                    "parallelism": part.hosts,
                    "backoffLimit": 0,
                    "template": pod,
                }
            },
        }

    metadata: Obj = {"name": name}
    if queue is not None:
        metadata["labels"] = {QUEUE_LABEL: queue}
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": suspend,
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "failurePolicy": {"maxRestarts": max_restarts},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "replicatedJobs": [replicated_job(s) for s in slices],
        },
    }


def _slice_pod(annotations: Obj) -> Obj:
    """A TPU slice host's pod, selecting the accelerator (the pool comes on top)."""
    chips = str(CHIPS_PER_HOST)
    return {
        "metadata": {"annotations": annotations},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {TPU_ACCELERATOR_LABEL_KEY: TPU_ACCELERATOR},
            "tolerations": [{"key": TPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "train",
                    "image": IMAGE,
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", TPU_RESOURCE: chips},
                        "limits": {TPU_RESOURCE: chips},
                    },
                }
            ],
        },
    }


def multislice_manifest(
    name: str,
    pools: tuple[str, ...],
    *,
    hosts: int = HOSTS_PER_SLICE,
    run_for: str = "1s",
    queue: str | None = None,
    suspend: bool = False,
) -> Obj:
    """The operator's shape: one replicatedJob `s` of `len(pools)` replicas (an Indexed
    Job of `hosts` pods each), exclusive placement per node pool, the pods allowed onto
    `pools` only."""
    pod = _slice_pod({SIM_DURATION_ANNOTATION: run_for})
    in_pools = {"key": NODE_POOL_LABEL_KEY, "operator": "In", "values": list(pools)}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [in_pools]}]
            }
        }
    }
    metadata: Obj = {
        "name": name,
        "annotations": {EXCLUSIVE_TOPOLOGY_ANNOTATION: NODE_POOL_LABEL_KEY},
    }
    if queue is not None:
        metadata["labels"] = {QUEUE_LABEL: queue}
    replicated = {
        "name": REPLICATED_JOB_NAME,
        "replicas": len(pools),
        "template": {
            "spec": {
                "completionMode": "Indexed",
                "completions": hosts,
                "parallelism": hosts,
                "backoffLimit": 0,
                "template": pod,
            }
        },
    }
    return {
        "apiVersion": f"{JOBSET_GROUP}/{JOBSET_VERSION}",
        "kind": "JobSet",
        "metadata": metadata,
        "spec": {
            "suspend": suspend,
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "successPolicy": {"operator": "All"},
            "failurePolicy": {"maxRestarts": 0},
            "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
            "replicatedJobs": [replicated],
        },
    }


def create_jobset(api: k8s.ApiClient, namespace: str, manifest: Obj) -> Obj:
    created: Obj = k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, manifest
    )
    return created


def read_jobset(api: k8s.ApiClient, namespace: str, name: str) -> Obj:
    found: Obj = k8s.CustomObjectsApi(api).get_namespaced_custom_object(
        JOBSET_GROUP, JOBSET_VERSION, namespace, JOBSET_PLURAL, name
    )
    return found


def jobset_condition(jobset: Obj, kind: str) -> Obj | None:
    """The JobSet's condition `kind` when it is True, else None."""
    for cond in (jobset.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def child_jobs(api: k8s.ApiClient, namespace: str, jobset: str) -> dict[str, k8s.V1Job]:
    """The JobSet's Jobs by name (selected by JobSet's own label)."""
    jobs = k8s.BatchV1Api(api).list_namespaced_job(
        namespace, label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}"
    )
    return {j.metadata.name: j for j in jobs.items}


def slice_nodes(pool: str, hosts: int = HOSTS_PER_SLICE) -> list[Obj]:
    """The kwok Nodes of one v6e 2x4 slice node pool, as GKE registers them."""
    shape = PoolShape(
        pool=pool,
        machine_type=TPU_MACHINE,
        accelerator=(TPU_ACCELERATOR_LABEL_KEY, TPU_ACCELERATOR),
        resource=(TPU_RESOURCE, CHIPS_PER_HOST),
        tpu_topology=TPU_TOPOLOGY,
        slice_nodes=hosts,
        taints=(Taint(TPU_TAINT_KEY, TPU_TAINT_VALUE),),
    )
    return [render_node(shape, name=f"{pool}-{i}", zone=ZONE) for i in range(hosts)]


@contextlib.contextmanager
def tpu_slices(api: k8s.ApiClient, pools: Mapping[str, int]) -> Iterator[list[str]]:
    """Creates the kwok nodes of each pool (name -> hosts); deletes them afterwards."""
    core = k8s.CoreV1Api(api)
    names: list[str] = []
    try:
        for pool, hosts in pools.items():
            for node in slice_nodes(pool, hosts):
                core.create_node(node)
                names.append(node["metadata"]["name"])
        yield names
    finally:
        for name in names:
            with contextlib.suppress(NotFound), typed_errors():
                core.delete_node(name)
