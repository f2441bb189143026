"""The local control plane: pinned versions, controllers, clean stop, no leaked processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dws_workshop.devcluster import DevCluster, MissingBinaries, find_binaries
from dws_workshop.devcluster.binaries import pinned_versions
from dws_workshop.devcluster.cluster import OWNER_FILE, WORKDIR_PREFIX, remove_stale_workdirs
from tests.cluster.conftest import Kubectl


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


def _wait_dead(pids: list[int], timeout: float = 15.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        time.sleep(0.1)
    return alive


def test_server_runs_the_pinned_kubernetes(kubectl: Kubectl) -> None:
    result = kubectl("version", "-o", "json")
    assert result.returncode == 0, result.stderr
    versions = json.loads(result.stdout)
    pinned = pinned_versions()["KUBERNETES_VERSION"]
    assert versions["serverVersion"]["gitVersion"] == pinned
    assert versions["clientVersion"]["gitVersion"] == pinned


def test_binds_to_loopback(devcluster: DevCluster) -> None:
    assert devcluster.server.startswith("https://127.0.0.1:")


def test_controllers_run(api: k8s.ApiClient, namespace: str) -> None:
    """The service-account controller (kube-controller-manager) fills new namespaces."""
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + 30
    names: list[str] = []
    while time.monotonic() < deadline and "default" not in names:
        names = [
            sa.metadata.name
            for sa in core.list_namespaced_service_account(namespace).items
            if sa.metadata
        ]
        time.sleep(0.2)
    assert "default" in names


def test_stop_leaves_nothing_behind() -> None:
    cluster = DevCluster()
    with cluster:
        pids = cluster.pids
        workdir = cluster.workdir
        assert len(pids) == 2  # etcd, kube-apiserver
        assert all(_alive(p) for p in pids)
    assert _wait_dead(pids) == []
    assert not workdir.exists()


def test_stop_on_error_inside_the_block() -> None:
    cluster = DevCluster()
    pids: list[int] = []

    def fail_inside() -> None:
        with cluster:
            pids.extend(cluster.pids)
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        fail_inside()
    assert len(pids) == 2
    assert _wait_dead(pids) == []
    assert not cluster.workdir.exists()


def test_children_die_with_a_killed_parent(tmp_path: Path) -> None:
    """Even SIGKILL of the Python process (no cleanup code runs) leaks no servers."""
    script = textwrap.dedent(
        """
        import sys, time
        from dws_workshop.devcluster import DevCluster
        cluster = DevCluster()
        cluster.start()
        print(" ".join(map(str, cluster.pids)), flush=True)
        time.sleep(600)
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pids = [int(p) for p in parent.stdout.readline().split()]
    assert len(pids) == 2
    parent.kill()
    parent.wait()
    assert _wait_dead(pids) == []


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_up_and_interrupt(tmp_path: Path, stop_signal: signal.Signals) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    up = subprocess.Popen(
        [sys.executable, "-m", "dws_operator", "devcluster", "up", "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert up.stdout is not None
    printed = up.stdout.readline().strip()
    assert printed == str(kubeconfig), up.stderr.read() if up.stderr else ""
    assert kubeconfig.exists()
    kubectl = find_binaries(["kubectl"])["kubectl"]
    crd = subprocess.run(
        [str(kubectl), "--kubeconfig", str(kubeconfig), "get", "crd", "-o", "name"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (
        "customresourcedefinition.apiextensions.k8s.io/trainingrequests.dws-operator.dev"
        in crd.stdout
    )
    children = [
        int(p)
        for p in subprocess.run(
            ["pgrep", "-P", str(up.pid)], capture_output=True, text=True, check=False
        ).stdout.split()
    ]
    assert len(children) == 2
    up.send_signal(stop_signal)
    assert up.wait(timeout=30) in (0, 130, 128 + signal.SIGTERM)
    assert _wait_dead(children) == []
    assert not kubeconfig.exists()


def test_missing_binary_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DWS_K8S_BIN_DIR", str(tmp_path))
    with pytest.raises(MissingBinaries) as raised:
        find_binaries(["kube-apiserver"])
    message = str(raised.value)
    assert "\n" not in message
    assert "kube-apiserver not found in DWS_K8S_BIN_DIR=" in message


def test_kubebuilder_assets_supply_the_envtest_binaries(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in ("kube-apiserver", "etcd", "kubectl"):
        (tmp_path / name).write_text("#!/bin/sh\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.delenv("DWS_K8S_BIN_DIR", raising=False)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = find_binaries(["kube-apiserver", "etcd", "kubectl"], build=False)
    assert found == {n: tmp_path / n for n in ("kube-apiserver", "etcd", "kubectl")}


def test_stale_workdirs_of_killed_owners_are_removed(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    stale = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (stale / OWNER_FILE).write_text(dead.stdout.strip())
    live = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
    (live / OWNER_FILE).write_text(str(os.getpid()))
    try:
        remove_stale_workdirs()
        assert not stale.exists()
        assert live.exists()
    finally:
        for path in (stale, live):
            subprocess.run(["rm", "-rf", str(path)], check=False)
