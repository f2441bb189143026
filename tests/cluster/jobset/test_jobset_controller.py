"""The real JobSet controller-manager (pinned v0.12.0, its webhooks registered) against
the devcluster: a two-slice JobSet becomes one Indexed Job per slice and a headless
Service, its pods land on their slices' kwok nodes, and the JobSet ends Completed, or
Failed when a slice fails. The operator's shape (one replicatedJob of N slices with
exclusive placement per node pool) puts each slice on a pool of its own."""

from __future__ import annotations

import socket
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_workshop.devcluster.jobset import JobSetManager
from dws_workshop.devcluster.kubeerrors import Invalid, typed_errors
from tests.cluster.jobsets import (
    HOSTS_PER_SLICE,
    Slice,
    child_jobs,
    create_jobset,
    jobset_condition,
    jobset_manifest,
    multislice_manifest,
    read_jobset,
    tpu_slices,
)
from tests.polling import eventually

#: Pods run for seconds (kwok's clock); the controller reacts in well under a second.
TIMEOUT = 60.0

JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


def _pools(namespace: str) -> tuple[str, str]:
    suffix = namespace.removeprefix("js-")
    return f"pool-a-{suffix}", f"pool-b-{suffix}"


def _pods(api: k8s.ApiClient, namespace: str, jobset: str) -> list[k8s.V1Pod]:
    pods = k8s.CoreV1Api(api).list_namespaced_pod(
        namespace, label_selector=f"{JOBSET_NAME}={jobset}"
    )
    return list(pods.items)


def _rjob_counts(status: dict[str, Any]) -> dict[str, dict[str, int]]:
    counts = ("active", "ready", "succeeded", "failed", "suspended")
    return {s["name"]: {k: s[k] for k in counts} for s in status["replicatedJobsStatus"]}


def _node_pool(api: k8s.ApiClient, node: str) -> str:
    labels: dict[str, str] = k8s.CoreV1Api(api).read_node(node).metadata.labels
    return labels[NODE_POOL_LABEL_KEY]


def test_webhooks_are_registered_for_the_managers_server(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager
) -> None:
    admission = k8s.AdmissionregistrationV1Api(jobset_api)
    name = jobset_manager.webhook_name
    mutating = admission.read_mutating_webhook_configuration(name)
    validating = admission.read_validating_webhook_configuration(name)
    base = f"https://127.0.0.1:{jobset_manager.webhook_port}"
    urls = {w.name: w.client_config.url for w in [*mutating.webhooks, *validating.webhooks]}
    assert urls == {
        "mjobset.kb.io": f"{base}/mutate-jobset-x-k8s-io-v1alpha2-jobset",
        "mpod.kb.io": f"{base}/mutate--v1-pod",
        "vjobset.kb.io": f"{base}/validate-jobset-x-k8s-io-v1alpha2-jobset",
        "vpod.kb.io": f"{base}/validate--v1-pod",
    }
    for webhook in [*mutating.webhooks, *validating.webhooks]:
        assert webhook.failure_policy == "Fail"
        pods = webhook.rules[0].resources == ["pods"]
        selector = webhook.object_selector.match_expressions if pods else None
        assert [(e.key, e.operator) for e in selector or []] == (
            [(JOBSET_NAME, "Exists")] if pods else []
        )


def test_manager_is_ready_on_loopback(jobset_manager: JobSetManager) -> None:
    assert jobset_manager.pid is not None
    assert jobset_manager.ready()
    config = yaml.safe_load(jobset_manager.config_path.read_text())
    assert config["apiVersion"] == "config.jobset.x-k8s.io/v1alpha1"
    assert config["internalCertManagement"] == {"enable": False}
    assert config["leaderElection"] == {"leaderElect": False}
    for address in (config["health"]["healthProbeBindAddress"], config["metrics"]["bindAddress"]):
        assert address.startswith("127.0.0.1:")
    assert config["webhook"]["host"] == "127.0.0.1"
    # Metrics (TLS) and the webhook server serve on loopback with our certificate.
    for port in (jobset_manager.metrics_port, jobset_manager.webhook_port):
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass


