"""Node settings the operator gives every node pool it creates: pure, no I/O.

Who the nodes are (their Google service account, its OAuth scopes, how pods reach the
metadata server), what they carry (extra labels, network tags) and their boot disk and
image streaming. They are operator-wide: a request cannot change them, so one security
review covers every pool.

Sources (read 2026-11-27):
- CIS GKE Benchmark 5.2.1: nodes should not run as the Compute Engine default service
  account; GKE uses it when `NodeConfig.service_account` is unset.
- GKE API reference, `google.container.v1.NodeConfig` (google-cloud-container 2.67.0):
  `service_account` is an email, `disk_size_gb` is at least 10, `tags` comply with
  RFC 1035; `WorkloadMetadataConfig.GKE_METADATA` needs Workload Identity on the cluster.
- GKE "Access scopes": with a custom service account GKE's default scope is
  `https://www.googleapis.com/auth/cloud-platform`, IAM then decides what nodes may do.
- GKE "Configuring a custom boot disk": boot disk types pd-balanced (the default since
  1.24), pd-standard, pd-ssd and hyperdisk-balanced.
- GKE "Use Image streaming": needs the Container-Optimized OS with containerd image.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, get_args

from dws_operator.gke.labels import LABEL_PREFIX, MAX_LABEL_LENGTH

__all__ = [
    "BOOT_DISK_TYPES",
    "CLOUD_PLATFORM_SCOPE",
    "MIN_DISK_SIZE_GB",
    "PoolDefaults",
    "PoolDefaultsError",
    "WorkloadMetadataMode",
    "default_service_account_warning",
    "parse_pool_defaults",
]

CLOUD_PLATFORM_SCOPE = "https://www.googleapis.com/auth/cloud-platform"
#: OAuth scopes are sent to GKE as URLs (gcloud's aliases such as `gke-default` are
#: expanded by gcloud, not by the API).
SCOPE_PREFIX = "https://www.googleapis.com/auth/"
WorkloadMetadataMode = Literal["GKE_METADATA", "GCE_METADATA"]
WORKLOAD_METADATA_MODES: tuple[WorkloadMetadataMode, ...] = get_args(WorkloadMetadataMode)
BOOT_DISK_TYPES = ("pd-balanced", "pd-standard", "pd-ssd", "hyperdisk-balanced")
MIN_DISK_SIZE_GB = 10
#: Our bound (Compute's largest boot disk is far above it): a typo such as 10000000
#: is refused here rather than by GKE.
MAX_DISK_SIZE_GB = 65536

#: An IAM service account email (NAME@PROJECT.iam.gserviceaccount.com, or a Google-managed
#: account's domain); GKE's API also takes `default`, which is what unset means here.
_EMAIL_RE = re.compile(r"^[a-z0-9][-a-z0-9._]*@[a-z0-9][-a-z0-9.]*\.[a-z]{2,}$")
#: RFC 1035 labels, as GKE requires of network tags.
_TAG_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
#: Valid as a GCE label key and a Kubernetes label name (labels.py's shared rules).
_LABEL_KEY_RE = re.compile(r"^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?)?$")


class PoolDefaultsError(ValueError):
    """A node setting that GKE would refuse, or that the operator cannot honour."""


@dataclass(frozen=True)
class PoolDefaults:
    """What every node pool the operator creates gets, whatever its request.

    Unset fields (None, empty) leave GKE's own default.
    """

    #: The nodes' Google service account; None: the Compute Engine default one.
    service_account: str | None = None
    #: The scopes asked for; empty: see `scopes`.
    oauth_scopes: tuple[str, ...] = ()
    #: GKE_METADATA: pods reach the GKE metadata server (Workload Identity), never the
    #: node's own credentials. GCE_METADATA exposes the node's service account to pods.
    workload_metadata: WorkloadMetadataMode = "GKE_METADATA"
    #: Extra labels, as (key, value) pairs sorted by key; the operator's own win.
    labels: tuple[tuple[str, str], ...] = ()
    tags: tuple[str, ...] = ()
    disk_type: str | None = None
    disk_size_gb: int | None = None
    image_streaming: bool = False

    def __post_init__(self) -> None:
        _check(self)

    @property
    def label_map(self) -> dict[str, str]:
        return dict(self.labels)

    @property
    def scopes(self) -> tuple[str, ...]:
        """The OAuth scopes sent: those asked for; else `cloud-platform` for the nodes'
        own service account (Google's advice: IAM alone then limits it); else none, so
        GKE's default scopes apply. `cloud-platform` on the Compute Engine default
        account (often the project's Editor) would hand that to anything on the nodes
        that reaches their metadata server, host-network pods included."""
        if self.oauth_scopes:
            return self.oauth_scopes
        return (CLOUD_PLATFORM_SCOPE,) if self.service_account is not None else ()


def default_service_account_warning(defaults: PoolDefaults) -> str | None:
    """The start-up warning for nodes without their own service account, else None."""
    if defaults.service_account is not None:
        return None
    return (
        "DWS_NODE_SERVICE_ACCOUNT is not set: node pools are created without a service "
        "account, so their nodes run as the Compute Engine default service account (CIS "
        "GKE Benchmark 5.2.1 says not to); set it to a least-privilege account with "
        "roles/container.defaultNodeServiceAccount"
    )


def parse_pool_defaults(get: Callable[[str, str], str | None]) -> PoolDefaults:
    """The node settings from `get(flag_key, ENV_NAME)` (None: not given).

    Raises PoolDefaultsError naming the variable and what it expects.
    """
    account = _text(get("node_service_account", "DWS_NODE_SERVICE_ACCOUNT"))
    scopes_text = get("node_oauth_scopes", "DWS_NODE_OAUTH_SCOPES")
    scopes = _items(scopes_text or "")
    if scopes_text and scopes_text.strip() and not scopes:
        raise PoolDefaultsError(
            f"DWS_NODE_OAUTH_SCOPES is empty; expected comma-separated scope URLs such as "
            f"{CLOUD_PLATFORM_SCOPE}, or unset"
        )
    mode = _text(get("node_workload_metadata", "DWS_NODE_WORKLOAD_METADATA")) or "GKE_METADATA"
    mode = mode.upper()
    if mode not in WORKLOAD_METADATA_MODES:
        raise PoolDefaultsError(
            f"DWS_NODE_WORKLOAD_METADATA={mode!r} is not valid; use GKE_METADATA (Workload "
            "Identity on the nodes) or GCE_METADATA"
        )
    labels = _labels(get("node_labels", "DWS_NODE_LABELS") or "")
    tags = _items(get("node_tags", "DWS_NODE_TAGS") or "")
    disk_type = _text(get("node_disk_type", "DWS_NODE_DISK_TYPE"))
    size_text = _text(get("node_disk_size_gb", "DWS_NODE_DISK_SIZE_GB"))
    size = None if size_text is None else _disk_size(size_text)
    streaming_text = _text(get("node_image_streaming", "DWS_NODE_IMAGE_STREAMING")) or "false"
    if streaming_text.lower() not in ("true", "false"):
        raise PoolDefaultsError(
            f"DWS_NODE_IMAGE_STREAMING={streaming_text!r} is not valid; use true or false"
        )
    return PoolDefaults(
        service_account=account,
        oauth_scopes=scopes,
        workload_metadata=mode,
        labels=labels,
        tags=tags,
        disk_type=disk_type,
        disk_size_gb=size,
        image_streaming=streaming_text.lower() == "true",
    )


def _check(defaults: PoolDefaults) -> None:
    account = defaults.service_account
    if account is not None and not _EMAIL_RE.match(account):
        raise PoolDefaultsError(
            f"DWS_NODE_SERVICE_ACCOUNT={account!r} is not valid; expected a service "
            "account email such as nodes@my-project.iam.gserviceaccount.com"
        )
    for scope in defaults.oauth_scopes:
        if not scope.startswith(SCOPE_PREFIX) or len(scope) == len(SCOPE_PREFIX):
            raise PoolDefaultsError(
                f"DWS_NODE_OAUTH_SCOPES: {scope!r} is not a scope URL; expected "
                f"{SCOPE_PREFIX}NAME such as {CLOUD_PLATFORM_SCOPE} (gcloud's aliases are "
                "not understood by the API)"
            )
    if defaults.workload_metadata not in WORKLOAD_METADATA_MODES:
        raise PoolDefaultsError(
            f"DWS_NODE_WORKLOAD_METADATA={defaults.workload_metadata!r} is not valid; use "
            "GKE_METADATA or GCE_METADATA"
        )
    keys = [key for key, _ in defaults.labels]
    if keys != sorted(set(keys)):
        raise PoolDefaultsError("DWS_NODE_LABELS: each key once (pairs sorted by key)")
    for key, value in defaults.labels:
        _check_label(key, value)
    for tag in defaults.tags:
        if not _TAG_RE.match(tag):
            raise PoolDefaultsError(
                f"DWS_NODE_TAGS: {tag!r} is not a valid network tag; expected RFC 1035: "
                "lowercase letters, digits and hyphens, starting with a letter, at most 63"
            )
    if len(set(defaults.tags)) != len(defaults.tags):
        raise PoolDefaultsError("DWS_NODE_TAGS: a tag is listed twice")
    if defaults.disk_type is not None and defaults.disk_type not in BOOT_DISK_TYPES:
        raise PoolDefaultsError(
            f"DWS_NODE_DISK_TYPE={defaults.disk_type!r} is not valid; GKE boot disks are "
            f"{', '.join(BOOT_DISK_TYPES)}"
        )
    size = defaults.disk_size_gb
    if size is not None and not MIN_DISK_SIZE_GB <= size <= MAX_DISK_SIZE_GB:
        raise PoolDefaultsError(
            f"DWS_NODE_DISK_SIZE_GB={size} is not valid; expected whole GB from "
            f"{MIN_DISK_SIZE_GB} (GKE's smallest) to {MAX_DISK_SIZE_GB}"
        )


def _check_label(key: str, value: str) -> None:
    if key.startswith(LABEL_PREFIX):
        # Refused rather than overridden: a label the operator reads (owner uid, shape)
        # set by configuration would hand pools to the wrong request.
        raise PoolDefaultsError(
            f"DWS_NODE_LABELS: {key!r} is reserved: keys starting with {LABEL_PREFIX!r} "
            "are the operator's own"
        )
    if not _LABEL_KEY_RE.match(key):
        raise PoolDefaultsError(
            f"DWS_NODE_LABELS: key {key!r} is not valid; expected at most "
            f"{MAX_LABEL_LENGTH} lowercase letters, digits, '_' and '-', starting with a "
            "letter and ending with a letter or digit (valid as a GCE and a Kubernetes label)"
        )
    if not _LABEL_VALUE_RE.match(value):
        raise PoolDefaultsError(
            f"DWS_NODE_LABELS: value {value!r} of {key!r} is not valid; expected at most "
            f"{MAX_LABEL_LENGTH} lowercase letters, digits, '_' and '-', starting and "
            "ending with a letter or digit"
        )


def _text(value: str | None) -> str | None:
    return (value.strip() or None) if value is not None else None


def _items(text: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _labels(text: str) -> tuple[tuple[str, str], ...]:
    pairs: dict[str, str] = {}
    for item in _items(text):
        key, equals, value = item.partition("=")
        if not equals:
            raise PoolDefaultsError(
                f"DWS_NODE_LABELS: {item!r} is not key=value; expected comma-separated "
                "key=value pairs such as team=ml,cost-center=research"
            )
        key, value = key.strip(), value.strip()
        if key in pairs:
            raise PoolDefaultsError(f"DWS_NODE_LABELS: key {key!r} is given twice")
        pairs[key] = value
    return tuple(sorted(pairs.items()))


def _disk_size(text: str) -> int:
    if not text.isdigit():
        raise PoolDefaultsError(
            f"DWS_NODE_DISK_SIZE_GB={text!r} is not valid; expected whole GB from "
            f"{MIN_DISK_SIZE_GB} to {MAX_DISK_SIZE_GB}"
        )
    return int(text)
