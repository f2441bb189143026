"""The operator's whole controller (caches, work queue, GKE snapshot, operation scheduler,
idle-pool shelf, reconciler, its background loops) on a virtual clock: Kubernetes is the
in-memory API server (tests/fakes/kubernetes.py), GKE the emulator answering in process
(tests/fakes/gke.py), and the event loop is looptime's, whose time moves only when every
task waits. A test steps time by waiting (`await op.until(...)`, `await op.sleep(...)`);
nothing waits on the machine's clock, so a slow machine gives the same verdict.

What kopf does in production, the harness does here: it delivers every change of a
watched kind (`controller.watched`) to `Controller.on_event`, and starts the workers once
the objects present at the start are in the cache. The test stands in for the Job
controller, the kubelet and GKE's autoscaler: it writes a Job's status, and gives a pool
its Nodes (in GKE and as Node objects).
"""

from __future__ import annotations

import asyncio
import copy
import json
import random
import threading
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import looptime
from google.cloud import container_v1

from dws_operator.api import GROUP, PLURAL, VERSION
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller import KueueMode, OperatorConfig
from dws_operator.controller.assembly import build_controller
from dws_operator.controller.config import OperatorTime
from dws_operator.controller.kube import LOCAL_QUEUES, WORKLOADS, KubeApi
from dws_operator.controller.runtime import Controller
from dws_operator.controller.watched import Watched, watched
from dws_operator.gke import ComputeApis
from dws_operator.kueue_objects import KUEUE_API_VERSION, KUEUE_GROUP
from dws_operator.multislice import JOBSET_GROUP, JOBSET_KIND, JOBSET_PLURAL, JOBSET_VERSION
from dws_operator.workload import REQUEST_LABEL
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator, EmulatorConfig
from tests.builders import manifest, spec_body
from tests.fakes.compute import in_process_compute
from tests.fakes.gke import InProcessGke
from tests.fakes.kubernetes import DEFAULT_RESOURCES, MemoryKube, Resource, Watcher

T = TypeVar("T")

#: Where virtual time starts, unless `Virtual.epoch` says otherwise: the decisions' UTC
#: and the emulator's calendar both read `EPOCH + loop.time()`.
EPOCH = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
NAMESPACE = "team-a"
#: The machine's seconds a scenario may take before it is called hung.
REAL_SECONDS = 120.0
#: How long `until` waits (virtual seconds) before it says what never came.
UNTIL_SECONDS = 3600.0


