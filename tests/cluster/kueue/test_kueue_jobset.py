"""Kueue's JobSet integration (jobset.x-k8s.io/jobset) with the real JobSet controller: a
suspended JobSet labelled for a LocalQueue gets a Workload with one PodSet per
replicatedJob, is admitted and unsuspended when the ClusterQueue's quota covers it, and
stays suspended when it does not. A JobSet of more replicatedJobs than a Workload holds
PodSets (18 in v0.19) gets no Workload at all, while the operator's shape (one
replicatedJob of N slices) with as many slices is admitted."""

from __future__ import annotations

from typing import Any

from kubernetes import client as k8s

from dws_operator.catalog import NODE_POOL_LABEL_KEY, TPU_ACCELERATOR_LABEL_KEY, TPU_RESOURCE
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP, Flavor, QueueSetup
from dws_workshop.devcluster.kueue import KueueManager
from tests.cluster.jobsets import (
    CHIPS_PER_HOST,
    HOSTS_PER_SLICE,
    TPU_ACCELERATOR,
    Slice,
    child_jobs,
    create_jobset,
    jobset_manifest,
    multislice_manifest,
    read_jobset,
)
from tests.cluster.kueue.conftest import condition, is_true, wait_for

Obj = dict[str, Any]

#: Two slices of two hosts with four chips each: exactly the ClusterQueue's TPU quota.
TPU_QUOTA = "16"


def _setup(namespace: str, tpu_quota: str = TPU_QUOTA) -> QueueSetup:
    suffix = namespace.removeprefix("t-")
    # The flavor's node labels are the accelerator label our pods already select: Kueue
    # merges them into the pod templates without a conflict.
    flavor = Flavor(f"v6e-{suffix}", {TPU_ACCELERATOR_LABEL_KEY: TPU_ACCELERATOR}, TPU_RESOURCE)
    return QueueSetup(
        cluster_queue=f"cq-{suffix}",
        local_queue="slices",
        namespace=namespace,
        flavors=(flavor,),
        quotas={"cpu": "100", "memory": "100Gi", TPU_RESOURCE: tpu_quota},
    )


def _workload_of(api: k8s.ApiClient, namespace: str, jobset: str) -> Obj | None:
    listing = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        KUEUE_GROUP, KUEUE_API_VERSION, namespace, "workloads"
    )
    for item in listing["items"]:
        owners = item["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "JobSet" and o.get("name") == jobset for o in owners):
            return dict(item)
    return None


def _active(api: k8s.ApiClient, kueue: KueueManager, setup: QueueSetup) -> None:
    wait_for(
        lambda: is_true(
            k8s.CustomObjectsApi(api).get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_API_VERSION, "clusterqueues", setup.cluster_queue
            ),
            "Active",
        ),
        "the ClusterQueue to become Active",
        kueue,
    )


def _slices(hosts: int) -> tuple[Slice, ...]:
    return (Slice("slice-a", "pool-a", hosts=hosts), Slice("slice-b", "pool-b", hosts=hosts))


