"""Multislice: the JobSet a multi-slice request runs as, and the decisions over its pools.

Pure: `render_jobset` and `decide` on hand-built `Observed` values.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dws_operator.api import Phase, TrainingRequestSpec, TrainingRequestStatus
from dws_operator.api.accelerator import MAX_SLICES
from dws_operator.api.spec import MAX_RESTARTS
from dws_operator.kube_types import JobSet
from dws_operator.multislice import (
    JOBSET_KIND,
    MAX_MULTISLICE_NAME,
    child_job_name,
    render_jobset,
)
from dws_operator.naming import MAX_NODE_POOL_NAME, default_node_pool_name, slice_pool_names
from dws_operator.planning import SlicePlan, plan_slice
from dws_operator.reconcile import (
    CreateJob,
    CreateNodePool,
    CreateService,
    DeleteJob,
    DeleteNodePool,
    JobView,
    Observed,
    PoolState,
    PoolView,
    ReconcileConfig,
    RequestView,
    ScaleNodePoolToZero,
    decide,
)
from dws_operator.reconcile.facts import read_spec, slices_of
from dws_operator.reconcile.step import pool_names_for
from dws_operator.workload import QUEUE_LABEL, RequestRef
from tests.builders import spec_body, tpu

NAME = "mega"
NAMESPACE = "ml"
UID = "0b5e2c9d-0000-4000-8000-00000000cafe"
REF = RequestRef(NAME, NAMESPACE, UID)
BODY = spec_body(tpu("v5p", "2x2x2", slices=2))  # 2 slices of 2 x ct5p-hightpu-4t
BASE = default_node_pool_name(NAME, UID, slices=2)
POOLS = (f"{BASE}-s0", f"{BASE}-s1")
CONFIG = ReconcileConfig(location="us-east5", jobset=True)
T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def plan(body: dict[str, Any] = BODY) -> SlicePlan:
    return plan_slice(TrainingRequestSpec.model_validate(body), pool_name=BASE)


def spec(body: dict[str, Any] = BODY) -> TrainingRequestSpec:
    return TrainingRequestSpec.model_validate(body)


def pool(name: str, state: PoolState = PoolState.RUNNING, max_nodes: int = 2) -> PoolView:
    return PoolView(
        name=name, state=state, ours=True, max_nodes=max_nodes, machine_type="ct5p-hightpu-4t"
    )


def observed(
    status: TrainingRequestStatus | None = None,
    *,
    pools: tuple[PoolView | None, ...] = (None, None),
    job: JobView | None = None,
    deleting: bool = False,
    nodes: dict[str, int] | None = None,
    stale: tuple[str, ...] = (),
) -> Observed:
    request = RequestView(
        name=NAME,
        namespace=NAMESPACE,
        uid=UID,
        generation=1,
        deleting=deleting,
        facts=read_spec(NAME, UID, BODY),
        status=status or TrainingRequestStatus(),
    )
    return Observed(
        request=request,
        now=T0,
        pool=pools[0],
        more_pools=pools[1:],
        job=job,
        nodes_by_pool=nodes or {},
        stale_jobs=stale,
    )


def status(phase: Phase, **fields: Any) -> TrainingRequestStatus:
    """A status an earlier pass left: the plan and pools recorded."""
    first = decide(observed(), CONFIG).status
    return first.model_copy(update={"phase": phase, "requested_at": T0, **fields})


# -- names and the raw spec ----------------------------------------------------------------


def test_every_slice_pool_name_fits_gke() -> None:
    long_name = "a" * 48
    base = default_node_pool_name(long_name, UID, slices=64)
    names = slice_pool_names(base, 64)
    assert len(names) == 64
    assert len(set(names)) == 64
    assert max(len(n) for n in names) <= MAX_NODE_POOL_NAME
    assert names[63].endswith("-s63")


def test_single_slice_pool_name_is_unchanged() -> None:
    assert slice_pool_names("dws-x-123", 1) == ("dws-x-123",)
    assert default_node_pool_name(NAME, UID) == default_node_pool_name(NAME, UID, slices=1)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (BODY, 2),
        (spec_body(tpu("v5p", "2x2x2")), 1),
        ({"accelerator": {"tpu": {"slices": "two"}}}, 1),
        ({"accelerator": {"tpu": {"slices": 0}}}, 1),
        # A count stored under an older, higher bound keeps naming the same pools.
        ({"accelerator": {"tpu": {"slices": 65}}}, 65),
        ({"accelerator": {"tpu": {"slices": True}}}, 1),
        ({"accelerator": "x"}, 1),
        ({}, 1),
    ],
)
def test_slices_of_a_stored_spec(raw: dict[str, Any], expected: int) -> None:
    assert slices_of(raw) == expected
    assert read_spec(NAME, UID, raw).workload_kind == (JOBSET_KIND if expected > 1 else "Job")


def test_pool_names_for_request() -> None:
    assert pool_names_for(observed().request) == POOLS


# -- render_jobset ----------------------------------------------------------------------


def pod_spec_of(jobset: JobSet) -> dict[str, Any]:
    [rjob] = jobset["spec"]["replicatedJobs"]
    return rjob["template"]["spec"]["template"]["spec"]


def test_jobset_has_one_replicated_job_of_one_indexed_job_per_slice() -> None:
    jobset = render_jobset(REF, spec(), plan())
    assert (jobset["apiVersion"], jobset["kind"]) == ("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobset["metadata"]["name"] == NAME
    assert jobset["metadata"]["ownerReferences"][0]["uid"] == UID
    # One replicatedJob: one Kueue PodSet, whatever the number of slices.
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert (rjob["name"], rjob["replicas"]) == ("s", 2)
    job = rjob["template"]["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 2, 2)
    assert job["backoffLimit"] == 0
    pod = job["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] == "2x2x2"
    assert "cloud.google.com/gke-nodepool" not in pod["nodeSelector"]
    assert pod["restartPolicy"] == "Never"
    assert pod["subdomain"] == NAME
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == "4"


def test_each_slice_gets_a_pool_of_its_own_among_the_requests_pools() -> None:
    jobset = render_jobset(REF, spec(), plan())
    # JobSet's exclusive placement: one child Job (slice) per node pool.
    assert jobset["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"
    }
    required = pod_spec_of(jobset)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required["nodeSelectorTerms"] == [
        {
            "matchExpressions": [
                {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": list(POOLS)}
            ]
        }
    ]


def test_the_pool_requirement_joins_every_term_of_the_users_node_affinity() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["us-east5-a"]}
    other = {"key": "example.com/rack", "operator": "Exists"}
    body = spec_body(
        tpu("v5p", "2x2x2", slices=2),
        template={
            "spec": {
                "containers": [{"name": "train", "image": "train:1"}],
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [zone]},
                                {"matchExpressions": [other]},
                            ]
                        }
                    }
                },
            }
        },
    )
    pools = {"key": "cloud.google.com/gke-nodepool", "operator": "In", "values": list(POOLS)}
    terms = pod_spec_of(render_jobset(REF, spec(body), plan(body)))["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [zone, pools]}, {"matchExpressions": [other, pools]}]


def test_each_pod_learns_its_slice_from_the_jobset_controllers_job_index() -> None:
    container = pod_spec_of(render_jobset(REF, spec(), plan()))["containers"][0]
    env = container["env"]
    names = [e["name"] for e in env]
    by_name = {e["name"]: e for e in env}
    assert by_name["MEGASCALE_SLICE_ID"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.labels['jobset.sigs.k8s.io/job-index']"}
    }
    # Dependent variables expand only those defined earlier in the list.
    assert names.index("MEGASCALE_SLICE_ID") < names.index("TPU_WORKER_HOSTNAMES")
    assert by_name["TPU_WORKER_HOSTNAMES"]["value"] == (
        f"{NAME}-s-$(MEGASCALE_SLICE_ID)-0.{NAME},{NAME}-s-$(MEGASCALE_SLICE_ID)-1.{NAME}"
    )
    assert by_name["TPU_WORKER_ID"]["valueFrom"] == {
        "fieldRef": {
            "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
        }
    }
    assert by_name["MEGASCALE_NUM_SLICES"]["value"] == "2"
    # Slice 0's first worker: the JobSet controller's `<jobset>-<rjob>-<job>-<pod>`.
    assert by_name["MEGASCALE_COORDINATOR_ADDRESS"]["value"] == f"{NAME}-s-0-0.{NAME}"
    assert by_name["DWS_ATTEMPT"]["value"] == "0"
    assert child_job_name(NAME, 3) == f"{NAME}-s-3"


def test_slice_pods_use_the_host_network_with_cluster_dns() -> None:
    pod = pod_spec_of(render_jobset(REF, spec(), plan()))
    assert (pod["hostNetwork"], pod["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    # As the API server defaults them for hostNetwork: hostPort = containerPort.
    ports = pod["containers"][0]["ports"]
    assert [(p["containerPort"], p["hostPort"]) for p in ports] == [(8471, 8471), (8431, 8431)]


def test_a_template_that_turns_the_host_network_off_keeps_it_off() -> None:
    body = spec_body(
        tpu("v5p", "2x2x2", slices=2),
        template={
            "spec": {"hostNetwork": False, "containers": [{"name": "train", "image": "train:1"}]}
        },
    )
    pod = pod_spec_of(render_jobset(REF, spec(body), plan(body)))
    assert pod["hostNetwork"] is False
    assert "dnsPolicy" not in pod
    assert all("hostPort" not in p for p in pod["containers"][0]["ports"])


def test_twenty_slices_are_still_one_replicated_job() -> None:
    body = spec_body(tpu("v5e", "2x4", slices=20))
    base = default_node_pool_name(NAME, UID, slices=20)
    jobset = render_jobset(REF, spec(body), plan_slice(spec(body), pool_name=base))
    [rjob] = jobset["spec"]["replicatedJobs"]
    assert rjob["replicas"] == 20
    [term] = pod_spec_of(jobset)["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert term["matchExpressions"][0]["values"] == list(slice_pool_names(base, 20))


def test_the_longest_pod_name_of_a_maximal_request_fits_a_dns_label() -> None:
    """JobSet's webhook: `<jobset>-<rjob>-<last job>-<last pod>-abcde` <= 63 characters."""
    jobset = "n" * MAX_MULTISLICE_NAME + f"-r{MAX_RESTARTS}"
    longest = f"{child_job_name(jobset, MAX_SLICES - 1)}-2239-abcde"
    assert len(longest) <= 63


