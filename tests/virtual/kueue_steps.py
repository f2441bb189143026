"""Kueue's controller, and GKE's answers to the ProvisioningRequests Kueue makes, stood in
for in the virtual tier: the test writes the objects they would write, and only those
the operator reads (controller/workloads.py, controller/provreqs.py).

- Kueue's LocalQueues of the DWS queues (`kueue_objects.dws_objects`): a request waits
  while its queue is missing.
- The Workload Kueue makes for a queued Job, `job-<Job>-<5 hex digits>`, owned by the
  Job; deactivated when Kueue gives up on it (`spec.active: false`, an Evicted condition
  whose reason is `DeactivatedDueTo<cause>`, with Kueue's message).
- The ProvisioningRequest Kueue's admission check makes for that Workload,
  `<Workload>-<check>-<try>`, owned by it; GKE marks it Accepted, then Provisioned or
  Failed, each condition with the time it changed.
- The garbage collector's part: a Workload goes once its Job is gone, a
  ProvisioningRequest once its Workload is (`collect`; MemoryKube follows no owner
  references).

Not written: the Workload's admission and the Job's unsuspension (the operator reads
neither: a Job's ready pods say it runs), ClusterQueues, flavors, admission checks.
tests/cluster/e2e keeps one scenario per area against the real Kueue.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from dws_operator import rfc3339
from dws_operator.controller import KueueMode
from dws_operator.controller.provreqs import PROVREQ_GROUP
from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    LOCAL_QUEUE,
    QUEUED_LOCAL_QUEUE,
    QUEUED_PROVISIONING_CLASS,
    ProvisioningCheck,
    dws_objects,
)
from dws_operator.workload import QUEUE_LABEL
from tests.fakes.kubernetes import Resource
from tests.virtual.harness import EPOCH, Virtual, VirtualOperator

PROVREQ_VERSION = "v1"
PROVREQ_PLURAL = "provisioningrequests"
PROVISIONING_REQUESTS = Resource(
    PROVREQ_GROUP, PROVREQ_VERSION, PROVREQ_PLURAL, "ProvisioningRequest", status=True
)
#: The admission check of the DWS queued queue: its name is in each ProvisioningRequest's.
CHECK = ProvisioningCheck().name
#: Kueue's Evicted message when its ProvisioningRequest check was Rejected (it gave up).
REJECTED = (
    f'The workload is deactivated due to AdmissionCheck in Rejected state: "{CHECK}" '
    "(Provisioning Request wasn't provisioned)"
)


@dataclass
class QueuedVirtual(Virtual):
    """A cluster with Kueue (its kinds served and watched) and ProvisioningRequests
    served; the operator queues every workload through Kueue (`KueueMode.REQUIRED`), queued
    provisioning through the DWS queued queue and the rest through the DWS queue."""

    kueue: bool = True
    settings: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.settings = {
            "kueue": KueueMode.REQUIRED,
            "default_queue": LOCAL_QUEUE,
            "queued_queue": QUEUED_LOCAL_QUEUE,
            **self.settings,
        }

    @property
    def resources(self) -> tuple[Resource, ...]:
        return (*super().resources, PROVISIONING_REQUESTS)


def utc_now(op: VirtualOperator) -> str:
    """The virtual time as Kubernetes writes a condition's (whole seconds)."""
    return rfc3339.seconds(EPOCH + timedelta(seconds=op.now()))


