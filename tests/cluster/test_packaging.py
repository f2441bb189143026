"""Installing dws-operator the way platform teams do: Helm, kustomize, the image."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from dws_operator.api import GROUP, VERSION
from dws_operator.controller import KueueMode, OperatorConfig, OperatorThread
from dws_operator.dashboard import dashboard_json
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.identity import MANAGED_BY
from dws_operator.kueue_objects import KUEUE_GROUP_VERSION, dws_flavors, dws_objects
from dws_operator.workload import REQUEST_LABEL
from dws_workshop.devcluster import DevCluster, find_binaries
from dws_workshop.emulator import EmulatorConfig, EmulatorThread
from tests.builders import tpu
from tests.cluster.conftest import Kubectl
from tests.cluster.operator.harness import Scenario
from tests.polling import eventually

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dws-operator"

Helm = Callable[..., subprocess.CompletedProcess[str]]
#: The chart's required GKE settings, as helm flags.
GKE_VALUES = (
    "--set",
    "gke.project=my-project",
    "--set",
    "gke.location=us-east5",
    "--set",
    "gke.cluster=training",
)


@pytest.fixture(scope="module")
def helm(devcluster: DevCluster) -> Helm:
    binary = find_binaries(["helm"])["helm"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(binary), "--kubeconfig", str(devcluster.kubeconfig), *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    return run


def test_helm_lint_strict(helm: Helm) -> None:
    result = helm("lint", "--strict", str(CHART))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("setting", ["bogus=1", "gke.zone=x", "image.registry=x"])
def test_unknown_values_are_rejected(helm: Helm, setting: str) -> None:
    result = helm("template", "t", str(CHART), "--set", setting)
    assert result.returncode != 0
    assert "additional properties" in result.stderr.lower()


def test_bad_values_are_rejected(helm: Helm) -> None:
    result = helm("template", "t", str(CHART), "--set", "kueue.mode=sometimes")
    assert result.returncode != 0
    assert "/kueue/mode" in result.stderr


def test_kustomize_base_is_generated_from_the_chart() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "hack" / "gen_manifests.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_rendered_chart_passes_server_side_dry_run(
    helm: Helm,
    kubectl: Kubectl,
    training_request_crd: str,
    third_party: list[str],
    namespace: str,
) -> None:
    rendered = helm(
        "template",
        "dry",
        str(CHART),
        "--namespace",
        namespace,
        *GKE_VALUES,
        "--set",
        "kueue.createObjects=true",
        "--set",
        f"kueue.localQueueNamespaces={{{namespace}}}",
        "--set-string",
        "serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account="
        "dws@my-project.iam.gserviceaccount.com",
    )
    assert rendered.returncode == 0, rendered.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(rendered.stdout) if d}
    assert kinds >= {
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "ResourceFlavor",
        "ClusterQueue",
        "LocalQueue",
        "AdmissionCheck",
        "ProvisioningRequestConfig",
    }
    applied = kubectl("apply", "--dry-run=server", "-f", "-", stdin=rendered.stdout)
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.count("(server dry run)") == len(
        [d for d in yaml.safe_load_all(rendered.stdout) if d]
    )


def test_chart_queues_cover_ephemeral_storage(helm: Helm) -> None:
    rendered = helm("template", "t", str(CHART), *GKE_VALUES, "--set", "kueue.createObjects=true")
    assert rendered.returncode == 0, rendered.stderr
    queues = [d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "ClusterQueue"]
    assert [q["metadata"]["name"] for q in queues] == ["dws", "dws-queued"]
    for queue in queues:
        [group] = queue["spec"]["resourceGroups"]
        assert "ephemeral-storage" in group["coveredResources"]
        assert len(group["flavors"]) == len(dws_flavors())
        for flavor in group["flavors"]:
            # Kueue wants the flavor's resources in the order of coveredResources.
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]


def _identity(manifest: dict[str, Any]) -> tuple[str, str, str]:
    metadata = manifest["metadata"]
    return manifest["kind"], metadata.get("namespace", ""), metadata["name"]


def test_chart_installs_exactly_the_kueue_objects_the_sandbox_and_tests_apply(helm: Helm) -> None:
    """templates/kueue.yaml is generated from `dws_objects`: with the chart's default
    values, Helm renders the very objects the sandbox, the load runs and the e2e suite
    apply (labels aside: Helm's own there)."""
    namespaces = ["team-a", "team-b"]
    rendered = helm(
        "template",
        "t",
        str(CHART),
        *GKE_VALUES,
        "--set",
        "kueue.createObjects=true",
        "--set",
        f"kueue.localQueueNamespaces={{{','.join(namespaces)}}}",
    )
    assert rendered.returncode == 0, rendered.stderr
    charted = {
        _identity(d): d
        for d in yaml.safe_load_all(rendered.stdout)
        if d and d["apiVersion"] == KUEUE_GROUP_VERSION
    }
    source = {_identity(d): d for d in dws_objects(namespaces)}
    assert charted.keys() == source.keys()
    for key, manifest in source.items():
        chart = charted[key]
        assert chart["metadata"].pop("labels")["app.kubernetes.io/name"] == "dws-operator"
        assert manifest["metadata"].pop("labels") == MANAGED_BY
        assert chart == manifest, key


@pytest.mark.parametrize(
    ("served", "refused"),
    [
        (["kueue.x-k8s.io/v1beta1"], True),  # Kueue before v0.15.0
        (["kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"], False),  # v0.15 to v0.19
        (["kueue.x-k8s.io/v1beta2"], False),  # v0.20 on
        ([], False),  # rendered offline: nothing known, nothing refused
    ],
)
def test_chart_refuses_a_kueue_older_than_v0_15(
    helm: Helm, served: list[str], refused: bool
) -> None:
    versions = [arg for version in served for arg in ("--api-versions", version)]
    rendered = helm(
        "template", "t", str(CHART), *GKE_VALUES, "--set", "kueue.createObjects=true", *versions
    )
    assert (rendered.returncode != 0) == refused, rendered.stderr
    assert ("older than Kueue v0.15.0" in rendered.stderr) == refused


def test_deployment_is_locked_down(helm: Helm) -> None:
    rendered = helm("template", "t", str(CHART))
    deployment = next(
        d for d in yaml.safe_load_all(rendered.stdout) if d and d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["resources"]["limits"]["memory"] == "512Mi"


def test_helm_install_creates_the_operator(
    helm: Helm, api: k8s.ApiClient, training_request_crd: str, namespace: str
) -> None:
    release = f"dws-{uuid.uuid4().hex[:6]}"
    result = helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        *GKE_VALUES,
    )
    try:
        assert result.returncode == 0, result.stderr
        assert "dws-operator 0.1.0 is installed" in result.stdout
        name = f"{release}-dws-operator"
        deployment = k8s.AppsV1Api(api).read_namespaced_deployment(name, namespace)
        env = {e.name: e.value for e in deployment.spec.template.spec.containers[0].env}
        assert env["DWS_GKE_CLUSTER"] == "training"
        k8s.CoreV1Api(api).read_namespaced_service_account(name, namespace)
        rbac = k8s.RbacAuthorizationV1Api(api)
        assert rbac.read_cluster_role(name).rules
        assert rbac.read_cluster_role_binding(name).subjects[0].name == name
    finally:
        helm("uninstall", release, "--namespace", namespace)


def test_kubectl_apply_k(kubectl: Kubectl, training_request_crd: str) -> None:
    applied = kubectl("apply", "--server-side", "--force-conflicts", "-k", str(ROOT / "manifests"))
    assert applied.returncode == 0, applied.stderr
    for kind in (
        "namespace/dws-system",
        "deployment.apps/dws-operator",
        "clusterrole.rbac.authorization.k8s.io/dws-operator",
    ):
        assert kind in applied.stdout
    kubectl("delete", "namespace", "dws-system", "--wait=false")


def _token_kubeconfig(
    devcluster: DevCluster, kubectl: Kubectl, namespace: str, sa: str, path: Path
) -> Path:
    token = kubectl("create", "token", sa, "-n", namespace, "--duration=1h")
    assert token.returncode == 0, token.stderr
    admin = yaml.safe_load(devcluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "sa", "user": {"token": token.stdout.strip()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("served", [False, True], ids=["all-namespaces", "watch-namespaces"])
def test_the_chart_rbac_is_enough_and_no_more(
    helm: Helm,
    api: k8s.ApiClient,
    kubectl: Kubectl,
    devcluster: DevCluster,
    training_request_crd: str,
    namespace: str,
    tmp_path: Path,
    served: bool,
) -> None:
    """The operator, running as the chart's ServiceAccount, takes a request through its
    whole life; the same identity cannot read Secrets. Serving listed namespaces, it can
    touch no Job, JobSet or Service elsewhere."""
    release = f"rbac-{uuid.uuid4().hex[:6]}"
    installed = helm(
        "install",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--set",
        "gke.project=dws-sandbox",
        "--set",
        "gke.location=us-east5",
        "--set",
        "gke.cluster=sandbox",
        "--set",
        "kueue.mode=disabled",
        *(("--set", f"watchNamespaces={{{namespace}}}") if served else ()),
    )
    assert installed.returncode == 0, installed.stderr
    sa = f"{release}-dws-operator"
    try:
        identity = f"system:serviceaccount:{namespace}:{sa}"
        for verb, resource in (("get", "secrets"), ("list", "secrets"), ("create", "pods")):
            check = kubectl("auth", "can-i", verb, resource, "--as", identity, "-A")
            assert check.stdout.strip() == "no", (verb, resource, check.stdout)
        for verb, resource in (("create", "jobs"), ("delete", "services"), ("patch", "events")):
            elsewhere = kubectl("auth", "can-i", verb, resource, "--as", identity, "-n", "default")
            expected = "no" if served or verb == "patch" else "yes"
            assert elsewhere.stdout.strip() == expected, (verb, resource, elsewhere.stdout)
        here = kubectl("auth", "can-i", "create", "jobs", "--as", identity, "-n", namespace)
        assert here.stdout.strip() == "yes", here.stdout
        kubeconfig = _token_kubeconfig(devcluster, kubectl, namespace, sa, tmp_path / "sa")
        with EmulatorThread(EmulatorConfig(operation_latency_seconds=0.2)) as emulator:
            config = OperatorConfig(
                project="dws-sandbox",
                location="us-east5",
                cluster="sandbox",
                gke_endpoint=emulator.endpoint,
                compute_endpoint=emulator.compute_endpoint,
                kueue=KueueMode.DISABLED,
                namespaces=(namespace,) if served else (),
            )
            scenario = Scenario(api, namespace, emulator)
            with OperatorThread(config, kubeconfig=kubeconfig):
                scenario.create(tpu("v6e", "2x4"))
                scenario.job()
                scenario.mark_pods("Succeeded", 2)
                scenario.wait_phase("Succeeded")
                eventually(scenario.at_zero, timeout=15, what="scale to zero")
                # Events are posted by the operator's identity too.
                eventually(lambda: "Succeeded" in scenario.events(), what="the Succeeded Event")
                scenario.delete()
                eventually(lambda: scenario.get() is None, what="the finalizer released")
        denied = k8s.CoreV1Api(_client(kubeconfig))
        with pytest.raises(k8s.ApiException) as raised:
            denied.list_namespaced_secret(namespace)
        assert raised.value.status == 403
    finally:
        helm("uninstall", release, "--namespace", namespace)


def _service(name: str, owned: bool, labelled: bool, owner: str = "r") -> str:
    metadata: dict[str, Any] = {"name": name}
    if labelled:
        metadata["labels"] = {REQUEST_LABEL: "r"}
    if owned:
        metadata["ownerReferences"] = [
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "TrainingRequest",
                "name": owner,
                "uid": str(uuid.uuid4()),
            }
        ]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": metadata}
    service["spec"] = {"clusterIP": "None", "selector": {"a": "b"}}
    return json.dumps(service)


def test_the_operator_scope_policy_lets_it_touch_only_requests_objects(
    helm: Helm, kubectl: Kubectl, training_request_crd: str, namespace: str
) -> None:
    """The chart's operator-scope admission policy: as the operator's ServiceAccount,
    a Service without the request label or a TrainingRequest owner is refused, and so is
    anything in kube-system; one labelled and owned is made. Others are not limited."""
    release = f"scope-{uuid.uuid4().hex[:6]}"
    installed = helm("install", release, str(CHART), "--namespace", namespace, *GKE_VALUES)
    assert installed.returncode == 0, installed.stderr
    identity = f"system:serviceaccount:{namespace}:{release}-dws-operator"

    def create(
        manifest: str, where: str, who: str | None = identity
    ) -> subprocess.CompletedProcess[str]:
        acting = ("--as", who) if who else ()
        return kubectl(
            "create", "--dry-run=server", "-n", where, *acting, "-f", "-", stdin=manifest
        )

    try:
        bare = _service("bare", owned=False, labelled=False)
        refused = eventually(
            lambda: (r := create(bare, namespace)).returncode != 0 and r,
            timeout=60,
            what="the operator-scope policy in force",
        )
        assert f"{release}-dws-operator-scope" in refused.stderr, refused.stderr
        assert "touches only objects labelled" in refused.stderr, refused.stderr
        unowned = create(_service("unowned", owned=False, labelled=True), namespace)
        assert "the TrainingRequest its label names owns" in unowned.stderr, unowned.stderr
        stranger = create(_service("stranger", owned=True, labelled=True, owner="other"), namespace)
        assert "the TrainingRequest its label names owns" in stranger.stderr, stranger.stderr
        ours = _service("ours", owned=True, labelled=True)
        made = create(ours, namespace)
        assert made.returncode == 0, made.stderr
        system = create(ours, "kube-system")
        assert "nothing in kube-system" in system.stderr, system.stderr
        # Not the operator (the cluster's admin): the policy does not apply.
        assert create(bare, namespace, who=None).returncode == 0
    finally:
        helm("uninstall", release, "--namespace", namespace)


def _client(kubeconfig: Path) -> k8s.ApiClient:
    from kubernetes import config as k8s_config  # noqa: PLC0415

    return k8s_config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]


def _objects(helm: Helm, *extra: str) -> dict[tuple[str, str], dict[str, object]]:
    rendered = helm("template", "ha", str(CHART), "--namespace", "dws-system", *GKE_VALUES, *extra)
    assert rendered.returncode == 0, rendered.stderr
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered.stdout) if d}