def test_jobset_within_quota_is_admitted_and_one_beyond_it_waits(
    api: k8s.ApiClient, kueue: KueueManager, namespace: str, apply_queue: Any
) -> None:
    setup = _setup(namespace)
    apply_queue(setup)
    wait_for(
        lambda: is_true(
            k8s.CustomObjectsApi(api).get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_API_VERSION, "clusterqueues", setup.cluster_queue
            ),
            "Active",
        ),
        "the ClusterQueue to become Active",
        kueue,
    )
    queue = setup.local_queue
    create_jobset(api, namespace, jobset_manifest("fits", _slices(2), queue=queue, suspend=True))
    create_jobset(api, namespace, jobset_manifest("too-big", _slices(4), queue=queue, suspend=True))

    workload = wait_for(
        lambda: (w := _workload_of(api, namespace, "fits")) and is_true(w, "Admitted") and w,
        "the fitting JobSet's Workload to be admitted",
        kueue,
    )
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
        ("slice-a", 2),
        ("slice-b", 2),
    ]
    assignments = workload["status"]["admission"]["podSetAssignments"]
    assert [a["flavors"][TPU_RESOURCE] for a in assignments] == [setup.flavors[0].name] * 2
    assert [a["resourceUsage"][TPU_RESOURCE] for a in assignments] == ["8", "8"]

    jobset = wait_for(
        lambda: (js := read_jobset(api, namespace, "fits"))["spec"]["suspend"] is False and js,
        "Kueue to unsuspend the fitting JobSet",
        kueue,
    )
    assert workload["metadata"]["name"].startswith("jobset-fits-")
    for rjob in jobset["spec"]["replicatedJobs"]:
        template = rjob["template"]["spec"]["template"]
        selector = template["spec"]["nodeSelector"]
        assert selector[TPU_ACCELERATOR_LABEL_KEY] == TPU_ACCELERATOR
        assert selector[NODE_POOL_LABEL_KEY] == f"pool-{rjob['name'][-1]}"
        # Admission stamps each pod template with its Workload and PodSet.
        assert (
            template["metadata"]["annotations"]["kueue.x-k8s.io/workload"]
            == (workload["metadata"]["name"])
        )
        assert template["metadata"]["labels"]["kueue.x-k8s.io/podset"] == rjob["name"]
    # The JobSet controller resumes the child Jobs it created while the JobSet was suspended.
    jobs = wait_for(
        lambda: (
            (found := child_jobs(api, namespace, "fits"))
            and len(found) == 2
            and all(j.spec.suspend is False for j in found.values())
            and found
        ),
        "the fitting JobSet's Jobs to be resumed",
        kueue,
    )
    assert sorted(jobs) == ["fits-slice-a-0", "fits-slice-b-0"]

    waiting = wait_for(
        lambda: (
            (w := _workload_of(api, namespace, "too-big"))
            and (c := condition(w, "QuotaReserved"))
            and c["status"] == "False"
            and w
        ),
        "Kueue to find the JobSet beyond quota",
        kueue,
    )
    reserved = condition(waiting, "QuotaReserved")
    assert reserved is not None
    assert reserved["reason"] == "Pending"
    # Its two slices need 32 chips: more than the ClusterQueue ever has, whatever runs.
    assert (
        "couldn't assign flavors to pod set slice-b: insufficient quota for google.com/tpu"
        in reserved["message"]
    )
    assert "> maximum capacity (16)" in reserved["message"]
    assert not is_true(waiting, "Admitted")
    too_big = read_jobset(api, namespace, "too-big")
    assert too_big["spec"]["suspend"] is True
    suspended = condition(too_big, "Suspended")
    assert suspended is not None
    assert (suspended["status"], suspended["reason"]) == ("True", "SuspendedJobs")
    # The JobSet controller made its Jobs, suspended like the JobSet.
    jobs = child_jobs(api, namespace, "too-big")
    assert sorted(jobs) == ["too-big-slice-a-0", "too-big-slice-b-0"]
    assert all(j.spec.suspend is True for j in jobs.values())


#: Kueue v0.19's `jobframework.MaxPodSets` (the Workload CRD's `spec.podSets` maxItems).
MAX_POD_SETS = 18
#: More slices than that.
SLICES = 20


def _no_workload_error(kueue: KueueManager, namespace: str, jobset: str) -> str | None:
    """The manager's log line saying it could not make the JobSet's Workload."""
    for line in kueue.log_path.read_text(errors="replace").splitlines():
        if "Handling job with no workload" in line and f"{namespace}/{jobset}" in line:
            return line
    return None


def test_more_slices_than_podsets_need_one_replicated_job(
    api: k8s.ApiClient, kueue: KueueManager, namespace: str, apply_queue: Any
) -> None:
    chips = SLICES * HOSTS_PER_SLICE * CHIPS_PER_HOST
    setup = _setup(namespace, tpu_quota=str(chips))
    apply_queue(setup)
    _active(api, kueue, setup)
    queue = setup.local_queue
    pools = tuple(f"pool-{i}" for i in range(SLICES))
    per_slice = tuple(Slice(f"slice-{i}", pool) for i, pool in enumerate(pools))
    create_jobset(
        api, namespace, jobset_manifest("per-slice", per_slice, queue=queue, suspend=True)
    )
    create_jobset(api, namespace, multislice_manifest("one-rjob", pools, queue=queue, suspend=True))

    # The operator's shape: one PodSet of every slice's pods, admitted within the quota.
    workload = wait_for(
        lambda: (w := _workload_of(api, namespace, "one-rjob")) and is_true(w, "Admitted") and w,
        "the one-replicatedJob JobSet's Workload to be admitted",
        kueue,
    )
    assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
        ("s", SLICES * HOSTS_PER_SLICE)
    ]
    [assignment] = workload["status"]["admission"]["podSetAssignments"]
    assert assignment["resourceUsage"][TPU_RESOURCE] == str(chips)
    wait_for(
        lambda: read_jobset(api, namespace, "one-rjob")["spec"]["suspend"] is False,
        "Kueue to unsuspend the one-replicatedJob JobSet",
        kueue,
    )

    # One replicatedJob per slice: Kueue builds a Workload of 20 PodSets, which the API
    # server refuses (the CRD's maxItems), so there is never a Workload to admit. Kueue
    # logs the refusal and retries; the JobSet stays suspended.
    line = wait_for(
        lambda: _no_workload_error(kueue, namespace, "per-slice"),
        "Kueue to fail making the per-slice JobSet's Workload",
        kueue,
    )
    assert f"Too many: {SLICES}: must have at most {MAX_POD_SETS} items" in line
    assert "spec.podSets" in line
    assert _workload_of(api, namespace, "per-slice") is None
    assert read_jobset(api, namespace, "per-slice")["spec"]["suspend"] is True
