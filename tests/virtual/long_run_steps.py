"""What a long run's virtual tests (tests/virtual/test_long_runs.py) stand in for, beyond
the harness's own: GKE's autoscaler and its VMs, the Job controller and the kubelets,
the garbage collector holding a Job deleted in the foreground while its pods checkpoint,
and the workload.

- A pool's VMs come for pods pending on it, `VM_SECONDS` after their Job was made (its
  pool running in GKE); a flex-start VM's Node carries GKE's
  `node.gke.io/machine-termination-datetime` (its creation plus maxRunDuration). A
  deleted pool's VMs go with it.
- A Job's pods run once its VMs are there (`run`: every pod ready). Deleted in the
  foreground (the operator's stop), they get their SIGTERM and exit `CHECKPOINT_SECONDS`
  later, once checkpointed; the Job is stored, being deleted, until then
  (`MemoryKube.hold`: the collector's `foregroundDeletion` stays on it meanwhile).
- A VM lost under a Job (a Spot VM reclaimed, a flex-start VM at its end) fails its pod
  with DisruptionTarget; the Job controller fails the Indexed Job by the operator's
  podFailurePolicy rule, and the Node goes.

`LongRunWorld` keeps, from a watch of its own, when each of the request's Jobs was made,
seen being deleted and gone, and the most workloads (not holders) stored at one time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from dws_operator import rfc3339
from dws_operator.catalog import NODE_POOL_LABEL_KEY, TERMINATION_ANNOTATION
from dws_operator.holder import holder_name, holder_segment
from dws_operator.workload import REQUEST_LABEL
from tests.virtual.harness import EPOCH, VirtualOperator

#: A VM comes this long after a pod asks for it.
VM_SECONDS = 300.0
#: The workload's pods checkpoint this long after their SIGTERM, then exit.
CHECKPOINT_SECONDS = 180.0
#: A wait of hours (for a segment's next step) looks this often (virtual seconds).
LONG_STEP = 30.0


def utc(op: VirtualOperator) -> datetime:
    """The operator's and GKE's UTC now."""
    return EPOCH + timedelta(seconds=op.now())


def virtual_seconds(moment: datetime) -> float:
    """A UTC moment as the virtual clock's seconds."""
    return (moment - EPOCH).total_seconds()


def pool_of(job: dict[str, Any]) -> str:
    """The pool a Job's pods select."""
    selector = job["spec"]["template"]["spec"].get("nodeSelector") or {}
    pool: str = selector[NODE_POOL_LABEL_KEY]
    return pool


def env_of(job: dict[str, Any]) -> dict[str, str]:
    """The training container's environment as the Job's template sets it."""
    [container] = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


