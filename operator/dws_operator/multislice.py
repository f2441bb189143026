"""Multislice: N identical multi-host TPU slices run as one JobSet. Pure.

`jobset.x-k8s.io/v1alpha2` with ONE replicatedJob (`s`) of `replicas: N`: each replica
is an Indexed Job of `nodes` pods, one slice, like a single slice's Job. This is the
shape of xpk (`--num-slices`: replicatedJob `slice-job`, `replicas: num_slices`;
AI-Hypercomputer/xpk src/xpk/commands/workload.py, read 2026-11-27) and of GKE's
Multislice guide (cloud.google.com/kubernetes-engine/docs/how-to/tpu-multislice).

Why one replicatedJob: Kueue makes one PodSet per replicatedJob, and a Workload holds at
most 18 PodSets in v0.19 (`jobframework.MaxPodSets`, the Workload CRD's `maxItems`; 8 in
v0.15-v0.17, 10 in v0.18). One replicatedJob per slice made a JobSet of more slices than
that which Kueue never admits; one replicatedJob is one PodSet of `N x nodes` pods.

Which slice lands where (JobSet v0.12.0, pkg/webhooks/pod_webhook.go and
pkg/controllers/pod_controller.go): the JobSet annotation
`alpha.jobset.sigs.k8s.io/exclusive-topology: cloud.google.com/gke-nodepool` asks for
exclusive placement. The controller copies it onto each child Job's pod template; JobSet's
pod mutating webhook gives each Job's leader (completion index 0) a required pod affinity
to its own Job's pods and a required anti-affinity to every other Job's pods (of the same
priority) on that topology key, and gives each follower a nodeSelector for the node pool
its leader was scheduled to; the pod validating webhook refuses a follower until its
leader is scheduled. So each child Job gets a node pool of its own. Our pods also carry a
required nodeAffinity `cloud.google.com/gke-nodepool In [the request's N pools]`: the
pool a slice gets is one of this request's, chosen at scheduling time, not when the
object is rendered.

What each pod knows of its slice: the JobSet controller labels and annotates each child
Job's pod template with `jobset.sigs.k8s.io/job-index` (the replica index, 0..N-1;
`labelAndAnnotateObject` in pkg/controllers/jobset_controller.go). `MEGASCALE_SLICE_ID`
reads that label through the downward API (as xpk's Pathways template does), and
`TPU_WORKER_HOSTNAMES` names the pod's own slice's workers with Kubernetes' dependent
environment variables (`$(MEGASCALE_SLICE_ID)`, defined earlier in the same list).

Names: the controller names child Jobs `<jobset>-s-<job index>` and, with DNS hostnames
on, a headless Service named after the JobSet, so worker k of slice i is
`<jobset>-s-<i>-<k>.<jobset>`. Every field JobSet's defaulting webhook would set is
written out, so the object means the same with or without that webhook.

Network (xpk's TPU JobSet and GKE's Multislice sample): `hostNetwork: true` with
`dnsPolicy: ClusterFirstWithHostNet`, for the data-center network between slices; the
pods still resolve the Service's names. With hostNetwork the API server sets each
container port's `hostPort` to its `containerPort` (and refuses any other value); we
write that out for every declared port. The TPU ports (8471, 8431) then bind on the node:
harmless, as a slice's pod takes all of its node's chips, so no two of our pods share a
node. A user template that sets `hostNetwork` or `dnsPolicy` keeps its own values.
"""

from __future__ import annotations

from typing import Any, Final

