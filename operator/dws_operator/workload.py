"""The Kubernetes objects a TrainingRequest runs as: a batch/v1 Job and, for slices of
more than one node, a headless Service giving the pods stable hostnames. Pure.

Multi-host slices: an Indexed Job with completions = parallelism = nodes,
backoffLimit 0, restartPolicy Never, one pod per node, `subdomain` = the headless
Service. Single-host: a plain Job with restartPolicy OnFailure.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dws_operator import rfc3339
from dws_operator.api import API_VERSION, KIND, ProvisioningSpec, TrainingRequestSpec
from dws_operator.catalog import MODE_SETTINGS
from dws_operator.durations import parse_duration
from dws_operator.identity import MANAGED_BY
from dws_operator.kube_types import (
    EnvVar,
    Job,
    JobSpec,
    OwnerReference,
    PodTemplate,
    Service,
    Toleration,
)
from dws_operator.kueue_objects import PROVREQ_PARAMETER_PREFIX
from dws_operator.planning import SlicePlan, TolerationPlan
from dws_operator.validation import segmented

#: A part of the user's pod template (a container, a port): any field Kubernetes has.
Manifest = dict[str, Any]

REQUEST_LABEL = "dws-operator.dev/training-request"
ATTEMPT_LABEL = "dws-operator.dev/attempt"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
#: Kueue copies `provreq.kueue.x-k8s.io/<param>` annotations of the Job into the
#: ProvisioningRequest's parameters: GKE reads the run-time cap and, for a TPU slice,
#: the topology it must provision whole.
MAX_RUN_ANNOTATION = f"{PROVREQ_PARAMETER_PREFIX}maxRunDurationSeconds"
TPU_TOPOLOGY_ANNOTATION = f"{PROVREQ_PARAMETER_PREFIX}tpu-topology"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
DISRUPTION_CONDITION = "DisruptionTarget"
ATTEMPT_ENV = "DWS_ATTEMPT"
CHECKPOINT_ENV = "DWS_CHECKPOINT_DIR"
#: A long run's segment (1, 2, ...) and the moment it runs at least until (RFC 3339).
SEGMENT_ENV = "DWS_SEGMENT"
SEGMENT_END_ENV = "DWS_SEGMENT_END"


@dataclass(frozen=True)
class SegmentEnv:
    """What a long run's workload is told of its segment (`reconcile.segments`)."""

    segment: int
    #: It runs at least until then: plan the last checkpoint for it.
    end: datetime


#: A long run's Job deadline counts this for a wait without a limit (maxWaitDuration 0s).
LONGEST_UNBOUNDED_WAIT = 30 * 24 * 3600

#: TPU VMs talk to each other on 8471 and expose runtime metrics on 8431.
TPU_PORTS = {"tpu-ici": 8471, "tpu-metrics": 8431}


@dataclass(frozen=True)
class RequestRef:
    """What a rendered object needs to know of its TrainingRequest."""

    name: str
    namespace: str
    uid: str

    def owner_reference(self) -> OwnerReference:
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "name": self.name,
            "uid": self.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }


def job_name(request: str, attempt: int) -> str:
    """The first attempt keeps the request's name; restarts get `-r<n>` (within 63 chars)."""
    return request if attempt == 0 else f"{request}-r{attempt}"


def service_name(request: str) -> str:
    return request


def needs_service(plan: SlicePlan) -> bool:
    """A multi-host slice needs our headless Service; a JobSet (several slices) makes
    its own."""
    return plan.nodes > 1 and not plan.multi_slice


def labels_for(ref: RequestRef, extra: Mapping[str, str] = {}) -> dict[str, str]:
    return {**MANAGED_BY, REQUEST_LABEL: ref.name, **extra}


