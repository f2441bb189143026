"""Multislice: N identical multi-host TPU slices run as one JobSet. Pure.

`jobset.x-k8s.io/v1alpha2`, one replicated Job per slice (`s0`, `s1`, ...; replicas 1),
each an Indexed Job of `nodes` pods like a single slice's Job, its pods pinned to the
slice's own node pool by `cloud.google.com/gke-nodepool`. Pinning gives each slice a
pool of its own without JobSet's exclusive-placement webhook, and makes the slice a pod
lands on (and so `MEGASCALE_SLICE_ID`) known when the object is rendered.

The JobSet controller names child Jobs `<jobset>-<replicated job>-<job index>` and,
with DNS hostnames on, a headless Service named after the JobSet, so a worker is
`<jobset>-s<i>-0-<index>.<jobset>`. Every field the JobSet webhook would default is
written out, so the object means the same with or without that webhook.
"""

from __future__ import annotations

from typing import Final

from dws_operator.api import TrainingRequestSpec
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.kube_types import EnvVar, JobSet, JobSetSpec, ReplicatedJob
from dws_operator.planning import SlicePlan
from dws_operator.workload import (
    ATTEMPT_LABEL,
    RequestRef,
    attempt_env,
    indexed_job_spec,
    job_name,
    labels_for,
    pod_template,
    queue_metadata,
    worker_env,
)

JOBSET_GROUP = "jobset.x-k8s.io"
JOBSET_VERSION = "v1alpha2"
JOBSET_API_VERSION = f"{JOBSET_GROUP}/{JOBSET_VERSION}"
JOBSET_PLURAL = "jobsets"
JOBSET_KIND: Final = "JobSet"
#: The JobSet webhook refuses a JobSet whose longest pod name,
#: `<jobset>-<replicated job>-<job index>-<pod index>-<5 random>`, passes 63 characters.
#: With `-r100` (a restart), `-s63`, `-0`, a 4-digit pod index (v5p's largest slice has
#: 2,240 VMs) and `-abcde`, a multi-slice request's name keeps 41 of them.
MAX_MULTISLICE_NAME = 41
#: The label the JobSet controller puts on its child Jobs and their pods.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
SLICES_ENV = "MEGASCALE_NUM_SLICES"
SLICE_ID_ENV = "MEGASCALE_SLICE_ID"
COORDINATOR_ENV = "MEGASCALE_COORDINATOR_ADDRESS"


def replicated_job_name(index: int) -> str:
    return f"s{index}"


def child_job_name(jobset: str, slice_index: int) -> str:
    """The JobSet controller's name for the slice's Job (replicas 1: job index 0)."""
    return f"{jobset}-{replicated_job_name(slice_index)}-0"


def _slice_env(plan: SlicePlan, jobset: str, index: int) -> list[EnvVar]:
    # Worker k of slice i is `<child job>-<k>.<jobset>`, as for a single slice's Job.
    coordinator = f"{child_job_name(jobset, 0)}-0.{jobset}"
    return [
        *worker_env(plan, child_job_name(jobset, index), jobset),
        {"name": SLICES_ENV, "value": str(plan.slices)},
        {"name": SLICE_ID_ENV, "value": str(index)},
        # JAX's Megascale runtime meets at one coordinator: slice 0's first worker.
        {"name": COORDINATOR_ENV, "value": coordinator},
    ]


def render_jobset(
    ref: RequestRef,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    *,
    attempt: int = 0,
    queue: str | None = None,
) -> JobSet:
    """The JobSet of one attempt. `queue` set means Kueue admits it (created suspended)."""
    if len(plan.pool_names) != plan.slices:
        raise ValueError("a multi-slice plan needs every slice's pool name")
    name = job_name(ref.name, attempt)
    replicated: list[ReplicatedJob] = []
    for index, pool in enumerate(plan.pool_names):
        env = _slice_env(plan, name, index) + attempt_env(spec, attempt)
        template = pod_template(
            ref,
            spec,
            plan,
            env,
            attempt=attempt,
            subdomain=name,
            node_selector={NODE_POOL_LABEL_KEY: pool},
        )
        replicated.append(
            {
                "name": replicated_job_name(index),
                "replicas": 1,
                "template": {
                    # Our labels on the child Jobs: their changes wake the request.
                    "metadata": {"labels": labels_for(ref, {ATTEMPT_LABEL: str(attempt)})},
                    "spec": indexed_job_spec(plan, template),
                },
            }
        )
    queue_labels, annotations = queue_metadata(spec, plan, queue)
    jobset_spec: JobSetSpec = {
        "replicatedJobs": replicated,
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All", "targetReplicatedJobs": []},
        # A lost slice fails the whole JobSet; the operator decides whether to restart it
        # (a new attempt, counted against maxRestarts) as it does for one slice.
        "failurePolicy": {"maxRestarts": 0},
        "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
    }
    if queue is not None:
        jobset_spec["suspend"] = True
    return {
        "apiVersion": JOBSET_API_VERSION,
        "kind": JOBSET_KIND,
        "metadata": {
            "name": name,
            "namespace": ref.namespace,
            "labels": labels_for(ref, {ATTEMPT_LABEL: str(attempt), **queue_labels}),
            "annotations": annotations,
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": jobset_spec,
    }