from dws_operator.api import TrainingRequestSpec
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.kube_types import EnvVar, JobSet, JobSetSpec, PodTemplate, ReplicatedJob
from dws_operator.planning import SlicePlan
from dws_operator.workload import (
    ATTEMPT_LABEL,
    RequestRef,
    SegmentEnv,
    attempt_env,
    indexed_job_spec,
    job_deadline,
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
#: The one replicatedJob's name; one letter, as every character is taken from the
#: request's name (see MAX_MULTISLICE_NAME).
REPLICATED_JOB_NAME = "s"
#: The JobSet webhook refuses a JobSet whose longest pod name,
#: `<jobset>-<replicated job>-<job index>-<pod index>-<5 random>`, passes 63 characters.
#: With `-r100` (a restart, MAX_RESTARTS), `-s`, `-63` (MAX_SLICES - 1), a 4-digit pod
#: index (v5p's largest slice has 2,240 VMs) and `-abcde`, 21 characters go to the
#: suffixes and a JobSet's name may have 42. A multi-slice request's name keeps 41, the
#: bound of the earlier shape (`-s63-0`, one character longer): the CRD's rule and every
#: request valid under it stay as they were.
MAX_MULTISLICE_NAME = 41
#: The label the JobSet controller puts on its child Jobs and their pods.
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
#: The child Job's index within its replicatedJob: the slice's index. A label and an
#: annotation on the child Jobs and their pods (JobSet v0.12.0 `labelAndAnnotateObject`).
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
#: JobSet's exclusive placement: one child Job per value of the named node label.
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
SLICES_ENV = "MEGASCALE_NUM_SLICES"
SLICE_ID_ENV = "MEGASCALE_SLICE_ID"
COORDINATOR_ENV = "MEGASCALE_COORDINATOR_ADDRESS"


def child_job_name(jobset: str, slice_index: int) -> str:
    """The JobSet controller's name for a slice's Job (`placement.GenJobName`)."""
    return f"{jobset}-{REPLICATED_JOB_NAME}-{slice_index}"


def _slice_env(plan: SlicePlan, jobset: str) -> list[EnvVar]:
    """The same list for every slice: the slice's own index comes from its pod's label."""
    index = f"metadata.labels['{JOB_INDEX_LABEL}']"
    # Worker k of slice i is `<child job>-<k>.<jobset>`; `$(MEGASCALE_SLICE_ID)` expands
    # to the pod's slice index because it is defined first.
    own_job = f"{jobset}-{REPLICATED_JOB_NAME}-$({SLICE_ID_ENV})"
    coordinator = f"{child_job_name(jobset, 0)}-0.{jobset}"
    return [
        {"name": SLICE_ID_ENV, "valueFrom": {"fieldRef": {"fieldPath": index}}},
        *worker_env(plan, own_job, jobset),
        {"name": SLICES_ENV, "value": str(plan.slices)},
        # JAX's Megascale runtime meets at one coordinator: slice 0's first worker.
        {"name": COORDINATOR_ENV, "value": coordinator},
    ]


def _pin_to_pools(pod_spec: dict[str, Any], pools: tuple[str, ...]) -> None:
    """Requires one of `pools` in every node selector term (terms are ORed, a term's
    expressions ANDed), keeping the user's own terms."""
    requirement = {"key": NODE_POOL_LABEL_KEY, "operator": "In", "values": list(pools)}
    affinity = pod_spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms") or [{}]
    for term in terms:
        term["matchExpressions"] = [*term.get("matchExpressions", []), requirement]
    required["nodeSelectorTerms"] = terms


def _host_network(pod_spec: dict[str, Any]) -> None:
    """hostNetwork with cluster DNS, and each port's hostPort as the API server defaults it."""
    pod_spec.setdefault("hostNetwork", True)
    if not pod_spec["hostNetwork"]:
        return
    pod_spec.setdefault("dnsPolicy", "ClusterFirstWithHostNet")
    for kind in ("initContainers", "containers"):
        for container in pod_spec.get(kind) or []:
            for port in container.get("ports") or []:
                if "containerPort" in port:
                    port.setdefault("hostPort", port["containerPort"])


def slice_pod_template(
    ref: RequestRef,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    jobset: str,
    attempt: int,
    segment: SegmentEnv | None = None,
) -> PodTemplate:
    """Every slice's pod template: the slice's chips and env, the request's pools."""
    env = _slice_env(plan, jobset) + attempt_env(spec, attempt, segment)
    template = pod_template(ref, spec, plan, env, attempt=attempt, subdomain=jobset)
    _pin_to_pools(template["spec"], plan.pool_names)
    _host_network(template["spec"])
    return template


def render_jobset(
    ref: RequestRef,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    *,
    attempt: int = 0,
    queue: str | None = None,
    segment: SegmentEnv | None = None,
) -> JobSet:
    """The JobSet of one attempt. `queue` set means Kueue admits it (created suspended)."""
    if len(plan.pool_names) != plan.slices:
        raise ValueError("a multi-slice plan needs every slice's pool name")
    name = job_name(ref.name, attempt)
    template = slice_pod_template(ref, spec, plan, name, attempt, segment)
    replicated: ReplicatedJob = {
        "name": REPLICATED_JOB_NAME,
        "replicas": plan.slices,
        "template": {
            # Our labels on the child Jobs: their changes wake the request.
            "metadata": {"labels": labels_for(ref, {ATTEMPT_LABEL: str(attempt)})},
            "spec": indexed_job_spec(plan, template, job_deadline(spec, plan)),
        },
    }
    queue_labels, annotations = queue_metadata(spec, plan, queue)
    jobset_spec: JobSetSpec = {
        "replicatedJobs": [replicated],
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
            "annotations": {EXCLUSIVE_TOPOLOGY_ANNOTATION: NODE_POOL_LABEL_KEY, **annotations},
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": jobset_spec,
    }