def render_service(ref: RequestRef) -> Service:
    """Headless: DNS gives each pod `<job>-<index>.<service>` and nothing load-balances."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": service_name(ref.name),
            "namespace": ref.namespace,
            "labels": labels_for(ref),
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {REQUEST_LABEL: ref.name},
            # Peers must resolve each other before any of them is Ready.
            "publishNotReadyAddresses": True,
        },
    }


def _merge_tolerations(own: list[Manifest], required: list[Toleration]) -> list[Manifest]:
    merged = list(own)
    for toleration in required:
        if toleration not in merged:
            merged.append(dict(toleration))
    return merged


def _toleration(plan: TolerationPlan) -> Toleration:
    return {"key": plan.key, "operator": plan.operator, "value": plan.value, "effect": plan.effect}


def worker_env(plan: SlicePlan, job: str, service: str) -> list[EnvVar]:
    """TPU_WORKER_ID (the pod's completion index) and every worker's hostname, in order."""
    hostnames = ",".join(f"{job}-{i}.{service}" for i in range(plan.nodes))
    index = f"metadata.annotations['{COMPLETION_INDEX_ANNOTATION}']"
    return [
        {"name": "TPU_WORKER_ID", "valueFrom": {"fieldRef": {"fieldPath": index}}},
        {"name": "TPU_WORKER_HOSTNAMES", "value": hostnames},
    ]


def _accelerator_container(containers: list[Manifest], resource: str) -> int:
    """The container that asks for the accelerator already, else the first one."""
    for index, container in enumerate(containers):
        resources = container.get("resources") or {}
        if any(resource in (resources.get(kind) or {}) for kind in ("requests", "limits")):
            return index
    return 0


def _training_container(container: Manifest, plan: SlicePlan, env: list[EnvVar]) -> Manifest:
    """The training container gets all of the node's chips (`chipsPerNode`) in requests
    and limits: a pod asking for more than a node has would never be scheduled."""
    resources = container.setdefault("resources", {})
    for kind in ("requests", "limits"):
        resources.setdefault(kind, {})[plan.resource_name] = str(plan.chips_per_node)
    if env:
        names = {e["name"] for e in env}
        container["env"] = [e for e in container.get("env", []) if e["name"] not in names] + env
    if plan.kind == "tpu" and not plan.single_host:
        ports = container.setdefault("ports", [])
        taken = {p.get("containerPort") for p in ports}
        ports.extend(
            {"name": name, "containerPort": port}
            for name, port in TPU_PORTS.items()
            if port not in taken
        )
    return container


def attempt_env(
    spec: TrainingRequestSpec, attempt: int, segment: SegmentEnv | None = None
) -> list[EnvVar]:
    """Lets the training code tell a restart (resume from its checkpoint) from a first run,
    and a long run's segment when its last checkpoint is due."""
    env: list[EnvVar] = [{"name": ATTEMPT_ENV, "value": str(attempt)}]
    if spec.checkpoint_dir is not None:
        env.append({"name": CHECKPOINT_ENV, "value": spec.checkpoint_dir})
    if segment is not None:
        env.append({"name": SEGMENT_ENV, "value": str(segment.segment)})
        env.append({"name": SEGMENT_END_ENV, "value": rfc3339.seconds(segment.end)})
    return env


def pod_template(
    ref: RequestRef,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    env: list[EnvVar],
    *,
    attempt: int,
    subdomain: str | None,
    node_selector: Mapping[str, str] = {},
) -> PodTemplate:
    """The user's template with the slice's chips, selectors, tolerations and `env`."""
    template = spec.template.model_dump(by_alias=True, exclude_none=True, mode="json")
    pod_meta = template.get("metadata") or {}
    pod_spec: Manifest = copy.deepcopy(template["spec"])
    multi_host = not plan.single_host
    containers = pod_spec["containers"]
    index = _accelerator_container(containers, plan.resource_name)
    containers[index] = _training_container(containers[index], plan, env)
    pod_spec["nodeSelector"] = {
        **pod_spec.get("nodeSelector", {}),
        **plan.node_selector,
        **node_selector,
    }
    pod_spec["tolerations"] = _merge_tolerations(
        pod_spec.get("tolerations", []),
        [_toleration(t) for t in plan.tolerations],
    )
    pod_spec["restartPolicy"] = "Never" if multi_host else "OnFailure"
    block = spec.provisioning.calendar
    stop_before = block.stop_before if block is not None else None
    if spec.run is not None and segmented(spec):
        stop_before = spec.run.stop_before
    if stop_before is not None and "terminationGracePeriodSeconds" not in pod_spec:
        # The workload is stopped this long before its capacity ends (a calendar block,
        # a long run's window): its pods get all of it to checkpoint after the SIGTERM,
        # before the VMs go.
        pod_spec["terminationGracePeriodSeconds"] = int(parse_duration(stop_before).total_seconds())
    if subdomain is not None:
        pod_spec["subdomain"] = subdomain
    labels = labels_for(ref, {ATTEMPT_LABEL: str(attempt)})
    return {
        "metadata": {
            "labels": {**pod_meta.get("labels", {}), **labels},
            "annotations": dict(pod_meta.get("annotations", {})),
        },
        "spec": pod_spec,
    }


def job_deadline(spec: TrainingRequestSpec, plan: SlicePlan) -> int:
    """The Job's run-time cap (`activeDeadlineSeconds`, counted from its start, and again
    when a suspended Job resumes): maxRunDuration; for a long run's segment, which the
    operator stops itself before its capacity ends (counted from when its VMs came), that
    and the longest wait for them, so the Job's own clock never ends a segment first."""
    if not segmented(spec):
        return plan.max_run_seconds
    return plan.max_run_seconds + (plan.max_wait_seconds or LONGEST_UNBOUNDED_WAIT)


def indexed_job_spec(plan: SlicePlan, template: PodTemplate, deadline: int) -> JobSpec:
    """One multi-host slice: an Indexed Job with one pod per node."""
    return {
        "template": template,
        # The run-time cap; Kubernetes restarts this clock when a suspended Job resumes.
        "activeDeadlineSeconds": deadline,
        "completionMode": "Indexed",
        "completions": plan.nodes,
        "parallelism": plan.nodes,
        # One lost worker fails the slice; restarts are the operator's decision.
        "backoffLimit": 0,
        # Tags a failure caused by losing a node (spot preemption, node loss) so the
        # operator can tell it from the training code failing.
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onPodConditions": [{"type": DISRUPTION_CONDITION, "status": "True"}],
                }
            ]
        },
    }