def test_two_slices_run_as_indexed_jobs_and_complete(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager, jobset_namespace: str
) -> None:
    api, namespace = jobset_api, jobset_namespace
    pool_a, pool_b = _pools(namespace)
    slices = (Slice("slice-a", pool_a, run_for="2s"), Slice("slice-b", pool_b, run_for="2s"))
    with tpu_slices(api, {pool_a: HOSTS_PER_SLICE, pool_b: HOSTS_PER_SLICE}):
        create_jobset(api, namespace, jobset_manifest("train", slices))

        jobs = eventually(
            lambda: (found := child_jobs(api, namespace, "train")) and len(found) == 2 and found,
            TIMEOUT,
            "the JobSet's two child Jobs",
        )
        # <jobset>-<replicatedJob>-<index>; indexes count within a replicatedJob, the
        # global index across the JobSet (in spec order).
        assert sorted(jobs) == ["train-slice-a-0", "train-slice-b-0"]
        for global_index, rjob in enumerate(("slice-a", "slice-b")):
            job = jobs[f"train-{rjob}-0"]
            assert job.metadata.labels[JOBSET_NAME] == "train"
            assert job.metadata.labels[REPLICATED_JOB] == rjob
            assert job.metadata.labels[JOB_INDEX] == "0"
            assert job.metadata.labels[JOB_GLOBAL_INDEX] == str(global_index)
            assert job.metadata.labels[RESTART_ATTEMPT] == "0"
            assert job.spec.completion_mode == "Indexed"
            assert (job.spec.completions, job.spec.parallelism) == (2, 2)
            owner = job.metadata.owner_references[0]
            assert (owner.kind, owner.name, owner.controller) == ("JobSet", "train", True)

        service = k8s.CoreV1Api(api).read_namespaced_service("train", namespace)
        assert service.spec.cluster_ip == "None"
        assert service.spec.selector == {JOBSET_NAME: "train"}
        assert service.spec.publish_not_ready_addresses is True
        assert service.metadata.owner_references[0].kind == "JobSet"

        done = eventually(
            lambda: jobset_condition(read_jobset(api, namespace, "train"), "Completed"),
            TIMEOUT,
            "the JobSet to complete",
        )
        assert done["reason"] == "AllJobsCompleted"
        assert done["message"] == "jobset completed successfully"

        jobset = read_jobset(api, namespace, "train")
        status: dict[str, Any] = jobset["status"]
        assert status["terminalState"] == "Completed"
        assert status["restarts"] == 0
        # One entry per replicatedJob, in no particular order; counts are Jobs, not pods.
        assert _rjob_counts(status) == {
            "slice-a": {"active": 0, "ready": 0, "succeeded": 1, "failed": 0, "suspended": 0},
            "slice-b": {"active": 0, "ready": 0, "succeeded": 1, "failed": 0, "suspended": 0},
        }
        # Defaults from the CRD's schema (not from the webhook).
        assert jobset["spec"]["failurePolicy"]["restartStrategy"] == "Recreate"
        assert {r["groupName"] for r in jobset["spec"]["replicatedJobs"]} == {"default"}

        pods = _pods(api, namespace, "train")
        assert len(pods) == 4
        for pod in pods:
            rjob = pod.metadata.labels[REPLICATED_JOB]
            index = pod.metadata.labels[COMPLETION_INDEX]
            assert pod.spec.hostname == f"train-{rjob}-0-{index}"
            assert pod.spec.subdomain == "train"
            assert pod.status.phase == "Succeeded"
            assert _node_pool(api, pod.spec.node_name) == (pool_a if rjob == "slice-a" else pool_b)


def test_failed_slice_fails_the_jobset_without_restarts(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager, jobset_namespace: str
) -> None:
    api, namespace = jobset_api, jobset_namespace
    pool_a, pool_b = _pools(namespace)
    slices = (
        Slice("slice-a", pool_a, run_for="300s"),
        Slice("slice-b", pool_b, run_for="1s", exit_code=1),
    )
    with tpu_slices(api, {pool_a: HOSTS_PER_SLICE, pool_b: HOSTS_PER_SLICE}):
        create_jobset(api, namespace, jobset_manifest("train", slices, max_restarts=0))

        failed = eventually(
            lambda: jobset_condition(read_jobset(api, namespace, "train"), "Failed"),
            TIMEOUT,
            "the JobSet to fail",
        )
        assert failed["reason"] == "ReachedMaxRestarts"
        assert failed["message"] == (
            "jobset failed due to reaching max number of restarts "
            "(first failed job: train-slice-b-0)"
        )
        jobset = read_jobset(api, namespace, "train")
        assert jobset["status"]["terminalState"] == "Failed"
        assert jobset["status"]["restarts"] == 0
        assert jobset_condition(jobset, "Completed") is None
        # A failed JobSet deletes its still-running Jobs and keeps the failed one.
        remaining = eventually(
            lambda: (found := child_jobs(api, namespace, "train")) and len(found) == 1 and found,
            TIMEOUT,
            "the running slice's Job to be deleted",
        )
        failed_job = remaining["train-slice-b-0"]
        job_failed = [c for c in failed_job.status.conditions if c.type == "Failed"]
        assert [(c.status, c.reason) for c in job_failed] == [("True", "BackoffLimitExceeded")]


