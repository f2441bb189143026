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
- The webhook server listens on 127.0.0.1:<free port> with a throw-away certificate in
  `webhook.certDir`. The metrics endpoint (TLS, authenticated) serves on 127.0.0.1:<free
  port> with the same certificate from `metrics.certDir` (with cert management off,
  JobSet would otherwise read /tmp/k8s-metrics-server/serving-certs).
- Leader election off; health probes on a 127.0.0.1 free port; default feature gates.

JobSet's webhooks are registered with the API server once the manager is ready
(`JobSetOptions.webhooks`, on by default), so the real webhook code runs on every
JobSet and JobSet pod, as in a cluster with JobSet's release manifests installed:

- A MutatingWebhookConfiguration and a ValidatingWebhookConfiguration named
  `jobset-webhooks-<port>` (one pair per manager, so two managers on one cluster do not
  undo each other's registration; each goes with its manager's stop). They hold JobSet's
  own four webhooks as its v0.12.0 kustomize manifests define them
  (config/components/webhook/manifests.yaml and patches/): the JobSet defaulting
  (`/mutate-jobset-x-k8s-io-v1alpha2-jobset`, CREATE) and validating
  (`/validate-jobset-x-k8s-io-v1alpha2-jobset`, CREATE and UPDATE) webhooks, and the pod
  mutating (`/mutate--v1-pod`) and validating (`/validate--v1-pod`) webhooks on CREATE of
  pods with the label `jobset.sigs.k8s.io/jobset-name` (their objectSelector); no
  namespaceSelector, failurePolicy Fail, sideEffects None. `clientConfig.url` is the
  manager's https://127.0.0.1:<port><path>, `caBundle` the CA of its certificate.
- The pod webhooks serve exclusive placement (the JobSet annotation
  `alpha.jobset.sigs.k8s.io/exclusive-topology`, see dws_operator.multislice): the leader
  pod (completion index 0) of each child Job gets a required pod affinity to its Job and
  anti-affinity to the other Jobs on the topology key; a follower gets a nodeSelector for
  its leader's topology value and is refused (a transient error the Job controller
  retries) until its leader is scheduled. The mutating webhook also labels every JobSet
  pod with its priority (`jobset.sigs.k8s.io/priority`).
- The JobSet defaulting webhook sets spec.successPolicy (operator All), spec.startupPolicy
  (AnyOrder), spec.network.enableDNSHostnames and .publishNotReadyAddresses (true), each
  Job template's completionMode (Indexed) and pod restartPolicy (OnFailure), and names
  unnamed failurePolicy rules. The controller needs some of them: it reads
  spec.successPolicy and spec.network without a nil check. The operator still renders
  its JobSets fully defaulted, so they mean the same where the webhook is not installed.
- The JobSet validating webhook checks the names of the Jobs and pods it will create
  (63 characters), a DNS-valid subdomain, and immutable fields on update.
- Registration waits until the API server calls the webhooks (its configuration watch
  lags a little): a dry-run leader pod comes back with the exclusive-placement
  affinities and a dry-run follower pod is refused.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from dws_operator.identity import MANAGED_BY
from dws_workshop.devcluster.binaries import find_binaries
from dws_workshop.devcluster.kubeerrors import ApiError, NotFound, typed_errors
from dws_workshop.devcluster.manager import ManagerError, ManagerProcess

CONFIG_API_VERSION = "config.jobset.x-k8s.io/v1alpha1"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
EXCLUSIVE_TOPOLOGY_ANNOTATION = "alpha.jobset.sigs.k8s.io/exclusive-topology"
COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
#: What JobSet's pod validating webhook answers a follower without its leader's selector.
FOLLOWER_REFUSAL = "follower pod node selector not set"
#: The probe pods' exclusive-placement topology key (any label key does).
PROBE_TOPOLOGY = "kubernetes.io/hostname"


class JobSetError(ManagerError):
    """The JobSet controller-manager could not be started; the message carries its log."""


@dataclass(frozen=True)
class JobSetOptions:
    startup_timeout: float = 60.0
    #: JobSet's feature gates (`featureGates`); its defaults when empty.
    feature_gates: Mapping[str, bool] = field(default_factory=dict)
    #: Manager log verbosity (zap level; higher is chattier).
    log_level: int = 2
    #: Register JobSet's webhooks with the API server (see the module docstring).
    webhooks: bool = True
    #: How long registration may take to be in effect.
    webhook_timeout: float = 30.0


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


def _webhook(
    name: str,
    url: str,
    ca_bundle: bytes,
    rule: tuple[str, str, str, tuple[str, ...]],
    pods_of_jobsets: bool,
) -> dict[str, Any]:
    group, version, resource, operations = rule
    webhook: dict[str, Any] = {
        "name": name,
        "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()},
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": list(operations),
                "resources": [resource],
            }
        ],
    }
    if pods_of_jobsets:
        # JobSet's patches/{mutating,validating}-patch.yaml: only pods of a JobSet.
        webhook["objectSelector"] = {
            "matchExpressions": [{"key": JOBSET_NAME_LABEL, "operator": "Exists"}]
        }
    return webhook