@dataclass
class VirtualOperator:
    """One operator serving NAMESPACE, and what the test does around it."""

    kube: MemoryKube
    emulator: ClusterManagerEmulator
    gke: InProcessGke
    config: OperatorConfig
    kueue: bool = False
    jobset: bool = False
    namespace: str = NAMESPACE
    name: str = field(default_factory=lambda: f"tr-{uuid.uuid4().hex[:6]}")
    cluster: str = DEFAULT_CLUSTER
    #: Compute answered in process by `emulator.compute` (`Virtual.compute`); None: the
    #: operator has no Compute (`operator_config`'s endpoint refuses at once).
    compute: ComputeApis | None = None
    #: The operator running now (`start`; a new one after `restart`).
    controller: Controller = field(init=False)
    #: Operators started so far.
    starts: int = 0
    _unwatch: Callable[[], None] | None = None

    # -- the operator -------------------------------------------------------------------

    async def start(self) -> None:
        """An operator starts: its caches filled from what is stored now (kopf's first
        listing), then its workers."""
        loop = asyncio.get_running_loop()
        controller = build_controller(
            self.config,
            self.kube,
            KubeApi(self.kube),
            self.kueue,
            self.jobset,
            gke_api=self.gke,
            compute_apis=self.compute,
            clock=loop.time,
            # Seeded: a scenario's jitters (retries, resyncs) are the same every run.
            rng=random.Random(self.starts),
        )
        follows = watched(self.kueue, self.jobset)
        self._unwatch = self.kube.watch(_deliver(controller, follows))
        for w in follows:
            for body in self.objects(w.plural, w.group, everywhere=True):
                if w.selects((body.get("metadata") or {}).get("labels")):
                    controller.on_event(w.kind, False, body)
        await controller.snapshot.refresh()
        controller.listed()
        self.controller = controller
        self.starts += 1

    async def kill(self) -> None:
        """The operator dies where it stands: every task cancelled at its await (a pass
        half done included), nothing flushed, its watch gone."""
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        controller = self.controller
        controller.queue.close()
        for task in controller.tasks:
            task.cancel()
        await asyncio.gather(*controller.tasks, return_exceptions=True)

    async def restart(self) -> None:
        await self.kill()
        await self.start()

    async def stop(self) -> None:
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        await self.controller.stop()

    # -- time ---------------------------------------------------------------------------

    @staticmethod
    def now() -> float:
        """Virtual seconds since the start."""
        return asyncio.get_running_loop().time()

    @staticmethod
    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def until(
        self,
        check: Callable[[], T | Awaitable[T]],
        what: str | Callable[[], str] = "",
        within: float = UNTIL_SECONDS,
        step: float = 1.0,
    ) -> T:
        """`check()`'s first truthy answer, looked at every `step` virtual seconds."""
        deadline = self.now() + within
        while True:
            answer = check()
            if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future):
                answer = await answer
            if answer:
                return answer  # type: ignore[return-value]
            if self.now() >= deadline:
                said = what() if callable(what) else what
                raise AssertionError(f"not within {within:.0f} virtual seconds: {said}")
            await asyncio.sleep(step)

    # -- Kubernetes -------------------------------------------------------------------

    async def call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        answer = await self.kube.request(method, path, body=body, **kw)
        return json.loads(answer)

    def _request_path(self, name: str | None = None) -> str:
        path = f"/apis/{GROUP}/{VERSION}/namespaces/{self.namespace}/{PLURAL}"
        return f"{path}/{name}" if name else path

    async def create(
        self, accelerator: dict[str, Any], mode: str = "FlexStart", **extra: Any
    ) -> dict[str, Any]:
        body = manifest(self.name, spec_body(accelerator, mode=mode, **extra))
        created: dict[str, Any] = await self.call("POST", self._request_path(), body)
        return created

    def get(self) -> dict[str, Any] | None:
        """The TrainingRequest as stored now (None once gone)."""
        return self.stored(PLURAL, self.name, GROUP)

    def stored(self, plural: str, name: str, group: str = "") -> dict[str, Any] | None:
        """An object of the namespace (or a cluster-scoped one) as stored now."""
        for resource, objects in self.kube._objects.items():
            if (resource.plural, resource.group) == (plural, group):
                namespace = self.namespace if resource.namespaced else ""
                body = objects.get((namespace, name))
                return copy.deepcopy(body) if body is not None else None
        return None

    def status(self) -> dict[str, Any]:
        status: dict[str, Any] = (self.get() or {}).get("status") or {}
        return status

    def phase(self) -> str | None:
        phase: str | None = self.status().get("phase")
        return phase

    async def wait_phase(self, *phases: str, within: float = UNTIL_SECONDS) -> dict[str, Any]:
        await self.until(
            lambda: self.phase() in phases, f"phase {phases} (now {self.phase()})", within
        )
        return self.status()

    def condition(self, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status().get("conditions", []) if c["type"] == type_), None)

    async def delete(self) -> None:
        await self.call("DELETE", self._request_path(self.name))

    def objects(
        self, plural: str, group: str = "", everywhere: bool = False
    ) -> list[dict[str, Any]]:
        """Every stored object of a kind in the namespace (cluster-scoped: all; with
        `everywhere`, in every namespace)."""
        found: list[dict[str, Any]] = []
        for resource, objects in self.kube._objects.items():
            if resource.plural == plural and resource.group == group:
                found += [
                    copy.deepcopy(body)
                    for (namespace, _), body in objects.items()
                    if everywhere or namespace in ("", self.namespace)
                ]
        return found

    def jobs(self) -> list[dict[str, Any]]:
        return [
            j
            for j in self.objects("jobs", "batch")
            if (j["metadata"].get("labels") or {}).get(REQUEST_LABEL) == self.name
        ]

    async def job(self) -> dict[str, Any]:
        jobs = await self.until(self.jobs, "the Job")
        assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
        return jobs[0]

    def service(self) -> dict[str, Any] | None:
        return self.stored("services", self.name)

    def events(self) -> list[str]:
        return [
            e["reason"]
            for e in self.objects("events")
            if (e.get("involvedObject") or {}).get("name") == self.name
        ]

    async def job_status(self, job: dict[str, Any], status: dict[str, Any]) -> None:
        """Stand in for the Job controller: the Job's status becomes `status`."""
        name = job["metadata"]["name"]
        path = f"/apis/batch/v1/namespaces/{self.namespace}/jobs/{name}/status"
        await self.call(
            "PATCH", path, {"status": status}, content_type="application/merge-patch+json"
        )

    async def job_running(self, ready: int) -> dict[str, Any]:
        job = await self.job()
        await self.job_status(job, {"active": ready, "ready": ready})
        return job

    async def job_succeeded(self) -> dict[str, Any]:
        job = await self.job()
        completions = job["spec"].get("completions") or 1
        await self.job_status(
            job,
            {
                "active": 0,
                "ready": 0,
                "succeeded": completions,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"},
                ],
            },
        )
        return job

    async def job_failed(self, reason: str = "BackoffLimitExceeded", message: str = "") -> None:
        """Stand in for the Job controller: the Job failed (`reason`, `message`)."""
        job = await self.job()
        condition = {"type": "Failed", "status": "True", "reason": reason, "message": message}
        await self.job_status(
            job, {"active": 0, "ready": 0, "failed": 1, "conditions": [condition]}
        )

    # -- GKE --------------------------------------------------------------------------

    def pool(self, name: str) -> container_v1.NodePool | None:
        return self.emulator.node_pool(f"{self.cluster}/nodePools/{name}")

    def pool_names(self) -> set[str]:
        return {str(pool.name) for pool, _ in self.emulator.node_pools(self.cluster)}

    def pool_nodes(self, name: str) -> int:
        counts = {str(pool.name): n for pool, n in self.emulator.node_pools(self.cluster)}
        return counts.get(name, 0)

    def created_pools(self) -> list[container_v1.NodePool]:
        """The CreateNodePool requests GKE accepted."""
        return [c.request.node_pool for c in self.emulator.calls_for("CreateNodePool") if c.ok]

    @property
    def pool_name(self) -> str:
        name: str = (self.status().get("nodePool") or {}).get("name") or ""
        assert name, self.status()
        return name

    async def nodes_up(self, pool: str, count: int) -> None:
        """Stand in for GKE's autoscaler and the kubelets: `pool` has `count` Nodes."""
        assert self.emulator.set_node_count(f"{self.cluster}/nodePools/{pool}", count)
        have = self.nodes_of(pool)
        for index in range(len(have), count):
            node = {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": f"gke-{pool}-{index}",
                    "labels": {NODE_POOL_LABEL_KEY: pool},
                },
            }
            await self.call("POST", "/api/v1/nodes", node)
        for node in have[count:]:
            await self.call("DELETE", f"/api/v1/nodes/{node['metadata']['name']}")

    def nodes_of(self, pool: str) -> list[dict[str, Any]]:
        return sorted(
            (
                n
                for n in self.objects("nodes")
                if (n["metadata"].get("labels") or {}).get(NODE_POOL_LABEL_KEY) == pool
            ),
            key=lambda n: str(n["metadata"]["name"]),
        )

    def at_zero(self, pool: str) -> bool:
        """As the e2e harness judges it: capped at zero, or a TPU slice pool (never
        capped) with no Node left."""
        found = self.pool(pool)
        if found is None:
            return False
        placement = found.placement_policy
        scaling = found.autoscaling
        ceiling = max(scaling.max_node_count, scaling.total_max_node_count)
        if placement.tpu_topology or placement.policy_name:
            return ceiling > 0 and self.pool_nodes(pool) == 0
        return ceiling == 0