def test_chart_runs_two_replicas_with_one_leader(helm: Helm) -> None:
    objects = _objects(helm)
    deployment = objects[("Deployment", "ha-dws-operator")]
    spec = deployment["spec"]
    assert isinstance(spec, dict)
    assert spec["replicas"] == 2
    assert "strategy" not in spec  # Kubernetes' RollingUpdate: the Lease hands over
    pod = spec["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["DWS_LEADER_ELECT"]["value"] == "true"
    assert env["DWS_LEASE_NAME"]["value"] == "ha-dws-operator"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    selector = spec["selector"]["matchLabels"]
    [term] = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == selector
    budget = objects[("PodDisruptionBudget", "ha-dws-operator")]
    assert budget["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": selector}}
    # Leases in its own namespace, its own Lease only beyond creating it.
    role = objects[("Role", "ha-dws-operator-leader-election")]
    assert role["metadata"]["namespace"] == "dws-system"  # type: ignore[index]
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["ha-dws-operator"],
            "verbs": ["get", "update"],
        },
    ]
    binding = objects[("RoleBinding", "ha-dws-operator-leader-election")]
    assert binding["roleRef"]["name"] == "ha-dws-operator-leader-election"  # type: ignore[index]
    cluster_role = objects[("ClusterRole", "ha-dws-operator")]
    assert all("leases" not in r["resources"] for r in cluster_role["rules"])  # type: ignore[attr-defined]


