"""The real Kueue manager (the pinned `kueue` binary) as a child process of a devcluster.

    with DevCluster(DevClusterOptions(controllers=True)) as cluster:
        install_third_party_crds(api)          # Kueue refuses to start without its CRDs
        with JobSetManager(cluster.kubeconfig), KueueManager(cluster.kubeconfig) as kueue:
            ...                                # Jobs, JobSets labelled kueue.x-k8s.io/queue-name

How it runs (Kueue v0.19.2, config.kueue.x-k8s.io/v1beta2 `Configuration`):

- No webhooks are registered with the API server: our Jobs and JobSets are created
  suspended with the queue label, which is all Kueue's defaulting webhooks would add.
  The manager still starts its webhook server (it always does), so it listens on
  127.0.0.1:<free port> with a throw-away certificate in `webhook.certDir`; nothing
  calls it.
- `internalCertManagement.enable: false`: Kueue's own cert rotation only works in-cluster
  (it waits for the Secret to be mounted into the pod and patches webhook configurations
  and conversion CRDs). With it off, Kueue reads the certificates from files, as its
  Helm chart mounts them: the webhook's from `webhook.certDir`, the metrics endpoint's from
  the fixed path /etc/kueue/metrics/certs (not configurable in v0.19). That path is given
  to the manager alone: it runs in a private user + mount namespace (`unshare`) where an
  overlay of /etc adds kueue/metrics/certs from the work directory; the host /etc is never
  written. If /etc/kueue/metrics/certs already holds tls.crt and tls.key, they are used
  and no namespace is needed.
- The `VisibilityOnDemand` feature gate is turned off: its API server would need more
  certificates (/visibility) and an APIService, and nothing here uses it.
- ProvisioningRequest support needs no gate (ProvisioningACC went GA in v0.14 and the
  gate is gone): the admission check controller starts when the ProvisioningRequest
  CRD is served at start-up, so install it first.
- Leader election off; health probes and metrics on 127.0.0.1 free ports.
- Integrations `batch/job` and `jobset.x-k8s.io/jobset`. Kueue sets up an integration's
  controller at start when its CRD is served, else it polls with a growing back-off until
  it is: install the JobSet CRD before Kueue starts (install_third_party_crds does). The
  JobSet controller (devcluster.jobset) is what turns an admitted JobSet into Jobs.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from dws_operator.identity import FIELD_MANAGER
from dws_operator.kueue_objects import (
    KUEUE_API_VERSION,
    KUEUE_GROUP,
    KUEUE_GROUP_VERSION,
    PLURALS,
    Manifest,
)
from dws_workshop.devcluster.binaries import find_binaries
from dws_workshop.devcluster.manager import ManagerError, ManagerProcess

#: Where Kueue v0.19 reads the metrics endpoint's certificate when it does not make its own.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
DEFAULT_FEATURE_GATES: Mapping[str, bool] = {"VisibilityOnDemand": False}
#: Kueue's names of the job integrations the operator's workloads use.
JOB_FRAMEWORK = "batch/job"
JOBSET_FRAMEWORK = "jobset.x-k8s.io/jobset"


class KueueError(ManagerError):
    """The Kueue manager could not be started; the message carries its log."""


@dataclass(frozen=True)
class KueueOptions:
    startup_timeout: float = 90.0
    #: Merged over DEFAULT_FEATURE_GATES.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    #: Kueue job integrations (`integrations.frameworks`).
    frameworks: tuple[str, ...] = (JOB_FRAMEWORK, JOBSET_FRAMEWORK)
    #: Namespace Kueue considers its own (it reads Secrets there; need not exist).
    namespace: str = "kueue-system"
    #: Manager log verbosity (zap level; higher is chattier).
    log_level: int = 2


def kueue_configuration(
    options: KueueOptions,
    *,
    health_port: int,
    metrics_port: int,
    webhook_port: int,
    webhook_cert_dir: Path,
) -> dict[str, Any]:
    """The manager's `Configuration` document. Pure."""
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "namespace": options.namespace,
        "manageJobsWithoutQueueName": False,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}"},
        "webhook": {
            "host": "127.0.0.1",
            "port": webhook_port,
            "certDir": str(webhook_cert_dir),
        },
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(options.frameworks)},
        "featureGates": {**DEFAULT_FEATURE_GATES, **options.feature_gates},
    }


def _metrics_certs_present() -> bool:
    return all((METRICS_CERT_DIR / name).is_file() for name in ("tls.crt", "tls.key"))


def _make_removable(path: Path) -> None:
    """Overlayfs leaves a mode-000 `work` directory behind; let rmtree descend into it."""
    for directory, subdirs, _files in os.walk(path):
        for sub in subdirs:
            target = Path(directory) / sub
            try:
                target.chmod(target.stat().st_mode | stat.S_IRWXU)
            except OSError:
                continue


