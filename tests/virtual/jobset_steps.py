"""What the multislice virtual tests (tests/virtual/test_multislice.py) stand in for: the
JobSet controller (v0.12.0, as tests/cluster/jobset holds the real one to), the Job
controller under it, the garbage collector following a JobSet's Jobs, and Kueue
admitting a JobSet.

What the operator reads of a JobSet (`controller.observe.jobset_view`) is its status
conditions and its child Jobs (labelled `jobset.sigs.k8s.io/jobset-name`), so that is
what is written here, as the controllers write it:

- a JobSet not suspended gets one Indexed Job per replica of its replicatedJob, named
  `<jobset>-<replicatedJob>-<index>`, labelled with the JobSet's name, the
  replicatedJob's, the job index, the global index and the restart attempt, on top of
  the template's labels, and owned by the JobSet (`start`);
- a slice's pods running make its Job's `ready` count (`run`);
- every slice's Job complete makes the JobSet `Completed` (AllJobsCompleted);
- a slice's Job failed (a lost VM: the pod's DisruptionTarget matches the Job's FailJob
  rule) makes a JobSet with failurePolicy.maxRestarts 0 `Failed` (ReachedMaxRestarts),
  and the controller deletes its other, still running Jobs, keeping the failed one;
- once a JobSet is gone, the garbage collector deletes the Jobs it owned (`collect`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from dws_operator.multislice import (
    JOB_INDEX_LABEL,
    JOBSET_API_VERSION,
    JOBSET_GROUP,
    JOBSET_KIND,
    JOBSET_NAME_LABEL,
    JOBSET_PLURAL,
    JOBSET_VERSION,
)
from tests.virtual.harness import VirtualOperator

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
MERGE = "application/merge-patch+json"


@dataclass
class JobSets:
    op: VirtualOperator

    def _path(self, name: str = "", status: bool = False) -> str:
        path = f"/apis/{JOBSET_GROUP}/{JOBSET_VERSION}/namespaces/{self.op.namespace}"
        path += f"/{JOBSET_PLURAL}"
        if name:
            path += f"/{name}"
        return f"{path}/status" if status else path

    def _job_path(self, name: str, status: bool = False) -> str:
        path = f"/apis/batch/v1/namespaces/{self.op.namespace}/jobs/{name}"
        return f"{path}/status" if status else path

    # -- what is stored ---------------------------------------------------------------

    def all(self) -> list[dict[str, Any]]:
        return self.op.objects(JOBSET_PLURAL, JOBSET_GROUP)

    def names(self) -> list[str]:
        return sorted(j["metadata"]["name"] for j in self.all())

    def get(self, name: str) -> dict[str, Any] | None:
        return self.op.stored(JOBSET_PLURAL, name, JOBSET_GROUP)

    async def made(self, name: str) -> dict[str, Any]:
        """The JobSet `name` once the operator made it."""
        jobset: dict[str, Any] = await self.op.until(lambda: self.get(name), f"the JobSet {name}")
        return jobset

    def children(self, jobset: str) -> list[dict[str, Any]]:
        """The Jobs of `jobset`, by their index."""
        found = [
            j
            for j in self.op.objects("jobs", "batch")
            if (j["metadata"].get("labels") or {}).get(JOBSET_NAME_LABEL) == jobset
        ]
        return sorted(found, key=lambda j: int(j["metadata"]["labels"][JOB_INDEX_LABEL]))

    # -- Kueue --------------------------------------------------------------------------

    async def admit(self, jobset: dict[str, Any]) -> None:
        """Kueue admits the JobSet's Workload: the JobSet is no longer suspended."""
        name = jobset["metadata"]["name"]
        await self.op.call(
            "PATCH", self._path(name), {"spec": {"suspend": False}}, content_type=MERGE
        )

    # -- the JobSet controller ----------------------------------------------------------

    async def start(self, jobset: dict[str, Any]) -> list[dict[str, Any]]:
        """The JobSet's child Jobs, one per replica, made. They are returned."""
        assert not jobset["spec"].get("suspend"), "a suspended JobSet has no Jobs"
        name = jobset["metadata"]["name"]
        owner = {
            "apiVersion": JOBSET_API_VERSION,
            "kind": JOBSET_KIND,
            "name": name,
            "uid": jobset["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        made = []
        for rjob in jobset["spec"]["replicatedJobs"]:
            for index in range(rjob["replicas"]):
                ours = {
                    JOBSET_NAME_LABEL: name,
                    REPLICATED_JOB_LABEL: rjob["name"],
                    JOB_INDEX_LABEL: str(index),
                    GLOBAL_INDEX_LABEL: str(len(made)),
                    RESTART_ATTEMPT_LABEL: "0",
                }
                template = copy.deepcopy(rjob["template"])
                labels = {**(template.get("metadata") or {}).get("labels", {}), **ours}
                pod = template["spec"]["template"]
                pod["metadata"]["labels"] = {**pod["metadata"].get("labels", {}), **ours}
                job = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {
                        "name": f"{name}-{rjob['name']}-{index}",
                        "namespace": self.op.namespace,
                        "labels": labels,
                        "annotations": {JOB_INDEX_LABEL: str(index)},
                        "ownerReferences": [owner],
                    },
                    "spec": template["spec"],
                }
                path = f"/apis/batch/v1/namespaces/{self.op.namespace}/jobs"
                made.append(await self.op.call("POST", path, job))
        return made

    async def run(self, jobset: str) -> None:
        """Every pod of every slice runs, ready (the slices' VMs are there)."""
        for job in self.children(jobset):
            pods = job["spec"]["parallelism"]
            await self._job_status(job, {"active": pods, "ready": pods})

    async def complete(self, jobset: str) -> None:
        """Every slice's pods exit 0: each Job completes, then the JobSet."""
        for job in self.children(jobset):
            done = [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ]
            pods = job["spec"]["completions"]
            await self._job_status(
                job, {"active": 0, "ready": 0, "succeeded": pods, "conditions": done}
            )
        condition = {
            "type": "Completed",
            "status": "True",
            "reason": "AllJobsCompleted",
            "message": "jobset completed successfully",
        }
        await self._status(jobset, {"conditions": [condition], "terminalState": "Completed"})

    async def slice_lost(self, jobset: str, index: int) -> None:
        """A VM of slice `index` is lost: its pod fails with DisruptionTarget, the Job
        controller fails its Job by the FailJob rule, the JobSet (no restarts of its
        own) fails, and its controller deletes the other slices' running Jobs."""
        children = self.children(jobset)
        lost = children[index]
        name = lost["metadata"]["name"]
        failed = {
            "type": "Failed",
            "status": "True",
            "reason": "PodFailurePolicy",
            "message": (
                f"Pod {self.op.namespace}/{name}-0-q8x4z has condition DisruptionTarget "
                "matching FailJob rule at index 0"
            ),
        }
        await self._job_status(lost, {"active": 0, "ready": 0, "failed": 1, "conditions": [failed]})
        condition = {
            "type": "Failed",
            "status": "True",
            "reason": "ReachedMaxRestarts",
            "message": (
                f"jobset failed due to reaching max number of restarts (first failed job: {name})"
            ),
        }
        await self._status(jobset, {"conditions": [condition], "terminalState": "Failed"})
        for other in children:
            if other is not lost:
                await self.op.call(
                    "DELETE",
                    self._job_path(other["metadata"]["name"]),
                    {"propagationPolicy": "Background"},
                )

    async def collect(self, jobset: str) -> None:
        """Once `jobset` is gone, the garbage collector deletes the Jobs it owned."""
        await self.op.until(lambda: self.get(jobset) is None, f"the JobSet {jobset} gone")
        for job in self.children(jobset):
            await self.op.call("DELETE", self._job_path(job["metadata"]["name"]))

    async def _job_status(self, job: dict[str, Any], status: dict[str, Any]) -> None:
        path = self._job_path(job["metadata"]["name"], status=True)
        await self.op.call("PATCH", path, {"status": status}, content_type=MERGE)

    async def _status(self, jobset: str, status: dict[str, Any]) -> None:
        await self.op.call(
            "PATCH", self._path(jobset, status=True), {"status": status}, content_type=MERGE
        )
