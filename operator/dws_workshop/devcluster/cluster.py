"""A real Kubernetes control plane on 127.0.0.1: etcd + kube-apiserver, and on request
kube-controller-manager, kube-scheduler and kwok, as child processes.

    with DevCluster(DevClusterOptions(controllers=True)) as cluster:
        subprocess.run([cluster.binaries["kubectl"], "--kubeconfig", cluster.kubeconfig, ...])

Everything lives in one temporary directory, removed on stop; children get SIGTERM
when this process dies, so nothing leaks even when the test run is killed.
"""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from dws_workshop.devcluster.binaries import find_binaries
from dws_workshop.devcluster.certs import ClusterPki, create_pki
from dws_workshop.devcluster.processes import ChildProcess, free_port
from dws_workshop.devcluster.stages import kwok_config

SERVICE_CIDR = "10.96.0.0/16"
WORKDIR_PREFIX = "dws-devcluster-"
OWNER_FILE = "owner.pid"
ISSUER = "https://kubernetes.default.svc.cluster.local"
#: How long a restart lets the kube-apiserver end on its own after SIGTERM. It stops
#: listening at once and has cleaned up within milliseconds, but with clients' watches
#: open it had not exited 30 s later (measured 2026-11-28): a longer grace is only a
#: longer outage.
APISERVER_STOP_GRACE = 1.0