def queue_metadata(
    spec: TrainingRequestSpec, plan: SlicePlan, queue: str | None
) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations that hand the workload to Kueue (none without a queue)."""
    if queue is None:
        return {}, {}
    annotations: dict[str, str] = {}
    if MODE_SETTINGS[spec.provisioning.mode].needs_provisioning_request:
        annotations[MAX_RUN_ANNOTATION] = str(plan.max_run_seconds)
        if plan.topology is not None:
            annotations[TPU_TOPOLOGY_ANNOTATION] = plan.topology
    return {QUEUE_LABEL: queue}, annotations


def render_job(
    ref: RequestRef,
    spec: TrainingRequestSpec,
    plan: SlicePlan,
    *,
    attempt: int = 0,
    queue: str | None = None,
    segment: SegmentEnv | None = None,
) -> Job:
    """The Job of one attempt. `queue` set means Kueue admits it (created suspended)."""
    name = job_name(ref.name, attempt)
    multi_host = not plan.single_host
    env = (
        worker_env(plan, name, service_name(ref.name)) if plan.kind == "tpu" and multi_host else []
    )
    env += attempt_env(spec, attempt, segment)
    template = pod_template(
        ref,
        spec,
        plan,
        env,
        attempt=attempt,
        subdomain=service_name(ref.name) if multi_host else None,
    )
    job_spec: JobSpec
    if multi_host:
        job_spec = indexed_job_spec(plan, template, job_deadline(spec, plan))
    else:
        job_spec = {
            "template": template,
            "activeDeadlineSeconds": job_deadline(spec, plan),
            "completions": 1,
            "parallelism": 1,
        }
    if queue is not None:
        job_spec["suspend"] = True
    queue_labels, annotations = queue_metadata(spec, plan, queue)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": ref.namespace,
            "labels": labels_for(ref, {ATTEMPT_LABEL: str(attempt), **queue_labels}),
            "annotations": annotations,
            "ownerReferences": [ref.owner_reference()],
        },
        "spec": job_spec,
    }


def queue_for(
    spec: TrainingRequestSpec, default_queue: str | None, queued_queue: str | None = None
) -> str | None:
    """The request's queueName; else, for queued provisioning, the queue whose ClusterQueue
    has the ProvisioningRequest admission check; else the default queue."""
    if spec.queue_name:
        return spec.queue_name
    if queued_queue and uses_provisioning_request(spec.provisioning):
        return queued_queue
    return default_queue


def uses_provisioning_request(provisioning: ProvisioningSpec) -> bool:
    return MODE_SETTINGS[provisioning.mode].needs_provisioning_request