def test_chart_with_one_replica_has_no_budget(helm: Helm) -> None:
    objects = _objects(helm, "--set", "replicaCount=1")
    assert ("PodDisruptionBudget", "ha-dws-operator") not in objects
    assert objects[("Deployment", "ha-dws-operator")]["spec"]["replicas"] == 1  # type: ignore[index]


def test_chart_never_runs_two_acting_replicas(helm: Helm) -> None:
    # Without leader election every replica acts: more than one is refused at render...
    two = helm("template", "ha", str(CHART), *GKE_VALUES, "--set", "leaderElection.enabled=false")
    assert two.returncode == 1
    assert "replicaCount=2 with leaderElection.enabled=false" in two.stderr
    # ...and the one there is goes before its replacement starts (a rolling update would
    # run both).
    alone: dict[Any, Any] = _objects(
        helm, "--set", "leaderElection.enabled=false", "--set", "replicaCount=1"
    )
    assert alone[("Deployment", "ha-dws-operator")]["spec"]["strategy"] == {"type": "Recreate"}
    # With leader election, replicas take turns on the Lease: a rolling update is safe.
    elected: dict[Any, Any] = _objects(helm)
    assert "strategy" not in elected[("Deployment", "ha-dws-operator")]["spec"]


def test_chart_serves_metrics_and_ships_the_dashboard(helm: Helm) -> None:
    default: dict[Any, Any] = _objects(helm)
    service = default[("Service", "ha-dws-operator-metrics")]
    assert service["spec"]["ports"] == [
        {"name": "metrics", "port": 8081, "targetPort": "metrics", "protocol": "TCP"}
    ]
    pod = default[("Deployment", "ha-dws-operator")]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["DWS_METRICS_PORT"], env["DWS_LOG_FORMAT"]) == ("8081", "text")
    assert {"name": "metrics", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    # Off by default: the ServiceMonitor (and never without its CRD) and the dashboard.
    assert not [k for k in default if k[0] in ("ServiceMonitor", "ConfigMap")]
    wanted = ["--set", "metrics.serviceMonitor.enabled=true"]
    wanted += ["--set", "metrics.dashboard.enabled=true"]
    assert not [k for k in _objects(helm, *wanted) if k[0] == "ServiceMonitor"]
    crd = "monitoring.coreos.com/v1/ServiceMonitor"
    on: dict[Any, Any] = _objects(helm, *wanted, "--api-versions", crd)
    monitor = on[("ServiceMonitor", "ha-dws-operator")]
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "interval": "30s"}]
    dashboard = on[("ConfigMap", "ha-dws-operator-dashboard")]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dashboard["data"]["dws-operator.json"]) == json.loads(dashboard_json())
    off: dict[Any, Any] = _objects(helm, "--set", "metrics.enabled=false")
    assert ("Service", "ha-dws-operator-metrics") not in off
    pod = off[("Deployment", "ha-dws-operator")]["spec"]["template"]["spec"]
    assert {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}[
        "DWS_METRICS_PORT"
    ] == "0"