def _deliver(controller: Controller, follows: tuple[Watched, ...]) -> Watcher:
    """What kopf does with a watch event, told to the controller in the loop's next turn
    (a watch event comes after the write's answer)."""
    loop = asyncio.get_running_loop()

    def tell(plural: str, deleted: bool, body: dict[str, Any]) -> None:
        labels = (body.get("metadata") or {}).get("labels") or {}
        for w in follows:
            if w.plural == plural and w.selects(labels):
                controller.on_event(w.kind, deleted, body)

    def watcher(plural: str, event: str, body: dict[str, Any]) -> None:
        loop.call_soon(tell, plural, event == "DELETED", body)

    return watcher


def operator_config(**settings: Any) -> OperatorConfig:
    """The operator of the emulator's default cluster serving NAMESPACE, without Kueue;
    `settings` (any OperatorConfig field, these too) win."""
    defaults: dict[str, Any] = {
        "project": "dws-sandbox",
        "location": "us-east5",
        "cluster": "sandbox",
        "kueue": KueueMode.DISABLED,
        "namespaces": (NAMESPACE,),
        # No Compute unless `Virtual.compute`: a test that reaches for it is refused at
        # once, by a port no one listens on, rather than reaching Google's.
        "compute_endpoint": "http://127.0.0.1:9",
    }
    return OperatorConfig(**{**defaults, **settings})


