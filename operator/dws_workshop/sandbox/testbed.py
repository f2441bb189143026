"""Everything a load run needs, started and stopped together: the control plane (kwok
playing the kubelet), Kueue with the sandbox's queues, the GKE emulator with GKE's
limits on, its autoscaler with capacity switched off until asked, and `dws-operator run`
as a process of its own, so its CPU and memory can be read alone.

    with Testbed(GkeLimits(clock_factor=10), workdir) as bed:
        bed.capacity.on()
        bed.operator_usage()

Time: GKE's operation durations are given in simulated seconds and run `clock_factor`
times faster (40 simulated seconds of CreateNodePool take 4 real seconds at 10).
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from kubernetes import client as k8s

from dws_operator.kueue_objects import LOCAL_QUEUE, QUEUED_LOCAL_QUEUE, dws_objects
from dws_workshop.devcluster import DevCluster, DevClusterOptions
from dws_workshop.devcluster.crds import install_third_party_crds, install_training_request_crd
from dws_workshop.devcluster.kueue import KueueManager, apply_kueue_objects
from dws_workshop.devcluster.processes import ChildProcess, free_port
from dws_workshop.devcluster.stages import kwok_config
from dws_workshop.emulator import (
    DEFAULT_CLUSTER,
    ClusterConfig,
    ClusterManagerEmulator,
    EmulatorConfig,
    EmulatorThread,
)
from dws_workshop.emulator.config import MethodName
from dws_workshop.sandbox.operator_env import metrics_env
from dws_workshop.sandbox.process_usage import Usage, read_usage
from dws_workshop.simulator.autoscaler import Autoscaler
from dws_workshop.simulator.scenario import CapacityRule, SimScenario

#: The node pool mutations GKE counts against a cluster's concurrent-operations quota.
CREATE_METHODS: tuple[MethodName, ...] = ("CreateNodePool",)
DELETE_METHODS: tuple[MethodName, ...] = ("DeleteNodePool",)
UPDATE_METHODS: tuple[MethodName, ...] = (
    "SetNodePoolAutoscaling",
    "SetNodePoolSize",
    "UpdateNodePool",
)
MUTATIONS = CREATE_METHODS + DELETE_METHODS + UPDATE_METHODS
OPERATOR_READY_TIMEOUT = 120.0


@dataclass(frozen=True)
class GkeLimits:
    """GKE's limits as the emulator applies them; durations in simulated seconds."""

    clock_factor: float = 10.0
    concurrent_operations: int = 5
    #: An empty pool: 30-45 s before GKE's 2026 speed-ups.
    create_seconds: float = 40.0
    #: Deletes and autoscaling/size updates: "seconds to tens of seconds".
    delete_seconds: float = 20.0
    update_seconds: float = 10.0
    #: The emulator's randomness (its injected faults): one seed, the same draws.
    seed: int = 0

    def real(self, simulated: float) -> float:
        """Real (wall) seconds of `simulated` seconds at the clock factor."""
        return simulated / self.clock_factor

    def duration(self, method: MethodName) -> float:
        """How long one operation of `method` runs, simulated seconds."""
        if method in CREATE_METHODS:
            return self.create_seconds
        if method in DELETE_METHODS:
            return self.delete_seconds
        return self.update_seconds


def emulator_config(limits: GkeLimits) -> EmulatorConfig:
    """The emulator with GKE's limits on: its clock runs `clock_factor` times faster and
    every operation takes its simulated duration."""
    return EmulatorConfig(
        seed=limits.seed,
        clock_factor=limits.clock_factor,
        operation_latency_seconds=limits.real(limits.update_seconds),
        operation_durations={method: limits.duration(method) for method in MUTATIONS},
        clusters=[
            ClusterConfig(
                name=DEFAULT_CLUSTER, concurrent_operations_quota=limits.concurrent_operations
            )
        ],
    )


class CapacitySwitch:
    """Capacity for every pool, off (nothing arrives: a stockout everywhere) or on (it
    arrives at once). The autoscaler reads its scenario's rules on every pass."""

    def __init__(self, scenario: SimScenario) -> None:
        self.scenario = scenario

    def off(self) -> None:
        self.scenario.capacity = [CapacityRule(stockout=True)]

    def on(self) -> None:
        # No rule matches: capacity is there as soon as a scale-up asks for it.
        self.scenario.capacity = []