def test_failed_slice_restarts_every_slice_then_fails(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager, jobset_namespace: str
) -> None:
    """failurePolicy.maxRestarts 1: the first failure recreates all the JobSet's Jobs
    (same names, restart-attempt 1); the second fails the JobSet."""
    api, namespace = jobset_api, jobset_namespace
    pool_a, pool_b = _pools(namespace)
    slices = (
        Slice("slice-a", pool_a, run_for="300s"),
        Slice("slice-b", pool_b, run_for="1s", exit_code=1),
    )
    with tpu_slices(api, {pool_a: HOSTS_PER_SLICE, pool_b: HOSTS_PER_SLICE}):
        create_jobset(api, namespace, jobset_manifest("train", slices, max_restarts=1))

        failed = eventually(
            lambda: jobset_condition(read_jobset(api, namespace, "train"), "Failed"),
            TIMEOUT,
            "the JobSet to fail after its one restart",
        )
        assert failed["reason"] == "ReachedMaxRestarts"
        status = read_jobset(api, namespace, "train")["status"]
        assert (status["restarts"], status["restartsCountTowardsMax"]) == (1, 1)
        restarting = next(c for c in status["conditions"] if c["type"] == "RestartingJobSet")
        assert (restarting["status"], restarting["reason"]) == ("False", "JobSetFailed")
        remaining = eventually(
            lambda: (found := child_jobs(api, namespace, "train")) and len(found) == 1 and found,
            TIMEOUT,
            "the running slice's Job to be deleted",
        )
        assert remaining["train-slice-b-0"].metadata.labels[RESTART_ATTEMPT] == "1"


def test_the_defaulting_webhook_completes_a_bare_jobset(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager, jobset_namespace: str
) -> None:
    """JobSet's defaulting webhook runs: a JobSet without network, successPolicy and
    startupPolicy gets them. (Without the webhook the controller reads spec.network and
    spec.successPolicy without a nil check and panics: the operator renders its JobSets
    fully defaulted all the same.)"""
    api, namespace = jobset_api, jobset_namespace
    manifest = jobset_manifest("bare", (Slice("slice-a", "nowhere"),))
    for key in ("network", "successPolicy", "startupPolicy"):
        del manifest["spec"][key]
    created = create_jobset(api, namespace, manifest)
    spec = created["spec"]
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["successPolicy"]["operator"] == "All"
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    eventually(lambda: child_jobs(api, namespace, "bare"), TIMEOUT, "the defaulted JobSet's Job")


def test_the_validating_webhook_refuses_names_too_long_for_its_pods(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager, jobset_namespace: str
) -> None:
    api, namespace = jobset_api, jobset_namespace
    # `<jobset>-slice-a-0-1-abcde`: 57 + 15 characters.
    manifest = jobset_manifest("n" * 57, (Slice("slice-a", "nowhere"),))
    with pytest.raises(Invalid) as refused, typed_errors():
        create_jobset(api, namespace, manifest)
    assert "pod names generated for this JobSet will exceed 63 characters" in str(refused.value)


def test_exclusive_placement_gives_each_slice_a_pool_of_its_own(
    jobset_api: k8s.ApiClient, jobset_manager: JobSetManager, jobset_namespace: str
) -> None:
    """The operator's shape: one replicatedJob of three slices, the pods allowed onto
    three pools. JobSet's pod webhook gives each Job's leader (completion index 0) pod
    affinity to its Job and anti-affinity to the others on the pool label, and each
    follower its leader's pool; the scheduler does the rest."""
    api, namespace = jobset_api, jobset_namespace
    suffix = namespace.removeprefix("js-")
    pools = tuple(f"pool-{c}-{suffix}" for c in "abc")
    with tpu_slices(api, dict.fromkeys(pools, HOSTS_PER_SLICE)):
        create_jobset(api, namespace, multislice_manifest("ms", pools, run_for="2s"))
        done = eventually(
            lambda: jobset_condition(read_jobset(api, namespace, "ms"), "Completed"),
            TIMEOUT,
            "the JobSet to complete",
        )
        assert done["reason"] == "AllJobsCompleted"
        assert sorted(child_jobs(api, namespace, "ms")) == ["ms-s-0", "ms-s-1", "ms-s-2"]
        pods = _pods(api, namespace, "ms")
        assert len(pods) == 3 * HOSTS_PER_SLICE
        by_slice: dict[str, set[str]] = {}
        for pod in pods:
            pool = _node_pool(api, pod.spec.node_name)
            by_slice.setdefault(pod.metadata.labels[JOB_INDEX], set()).add(pool)
            if pod.metadata.labels[COMPLETION_INDEX] == "0":
                [anti] = (
                    pod.spec.affinity.pod_anti_affinity.required_during_scheduling_ignored_during_execution
                )
                [near] = (
                    pod.spec.affinity.pod_affinity.required_during_scheduling_ignored_during_execution
                )
                assert anti.topology_key == near.topology_key == NODE_POOL_LABEL_KEY
            else:
                assert pod.spec.node_selector[NODE_POOL_LABEL_KEY] == pool
        # Each slice on one pool, each pool one slice.
        assert sorted(by_slice) == ["0", "1", "2"]
        assert all(len(on) == 1 for on in by_slice.values())
        assert sorted(p for on in by_slice.values() for p in on) == sorted(pools)