@dataclass
class Virtual:
    """Runs `scenario(op)` on a fresh virtual loop, operator and emulator; a test calls
    it once. `end` bounds the virtual time (a hang fails, it does not wait)."""

    emulator_config: EmulatorConfig = field(
        default_factory=lambda: EmulatorConfig(operation_latency_seconds=20.0)
    )
    settings: dict[str, Any] = field(default_factory=dict)
    #: Queue through Kueue (its LocalQueues and Workloads are served and watched; the
    #: test stands in for Kueue's controller), run several slices as JobSets.
    kueue: bool = False
    jobset: bool = False
    #: Answer Compute (workload policies, calendar-mode bookings) in process, by the
    #: emulator's Compute (tests/fakes/compute.py).
    compute: bool = False
    #: UTC at virtual time 0 (a scenario at a fixed date of its own: a sample's block).
    epoch: datetime = EPOCH
    end: float = 30 * 86400.0

    @property
    def resources(self) -> tuple[Resource, ...]:
        extra: list[Resource] = []
        if self.kueue:
            extra += [
                Resource(KUEUE_GROUP, KUEUE_API_VERSION, LOCAL_QUEUES, "LocalQueue", status=True),
                Resource(KUEUE_GROUP, KUEUE_API_VERSION, WORKLOADS, "Workload", status=True),
            ]
        if self.jobset:
            extra.append(
                Resource(JOBSET_GROUP, JOBSET_VERSION, JOBSET_PLURAL, JOBSET_KIND, status=True)
            )
        return (*DEFAULT_RESOURCES, *extra)

    def run(self, scenario: Callable[[VirtualOperator], Awaitable[None]]) -> None:
        # Time moves on after one idle turn of the loop (looptime's default waits 42):
        # with no callback ready, every task waits on a timer or an event. A third less
        # CPU for the 25-hour long-run test.
        loop = looptime.new_event_loop(start=0.0, end=self.end, noop_cycles=1)
        main = loop.create_task(self._serve(scenario))
        # `end` bounds virtual time only: a loop that always has a callback ready never
        # moves it, and would spin for ever. The machine's clock ends that (a hang guard,
        # never a verdict: every scenario takes well under a second of it).
        guard = threading.Timer(REAL_SECONDS, loop.call_soon_threadsafe, (main.cancel,))
        guard.start()
        try:
            loop.run_until_complete(main)
        except asyncio.CancelledError:
            raise AssertionError(
                f"not done in {REAL_SECONDS:.0f} real seconds: the loop never went idle"
            ) from None
        finally:
            guard.cancel()
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _serve(self, scenario: Callable[[VirtualOperator], Awaitable[None]]) -> None:
        loop = asyncio.get_running_loop()

        def utc() -> datetime:
            return self.epoch + timedelta(seconds=loop.time())

        config = self.emulator_config.model_copy(update={"calendar_epoch": self.epoch})
        emulator = ClusterManagerEmulator(config, clock=loop.time)
        gke = InProcessGke(emulator)
        kube = MemoryKube(self.resources, utc)
        settings = {"time": OperatorTime(now=utc), **self.settings}
        op = VirtualOperator(
            kube, emulator, gke, operator_config(**settings), self.kueue, self.jobset
        )
        if self.compute:
            op.compute = in_process_compute(emulator.compute)
        await op.start()
        try:
            await scenario(op)
        finally:
            await op.stop()