def webhook_configurations(
    name: str, base_url: str, ca_bundle: bytes
) -> tuple[dict[str, Any], dict[str, Any]]:
    """JobSet v0.12.0's mutating and validating webhook configurations (its kustomize
    manifests with their patches), calling `base_url` (https://host:port). Pure."""
    jobsets = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
    pods = ("", "v1", "pods")
    metadata = {"name": name, "labels": dict(MANAGED_BY)}
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": metadata,
        "webhooks": [
            _webhook(
                "mjobset.kb.io",
                f"{base_url}/mutate-jobset-x-k8s-io-v1alpha2-jobset",
                ca_bundle,
                (*jobsets, ("CREATE",)),
                pods_of_jobsets=False,
            ),
            _webhook(
                "mpod.kb.io",
                f"{base_url}/mutate--v1-pod",
                ca_bundle,
                (*pods, ("CREATE",)),
                pods_of_jobsets=True,
            ),
        ],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": dict(metadata),
        "webhooks": [
            _webhook(
                "vjobset.kb.io",
                f"{base_url}/validate-jobset-x-k8s-io-v1alpha2-jobset",
                ca_bundle,
                (*jobsets, ("CREATE", "UPDATE")),
                pods_of_jobsets=False,
            ),
            _webhook(
                "vpod.kb.io",
                f"{base_url}/validate--v1-pod",
                ca_bundle,
                (*pods, ("CREATE",)),
                pods_of_jobsets=True,
            ),
        ],
    }
    return mutating, validating


def probe_pod(completion_index: int) -> Any:
    """A pod of a JobSet using exclusive placement, for a dry-run create: index 0 is a
    leader (the mutating webhook adds affinities), any other a follower (refused while
    it has no leader)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "jobset-webhook-probe-",
            "labels": {JOBSET_NAME_LABEL: "webhook-probe"},
            "annotations": {
                JOBSET_NAME_LABEL: "webhook-probe",
                EXCLUSIVE_TOPOLOGY_ANNOTATION: PROBE_TOPOLOGY,
                COMPLETION_INDEX_ANNOTATION: str(completion_index),
            },
        },
        "spec": {"containers": [{"name": "probe", "image": "webhook-probe"}]},
    }


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

    @property
    def webhook_name(self) -> str:
        """The name of this manager's two webhook configurations."""
        return f"jobset-webhooks-{self.webhook_port}"

    def start(self) -> None:
        super().start()
        if not self.options.webhooks:
            return
        try:
            self._register_webhooks()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        # First, so that no pod of a JobSet is refused for want of a webhook server.
        if self.options.webhooks:
            self._unregister_webhooks()
        super().stop()

    def _api(self) -> k8s.ApiClient:
        client: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return client

    def _register_webhooks(self) -> None:
        if self.ca_cert is None:
            raise JobSetError("the JobSet manager has no serving certificate")
        # Any: the client takes manifests (dicts) where its stubs name its model classes.
        mutating: Any
        validating: Any
        mutating, validating = webhook_configurations(
            self.webhook_name, f"https://127.0.0.1:{self.webhook_port}", self.ca_cert.read_bytes()
        )
        with self._api() as api:
            admission = k8s.AdmissionregistrationV1Api(api)
            with typed_errors():
                admission.create_mutating_webhook_configuration(mutating)
                admission.create_validating_webhook_configuration(validating)
            self._wait_for_webhooks(k8s.CoreV1Api(api))

    def _webhooks_answer(self, core: k8s.CoreV1Api) -> str | None:
        """None once both configurations are in effect: a dry-run leader comes back with
        its exclusive-placement affinities and a dry-run follower is refused. Else what
        was seen instead. (The pods are checked like any other: e.g. the namespace's
        default ServiceAccount must exist.)"""
        try:
            with typed_errors():
                leader: Any = core.create_namespaced_pod("default", probe_pod(0), dry_run="All")
        except ApiError as error:
            return f"the leader probe was refused: {error}"
        affinity = leader.spec.affinity
        if affinity is None or affinity.pod_anti_affinity is None:
            return "the leader probe came back without exclusive-placement affinities"
        try:
            with typed_errors():
                core.create_namespaced_pod("default", probe_pod(1), dry_run="All")
        except ApiError as error:
            if FOLLOWER_REFUSAL in str(error):
                return None
            return f"the follower probe was refused otherwise: {error}"
        return "the follower probe was admitted"

    def _wait_for_webhooks(self, core: k8s.CoreV1Api) -> None:
        deadline = time.monotonic() + self.options.webhook_timeout
        while (seen := self._webhooks_answer(core)) is not None:
            if time.monotonic() > deadline:
                raise JobSetError(
                    f"JobSet's webhooks ({self.webhook_name}) not in effect after "
                    f"{self.options.webhook_timeout:.0f}s ({seen}):\n{self.log_tail(40)}"
                )
            time.sleep(0.1)

    def _unregister_webhooks(self) -> None:
        """Best effort: the API server may be gone already (the cluster stopped first)."""
        with contextlib.suppress(Exception), self._api() as api:
            admission = k8s.AdmissionregistrationV1Api(api)
            for delete in (
                admission.delete_mutating_webhook_configuration,
                admission.delete_validating_webhook_configuration,
            ):
                with contextlib.suppress(NotFound), typed_errors():
                    delete(self.webhook_name, _request_timeout=5)

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
