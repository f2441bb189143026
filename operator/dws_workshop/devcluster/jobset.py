"""The real JobSet controller-manager (the pinned `jobset` binary) as a child process of a
devcluster.

    with DevCluster(DevClusterOptions(controllers=True)) as cluster:
        install_third_party_crds(api)          # the JobSet CRD, with Kueue's
        with JobSetManager(cluster.kubeconfig) as jobset:
            ...                                # JobSets become Jobs and a headless Service

How it runs (JobSet v0.12.0, its main.go; config.jobset.x-k8s.io/v1alpha1 `Configuration`
given with --config, decoded strictly):

- `internalCertManagement.enable: false`. JobSet's cert rotation (open-policy-agent's
  cert-controller) only works in-cluster: it keeps the certificates in the Secret
  jobset-system/jobset-webhook-server-cert, writes them to the fixed, shared directory
  /tmp/k8s-webhook-server/serving-certs and injects the CA into the webhook
  configurations jobset-{validating,mutating}-webhook-configuration, which it expects to
  exist; main.go sets up no controller until that has happened. With it off, the
  controllers start at once and the servers read certificates from files.
- The webhook server still starts (main.go always registers the handlers, and /readyz
  waits for the server), so it listens on 127.0.0.1:<free port> with a throw-away
  certificate in `webhook.certDir`. No webhook configuration is registered with the API
  server, so nothing calls it. The metrics endpoint (TLS, authenticated) serves on
  127.0.0.1:<free port> with the same certificate from `metrics.certDir` (with cert
  management off, JobSet would otherwise read /tmp/k8s-metrics-server/serving-certs).
- Leader election off; health probes on a 127.0.0.1 free port; default feature gates.

What the missing webhooks mean for the JobSets we create (the operator renders them
fully defaulted):

- JobSet's defaulting webhook sets spec.successPolicy (operator All), spec.startupPolicy
  (AnyOrder), spec.network.enableDNSHostnames and .publishNotReadyAddresses (true), each
  Job template's completionMode (Indexed) and pod restartPolicy (OnFailure), and names
  unnamed failurePolicy rules. The controller needs some of them: it reads
  spec.successPolicy and spec.network without a nil check, so a JobSet without them
  crashes the reconcile (a panic in controller-runtime's reconcile, recovered, retried).
  Ours set all of them explicitly.
- The validating webhook (name lengths of the Jobs and pods it will create, a DNS-valid
  subdomain, immutable fields on update) does not run: the operator keeps names short.
- The pod webhooks only serve exclusive placement (the
  alpha.jobset.sigs.k8s.io/exclusive-topology annotation: leader pod affinities and
  follower node selectors); our slices are pinned to their node pool by nodeSelector
  instead, and the pod controller ignores pods without that annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dws_workshop.devcluster.binaries import find_binaries
from dws_workshop.devcluster.manager import ManagerError, ManagerProcess

CONFIG_API_VERSION = "config.jobset.x-k8s.io/v1alpha1"


class JobSetError(ManagerError):
    """The JobSet controller-manager could not be started; the message carries its log."""


@dataclass(frozen=True)
class JobSetOptions:
    startup_timeout: float = 60.0
    #: JobSet's feature gates (`featureGates`); its defaults when empty.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    #: Manager log verbosity (zap level; higher is chattier).
    log_level: int = 2


def jobset_configuration(
    options: JobSetOptions,
    *,
    health_port: int,
    metrics_port: int,
    webhook_port: int,
    cert_dir: Path,
) -> dict[str, Any]:
    """The manager's `Configuration` document. Pure."""
    config: dict[str, Any] = {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": f"127.0.0.1:{metrics_port}", "certDir": str(cert_dir)},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "internalCertManagement": {"enable": False},
    }
    if options.feature_gates:
        config["featureGates"] = dict(options.feature_gates)
    return config


class JobSetManager(ManagerProcess):
    """JobSet's controller-manager, bound to 127.0.0.1, stopped with the context or with
    its parent. Needs the JobSet CRD installed (install_third_party_crds)."""

    name = "jobset"
    error = JobSetError

    def __init__(
        self,
        kubeconfig: Path,
        options: JobSetOptions | None = None,
        binary: Path | None = None,
    ) -> None:
        self.options = options or JobSetOptions()
        super().__init__(
            kubeconfig,
            binary or find_binaries(["jobset"])["jobset"],
            self.options.startup_timeout,
        )

    def _write_files(self) -> None:
        certs = self.serving_certificate(self.workdir / "certs")
        config = jobset_configuration(
            self.options,
            health_port=self.health_port,
            metrics_port=self.metrics_port,
            webhook_port=self.webhook_port,
            cert_dir=certs,
        )
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))

    def _argv(self) -> list[str]:
        return [
            str(self.binary),
            f"--config={self.config_path}",
            f"--kubeconfig={self.kubeconfig}",
            f"--zap-log-level={self.options.log_level}",
        ]
