"""Two `dws-operator run` processes, one Lease: the leader is killed mid-lifecycle and the
other finishes the request, with one pool created and scaled to zero."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster
from dws_workshop.devcluster.kubeerrors import NotFound, typed_errors
from dws_workshop.emulator import ClusterManagerEmulator
from dws_workshop.sandbox.operator_env import metrics_env
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

DURATION, RENEW, RETRY = 4.0, 3.0, 0.5


class Replica:
    def __init__(self, name: str, env: dict[str, str], kubeconfig: Path, log: Path) -> None:
        self.name = name
        self.log = log
        self._out = log.open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dws_operator", "run", "--kubeconfig", str(kubeconfig)],
            env={**env, "POD_NAME": name},
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )

    def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signum)
        # A hang guard, not a measure: a loaded CI machine once took over 60 s to stop it.
        try:
            code = self.process.wait(timeout=180)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self._out.close()
            tail = "\n".join(self.output().splitlines()[-40:])
            message = f"{self.name} did not stop in 180 s; its last lines:\n{tail}"
            raise AssertionError(message) from None
        self._out.close()
        return code

    def output(self) -> str:
        return self.log.read_text()


@pytest.fixture
def replicas(
    devcluster: DevCluster,
    training_request_crd: str,
    emulator: ClusterManagerEmulator,
    namespace: str,
    tmp_path: Path,
) -> Iterator[dict[str, Replica]]:
    env = {
        **os.environ,
        "DWS_GKE_PROJECT": "dws-sandbox",
        "DWS_GKE_LOCATION": "us-east5",
        "DWS_GKE_CLUSTER": "sandbox",
        "DWS_GKE_ENDPOINT": emulator.endpoint,
        "DWS_KUEUE": "disabled",
        "DWS_NAMESPACES": namespace,
        "DWS_LEADER_ELECT": "true",
        "DWS_LEASE_NAMESPACE": namespace,
        "DWS_LEASE_DURATION_SECONDS": str(DURATION),
        "DWS_LEASE_RENEW_DEADLINE_SECONDS": str(RENEW),
        "DWS_LEASE_RETRY_PERIOD_SECONDS": str(RETRY),
    }
    started = {
        name: Replica(name, env | metrics_env(), devcluster.kubeconfig, tmp_path / f"{name}.log")
        for name in ("replica-a", "replica-b")
    }
    try:
        yield started
    finally:
        for replica in started.values():
            replica.stop(signal.SIGKILL)


def _holder(api: k8s.ApiClient, namespace: str) -> str:
    try:
        with typed_errors():
            lease = k8s.CoordinationV1Api(api).read_namespaced_lease("dws-operator", namespace)
    except NotFound:
        return ""
    return str(lease.spec.holder_identity or "")


def test_the_leader_killed_mid_lifecycle(
    api: k8s.ApiClient,
    namespace: str,
    scenario: Scenario,
    emulator: ClusterManagerEmulator,
    replicas: dict[str, Replica],
) -> None:
    holder = eventually(lambda: _holder(api, namespace), what="a replica to take the lease")
    leader = replicas[holder.split("_")[0]]
    [standby] = [r for r in replicas.values() if r is not leader]
    eventually(
        lambda: f"waiting; {holder} holds the lease" in standby.output(),
        what="the standby to see the leader",
    )
    assert f"{holder} holds lease {namespace}/dws-operator" in leader.output()
    assert "holds lease" not in standby.output()  # it never took it

    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(scenario.created_pools, what="CreateNodePool from the leader")
    leader.stop(signal.SIGKILL)
    killed = time.monotonic()

    def new_holder() -> str | None:
        now = _holder(api, namespace)
        return now if now and now != holder else None

    new = eventually(
        new_holder,
        timeout=DURATION + 10,
        what="the standby to take the lease over",
    )
    took_over = time.monotonic() - killed
    assert new.startswith(f"{standby.name}_")
    # Not before the lease ran out (the killed leader's last renewal), nor long after.
    # The leader renewed at most a retry period (and a write) before it was killed.
    assert took_over >= DURATION - 2 * RETRY, f"took over after {took_over:.1f}s"
    assert took_over < DURATION + 2 * RETRY * 1.2 + 2.0, f"took over after {took_over:.1f}s"
    print(f"failover: lease taken over {took_over:.2f}s after SIGKILL of the leader")

    scenario.wait_phase("WaitingForCapacity")
    scenario.mark_pods("Succeeded", 1)
    scenario.wait_phase("Succeeded")
    eventually(scenario.at_zero, what="the pool at zero")
    eventually(lambda: scenario.status().get("scaledDownAt"), what="scaledDownAt")
    assert [c.ok for c in emulator.calls_for("CreateNodePool")].count(True) == 1
    assert len(scenario.created_pools()) == 1
    assert len(scenario.jobs()) == 1

    # A clean stop hands the lease back at once.
    assert standby.stop() == 0, standby.output()
    assert _holder(api, namespace) == ""


def _ports(pid: int) -> set[int]:
    """The local TCP ports of a process's sockets (from /proc: its fds' socket inodes)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_a_replica_that_loses_its_lease_exits_without_another_call(
    api: k8s.ApiClient,
    namespace: str,
    scenario: Scenario,
    emulator: ClusterManagerEmulator,
    replicas: dict[str, Replica],
) -> None:
    holder = eventually(lambda: _holder(api, namespace), what="a replica to take the lease")
    leader = replicas[holder.split("_")[0]]
    [standby] = [r for r in replicas.values() if r is not leader]
    # The leader has work in hand (a pool to follow, a snapshot to refresh) ...
    scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
    eventually(scenario.created_pools, what="CreateNodePool from the leader")
    # ... and is stopped, not killed (a paused VM, a stuck node): the standby takes over.
    leader.process.send_signal(signal.SIGSTOP)
    eventually(
        lambda: _holder(api, namespace).startswith(f"{standby.name}_"),
        timeout=DURATION + 10,
        what="the standby to take the lease over",
    )
    resumed_from = len(emulator.calls)
    # Its sockets, while it is stopped (they are still open then).
    leader_ports = _ports(leader.process.pid)
    assert leader_ports
    # Resumed, every timer of the old leader is due at once; it finds its renewal too
    # old and exits before calling GKE again, for a read or a write.
    leader.process.send_signal(signal.SIGCONT)
    assert leader.process.wait(timeout=RENEW + 10) == 3, leader.output()
    assert "exiting now" in leader.output()
    scenario.wait_phase("WaitingForCapacity")
    # The new leader goes on calling GKE (its snapshot refresh at the least) ...
    eventually(
        lambda: len(emulator.calls) > resumed_from + 1,
        what="the new leader's GKE calls",
    )
    # ... and no call since the old leader resumed came from the old leader.
    callers = {int(call.peer.rsplit(":", 1)[1]) for call in emulator.calls[resumed_from:]}
    assert not callers & leader_ports, (callers, leader_ports)
    # (The ports do tell callers apart: the old leader's create came from one of them.)
    [create] = [c for c in emulator.calls_for("CreateNodePool") if c.ok]
    assert int(create.peer.rsplit(":", 1)[1]) in leader_ports
    assert [c.ok for c in emulator.calls_for("CreateNodePool")].count(True) == 1
