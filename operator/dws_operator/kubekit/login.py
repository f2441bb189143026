"""Who the operator is to the API server: one login, used by its own client and by kopf.

In a pod: the pod's service account (its projected token is rotated by the kubelet,
so it is read again every minute). Elsewhere: the kubeconfig (KUBECONFIG, files merged
as kubectl merges them, or `--kubeconfig`), its current context: the server and its CA
(file or embedded), client certificates (file or embedded), a token or token file, or an
exec credential plugin such as `gke-gcloud-auth-plugin` (run again when its credential
expires). Anything else is refused by name rather than half-understood.

Read here, as client-go reads it, rather than by the `kubernetes` package's loader,
whose reading (checked in its release 37.0.2, `config/kube_config.py` and
`config/exec_provider.py`) differs from client-go where it matters for security and for
an unattended operator: it takes `insecure-skip-tls-verify: "false"` (a string) as true
and turns certificate checks off, ignores impersonation (`as`, `as-groups`), lets the
last of several files set the current context where client-go keeps the first, logs an
exec plugin's failure and goes on without credentials, and waits for a hung plugin for
ever. Each of those is a test of this module. Memory is not the reason: the package
importable costs the operator about 5 MiB (README, "Performance").
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from dws_operator import rfc3339

__all__ = ["SERVICE_ACCOUNT_DIR", "Login", "LoginError", "log_in"]

#: Where a pod finds its service account's token, CA and namespace.
SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")

#: A token read from a file is trusted this long: the kubelet rewrites a projected token
#: well before it expires, and a file named in a kubeconfig may change at any time.
TOKEN_FILE_SECONDS = 60.0

#: An exec plugin's credential is renewed this long before it says it expires.
EXPIRY_MARGIN_SECONDS = 30.0

#: An exec plugin that has not answered in this long is not going to (client-go waits
#: as long as the plugin runs; a hung one would stall every call behind the login).
EXEC_TIMEOUT_SECONDS = 60.0

#: The ExecCredential versions client-go speaks (v1alpha1 is gone from it).
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class LoginError(Exception):
    """No way to log in: no service account and no usable kubeconfig, or one asking for
    something this operator does not do."""


@dataclass(frozen=True)
class Login:
    """One set of credentials: good until `expires_at` (an exec plugin's word; None: until
    refused), to be read again at `reread_at` (a token file may change at any time)."""

    server: str
    ca_data: bytes | None = None
    insecure: bool = False
    certificate_data: bytes | None = None
    private_key_data: bytes | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    expires_at: datetime | None = None
    reread_at: datetime | None = None
    namespace: str | None = None
    #: Where the credentials came from, for log lines.
    source: str = field(default="", compare=False)

    def credentials(self) -> tuple[str | None, bytes | None, bytes | None, bytes | None, bool]:
        """What is shown to the server: the token, then what TLS is set up with."""
        return (
            self.token,
            self.certificate_data,
            self.private_key_data,
            self.ca_data,
            self.insecure,
        )

    def due(self, now: datetime) -> bool:
        """Time to log in again."""
        if self.reread_at is not None and now >= self.reread_at:
            return True
        if self.expires_at is None:
            return False
        return now >= self.expires_at - timedelta(seconds=EXPIRY_MARGIN_SECONDS)


async def log_in(kubeconfig: str | None = None) -> Login:
    """The credentials to use now: the kubeconfig named (or KUBECONFIG's), else the pod's
    service account when running in one, else ~/.kube/config."""
    if kubeconfig:
        return await _from_kubeconfig(_files(kubeconfig))
    if os.environ.get("KUBECONFIG"):
        return await _from_kubeconfig(_files(os.environ["KUBECONFIG"]))
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster()
    default = Path.home() / ".kube" / "config"
    if default.exists():
        return await _from_kubeconfig([default])
    raise LoginError("not in a pod and no kubeconfig: set KUBECONFIG or pass --kubeconfig")


def in_cluster(directory: Path = SERVICE_ACCOUNT_DIR) -> Login:
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise LoginError("KUBERNETES_SERVICE_HOST is not set: not running in a pod")
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    namespace = directory / "namespace"
    return Login(
        server=server,
        ca_data=_read(directory / "ca.crt"),
        token=_read(directory / "token").decode().strip(),
        reread_at=rfc3339.now() + timedelta(seconds=TOKEN_FILE_SECONDS),
        namespace=namespace.read_text().strip() if namespace.exists() else None,
        source=f"service account ({directory})",
    )


def _files(paths: str) -> list[Path]:
    return [Path(p).expanduser() for p in paths.split(os.pathsep) if p]


@dataclass
class _Merged:
    """kubectl's merge of several files: the first file to set a name or value wins."""

    current: str | None = None
    clusters: dict[str, tuple[Mapping[str, Any], Path]] = field(default_factory=dict)
    users: dict[str, tuple[Mapping[str, Any], Path]] = field(default_factory=dict)
    contexts: dict[str, Mapping[str, Any]] = field(default_factory=dict)

    def add(self, path: Path) -> None:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except OSError as error:
            raise LoginError(f"kubeconfig {path}: {error.strerror or error}") from error
        except yaml.YAMLError as error:
            raise LoginError(f"kubeconfig {path} is not YAML: {error}") from error
        if not isinstance(document, dict):
            raise LoginError(f"kubeconfig {path} is not a mapping")
        self.current = self.current or document.get("current-context") or None
        base = path.parent
        for entry in document.get("clusters") or []:
            self.clusters.setdefault(str(entry.get("name")), (entry.get("cluster") or {}, base))
        for entry in document.get("users") or []:
            self.users.setdefault(str(entry.get("name")), (entry.get("user") or {}, base))
        for entry in document.get("contexts") or []:
            self.contexts.setdefault(str(entry.get("name")), entry.get("context") or {})


#: A kubeconfig user's impersonation fields (client-go's AuthInfo).
_IMPERSONATION = frozenset({"as", "as-uid", "as-groups", "as-user-extra"})


async def _from_kubeconfig(paths: list[Path]) -> Login:
    merged = _Merged()
    for path in paths:
        if path.exists() or len(paths) == 1:
            merged.add(path)
    where = os.pathsep.join(str(p) for p in paths)
    if not merged.current:
        raise LoginError(f"kubeconfig {where} has no current-context")
    context = merged.contexts.get(merged.current)
    if context is None:
        raise LoginError(f"kubeconfig {where}: context {merged.current!r} is not defined")
    cluster_name, user_name = str(context.get("cluster")), str(context.get("user") or "")
    if cluster_name not in merged.clusters:
        raise LoginError(f"kubeconfig {where}: cluster {cluster_name!r} is not defined")
    cluster, cluster_base = merged.clusters[cluster_name]
    user, user_base = merged.users.get(user_name, ({}, Path(".")))
    server = str(cluster.get("server") or "")
    if not server:
        raise LoginError(f"kubeconfig {where}: cluster {cluster_name!r} has no server")
    insecure = cluster.get("insecure-skip-tls-verify", False)
    if not isinstance(insecure, bool):
        # kubectl refuses a string here too (it cannot unmarshal it into a bool); read as
        # Python truth, a quoted "false" would turn certificate checks off.
        raise LoginError(
            f"kubeconfig {where}: cluster {cluster_name!r}: insecure-skip-tls-verify must be "
            f"true or false, not {insecure!r}"
        )
    impersonating = sorted(set(user) & _IMPERSONATION)
    if impersonating:
        # Ignoring them would act with the login's own (often broader) rights instead of
        # the identity the kubeconfig asks for.
        raise LoginError(
            f"kubeconfig {where}: user {user_name!r} impersonates ({', '.join(impersonating)}), "
            "which the operator does not do; give it the identity to act as directly"
        )
    login = Login(
        server=server.rstrip("/"),
        ca_data=_data(cluster, "certificate-authority", cluster_base),
        insecure=insecure,
        certificate_data=_data(user, "client-certificate", user_base),
        private_key_data=_data(user, "client-key", user_base),
        namespace=context.get("namespace") or None,
        source=f"kubeconfig {where}, context {merged.current}",
    )
    if user.get("token"):
        return _with(login, token=str(user["token"]))
    if user.get("tokenFile"):
        token = _read(_resolve(str(user["tokenFile"]), user_base)).decode().strip()
        expires = rfc3339.now() + timedelta(seconds=TOKEN_FILE_SECONDS)
        return _with(login, token=token, reread_at=expires)
    if user.get("exec"):
        return await _exec(login, user["exec"], user_base, cluster)
    unsupported = sorted(set(user) & {"auth-provider", "username", "password"})
    if unsupported:
        raise LoginError(
            f"kubeconfig {where}: user {user_name!r} logs in with {', '.join(unsupported)}, "
            "which current Kubernetes releases no longer accept; use an exec plugin "
            "(for GKE, gke-gcloud-auth-plugin)"
        )
    return login


def _with(login: Login, **changes: Any) -> Login:
    return Login(**{**login.__dict__, **changes})


def _resolve(path: str, base: Path) -> Path:
    candidate = Path(path).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise LoginError(f"cannot read {path}: {error.strerror or error}") from error


def _data(section: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    """`key-data` (base64) or the file `key` names (relative to the kubeconfig)."""
    if section.get(f"{key}-data"):
        try:
            return base64.b64decode(str(section[f"{key}-data"]), validate=True)
        except ValueError as error:
            raise LoginError(f"{key}-data is not base64: {error}") from error
    if section.get(key):
        return _read(_resolve(str(section[key]), base))
    return None


async def _exec(
    login: Login, spec: Mapping[str, Any], base: Path, cluster: Mapping[str, Any]
) -> Login:
    """Run an exec credential plugin as client-go does, and take its credential."""
    api_version = str(spec.get("apiVersion") or "")
    if api_version not in EXEC_API_VERSIONS:
        raise LoginError(
            f"exec plugin apiVersion {api_version!r}; supported: {', '.join(EXEC_API_VERSIONS)}"
        )
    command = str(spec.get("command") or "")
    if not command:
        raise LoginError("exec plugin without a command")
    if "/" in command and not Path(command).is_absolute():
        command = str(base / command)  # client-go resolves such paths from the file
    request: dict[str, Any] = {
        "apiVersion": api_version,
        "kind": "ExecCredential",
        "spec": {"interactive": False},
    }
    if spec.get("provideClusterInfo"):
        request["spec"]["cluster"] = {
            "server": login.server,
            "certificate-authority-data": base64.b64encode(login.ca_data or b"").decode(),
            "insecure-skip-tls-verify": login.insecure,
        } | ({"config": cluster["extensions"]} if cluster.get("extensions") else {})
    environment = dict(os.environ)
    try:
        environment.update({str(e["name"]): str(e["value"]) for e in spec.get("env") or []})
    except (KeyError, TypeError) as error:
        raise LoginError(f"exec plugin {command}: env entries need a name and a value") from error
    environment["KUBERNETES_EXEC_INFO"] = json.dumps(request)
    try:
        process = await asyncio.create_subprocess_exec(
            command,
            *[str(a) for a in spec.get("args") or []],
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=environment,
        )
    except OSError as error:
        hint = f"; {spec['installHint']}" if spec.get("installHint") else ""
        raise LoginError(f"exec plugin {command}: {error.strerror or error}{hint}") from error
    try:
        out, err = await asyncio.wait_for(process.communicate(), EXEC_TIMEOUT_SECONDS)
    except TimeoutError:
        raise LoginError(
            f"exec plugin {command} gave no credential in {EXEC_TIMEOUT_SECONDS:g}s"
        ) from None
    finally:
        if process.returncode is None:
            process.kill()  # timed out, or the call waiting for it was cancelled
            await process.wait()  # reaped, not left to the garbage collector
    if process.returncode != 0:
        raise LoginError(
            f"exec plugin {command} exited {process.returncode}: {err.decode(errors='replace')}"
        )
    try:
        status = json.loads(out)["status"]
    except (ValueError, KeyError, TypeError) as error:
        raise LoginError(f"exec plugin {command} printed no ExecCredential status") from error
    expires = status.get("expirationTimestamp")
    certificate = status.get("clientCertificateData")
    key = status.get("clientKeyData")
    return _with(
        login,
        token=status.get("token") or None,
        certificate_data=certificate.encode() if certificate else login.certificate_data,
        private_key_data=key.encode() if key else login.private_key_data,
        expires_at=_expiry(command, expires),
    )


def _expiry(command: str, stamp: object) -> datetime | None:
    if not stamp:
        return None
    try:
        moment = rfc3339.parse(str(stamp))
    except ValueError as error:
        raise LoginError(f"exec plugin {command}: expirationTimestamp {stamp!r}") from error
    if moment.tzinfo is None:
        raise LoginError(f"exec plugin {command}: expirationTimestamp {stamp!r} has no offset")
    return moment