def test_chart_refuses_metrics_on_the_health_port(helm: Helm) -> None:
    clash = helm("template", "ha", str(CHART), *GKE_VALUES, "--set", "metrics.port=8080")
    assert clash.returncode == 1
    assert "metrics.port and healthPort must differ" in clash.stderr


def _operator_settings(helm: Helm, *extra: str) -> OperatorConfig:
    """The settings the chart's Deployment gives the operator, read as it reads them."""
    objects: dict[Any, Any] = _objects(helm, *extra)
    pod = objects[("Deployment", "ha-dws-operator")]["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}
    return OperatorConfig.from_env(env)


def test_chart_node_settings_reach_the_operator(helm: Helm) -> None:
    assert _operator_settings(helm).pool_defaults == PoolDefaults()
    account = "dws-nodes@my-project.iam.gserviceaccount.com"
    values = {
        "nodes": {
            "serviceAccount": account,
            "oauthScopes": [
                "https://www.googleapis.com/auth/devstorage.read_only",
                "https://www.googleapis.com/auth/logging.write",
            ],
            "workloadMetadata": "GCE_METADATA",
            "labels": {"team": "ml", "cost-center": "research"},
            "tags": ["dws-nodes", "allow-egress"],
            "diskType": "hyperdisk-balanced",
            "diskSizeGb": 200,
            "imageStreaming": True,
        }
    }
    config = _operator_settings(helm, "--set-json", f"nodes={json.dumps(values['nodes'])}")
    assert config.pool_defaults == PoolDefaults(
        service_account=account,
        oauth_scopes=(
            "https://www.googleapis.com/auth/devstorage.read_only",
            "https://www.googleapis.com/auth/logging.write",
        ),
        workload_metadata="GCE_METADATA",
        labels=(("cost-center", "research"), ("team", "ml")),
        tags=("dws-nodes", "allow-egress"),
        disk_type="hyperdisk-balanced",
        disk_size_gb=200,
        image_streaming=True,
    )


@pytest.mark.parametrize(
    ("setting", "words"),
    [
        ("nodes.serviceAccount=nodes", "/nodes/serviceAccount"),
        ("nodes.workloadMetadata=SECURE", "/nodes/workloadMetadata"),
        ("nodes.diskType=pd-extreme", "/nodes/diskType"),
        ("nodes.diskSizeGb=5", "/nodes/diskSizeGb"),
        ("nodes.tags={Bad_Tag}", "/nodes/tags/0"),
        # Helm names a wrong path for a bad property name; the name itself is right.
        ("nodes.labels.Team=ml", "'Team' does not match pattern"),
        ("nodes.oauthScopes={cloud-platform}", "/nodes/oauthScopes/0"),
    ],
)
def test_chart_refuses_bad_node_settings(helm: Helm, setting: str, words: str) -> None:
    result = helm("template", "t", str(CHART), *GKE_VALUES, "--set", setting)
    assert result.returncode != 0
    assert words in result.stderr, result.stderr