def test_jobset_spells_out_what_its_webhook_would_default() -> None:
    body = render_jobset(REF, spec(), plan())["spec"]
    assert body["failurePolicy"] == {"maxRestarts": 0}
    assert body["successPolicy"]["operator"] == "All"
    assert body["network"]["enableDNSHostnames"] is True
    assert body["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert "suspend" not in body


def test_queued_jobset_is_suspended_with_the_queue_label() -> None:
    jobset = render_jobset(REF, spec(), plan(), attempt=2, queue="team-a")
    assert jobset["spec"]["suspend"] is True
    assert jobset["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert jobset["metadata"]["name"] == f"{NAME}-r2"
    # The queue label is the JobSet's only: Kueue must not see the child Jobs as workloads.
    for rjob in jobset["spec"]["replicatedJobs"]:
        assert QUEUE_LABEL not in rjob["template"]["metadata"]["labels"]
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology" in jobset["metadata"]["annotations"]


def test_render_jobset_needs_every_pool_name() -> None:
    no_pools = plan_slice(spec())
    with pytest.raises(ValueError, match="pool name"):
        render_jobset(REF, spec(), no_pools)


# -- decide ---------------------------------------------------------------------------------


def test_creates_a_pool_per_slice() -> None:
    decision = decide(observed(), CONFIG)
    created = [a for a in decision.actions if isinstance(a, CreateNodePool)]
    assert [a.name for a in created] == list(POOLS)
    assert decision.status.phase == Phase.PROVISIONING
    assert decision.status.slices is not None
    assert [(s.index, s.node_pool, s.nodes) for s in decision.status.slices] == [
        (0, POOLS[0], 0),
        (1, POOLS[1], 0),
    ]
    assert decision.status.plan is not None
    assert (decision.status.plan.slices, decision.status.plan.total_nodes) == (2, 4)


def test_creates_only_the_missing_slice_pool() -> None:
    decision = decide(observed(pools=(pool(POOLS[0]), None)), CONFIG)
    assert [a.name for a in decision.actions if isinstance(a, CreateNodePool)] == [POOLS[1]]


def test_waits_while_any_slice_pool_provisions() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1], PoolState.PROVISIONING))
    decision = decide(observed(pools=pools), CONFIG)
    assert decision.actions == []
    assert decision.status.phase == Phase.PROVISIONING
    assert POOLS[1] in (decision.status.message or "")