class Testbed:
    """The whole sandbox of a load run; `close` (or the context's end) stops all of it."""

    def __init__(
        self,
        limits: GkeLimits,
        workdir: Path,
        namespace: str = "default",
        operator_env: dict[str, str] | None = None,
        replicas: int = 1,
        operator_python: str = sys.executable,
    ) -> None:
        self.limits = limits
        #: Operator processes; more than one take turns on a Lease (leader election).
        self.replicas = replicas
        #: More DWS_* settings for the operator (e.g. a shorter GKE refresh interval).
        self.operator_env = dict(operator_env or {})
        #: The interpreter the operator runs with: one with only the operator's runtime
        #: dependencies runs it as its image does (`hack/python-env.sh operator`).
        self.operator_python = operator_python
        self.workdir = workdir
        self.namespace = namespace
        self.scenario = SimScenario(clock_factor=limits.clock_factor)
        self.capacity = CapacitySwitch(self.scenario)
        self.capacity.off()
        self._stack = contextlib.ExitStack()
        self._cluster: DevCluster | None = None
        self._emulator: ClusterManagerEmulator | None = None
        self._operators: list[ChildProcess] = []
        self._liveness: list[str] = []

    def __enter__(self) -> Testbed:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._stack.close()

    @property
    def cluster(self) -> DevCluster:
        if self._cluster is None:
            raise RuntimeError("the testbed is not running")
        return self._cluster

    @property
    def emulator(self) -> ClusterManagerEmulator:
        if self._emulator is None:
            raise RuntimeError("the testbed is not running")
        return self._emulator

    @property
    def operator(self) -> ChildProcess:
        """The first operator process (the only one with one replica)."""
        return self.operators[0]

    @property
    def operators(self) -> list[ChildProcess]:
        if not self._operators:
            raise RuntimeError("the testbed is not running")
        return self._operators

    def kill_operator(self, index: int = 0) -> bool:
        """SIGKILL one operator process (no clean stop, no Lease released); False when
        it had ended already."""
        return self.operators[index].kill()

    def start_operator_again(self, index: int = 0, wait: bool = True) -> None:
        """Start a killed or stopped operator process again (a container restart)."""
        operator = self.operators[index]
        if operator.exited() is None:
            raise RuntimeError(f"{operator.name} is still running")
        operator.start()
        if wait:
            _wait_live(operator, self._liveness[index], OPERATOR_READY_TIMEOUT)

    def api_client(self) -> k8s.ApiClient:
        """A new client of the testbed's API server, closed with the testbed."""
        api = self.cluster.api_client()
        self._stack.callback(api.close)
        return api

    def operator_usage(self) -> Usage:
        pid = self.operator.pid
        if pid is None or self.operator.exited() is not None:
            raise RuntimeError(f"the operator is not running:\n{self.operator.log_tail()}")
        return read_usage(pid)

    # Start-up, in dependency order -------------------------------------------

    def _start(self) -> None:
        stack = self._stack
        self._cluster = stack.enter_context(
            DevCluster(
                DevClusterOptions(
                    controllers=True,
                    kwok=True,
                    stages=kwok_config(),
                    kubeconfig=self.workdir / "kubeconfig",
                )
            )
        )
        api = self.api_client()
        install_training_request_crd(api)
        # Kueue sets up the ProvisioningRequest check only for APIs served at its start.
        install_third_party_crds(api)
        stack.enter_context(KueueManager(self._cluster.kubeconfig))
        apply_kueue_objects(api, dws_objects([self.namespace]))
        self._emulator = stack.enter_context(EmulatorThread(emulator_config(self.limits)))
        stack.enter_context(Autoscaler(self._emulator, self._cluster.kubeconfig, self.scenario))
        # The replicas start together and are stopped together: each takes seconds to
        # come up and, after SIGTERM, to exit.
        stack.callback(self._stop_operators)
        for index in range(self.replicas):
            self._operators.append(self._start_operator(index))
        for operator, liveness in zip(self._operators, self._liveness, strict=True):
            _wait_live(operator, liveness, OPERATOR_READY_TIMEOUT)

    def _stop_operators(self) -> None:
        stopping = [
            threading.Thread(target=operator.stop, args=(30.0,), name=f"stop-{operator.name}")
            for operator in self._operators
        ]
        for thread in stopping:
            thread.start()
        for thread in stopping:
            thread.join()

    def _start_operator(self, index: int) -> ChildProcess:
        emulator, cluster = self.emulator, self.cluster
        port = free_port()
        liveness = f"http://127.0.0.1:{port}/healthz"
        self._liveness.append(liveness)
        name = "dws-operator" if self.replicas == 1 else f"dws-operator-{index}"
        election = (
            {
                "DWS_LEADER_ELECT": "true",
                "DWS_LEASE_NAMESPACE": self.namespace,
                "POD_NAME": name,
                # A quick handover (client-go's proportions): a killed leader is
                # replaced in about 5 s, not 15.
                "DWS_LEASE_DURATION_SECONDS": "4",
                "DWS_LEASE_RENEW_DEADLINE_SECONDS": "3",
                "DWS_LEASE_RETRY_PERIOD_SECONDS": "0.5",
            }
            if self.replicas > 1
            else {}
        )
        env = {
            "DWS_GKE_PROJECT": DEFAULT_CLUSTER.split("/")[1],
            "DWS_GKE_LOCATION": DEFAULT_CLUSTER.split("/")[3],
            "DWS_GKE_CLUSTER": DEFAULT_CLUSTER.rsplit("/", 1)[-1],
            "DWS_GKE_ENDPOINT": emulator.endpoint,
            "DWS_COMPUTE_ENDPOINT": emulator.compute_endpoint,
            "DWS_KUEUE": "required",
            "DWS_DEFAULT_QUEUE": LOCAL_QUEUE,
            "DWS_QUEUED_QUEUE": QUEUED_LOCAL_QUEUE,
            "DWS_NAMESPACES": self.namespace,
            **metrics_env(),
            **election,
            **self.operator_env,
        }
        argv = [
            self.operator_python,
            "-m",
            "dws_operator",
            "run",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--liveness",
            liveness,
        ]
        operator = ChildProcess(name, argv, self.workdir, env=env)
        operator.start()
        return operator


def _wait_live(process: ChildProcess, url: str, timeout: float) -> None:
    """Until kopf's liveness endpoint answers 200 (the operator has started), or fail with
    the operator's log if it exits or does not come up in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.exited() is not None:
            raise RuntimeError(f"dws-operator exited at start:\n{process.log_tail()}")
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.2)
    raise RuntimeError(f"dws-operator not live after {timeout:g}s:\n{process.log_tail()}")