def remove_stale_workdirs() -> None:
    """Delete work directories left by clusters whose owning process was killed."""
    for workdir in Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*"):
        try:
            owner = int((workdir / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not Path(f"/proc/{owner}").exists():
            shutil.rmtree(workdir, ignore_errors=True)


class DevClusterError(RuntimeError):
    """The control plane could not be started; the message carries the failing log."""


@dataclass(frozen=True)
class DevClusterOptions:
    #: kube-controller-manager and kube-scheduler: Jobs make pods, pods get nodes,
    #: owner references are garbage-collected, namespaces get service accounts.
    controllers: bool = False
    #: kwok: fake nodes and pods that "run" (needs controllers to be useful).
    kwok: bool = False
    #: kwok's configuration (multi-document YAML: KwokConfiguration, Stage objects),
    #: passed with --config. Default: `dws_workshop.devcluster.stages.kwok_config()`
    #: (kwok v0.8.0 exits with "no stages found" without any).
    stages: str | None = None
    #: Where to write the admin kubeconfig; default inside the work directory.
    kubeconfig: Path | None = None
    startup_timeout: float = 90.0


class DevCluster:
    def __init__(
        self,
        options: DevClusterOptions | None = None,
        binaries: Mapping[str, Path] | None = None,
    ) -> None:
        self.options = options or DevClusterOptions()
        needed = ["etcd", "kube-apiserver", "kubectl"]
        if self.options.controllers:
            needed += ["kube-controller-manager", "kube-scheduler"]
        if self.options.kwok:
            needed.append("kwok")
        self.binaries: Mapping[str, Path] = binaries or find_binaries(needed)
        remove_stale_workdirs()
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        (self.workdir / OWNER_FILE).write_text(str(os.getpid()))
        self.kubeconfig = self.options.kubeconfig or self.workdir / "kubeconfig"
        self.server = ""
        self.startup_seconds = 0.0
        self._children: list[ChildProcess] = []
        self._pki: ClusterPki | None = None

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> DevCluster:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> None:
        began = time.monotonic()
        try:
            self._pki = create_pki(self.workdir / "pki")
            self._start_etcd()
            self._start_apiserver()
            self._write_kubeconfig()
            if self.options.controllers:
                self._start_controllers()
            if self.options.kwok:
                self._start_kwok()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began

    def api_client(self) -> k8s.ApiClient:
        """A synchronous Kubernetes client for this cluster; the caller closes it."""
        client: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return client

    def stop(self) -> None:
        for child in reversed(self._children):
            child.stop()
        self._children.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)
        if self.options.kubeconfig is not None:
            self.options.kubeconfig.unlink(missing_ok=True)

    def restart_apiserver(self, down_seconds: float = 0.0) -> None:
        """Stop the kube-apiserver (SIGTERM, SIGKILL after `APISERVER_STOP_GRACE`), wait
        `down_seconds`, start it again on the same address, and wait until it is ready:
        what an upgrade of the control plane does to its clients. etcd keeps the state."""
        [apiserver] = [c for c in self._children if c.name == "kube-apiserver"]
        apiserver.stop(APISERVER_STOP_GRACE)
        time.sleep(down_seconds)
        apiserver.start()
        self._wait(apiserver, f"{self.server}/readyz", context=self._tls_context())

    @property
    def pids(self) -> list[int]:
        return [c.pid for c in self._children if c.pid is not None]

    # -- components ----------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> ChildProcess:
        child = ChildProcess(name, argv, self.workdir)
        self._children.append(child)
        child.start()
        return child

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self._etcd_url = f"http://127.0.0.1:{client}"
        etcd = self._spawn(
            "etcd",
            [
                str(self.binaries["etcd"]),
                "--name=dev",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=dev=http://127.0.0.1:{peer}",
                "--listen-metrics-urls=",
                # A test cluster: durability buys nothing, fsync costs seconds.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait(etcd, f"{self._etcd_url}/health", context=None)

    def _start_apiserver(self) -> None:
        pki = self._require_pki()
        port = free_port()
        self.server = f"https://127.0.0.1:{port}"
        apiserver = self._spawn(
            "kube-apiserver",
            [
                str(self.binaries["kube-apiserver"]),
                "--advertise-address=127.0.0.1",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--etcd-servers={self._etcd_url}",
                f"--cert-dir={self.workdir / 'apiserver'}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--client-ca-file={pki.ca_cert}",
                f"--service-account-key-file={pki.service_account_pub}",
                f"--service-account-signing-key-file={pki.service_account_key}",
                f"--service-account-issuer={ISSUER}",
                f"--api-audiences={ISSUER}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--enable-priority-and-fairness=false",
                "--endpoint-reconciler-type=none",
            ],
        )
        self._wait(apiserver, f"{self.server}/readyz", context=self._tls_context())

    def _start_controllers(self) -> None:
        pki = self._require_pki()
        kubeconfig = f"--kubeconfig={self.kubeconfig}"
        auth = [
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
        ]
        self._spawn(
            "kube-controller-manager",
            [
                str(self.binaries["kube-controller-manager"]),
                kubeconfig,
                *auth,
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                f"--service-account-private-key-file={pki.service_account_key}",
                f"--root-ca-file={pki.ca_cert}",
                "--use-service-account-credentials=false",
                # No CA key on disk, so no certificate signing; nothing here needs it.
                "--controllers=*,-csrsigning",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.binaries["kube-scheduler"]),
                kubeconfig,
                *auth,
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
            ],
        )

    def _start_kwok(self) -> None:
        config = self.workdir / "kwok.yaml"
        config.write_text(self.options.stages or kwok_config())
        address = f"127.0.0.1:{free_port()}"
        kwok = self._spawn(
            "kwok",
            [
                str(self.binaries["kwok"]),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={config}",
                "--manage-all-nodes=false",
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                f"--server-address={address}",
            ],
        )
        # kwok exits at once on a bad configuration: wait until it serves, like the rest.
        self._wait(kwok, f"http://{address}/healthz", context=None)

    # -- helpers -------------------------------------------------------------------

    def _require_pki(self) -> ClusterPki:
        if self._pki is None:
            raise DevClusterError("the cluster PKI has not been created")
        return self._pki

    def _tls_context(self) -> ssl.SSLContext:
        pki = self._require_pki()
        context = ssl.create_default_context(cafile=str(pki.ca_cert))
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        return context

    def _wait(self, child: ChildProcess, url: str, context: ssl.SSLContext | None) -> None:
        deadline = time.monotonic() + self.options.startup_timeout
        last_error = "no answer"
        while time.monotonic() < deadline:
            status = child.exited()
            if status is not None:
                raise DevClusterError(
                    f"{child.name} exited with status {status} during start-up:\n{child.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                last_error = str(error)
            time.sleep(0.1)
        raise DevClusterError(
            f"{child.name} not ready at {url} after {self.options.startup_timeout:.0f}s "
            f"({last_error}):\n{child.log_tail()}"
        )

    def _write_kubeconfig(self) -> None:
        pki = self._require_pki()

        def b64(path: Path) -> str:
            return base64.b64encode(path.read_bytes()).decode()

        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "dws-devcluster",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority-data": b64(pki.ca_cert),
                    },
                }
            ],
            "users": [
                {
                    "name": "dws-admin",
                    "user": {
                        "client-certificate-data": b64(pki.admin_cert),
                        "client-key-data": b64(pki.admin_key),
                    },
                }
            ],
            "contexts": [
                {
                    "name": "dws-devcluster",
                    "context": {"cluster": "dws-devcluster", "user": "dws-admin"},
                }
            ],
            "current-context": "dws-devcluster",
        }
        self.kubeconfig.parent.mkdir(parents=True, exist_ok=True)
        self.kubeconfig.write_text(yaml.safe_dump(config, sort_keys=False))
        self.kubeconfig.chmod(0o600)
