"""A chaos run: requests of every kind through the simulated cluster while operator
processes are SIGKILLed, GKE misbehaves and the API server restarts; then every request
is deleted. The verdict comes from what GKE and the cluster hold, not from the
operator's word: each pool created exactly once, nothing billed after a request
finished, and nothing left after the deletions.

What is done to it, from one seed (the same seed, the same kill times and faults):
- `kills` SIGKILLs of an operator process at random moments (mostly the Lease's holder
  when there are replicas), each restarted at once as Kubernetes would, not waited for:
  a kill may land while the last one is still starting; a replica that ends on its own
  (a lost Lease exits 3) is restarted too, for the whole run;
- GKE, until every request has ended and scaled down: bursts of UNAVAILABLE on one
  method at a time (the first on every ListNodePools call, which the leader makes at its
  start and every 10 s, until one has failed: however fast a run goes, it meets one;
  the others at random moments, so they may or may not meet a call); a share of
  CreateNodePool calls carried out but answered DEADLINE_EXCEEDED (the answer lost); a
  quota too small for one kind of request (terminal: those requests end Failed,
  QuotaExceeded);
- the kube-apiserver restarted once, half-way through the kills.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from dws_operator.api import API_VERSION, GROUP, KIND, PLURAL, TERMINAL_PHASES, VERSION
from dws_operator.catalog import NODE_POOL_LABEL_KEY
from dws_operator.controller.config import LEASE_NAME
from dws_operator.gke.labels import NAME_LABEL
from dws_workshop.devcluster.kubeerrors import NotFound, typed_errors
from dws_workshop.devcluster.stages import SIM_DURATION_ANNOTATION
from dws_workshop.emulator import DEFAULT_CLUSTER, ClusterManagerEmulator, MethodFaults
from dws_workshop.emulator.config import MethodName
from dws_workshop.sandbox.testbed import GkeLimits, Testbed

IMAGE = "us-docker.pkg.dev/example/chaos/train:1"
#: The accelerator given too small a quota, and that quota (chips).
SHORT_ACCELERATOR, SHORT_QUOTA = "nvidia-h100-80gb", 8
#: Methods an UNAVAILABLE burst may hit, one at a time.
BURST_METHODS: tuple[MethodName, ...] = (
    "CreateNodePool",
    "GetNodePool",
    "ListNodePools",
    "SetNodePoolAutoscaling",
    "SetNodePoolSize",
    "DeleteNodePool",
    "GetOperation",
)
ZERO = "ScaleToZero"


@dataclass(frozen=True)
class Kind:
    """One kind of request; `fails_with`: the reason it must fail with (a terminal fault)."""

    name: str
    accelerator: dict[str, Any]
    mode: str
    cleanup: str
    fails_with: str | None = None


KINDS: tuple[Kind, ...] = (
    Kind("tpu-single-host", {"tpu": {"version": "v6e", "topology": "2x2"}}, "FlexStart", ZERO),
    Kind("tpu-multi-host", {"tpu": {"version": "v6e", "topology": "4x4"}}, "FlexStart", "Delete"),
    Kind("gpu", {"gpu": {"type": "nvidia-l4", "nodes": 1, "count": 1}}, "FlexStart", ZERO),
    Kind("tpu-spot", {"tpu": {"version": "v6e", "topology": "2x4"}}, "Spot", ZERO),
    Kind("gpu-spot", {"gpu": {"type": "nvidia-l4", "nodes": 2, "count": 1}}, "Spot", "Delete"),
    Kind(
        "gpu-over-quota",
        {"gpu": {"type": SHORT_ACCELERATOR, "nodes": 2}},
        "Spot",
        "Delete",
        fails_with="QuotaExceeded",
    ),
)


@dataclass(frozen=True)
class ChaosOptions:
    requests: int = 50
    kills: int = 200
    replicas: int = 2
    seed: int = 1
    #: Seconds between two kills, drawn uniformly.
    kill_gap: tuple[float, float] = (0.5, 3.0)
    #: Share of CreateNodePool calls carried out but answered DEADLINE_EXCEEDED.
    lost_create_answers: float = 0.2
    restart_apiserver: bool = True
    #: How long each pod runs (kwok's clock, wall seconds).
    sim_duration: str = "3s"
    clock_factor: float = 20.0
    #: The interpreter the operator runs with (see `Testbed.operator_python`).
    operator_python: str = sys.executable
    #: Give up waiting for the requests to end, or to go, after this long.
    settle_timeout: float = 600.0
    #: And the whole run after this long, wherever it is.
    timeout: float = 5400.0


class ChaosRun:
    def __init__(
        self, options: ChaosOptions, workdir: Path, say: Callable[[str], None] = print
    ) -> None:
        self.options = options
        self.workdir = workdir
        self.say = say
        # One stream per purpose: what the cluster does (who holds the Lease) changes
        # which draws a victim takes, and must not change when the kills come.
        self.gaps = random.Random(f"{options.seed}:gaps")
        self.victims = random.Random(f"{options.seed}:victims")
        self.kinds = {f"chaos-{i:03d}": KINDS[i % len(KINDS)] for i in range(options.requests)}
        self.kills: Counter[str] = Counter()
        #: Exits nobody caused (by exit code), each followed by a restart.
        self.exits: Counter[int] = Counter()
        self.apiserver_restarts = 0
        self._stop_faults = threading.Event()
        self._stop_supervising = threading.Event()
        #: Held while killing or restarting a replica: the supervisor and the killer
        #: take turns.
        self._turn = threading.Lock()
        self._deadline = 0.0

    def run(self) -> dict[str, Any]:
        began = time.monotonic()
        self._deadline = began + self.options.timeout
        limits = GkeLimits(clock_factor=self.options.clock_factor, seed=self.options.seed)
        # No pool reuse: each request's pool is its own, so "created once" is per request.
        env = {"DWS_POOL_IDLE_SECONDS": "0"}
        with Testbed(
            limits,
            self.workdir,
            operator_env=env,
            replicas=self.options.replicas,
            operator_python=self.options.operator_python,
        ) as bed:
            bed.capacity.on()
            api = bed.api_client()
            bed.emulator.set_quota(SHORT_ACCELERATOR, SHORT_QUOTA)
            bed.emulator.set_faults(
                "CreateNodePool", MethodFaults(lost_answer_rate=self.options.lost_create_answers)
            )
            self.say(f"creating {len(self.kinds)} requests")
            for name, kind in self.kinds.items():
                self._create(api, bed.namespace, name, kind)
            faults = threading.Thread(target=self._faults, args=(bed,), daemon=True)
            supervisor = threading.Thread(target=self._supervise, args=(bed,), daemon=True)
            faults.start()
            supervisor.start()
            try:
                try:
                    self._kill(bed, api)
                    # GKE goes on misbehaving while the requests finish and scale down.
                    self.say("kills done; waiting for every request to end and scale down")
                    ended = self._settle(api, bed)
                finally:
                    self._stop_faults.set()
                    faults.join()
                bed.emulator.set_faults("CreateNodePool", None)
                finished_nodes = self._billed_nodes(api, bed)
                self.say("deleting every request")
                for name in self.kinds:
                    self._delete(api, bed.namespace, name)
                self._wait(lambda: not self._requests(api, bed.namespace), "requests gone")
                # Pods go by garbage collection after their Job: give them their time.
                self._wait(lambda: not any(self._left(bed, api).values()), "nothing left")
            finally:
                self._stop_supervising.set()
                supervisor.join()
            figures = self._verdict(bed, api, ended, finished_nodes)
        figures["seconds"] = round(time.monotonic() - began, 1)
        return figures

    # Requests ----------------------------------------------------------------

    def _create(self, api: k8s.ApiClient, namespace: str, name: str, kind: Kind) -> None:
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "accelerator": kind.accelerator,
                "provisioning": {"mode": kind.mode},
                "nodePool": {"cleanup": kind.cleanup},
                "template": {
                    "metadata": {
                        "annotations": {SIM_DURATION_ANNOTATION: self.options.sim_duration}
                    },
                    "spec": {"containers": [{"name": "train", "image": IMAGE}]},
                },
            },
        }
        k8s.CustomObjectsApi(api).create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, body
        )

    def _delete(self, api: k8s.ApiClient, namespace: str, name: str) -> None:
        try:
            with typed_errors():
                k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name
                )
        except NotFound:
            pass

    @staticmethod
    def _requests(api: k8s.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
        listed: Any = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL
        )
        return {item["metadata"]["name"]: item for item in listed["items"]}

    # What is done to it ------------------------------------------------------------

    def _kill(self, bed: Testbed, api: k8s.ApiClient) -> None:
        low, high = self.options.kill_gap
        restart_at = self.options.kills // 2 if self.options.restart_apiserver else -1
        number = 0  # kills so far; a victim that had ended meanwhile is not one
        while number < self.options.kills:
            if time.monotonic() > self._deadline:
                self.say(f"out of time after {number} kills")
                return
            time.sleep(self.gaps.uniform(low, high))
            if number == restart_at and not self.apiserver_restarts:
                self.say("restarting the kube-apiserver")
                bed.cluster.restart_apiserver(down_seconds=2.0)
                self.apiserver_restarts += 1
            index, role = self._victim(bed, api)
            with self._turn:
                self._restart_exited(bed)
                if bed.kill_operator(index):
                    self.kills[role] += 1
                    number += 1
                    if number % 20 == 0:
                        self.say(f"{number} kills")
                else:  # it had ended on its own meanwhile: an exit, not a kill
                    self.exits[bed.operators[index].exited() or 0] += 1
                bed.start_operator_again(index, wait=False)

    def _victim(self, bed: Testbed, api: k8s.ApiClient) -> tuple[int, str]:
        """Which process to kill: the Lease's holder three times in four, when known."""
        replicas = len(bed.operators)
        # The same two draws every time, whoever holds the Lease.
        coin, pick = self.victims.random(), self.victims.random()
        if replicas == 1:
            return 0, "only"
        holder = self._holder(api, bed.namespace)
        names = [o.name for o in bed.operators]
        leader = next((i for i, n in enumerate(names) if holder.startswith(f"{n}_")), None)
        if leader is not None and coin < 0.75:
            return leader, "leader"
        others = [i for i in range(replicas) if i != leader]
        chosen = others[min(int(pick * len(others)), len(others) - 1)]
        return chosen, "standby" if leader is not None else "unknown"

    @staticmethod
    def _holder(api: k8s.ApiClient, namespace: str) -> str:
        try:
            lease = k8s.CoordinationV1Api(api).read_namespaced_lease(LEASE_NAME, namespace)
        except (k8s.ApiException, OSError):
            return ""
        return str(lease.spec.holder_identity or "") if lease.spec else ""

    def _faults(self, bed: Testbed) -> None:
        """UNAVAILABLE bursts: one method at a time, half its calls, 3 to 8 seconds each."""
        emulator = bed.emulator
        rng = random.Random(f"{self.options.seed}:faults")
        emulator.set_faults("ListNodePools", MethodFaults(error_rate=1.0))
        while not _refused(emulator, "ListNodePools") and not self._stop_faults.wait(0.2):
            pass
        emulator.set_faults("ListNodePools", None)
        while not self._stop_faults.wait(rng.uniform(1.0, 4.0)):
            method = rng.choice(BURST_METHODS)
            if method == "CreateNodePool":
                faults = MethodFaults(
                    error_rate=0.5, lost_answer_rate=self.options.lost_create_answers
                )
            else:
                faults = MethodFaults(error_rate=0.5)
            emulator.set_faults(method, faults)
            self._stop_faults.wait(rng.uniform(3.0, 8.0))
            if method == "CreateNodePool":
                emulator.set_faults(
                    method, MethodFaults(lost_answer_rate=self.options.lost_create_answers)
                )
            else:
                emulator.set_faults(method, None)

    def _restart_exited(self, bed: Testbed) -> None:
        """Restart replicas that ended on their own (a lost Lease exits with 3; one
        started while the API server was down may give up), as the kubelet would."""
        for index, operator in enumerate(bed.operators):
            code = operator.exited()
            if code is not None:
                self.exits[code] += 1
                bed.start_operator_again(index, wait=False)

    def _supervise(self, bed: Testbed) -> None:
        """The kubelet's part for the whole run: a replica that ended is started again."""
        while not self._stop_supervising.wait(0.5):
            with self._turn:
                self._restart_exited(bed)

    # Waiting -------------------------------------------------------------------------

    def _settle(self, api: k8s.ApiClient, bed: Testbed) -> dict[str, dict[str, Any]]:
        """Until every request has ended and its pools are at zero (or deleted)."""

        def settled() -> dict[str, dict[str, Any]] | None:
            requests = self._requests(api, bed.namespace)
            for name, request in requests.items():
                status = request.get("status") or {}
                if status.get("phase") not in TERMINAL_PHASES:
                    return None
                kind = self.kinds.get(name)
                refused = kind is not None and kind.fails_with is not None
                if not refused and not status.get("scaledDownAt"):
                    return None
            return requests

        found = self._wait(settled, "every request ended and scaled down")
        return found if isinstance(found, dict) else self._requests(api, bed.namespace)

    def _wait(self, probe: Callable[[], Any], what: str) -> Any:
        deadline = min(time.monotonic() + self.options.settle_timeout, self._deadline)
        while time.monotonic() < deadline:
            found = probe()
            if found:
                return found
            time.sleep(1.0)
        self.say(f"gave up waiting: {what}")
        return None

    @staticmethod
    def _nodes_by_pool(api: k8s.ApiClient, namespace: str) -> Counter[str]:
        nodes = k8s.CoreV1Api(api).list_node(label_selector=NODE_POOL_LABEL_KEY).items
        return Counter(
            str(((n.metadata.labels if n.metadata else None) or {}).get(NODE_POOL_LABEL_KEY))
            for n in nodes
        )

    def _billed_nodes(self, api: k8s.ApiClient, bed: Testbed) -> Counter[str]:
        """Nodes still billed, by pool: of each pool GKE still has, the larger of its own
        node count and the Node objects labelled with it. A deleted pool bills nothing
        (its delete operation ends once its VMs are gone) even while its Node objects
        wait for the node controller to remove them, which is not the operator's part."""
        objects = self._nodes_by_pool(api, bed.namespace)
        billed: Counter[str] = Counter()
        for pool, count in bed.emulator.node_pools(DEFAULT_CLUSTER):
            nodes = max(count, objects.get(pool.name, 0))
            if nodes:
                billed[pool.name] = nodes
        return billed

    # The verdict -----------------------------------------------------------------

    def _verdict(
        self,
        bed: Testbed,
        api: k8s.ApiClient,
        ended: dict[str, dict[str, Any]],
        finished_nodes: Counter[str],
    ) -> dict[str, Any]:
        emulator = bed.emulator
        # A create counts when GKE carried it out: answered OK, or a lost answer.
        applied: Counter[str] = Counter()
        owner: dict[str, str] = {}
        for call in emulator.calls_for("CreateNodePool"):
            if call.ok or call.message == "Deadline Exceeded":
                pool = call.request.node_pool
                applied[pool.name] += 1
                owner[pool.name] = str(pool.config.resource_labels.get(NAME_LABEL, ""))
        per_request = Counter(owner.values())
        phases: Counter[str] = Counter()
        unexpected: dict[str, str] = {}
        for name, kind in self.kinds.items():
            status = (ended.get(name) or {}).get("status") or {}
            phase = str(status.get("phase"))
            reason = _reason(status)
            phases[f"{phase}/{reason}" if phase == "Failed" else phase] += 1
            wanted = ("Failed", kind.fails_with) if kind.fails_with else ("Succeeded", None)
            got = (phase, reason if phase == "Failed" else None)
            if got != wanted:
                unexpected[name] = f"{phase} {reason or ''}".strip()
            elif not kind.fails_with and not status.get("scaledDownAt"):
                unexpected[name] = f"{phase}, never scaled down"
            made, wanted_pools = per_request.get(name, 0), 0 if kind.fails_with else 1
            if made != wanted_pools:
                unexpected.setdefault(name, f"{made} pools created")
        injected = Counter(
            f"{c.method}:{c.code.name}"
            for c in emulator.calls
            if not c.ok and c.code.name in ("UNAVAILABLE", "DEADLINE_EXCEEDED")
        )
        return {
            "complete": (
                sum(self.kills.values()) == self.options.kills
                and self.apiserver_restarts == int(self.options.restart_apiserver)
                and bool(injected)
            ),
            "requests": len(self.kinds),
            "replicas": self.options.replicas,
            "seed": self.options.seed,
            "kills": sum(self.kills.values()),
            "kills_by_role": dict(self.kills),
            "exits_by_code": {str(k): v for k, v in sorted(self.exits.items())},
            "apiserver_restarts": self.apiserver_restarts,
            "faults": dict(sorted(injected.items())),
            "phases": dict(sorted(phases.items())),
            "unexpected": unexpected,
            "pools_created_per_request": dict(sorted(Counter(per_request.values()).items())),
            "pools_created_twice": sorted(p for p, n in applied.items() if n > 1),
            "nodes_left_after_finish": sum(finished_nodes.values()),
            **{f"{what}_left": count for what, count in self._left(bed, api).items()},
        }

    def _left(self, bed: Testbed, api: k8s.ApiClient) -> dict[str, int]:
        """What is still there: requests, GKE's pools, Nodes, Jobs, pods."""
        namespace = bed.namespace
        batch, core = k8s.BatchV1Api(api), k8s.CoreV1Api(api)
        return {
            "requests": len(self._requests(api, namespace)),
            "pools": len(bed.emulator.node_pools(DEFAULT_CLUSTER)),
            "nodes": sum(self._nodes_by_pool(api, namespace).values()),
            "jobs": len(batch.list_namespaced_job(namespace).items),
            "pods": len(core.list_namespaced_pod(namespace).items),
        }


def _reason(status: dict[str, Any]) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Completed":
            return str(condition.get("reason"))
    return None


def clean(figures: dict[str, Any]) -> bool:
    """The run's verdict: everything was done to it (every kill, the API server restart,
    GKE faults), no replica crashed, every request ended as it should and was scaled
    down, with exactly one pool made for it, nothing billed after it ended, and nothing
    left after the deletions."""
    exits = {int(code) for code in figures["exits_by_code"]}
    return (
        figures["complete"]
        # A replica ends on its own only when it lost its Lease (3); anything else is
        # a crash.
        and exits <= {3}
        and not figures["unexpected"]
        and not figures["pools_created_twice"]
        and figures["nodes_left_after_finish"] == 0
        and figures["requests_left"] == 0
        and figures["pools_left"] == 0
        and figures["nodes_left"] == 0
        and figures["jobs_left"] == 0
        and figures["pods_left"] == 0
    )


def _refused(emulator: ClusterManagerEmulator, method: str) -> bool:
    """Whether the emulator has answered a call of `method` UNAVAILABLE."""
    return any(not c.ok and c.code.name == "UNAVAILABLE" for c in emulator.calls_for(method))
