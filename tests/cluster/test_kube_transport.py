"""The operator's own connection to a real API server: its refusals as typed errors, a
pod's service-account login, and a token that stopped working renewed on the 401."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dws_operator.controller import kube as kube_module
from dws_operator.controller.kube import Conflict, Connection, Invalid, KubeApi, Listed, NotFound
from dws_operator.kubekit.login import in_cluster, log_in
from dws_operator.kubekit.transport import ApiError
from dws_operator.workload import REQUEST_LABEL
from dws_workshop.devcluster import DevCluster
from tests.polling import eventually


@pytest.fixture
def token(api: k8s.ApiClient, namespace: str) -> str:
    """A token of a ServiceAccount allowed to read and write ConfigMaps in `namespace`."""
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "edit",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
        },
    )
    # The API server's authorizer learns of a new binding from its watch, a moment later.
    review = {
        "spec": {
            "user": f"system:serviceaccount:{namespace}:reader",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
            "resourceAttributes": {
                "namespace": namespace,
                "verb": "list",
                "resource": "configmaps",
            },
        }
    }
    authorization = k8s.AuthorizationV1Api(api)
    eventually(
        lambda: authorization.create_subject_access_review(review).status.allowed,
        what="the reader's binding in effect",
    )
    return str(
        core.create_namespaced_service_account_token(
            "reader", namespace, {"spec": {"expirationSeconds": 3600}}
        ).status.token
    )


def _configmaps(namespace: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/configmaps" + (f"/{name}" if name else "")


def test_refusals_arrive_typed(devcluster: DevCluster, namespace: str) -> None:
    async def main() -> list[tuple[type[ApiError], int, str]]:
        api = await Connection.open(str(devcluster.kubeconfig))
        kube = KubeApi(api)
        seen = []
        body = {"metadata": {"name": "one"}, "data": {"k": "v"}}
        try:
            await kube.call("POST", _configmaps(namespace), body=body)
            calls = [
                ("GET", _configmaps(namespace, "absent"), None),
                ("POST", _configmaps(namespace), body),
                ("POST", _configmaps(namespace), {"metadata": {"name": "Not_A_Name"}}),
                ("GET", "/apis/no.such.group/v1/things", None),
            ]
            for method, path, payload in calls:
                try:
                    await kube.call(method, path, body=payload)
                except ApiError as error:
                    seen.append((type(error), error.status, error.message))
        finally:
            await api.close()
        return seen

    (absent, exists, invalid, unknown) = asyncio.run(main())
    assert absent[:2] == (NotFound, 404)
    assert absent[2] == 'configmaps "absent" not found'  # the server's own words
    assert exists[:2] == (Conflict, 409)
    assert invalid[:2] == (Invalid, 422)
    assert "Not_A_Name" in invalid[2]
    assert unknown[:2] == (NotFound, 404)


def test_a_pods_service_account_logs_in(
    devcluster: DevCluster,
    namespace: str,
    token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    admin = asyncio.run(log_in(str(devcluster.kubeconfig)))
    assert admin.ca_data is not None
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(admin.ca_data)
    (tmp_path / "namespace").write_text(namespace)
    host, port = admin.server.removeprefix("https://").rsplit(":", 1)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    login = in_cluster(tmp_path)
    assert login.namespace == namespace

    async def main() -> tuple[list[str], int]:
        api = Connection(login, None, connections=1)
        try:
            listed = await KubeApi(api).call("GET", _configmaps(namespace))
            try:  # the service account may not read other namespaces
                await KubeApi(api).call("GET", _configmaps("kube-system"))
            except ApiError as error:
                return [i["metadata"]["name"] for i in listed["items"]], error.status
        finally:
            await api.close()
        raise AssertionError("read kube-system without the right to")

    names, refused = asyncio.run(main())
    assert "kube-root-ca.crt" in names
    assert refused == 403


def test_a_refused_token_is_read_again_once(
    devcluster: DevCluster, namespace: str, token: str, tmp_path: Path
) -> None:
    admin = asyncio.run(log_in(str(devcluster.kubeconfig)))
    assert admin.ca_data is not None
    (tmp_path / "ca.crt").write_bytes(admin.ca_data)
    token_file = tmp_path / "token"
    token_file.write_text("revoked")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        f"""
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{admin.server}", certificate-authority: ca.crt}}}}]
users: [{{name: u, user: {{tokenFile: token}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )

    async def main() -> tuple[str | None, int, str | None]:
        api = await Connection.open(str(kubeconfig), connections=1)
        first = api.login
        try:
            try:
                await KubeApi(api).call("GET", _configmaps(namespace))
            except ApiError as error:  # the file still holds a token the server refuses
                refused = error.status
            token_file.write_text(token)  # what the kubelet does when it rotates a token
            await KubeApi(api).call("GET", _configmaps(namespace))
            return first.token, refused, api.login.token
        finally:
            await api.close()

    before, refused, after = asyncio.run(main())
    assert (before, refused) == ("revoked", 401)
    assert after == token


def test_a_listing_comes_a_page_at_a_time(
    api: k8s.ApiClient, devcluster: DevCluster, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = k8s.CoreV1Api(api)
    for index in range(5):
        core.create_namespaced_service(
            namespace,
            {
                "metadata": {"name": f"s{index}", "labels": {REQUEST_LABEL: "r"}},
                "spec": {"clusterIP": "None", "selector": {"app": "none"}},
            },
        )
    core.create_namespaced_service(
        namespace, {"metadata": {"name": "unlabelled"}, "spec": {"clusterIP": "None"}}
    )
    monkeypatch.setattr(kube_module, "LIST_PAGE", 2)

    async def main() -> tuple[list[Listed], list[str]]:
        api = await Connection.open(str(devcluster.kubeconfig))
        kube = KubeApi(api)
        try:
            pages = [page async for page in kube.snapshots("services", REQUEST_LABEL, (namespace,))]
            names = [
                item["metadata"]["name"]
                async for item in kube.listing("services", REQUEST_LABEL, (namespace,))
            ]
            return pages, names
        finally:
            await api.close()

    pages, names = asyncio.run(main())
    assert [len(page.items) for page in pages] == [2, 2, 1]
    # Every page of one list is at the list's version.
    assert len({page.version for page in pages}) == 1
    assert pages[0].version is not None
    assert sorted(names) == [f"s{index}" for index in range(5)]


def test_a_delete_by_uid_leaves_a_newer_namesake(
    devcluster: DevCluster, api: k8s.ApiClient, namespace: str
) -> None:
    # The Service the operator knew was deleted and another made under its name (by
    # anyone): a delete naming the first one's uid leaves the second alone.
    core = k8s.CoreV1Api(api)
    service = {"metadata": {"name": "namesake"}, "spec": {"ports": [{"port": 80}]}}
    first = core.create_namespaced_service(namespace, service).metadata.uid
    core.delete_namespaced_service("namesake", namespace)
    second = core.create_namespaced_service(namespace, service).metadata.uid

    async def main() -> tuple[bool, bool]:
        connection = await Connection.open(str(devcluster.kubeconfig))
        kube = KubeApi(connection)
        try:
            stale = await kube.delete("services", namespace, "namesake", first)
            left = core.read_namespaced_service("namesake", namespace).metadata.uid == second
            assert await kube.delete("services", namespace, "namesake", second)
            return stale, left
        finally:
            await connection.close()

    assert asyncio.run(main()) == (False, True)