@dataclass
class LongRunWorld:
    op: VirtualOperator
    #: Each pool's VMs' ends, as GKE annotated their Nodes.
    vm_ends: dict[str, set[datetime]] = field(default_factory=dict)
    #: Virtual seconds at which each of the request's Jobs was made, first seen being
    #: deleted, and gone.
    added: dict[str, float] = field(default_factory=dict)
    deleting: dict[str, float] = field(default_factory=dict)
    gone: dict[str, float] = field(default_factory=dict)
    #: Workloads (not holders) in the order made.
    made: list[str] = field(default_factory=list)
    #: The most workloads of the request stored at one time.
    most_at_once: int = 0
    #: When each workload's pods ran: from ready to their SIGTERM or end (virtual s).
    ran: dict[str, tuple[float, float | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.op.kube.watch(self._seen)

    def _seen(self, plural: str, event: str, body: dict[str, Any]) -> None:
        metadata = body["metadata"]
        if plural != "jobs" or (metadata.get("labels") or {}).get(REQUEST_LABEL) != self.op.name:
            return
        name, now = metadata["name"], self.op.now()
        if event == "ADDED":
            self.added[name] = now
            if holder_segment(self.op.name, name) is None:
                self.made.append(name)
        if metadata.get("deletionTimestamp"):
            self.deleting.setdefault(name, now)
        if event == "DELETED":
            self.gone.setdefault(name, now)
        self.most_at_once = max(self.most_at_once, len(self.workloads()))

    # -- what is stored ---------------------------------------------------------------

    def workloads(self) -> list[dict[str, Any]]:
        return [
            j for j in self.op.jobs() if holder_segment(self.op.name, j["metadata"]["name"]) is None
        ]

    def holders(self) -> list[str]:
        return [
            name
            for j in self.op.jobs()
            if holder_segment(self.op.name, name := j["metadata"]["name"]) is not None
        ]

    def stored(self, name: str) -> dict[str, Any] | None:
        return self.op.stored("jobs", name, "batch")

    async def job(self, name: str, within: float = 3600.0, step: float = 1.0) -> dict[str, Any]:
        """The Job `name` once the operator made it."""
        job: dict[str, Any] = await self.op.until(
            lambda: self.stored(name), f"the Job {name}", within, step
        )
        return job

    async def holder(self, segment: int, within: float) -> dict[str, Any]:
        """The holder of `segment`'s capacity, made hours into the segment before it."""
        return await self.job(holder_name(self.op.name, segment), within, LONG_STEP)

    def segment(self) -> dict[str, Any]:
        """The status's record of the current segment."""
        record: dict[str, Any] = self.op.status()["segments"][-1]
        return record

    # -- GKE's autoscaler -------------------------------------------------------------

    async def vms_for(self, job: dict[str, Any], life: timedelta | None) -> str:
        """The VMs `job`'s pending pods ask for, one per pod, come `VM_SECONDS` after it
        was made, once its pool runs in GKE (`life`: a flex-start VM's maxRunDuration).
        Their pool."""
        pool = pool_of(job)
        await self.op.until(
            lambda: (p := self.op.pool(pool)) is not None and p.status.name == "RUNNING",
            f"the pool {pool} running",
        )
        await self.op.sleep(self.added[job["metadata"]["name"]] + VM_SECONDS - self.op.now())
        await self.vms_up(pool, int(job["spec"].get("parallelism") or 1), life)
        return pool

    async def vms_up(self, pool: str, count: int, life: timedelta | None) -> None:
        """`pool` has `count` VMs, the new ones ending after `life` (flex-start)."""
        op = self.op
        assert op.emulator.set_node_count(f"{op.cluster}/nodePools/{pool}", count)
        ends = utc(op).replace(microsecond=0) + life if life is not None else None
        for index in range(len(op.nodes_of(pool)), count):
            annotations = {}
            if ends is not None:
                annotations[TERMINATION_ANNOTATION] = rfc3339.seconds(ends)
                self.vm_ends.setdefault(pool, set()).add(ends)
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gke-{pool}-{index}",
                    "labels": {NODE_POOL_LABEL_KEY: pool},
                    "annotations": annotations,
                },
            }
            await op.call("POST", "/api/v1/nodes", node)

    async def vms_gone_with(self, pool: str) -> None:
        """Once the operator's deletion of `pool` is done in GKE, its Nodes go."""
        op = self.op
        await op.until(lambda: pool not in op.pool_names(), f"the pool {pool} deleted")
        for node in op.nodes_of(pool):
            await op.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")

    async def vms_lost(self, job: dict[str, Any], lost: int) -> None:
        """`lost` VMs under `job` go (a Spot VM reclaimed, flex-start VMs at their end):
        its pod there fails with DisruptionTarget, the Job controller fails the Job by
        its FailJob rule, the Nodes go."""
        op = self.op
        pool, name = pool_of(job), job["metadata"]["name"]
        message = (
            f"Pod {op.namespace}/{name}-0-x7k2p has condition DisruptionTarget matching "
            "FailJob rule at index 0"
        )
        failed = {"type": "Failed", "status": "True", "reason": "PodFailurePolicy"}
        await op.job_status(
            job,
            {"active": 0, "ready": 0, "failed": 1, "conditions": [{**failed, "message": message}]},
        )
        await self.pods_exited(name)
        await op.nodes_up(pool, len(op.nodes_of(pool)) - lost)

    # -- the Job controller, the kubelets, the workload ---------------------------------

    async def run(self, job: dict[str, Any]) -> None:
        """Every pod of `job` runs and is ready (its VMs are there)."""
        pods = int(job["spec"].get("parallelism") or 1)
        name = job["metadata"]["name"]
        self.op.kube.hold("jobs", self.op.namespace, name)
        await self.op.job_status(job, {"active": pods, "ready": pods})
        if holder_segment(self.op.name, name) is None:
            self.ran[name] = (self.op.now(), None)

    async def stopped(self, name: str, within: float) -> float:
        """When the operator deleted the workload `name` (its pods' SIGTERM)."""
        await self.op.until(lambda: name in self.deleting, f"{name} stopped", within, LONG_STEP)
        began, _ = self.ran[name]
        self.ran[name] = (began, self.deleting[name])
        return self.deleting[name]

    async def checkpointed(self, name: str) -> None:
        """The stopped workload's pods exit `CHECKPOINT_SECONDS` after their SIGTERM."""
        await self.op.sleep(self.deleting[name] + CHECKPOINT_SECONDS - self.op.now())
        await self.pods_exited(name)

    async def pods_exited(self, name: str) -> None:
        """The Job's pods are gone: a foreground delete of it ends."""
        if name in self.ran and self.ran[name][1] is None:
            self.ran[name] = (self.ran[name][0], self.op.now())
        self.op.kube.let_go("jobs", self.op.namespace, name)
        await self.op.sleep(0)

    async def succeed(self, job: dict[str, Any]) -> None:
        """`job`'s pods all exit 0: the Job controller says Complete."""
        pods = int(job["spec"].get("completions") or 1)
        conditions = [
            {"type": "SuccessCriteriaMet", "status": "True"},
            {"type": "Complete", "status": "True"},
        ]
        await self.op.job_status(
            job, {"active": 0, "ready": 0, "succeeded": pods, "conditions": conditions}
        )
        await self.pods_exited(job["metadata"]["name"])

    def trained(self) -> float:
        """The workloads' running time so far, virtual seconds."""
        now = self.op.now()
        return sum((until or now) - began for began, until in self.ran.values())

    def workload_order(self) -> list[str]:
        """The workloads that ran, in the order they began."""
        return [name for name, _ in sorted(self.ran.items(), key=lambda item: item[1][0])]

    def asked(self) -> list[str]:
        """The pools the operator asked GKE to create, in order (refused ones too)."""
        return [c.request.node_pool.name for c in self.op.emulator.calls_for("CreateNodePool")]
