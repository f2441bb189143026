"""The operator's login: kubeconfigs as kubectl reads them (merged files, relative paths,
embedded or file credentials, exec plugins), a pod's service account, and a clear
refusal of what it does not do."""

from __future__ import annotations

import asyncio
import base64
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from dws_operator import rfc3339
from dws_operator.controller.kube import KubeApi
from dws_operator.kubekit import login as login_module
from dws_operator.kubekit.login import Login, LoginError, in_cluster, log_in
from dws_operator.kubekit.transport import Connection

PLUGIN = """
import json, os, sys
info = json.loads(os.environ["KUBERNETES_EXEC_INFO"])
print(json.dumps({
    "apiVersion": info["apiVersion"],
    "kind": "ExecCredential",
    "status": {
        "token": os.environ["TOKEN"] + ":" + str(info["spec"]["interactive"]),
        "expirationTimestamp": sys.argv[1],
    },
}))
"""


def _config(
    users: dict[str, Any],
    current: str | None = "main",
    server: str = "https://10.0.0.1:6443",
    cluster: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": name, "user": user} for name, user in users.items()],
        "contexts": [
            {"name": name, "context": {"cluster": "c", "user": name, "namespace": "team"}}
            for name in users
        ],
        **({"current-context": current} if current else {}),
    }


def _write(path: Path, config: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _log_in(kubeconfig: str) -> Login:
    return asyncio.run(log_in(kubeconfig))


def test_embedded_certificates_and_token(tmp_path: Path) -> None:
    user = {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode(),
        "token": "t0k",
    }
    cluster = {"certificate-authority-data": base64.b64encode(b"CA").decode()}
    login = _log_in(_write(tmp_path / "k", _config({"main": user}, cluster=cluster)))
    assert login == Login(
        server="https://10.0.0.1:6443",
        ca_data=b"CA",
        certificate_data=b"CERT",
        private_key_data=b"KEY",
        token="t0k",
        namespace="team",
    )
    assert not login.due(rfc3339.now() + timedelta(days=365))  # a static token never is


def test_files_are_read_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "pki").mkdir()
    for name, content in (("ca.crt", b"CA"), ("me.crt", b"CERT"), ("me.key", b"KEY")):
        (tmp_path / "pki" / name).write_bytes(content)
    (tmp_path / "token").write_text("from-file\n")
    user = {"client-certificate": "pki/me.crt", "client-key": "pki/me.key", "tokenFile": "token"}
    cluster = {"certificate-authority": "pki/ca.crt", "insecure-skip-tls-verify": False}
    login = _log_in(_write(tmp_path / "k", _config({"main": user}, cluster=cluster)))
    assert (login.ca_data, login.certificate_data, login.private_key_data) == (
        b"CA",
        b"CERT",
        b"KEY",
    )
    assert login.token == "from-file"
    # A token file may be rewritten at any time: read again within a minute. It does not
    # expire then (kopf, told of an expiry, would drop its watches at each re-read).
    assert (login.expires_at, login.reread_at is not None) == (None, True)
    assert login.due(rfc3339.now() + timedelta(seconds=60))
    assert "from-file" not in repr(login)  # secrets stay out of logs and tracebacks
    assert "KEY" not in repr(login)


def test_merged_files_first_one_wins(tmp_path: Path) -> None:
    first = _config({"main": {"token": "first"}})
    second = _config({"main": {"token": "second"}, "other": {"token": "o"}}, current="other")
    paths = [
        _write(tmp_path / "a", first),
        str(tmp_path / "missing"),
        _write(tmp_path / "b", second),
    ]
    login = _log_in(":".join(paths))
    # current-context from the first file that sets it, users from the first defining them
    assert login.token == "first"
    del first["current-context"]
    _write(tmp_path / "a", first)
    assert _log_in(":".join(paths)).token == "o"


def test_kubeconfig_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", _write(tmp_path / "k", _config({"main": {"token": "env"}})))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.9")  # a kubeconfig named wins
    assert asyncio.run(log_in()).token == "env"


def test_exec_plugin_credential_and_expiry(tmp_path: Path) -> None:
    (tmp_path / "plugin.py").write_text(PLUGIN)
    expires = "2030-01-02T03:04:05Z"
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1",
            "command": sys.executable,
            "args": [str(tmp_path / "plugin.py"), expires],
            "env": [{"name": "TOKEN", "value": "from-plugin"}],
        }
    }
    login = _log_in(_write(tmp_path / "k", _config({"main": user})))
    assert login.token == "from-plugin:False"  # told it may not ask anyone anything
    assert login.expires_at == rfc3339.parse(expires)
    assert not login.due(rfc3339.parse("2030-01-02T03:03:00Z"))
    assert login.due(rfc3339.parse("2030-01-02T03:03:40Z"))  # renewed 30 s ahead


