"""One login path for kopf and the operator's own client: any kubeconfig the official
client accepts, here one whose user is an exec credential plugin (as GKE's
gke-gcloud-auth-plugin is), with a ServiceAccount token from the real API server."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from dws_operator.controller import OperatorConfig, OperatorThread
from dws_workshop.devcluster import DevCluster
from tests.builders import gpu
from tests.cluster.operator.harness import Scenario

PLUGIN = """
import json, sys
with open(sys.argv[2], "a") as calls:
    calls.write("called\\n")
print(json.dumps({
    "apiVersion": "client.authentication.k8s.io/v1",
    "kind": "ExecCredential",
    "status": {"token": open(sys.argv[1]).read().strip()},
}))
"""


@pytest.fixture
def exec_kubeconfig(
    devcluster: DevCluster, api: k8s.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[tuple[Path, Path]]:
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "login"}})
    binding = f"{namespace}-login"
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "cluster-admin",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "login", "namespace": namespace}],
        }
    )
    token = core.create_namespaced_service_account_token(
        "login", namespace, {"spec": {"expirationSeconds": 3600}}
    ).status.token
    (tmp_path / "token").write_text(token)
    (tmp_path / "plugin.py").write_text(PLUGIN)
    calls = tmp_path / "calls"
    admin = yaml.safe_load(devcluster.kubeconfig.read_text())
    cluster = admin["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [
            {
                "name": "plugin",
                "user": {
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": sys.executable,
                        "args": [
                            str(tmp_path / "plugin.py"),
                            str(tmp_path / "token"),
                            str(calls),
                        ],
                        "interactiveMode": "Never",
                    }
                },
            }
        ],
        "contexts": [{"name": "plugin", "context": {"cluster": cluster["name"], "user": "plugin"}}],
        "current-context": "plugin",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(config))
    try:
        yield path, calls
    finally:
        rbac.delete_cluster_role_binding(binding)


def test_an_exec_credential_plugin_logs_both_clients_in(
    exec_kubeconfig: tuple[Path, Path],
    training_request_crd: str,
    operator_config: OperatorConfig,
    scenario: Scenario,
) -> None:
    kubeconfig, calls = exec_kubeconfig
    with OperatorThread(operator_config, kubeconfig=kubeconfig):
        scenario.create(gpu("nvidia-l4", nodes=1, count=1), mode="Spot")
        # kopf's watch saw the request and our client wrote its status and made its Job
        # (right after the status: the pass writes that first).
        scenario.wait_phase("WaitingForCapacity", timeout=60)
        assert len(scenario.created_pools()) == 1
        scenario.job()  # exactly one
    # Both clients got their token from the plugin: kopf's login and the operator's own.
    assert len(calls.read_text().splitlines()) >= 2
