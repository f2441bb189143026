"""A long run's capacity holder: pods that ask for the next segment's VMs ahead of its
rollover, and hold them until its workload takes them.

GKE's autoscaler adds nodes to a flex-start (or Spot, or on-demand) pool only for pods
that cannot be scheduled and select it: a pool made ahead with nothing pending on it asks
for nothing. The holder is one pod per node of the next segment's pool, asking for the
node's chips as the workload's pods will, running a pause container; it is deleted (its
pods go at once: a grace period of 0) in the pass that makes the next segment's workload,
whose pods then land on the nodes it held. A queued-provisioning pool gets its nodes only
through a ProvisioningRequest (Kueue's, for the workload itself), so it has no holder.
"""

from __future__ import annotations

from dws_operator.api import PodTemplate, TrainingRequestSpec
from dws_operator.kube_types import Job
from dws_operator.planning import SlicePlan
from dws_operator.workload import QUEUE_LABEL, REQUEST_LABEL, RequestRef, render_job

#: The pause image every Kubernetes node already runs its pods' sandboxes from.
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
#: Between a holder's segment and its request's name.
HOLDER_INFIX = "-hold-"


def holder_name(request: str, segment: int) -> str:
    """`<segment>-hold-<request>`: it starts with a digit, which no TrainingRequest's
    name does (and so none of their workloads', which start with the request's name),
    so it cannot be the name of any request's Job."""
    return f"{segment}{HOLDER_INFIX}{request}"


def holder_segment(request: str, job: str) -> int | None:
    """The segment a holder of `request` named `job` is for; None when `job` is none."""
    head, infix, tail = job.partition(HOLDER_INFIX)
    return int(head) if infix and tail == request and head.isdigit() else None


def render_holder(ref: RequestRef, spec: TrainingRequestSpec, plan: SlicePlan, segment: int) -> Job:
    """The holder of `segment`'s capacity: the workload's Job as the plan renders it
    (its pools, chips and tolerations), with a pause container, no queue (Kueue's quota
    is the workload's, which asks for it when it starts)."""
    holding = spec.model_copy(
        update={
            "template": PodTemplate.model_validate(
                {"spec": {"containers": [{"name": "hold", "image": PAUSE_IMAGE}]}}
            ),
            "checkpoint_dir": None,
        }
    )
    job = render_job(ref, holding, plan, attempt=0, queue=None)
    job["metadata"]["name"] = holder_name(ref.name, segment)
    job["metadata"]["labels"].pop(QUEUE_LABEL, None)
    # Not the request's pods: out of its headless Service's endpoints.
    job["spec"]["template"]["metadata"]["labels"].pop(REQUEST_LABEL, None)
    pod = job["spec"]["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 0
    pod.pop("subdomain", None)
    return job