@pytest.mark.parametrize(
    ("user", "words"),
    [
        (
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1alpha1", "command": "x"}},
            "v1alpha1",
        ),
        (
            {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/no/such"}},
            "exec plugin /no/such",
        ),
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": ["-c", "import sys; sys.exit(3)"],
                }
            },
            "exited 3",
        ),
        (
            {
                "exec": {
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": sys.executable,
                    "args": ["-c", "print('hello')"],
                }
            },
            "no ExecCredential status",
        ),
        ({"auth-provider": {"name": "gcp"}}, "gke-gcloud-auth-plugin"),
        ({"tokenFile": "/no/such/token"}, "cannot read /no/such/token"),
        ({"client-key-data": "not base64!"}, "client-key-data is not base64"),
        # Impersonation is refused, never ignored: ignoring it would act with the login's
        # own rights instead of the identity asked for.
        ({"token": "t", "as": "deployer"}, r"impersonates \(as\)"),
        ({"token": "t", "as-groups": ["ml"], "as-uid": "1"}, r"impersonates \(as-groups, as-uid\)"),
    ],
)
def test_what_it_cannot_use_is_refused_by_name(
    tmp_path: Path, user: dict[str, Any], words: str
) -> None:
    with pytest.raises(LoginError, match=words):
        _log_in(_write(tmp_path / "k", _config({"main": user})))


def test_a_plugin_that_never_answers_is_given_up_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It blocks on a pipe nobody writes to: no answer ever, whatever the machine's speed.
    monkeypatch.setattr(login_module, "EXEC_TIMEOUT_SECONDS", 0.2)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": sys.executable,
            "args": ["-c", "import os; r, w = os.pipe(); os.read(r, 1)"],
        }
    }
    with pytest.raises(LoginError, match=r"gave no credential in 0\.2s"):
        _log_in(_write(tmp_path / "k", _config({"main": user})))


@pytest.mark.parametrize(
    ("config", "words"),
    [
        (_config({"main": {}}, current=None), "no current-context"),
        (_config({"main": {}}, current="elsewhere"), "context 'elsewhere' is not defined"),
        (_config({"main": {}}, server=""), "has no server"),
        # A quoted "false" is not false: read as truth it would switch TLS checks off.
        (
            _config({"main": {"token": "t"}}, cluster={"insecure-skip-tls-verify": "false"}),
            "insecure-skip-tls-verify must be true or false, not 'false'",
        ),
        ("- a list", "is not a mapping"),
        ("a: [", "is not YAML"),
    ],
)
def test_broken_kubeconfigs_are_refused(tmp_path: Path, config: Any, words: str) -> None:
    path = tmp_path / "k"
    path.write_text(config if isinstance(config, str) else json.dumps(config))
    with pytest.raises(LoginError, match=words):
        _log_in(str(path))


def test_tls_checks_stay_on_unless_switched_off_by_a_boolean(tmp_path: Path) -> None:
    def insecure(cluster: dict[str, Any], name: str) -> bool:
        config = _config({"main": {"token": "t"}}, cluster=cluster)
        return _log_in(_write(tmp_path / name, config)).insecure

    assert insecure({}, "unset") is False
    assert insecure({"insecure-skip-tls-verify": False}, "off") is False
    assert insecure({"insecure-skip-tls-verify": True}, "on") is True


def test_service_account_in_a_pod(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "token").write_text("sa-token\n")
    (tmp_path / "ca.crt").write_bytes(b"CA")
    (tmp_path / "namespace").write_text("ops")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    login = in_cluster(tmp_path)
    assert (login.server, login.token, login.ca_data, login.namespace) == (
        "https://[fd00::1]:443",
        "sa-token",
        b"CA",
        "ops",
    )
    assert login.due(rfc3339.now() + timedelta(seconds=60))  # the kubelet rotates it


def test_nowhere_to_log_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(LoginError, match="set KUBECONFIG or pass --kubeconfig"):
        asyncio.run(log_in())


def test_a_login_to_nowhere_is_a_connection_error_not_a_hang(tmp_path: Path) -> None:
    async def main() -> None:
        api = Connection(Login(server="https://127.0.0.1:9"), None, connections=1)
        try:
            await KubeApi(api).call("GET", "/version")
        finally:
            await api.close()

    with pytest.raises(OSError, match=r"127\.0\.0\.1"):
        asyncio.run(main())