class KueueManager(ManagerProcess):
    """The Kueue manager, bound to 127.0.0.1, stopped with the context or with its parent."""

    name = "kueue"
    error = KueueError

    def __init__(
        self,
        kubeconfig: Path,
        options: KueueOptions | None = None,
        binary: Path | None = None,
    ) -> None:
        self.options = options or KueueOptions()
        super().__init__(
            kubeconfig,
            binary or find_binaries(["kueue"])["kueue"],
            self.options.startup_timeout,
        )
        #: True when the manager runs in its own user + mount namespace (see module doc).
        self.private_mounts = False

    def stop(self) -> None:
        self._stop_child()
        _make_removable(self.workdir)
        super().stop()

    def _write_files(self) -> None:
        webhook_certs = self.serving_certificate(self.workdir / "webhook-certs")
        if not _metrics_certs_present():
            if shutil.which("unshare") is None or shutil.which("mount") is None:
                raise KueueError(
                    f"Kueue needs a metrics certificate in {METRICS_CERT_DIR} (tls.crt, tls.key) "
                    "and `unshare`/`mount` (util-linux) are not there to provide one privately; "
                    "install util-linux or put a certificate there"
                )
            # The overlay's upper layer: /etc/kueue/metrics/certs as the manager sees it.
            certs = self.workdir / "etc-upper" / METRICS_CERT_DIR.relative_to("/etc")
            certs.mkdir(parents=True)
            for name in ("tls.crt", "tls.key"):
                shutil.copyfile(webhook_certs / name, certs / name)
            (self.workdir / "etc-work").mkdir()
            self.private_mounts = True
        config = kueue_configuration(
            self.options,
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            webhook_port=self.webhook_port,
            webhook_cert_dir=webhook_certs,
        )
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def _argv(self) -> list[str]:
        kueue = [
            str(self.binary),
            f"--config={self.config_path}",
            f"--kubeconfig={self.kubeconfig}",
            f"--zap-log-level={self.options.log_level}",
        ]
        if not self.private_mounts:
            return kueue
        upper, work = self.workdir / "etc-upper", self.workdir / "etc-work"
        # unshare execs (no fork), so the child keeps the parent-death signal set by
        # ChildProcess; sh then execs kueue. Arguments pass through "$@", never the script.
        script = (
            'mount -t overlay dws-kueue-etc -o "lowerdir=/etc,upperdir=$1,workdir=$2" /etc '
            '&& shift 2 && exec "$@"'
        )
        return [
            "unshare",
            "--user",
            "--map-root-user",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
            str(upper),
            str(work),
            *kueue,
        ]

    def _exit_hint(self) -> str:
        if not self.private_mounts:
            return ""
        return (
            "\n(the manager runs in a private user + mount namespace to see its metrics "
            f"certificate at {METRICS_CERT_DIR}; if unprivileged user namespaces or overlayfs "
            f"in them are disabled here, put tls.crt and tls.key into {METRICS_CERT_DIR} instead)"
        )


def apply_kueue_objects(
    api: k8s.ApiClient, objects: Iterable[Manifest], field_manager: str = FIELD_MANAGER
) -> list[Manifest]:
    """Server-side apply each Kueue manifest (in the given order); returns the live objects."""
    custom = k8s.CustomObjectsApi(api)
    applied: list[Manifest] = []
    for manifest in objects:
        kind = manifest["kind"]
        plural = PLURALS.get(kind)
        if plural is None or manifest.get("apiVersion") != KUEUE_GROUP_VERSION:
            raise ValueError(f"not a Kueue {KUEUE_GROUP_VERSION} object: {kind}")
        metadata = manifest["metadata"]
        common: Manifest = {
            "field_manager": field_manager,
            "force": True,
            "_content_type": "application/apply-patch+yaml",
        }
        name = metadata["name"]
        namespace = metadata.get("namespace")
        # The client maps only a 200 answer to the object; an apply that creates answers
        # 201 and comes back empty, so the object is read back then.
        live: object
        if namespace:
            args = (KUEUE_GROUP, KUEUE_API_VERSION, namespace, plural, name)
            live = custom.patch_namespaced_custom_object(*args, manifest, **common)
            if not isinstance(live, dict):
                live = custom.get_namespaced_custom_object(*args)
        else:
            cluster_args = (KUEUE_GROUP, KUEUE_API_VERSION, plural, name)
            live = custom.patch_cluster_custom_object(*cluster_args, manifest, **common)
            if not isinstance(live, dict):
                live = custom.get_cluster_custom_object(*cluster_args)
        if not isinstance(live, dict):
            raise TypeError(f"unexpected answer reading {kind} {name}: {live!r}")
        applied.append(live)
    return applied