def test_a_foreign_slice_pool_fails_the_request() -> None:
    foreign = PoolView(
        name=POOLS[1],
        state=PoolState.RUNNING,
        ours=False,
        max_nodes=2,
        machine_type="ct5p-hightpu-4t",
    )
    decision = decide(observed(pools=(pool(POOLS[0]), foreign)), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "NodePoolNameTaken" in (decision.status.message or "")
    assert not [a for a in decision.actions if isinstance(a, CreateNodePool)]


def test_all_pools_ready_creates_the_jobset_and_no_service() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    decision = decide(observed(pools=pools), CONFIG)
    assert [type(a) for a in decision.actions] == [CreateJob]
    created = decision.actions[0]
    assert isinstance(created, CreateJob)
    assert created.manifest["kind"] == JOBSET_KIND
    assert not [a for a in decision.actions if isinstance(a, CreateService)]
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    assert decision.status.message == "Waiting for capacity: 0/4 nodes"


def test_running_needs_every_slice_ready() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    half = JobView(name=NAME, ours=True, ready=2)
    waiting = decide(observed(status(Phase.WAITING_FOR_CAPACITY), pools=pools, job=half), CONFIG)
    assert waiting.status.phase == Phase.WAITING_FOR_CAPACITY
    assert waiting.status.message == "Waiting for capacity: 2/4 nodes ready"
    full = JobView(name=NAME, ours=True, ready=4)
    nodes = dict.fromkeys(POOLS, 2)
    running = decide(
        observed(status(Phase.WAITING_FOR_CAPACITY), pools=pools, job=full, nodes=nodes), CONFIG
    )
    assert running.status.phase == Phase.RUNNING
    assert running.status.message == "Running on 2 slices of 2 x ct5p-hightpu-4t"
    assert running.status.slices is not None
    assert [s.nodes for s in running.status.slices] == [2, 2]


def test_success_scales_every_slice_pool_to_zero() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    done = JobView(name=NAME, ours=True, complete=True)
    decision = decide(observed(status(Phase.RUNNING), pools=pools, job=done), CONFIG)
    assert decision.status.phase == Phase.SUCCEEDED
    scaled = [a.name for a in decision.actions if isinstance(a, ScaleNodePoolToZero)]
    assert scaled == list(POOLS)
    # Once both are at zero, the request records it.
    zero = (pool(POOLS[0], max_nodes=0), pool(POOLS[1], max_nodes=0))
    after = decide(observed(decision.status, pools=zero, job=done), CONFIG)
    assert after.actions == []
    assert after.status.scaled_down_at == T0
    assert after.requeue_after is None


def test_one_pool_still_up_keeps_the_cleanup_going() -> None:
    done = JobView(name=NAME, ours=True, complete=True)
    pools = (pool(POOLS[0], max_nodes=0), pool(POOLS[1]))
    decision = decide(observed(status(Phase.SUCCEEDED), pools=pools, job=done), CONFIG)
    assert [a for a in decision.actions if isinstance(a, ScaleNodePoolToZero)] == [
        ScaleNodePoolToZero(POOLS[1])
    ]
    assert decision.status.scaled_down_at is None


def test_lost_slice_restarts_the_whole_jobset() -> None:
    body_restarts = 1
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    lost = JobView(name=NAME, ours=True, failed=True, disrupted=True)
    request_status = status(Phase.RUNNING, started_at=T0)
    raw = {**BODY, "maxRestarts": body_restarts}
    obs = observed(request_status, pools=pools, job=lost)
    obs = Observed(
        request=dataclasses.replace(obs.request, facts=read_spec(NAME, UID, raw)),
        now=T0 + timedelta(minutes=5),
        pool=obs.pool,
        more_pools=obs.more_pools,
        job=lost,
    )
    decision = decide(obs, CONFIG)
    assert decision.actions == [DeleteJob(NAME, JOBSET_KIND)]
    assert decision.status.restarts == 1
    assert decision.status.phase == Phase.WAITING_FOR_CAPACITY
    # Next pass: the new attempt's JobSet.
    again = Observed(
        request=dataclasses.replace(obs.request, status=decision.status),
        now=obs.now,
        pool=obs.pool,
        more_pools=obs.more_pools,
    )
    created = [a for a in decide(again, CONFIG).actions if isinstance(a, CreateJob)]
    assert [c.manifest["metadata"]["name"] for c in created] == [f"{NAME}-r1"]
    assert created[0].manifest["kind"] == JOBSET_KIND


def test_stale_attempts_are_deleted_as_jobsets() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    decision = decide(observed(pools=pools, stale=(NAME,)), CONFIG)
    assert DeleteJob(NAME, JOBSET_KIND) in decision.actions


def test_deletion_removes_the_jobset_and_every_pool() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    job = JobView(name=NAME, ours=True)
    decision = decide(observed(status(Phase.RUNNING), pools=pools, job=job, deleting=True), CONFIG)
    assert DeleteJob(NAME, JOBSET_KIND) in decision.actions
    assert [a.name for a in decision.actions if isinstance(a, DeleteNodePool)] == list(POOLS)
    assert decision.released is False
    # One pool still stopping: not released yet; both gone: released.
    stopping = (None, pool(POOLS[1], PoolState.STOPPING))
    waiting = decide(observed(status(Phase.DELETING), pools=stopping, deleting=True), CONFIG)
    assert (waiting.actions, waiting.released) == ([], False)
    gone = decide(observed(status(Phase.DELETING), deleting=True), CONFIG)
    assert gone.released is True


def test_capacity_timeout_deletes_every_slice_pool() -> None:
    pools = (pool(POOLS[0]), pool(POOLS[1]))
    waiting = JobView(name=NAME, ours=True, ready=2)
    late = status(Phase.WAITING_FOR_CAPACITY, requested_at=T0 - timedelta(hours=25))
    decision = decide(observed(late, pools=pools, job=waiting), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "CapacityTimeout" in (decision.status.message or "")
    assert "2 slices of 2 x ct5p-hightpu-4t" in (decision.status.message or "")
    assert DeleteJob(NAME, JOBSET_KIND) in decision.actions
    assert [a.name for a in decision.actions if isinstance(a, DeleteNodePool)] == list(POOLS)


def test_without_the_jobset_api_a_multi_slice_request_fails_at_once() -> None:
    decision = decide(observed(), ReconcileConfig(location="us-east5"))
    assert decision.status.phase == Phase.FAILED
    assert (decision.status.message or "").startswith("JobSetRequired: 2 slices run as one JobSet")
    assert decision.actions == []


def test_a_multi_slice_name_leaves_room_for_the_jobsets_pod_names() -> None:
    long_name = "n" * 42
    request = RequestView(
        name=long_name,
        namespace=NAMESPACE,
        uid=UID,
        generation=1,
        deleting=False,
        facts=read_spec(long_name, UID, BODY),
        status=TrainingRequestStatus(),
    )
    decision = decide(Observed(request=request, now=T0), CONFIG)
    assert decision.status.phase == Phase.FAILED
    assert "metadata.name: at most 41 characters" in (decision.status.message or "")
    assert decision.actions == []


def test_status_names_the_first_slices_real_pool() -> None:
    decision = decide(observed(), CONFIG)
    assert decision.status.node_pool is not None
    assert decision.status.node_pool.name == POOLS[0]


def test_a_failed_create_deletes_the_slice_pools_already_made() -> None:
    """GKE refused slice 1's pool after slice 0's was made: the request fails, and the
    pool that never got capacity goes (ScaleToZero would keep it forever)."""
    failed_status = status(Phase.FAILED, provisioned_at=None)
    decision = decide(observed(failed_status, pools=(pool(POOLS[0]), None)), CONFIG)
    assert decision.actions == [DeleteNodePool(POOLS[0])]