@dataclass
class Kueue:
    """Kueue's controller (and GKE answering its ProvisioningRequests) for `op`."""

    op: VirtualOperator

    def _path(self, plural: str, name: str = "") -> str:
        group = f"{KUEUE_GROUP}/{KUEUE_API_VERSION}"
        if plural == PROVREQ_PLURAL:
            group = f"{PROVREQ_GROUP}/{PROVREQ_VERSION}"
        path = f"/apis/{group}/namespaces/{self.op.namespace}/{plural}"
        return f"{path}/{name}" if name else path

    async def queues(self) -> None:
        """The DWS LocalQueues of the namespace, as the chart's Kueue objects make them."""
        for manifest in dws_objects([self.op.namespace]):
            if manifest["kind"] == "LocalQueue":
                await self.op.call("POST", self._path("localqueues"), manifest)

    async def workload(self, job: dict[str, Any]) -> str:
        """The Workload Kueue makes for `job` (a queued Job); its name."""
        metadata = job["metadata"]
        digest = hashlib.sha256(str(metadata["uid"]).encode()).hexdigest()[:5]
        name = f"job-{metadata['name']}-{digest}"
        body = {
            "apiVersion": f"{KUEUE_GROUP}/{KUEUE_API_VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": name,
                "namespace": self.op.namespace,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": metadata["name"],
                        "uid": metadata["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {"queueName": metadata["labels"][QUEUE_LABEL], "active": True},
        }
        await self.op.call("POST", self._path("workloads"), body)
        return name

    async def deactivate(self, workload: str, message: str = REJECTED) -> None:
        """Kueue gives up on `workload`: deactivated, Evicted for its rejected check."""
        await self.op.call(
            "PATCH",
            self._path("workloads", workload),
            {"spec": {"active": False}},
            content_type="application/merge-patch+json",
        )
        evicted = {
            "type": "Evicted",
            "status": "True",
            "reason": "DeactivatedDueToAdmissionCheck",
            "message": message,
            "lastTransitionTime": utc_now(self.op),
        }
        await self.op.call(
            "PATCH",
            self._path("workloads", workload) + "/status",
            {"status": {"conditions": [evicted]}},
            content_type="application/merge-patch+json",
        )

    async def provisioning_request(self, workload: str, attempt: int = 1) -> str:
        """The ProvisioningRequest Kueue's check makes for `workload` (its `attempt`th),
        Accepted by GKE at once; its name."""
        stored = self.op.stored("workloads", workload, KUEUE_GROUP)
        assert stored is not None, workload
        name = f"{workload}-{CHECK}-{attempt}"
        body = {
            "apiVersion": f"{PROVREQ_GROUP}/{PROVREQ_VERSION}",
            "kind": "ProvisioningRequest",
            "metadata": {
                "name": name,
                "namespace": self.op.namespace,
                "ownerReferences": [
                    {
                        "apiVersion": f"{KUEUE_GROUP}/{KUEUE_API_VERSION}",
                        "kind": "Workload",
                        "name": workload,
                        "uid": stored["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "spec": {"provisioningClassName": QUEUED_PROVISIONING_CLASS},
        }
        await self.op.call("POST", self._path(PROVREQ_PLURAL), body)
        await self._condition(name, "Accepted", "Accepted", "The request was accepted.")
        return name

    async def provisioned(self, provreq: str) -> None:
        """GKE has the capacity of `provreq`."""
        await self._condition(provreq, "Provisioned", "Provisioned", "Provisioned.")

    async def failed(self, provreq: str) -> None:
        """GKE found no capacity for `provreq` within its wait."""
        await self._condition(provreq, "Failed", "WaitTimeExceeded", "Capacity was not found.")

    async def _condition(self, provreq: str, type_: str, reason: str, message: str) -> None:
        stored = self.op.stored(PROVREQ_PLURAL, provreq, PROVREQ_GROUP)
        assert stored is not None, provreq
        conditions = (stored.get("status") or {}).get("conditions") or []
        conditions = [c for c in conditions if c["type"] != type_] + [
            {
                "type": type_,
                "status": "True",
                "reason": reason,
                "message": message,
                "lastTransitionTime": utc_now(self.op),
            }
        ]
        await self.op.call(
            "PATCH",
            self._path(PROVREQ_PLURAL, provreq) + "/status",
            {"status": {"conditions": conditions}},
            content_type="application/merge-patch+json",
        )

    def workloads(self) -> list[dict[str, Any]]:
        return self.op.objects("workloads", KUEUE_GROUP)

    def provisioning_requests(self) -> list[dict[str, Any]]:
        return self.op.objects(PROVREQ_PLURAL, PROVREQ_GROUP)

    async def collect(self) -> None:
        """The garbage collector: Workloads whose Job is gone go, then ProvisioningRequests
        whose Workload is gone."""
        jobs = {j["metadata"]["uid"] for j in self.op.objects("jobs", "batch")}
        await self._collect("workloads", self.workloads(), jobs)
        workloads = {w["metadata"]["uid"] for w in self.workloads()}
        await self._collect(PROVREQ_PLURAL, self.provisioning_requests(), workloads)

    async def _collect(
        self, plural: str, dependents: list[dict[str, Any]], alive: set[str]
    ) -> None:
        for dependent in dependents:
            refs = dependent["metadata"].get("ownerReferences") or []
            if not any(ref["uid"] in alive for ref in refs):
                await self.op.call("DELETE", self._path(plural, dependent["metadata"]["name"]))
