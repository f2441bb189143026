"""GKE's checks on a new pool's node identity, boot disk and image streaming.

Called once from `rules.validate_new_pool`, after the placement and GPU checks; the
first broken rule wins. Each refusal is INVALID_ARGUMENT naming the request field.
GKE's own wording was found for none of them: every message is ours (our assumption),
the rule itself is sourced. The pool is kept as sent (GetNodePool returns these fields
as they were created); GKE's own defaults (100 GB pd-balanced disk, COS_CONTAINERD,
the `default` service account) are not filled in.

Rules, for RULES.md (every source read 2026-11-27; "API reference" is the GKE API's
`google.container.v1` reference as google-cloud-container 2.67.0 ships it, in
`container_v1/types/cluster_service.py`):

- `node_pool.config.service_account`: an email address, or `default`. Source: API
  reference, `NodeConfig.service_account` ("Specify the email address of the Service
  Account; otherwise ... the "default" service account is used").
- `node_pool.config.workload_metadata_config.mode`: `GKE_METADATA` needs Workload
  Identity on the cluster (`workload_identity_config.workload_pool` set; the emulator's
  `ClusterConfig.workload_identity`). Source: API reference,
  `WorkloadMetadataConfig.Mode.GKE_METADATA` ("This feature can only be enabled if
  Workload Identity is enabled at the cluster level"); xpk enables the
  `PROJECT.svc.id.goog` pool before it creates pools with `--workload-metadata=GKE_METADATA`
  (AI-Hypercomputer/xpk `src/xpk/core/cluster.py`, `src/xpk/core/nodepool.py`). The
  message is our assumption: no public issue quoting GKE's was found.
- `node_pool.config.disk_size_gb`: at least 10 (0: GKE's default, 100). Source: API
  reference, `NodeConfig.disk_size_gb` ("The smallest allowed disk size is 10GB").
- `node_pool.config.disk_type`: pd-balanced, pd-standard, pd-ssd or hyperdisk-balanced
  (unset: GKE's default). Source: GKE "Configuring a custom boot disk"
  (https://cloud.google.com/kubernetes-engine/docs/how-to/custom-boot-disks), the
  `--disk-type` values; Cluster Toolkit allows the same four
  (`modules/scheduler/gke-cluster/variables.tf`).
- `node_pool.config.disk_type`: TPU v6e (`ct6e-*`) boots only from hyperdisk-balanced.
  Source: Cloud TPU "Attach durable block storage to a TPU VM"
  (https://cloud.google.com/tpu/docs/setup-persistent-disk), table "TPU support for
  Hyperdisk and Persistent Disk": v6e takes Hyperdisk Balanced and Hyperdisk ML, the
  boot disk included; of GKE's boot disk types only hyperdisk-balanced is one. Cluster
  Toolkit's v6e blueprint sets `disk_type: hyperdisk-balanced`
  (`examples/gke-tpu-v6e/gke-tpu-v6e.yaml`).
- `node_pool.config.disk_type`: TPU v3, v4, v5e and v5p (`ct3-`, `ct3p-`, `ct4p-`,
  `ct5lp-`, `ct5p-`) boot only from pd-balanced. Source: the same Cloud TPU table
  ("Balanced Persistent Disk" for each).
- `node_pool.config.tags[i]`: RFC 1035 names. Source: API reference, `NodeConfig.tags`
  ("Each tag within the list must comply with RFC1035").
- `node_pool.config.gcfs_config.enabled`: image streaming needs `COS_CONTAINERD` (an
  unset `image_type` is GKE's default, that image). Source: GKE "Use Image streaming to
  pull container images"
  (https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming),
  Requirements: "You must use the Container-Optimized OS with containerd node image".

Not encoded, for want of a primary source found: tpu7x's boot disk types, the A3/A4
and C3/C4/N4 series' (Hyperdisk-only series are reported by users, e.g.
hashicorp/terraform-provider-google#19890 for n4, but no GKE text was found), whether
the service account exists, and OAuth scope values.
"""

from __future__ import annotations

import re

from google.cloud import container_v1

from dws_workshop.emulator.config import ClusterConfig
from dws_workshop.emulator.status import invalid

__all__ = ["BOOT_DISK_TYPES", "MIN_DISK_SIZE_GB", "check_node_config"]

BOOT_DISK_TYPES = ("pd-balanced", "pd-standard", "pd-ssd", "hyperdisk-balanced")
MIN_DISK_SIZE_GB = 10
#: Machine type prefix -> the only boot disk types its TPU VMs take.
_TPU_BOOT_DISKS: dict[str, tuple[str, ...]] = {
    "ct6e-": ("hyperdisk-balanced",),
    "ct5p-": ("pd-balanced",),
    "ct5lp-": ("pd-balanced",),
    "ct4p-": ("pd-balanced",),
    "ct3p-": ("pd-balanced",),
    "ct3-": ("pd-balanced",),
}
_EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_RFC1035_RE = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
_IMAGE_STREAMING_IMAGE = "COS_CONTAINERD"
_GKE_METADATA = container_v1.WorkloadMetadataConfig.Mode.GKE_METADATA


def check_node_config(config: container_v1.NodeConfig, cluster: ClusterConfig) -> None:
    """Raise the INVALID_ARGUMENT GKE answers for these node settings, if any."""
    account = config.service_account
    if account and account != "default" and not _EMAIL_RE.match(account):
        raise invalid(
            "node_pool.config.service_account",
            f"{account!r} is not a service account email (NAME@PROJECT.iam.gserviceaccount"
            ".com) nor 'default'",
        )
    if config.workload_metadata_config.mode == _GKE_METADATA and not cluster.workload_pool:
        raise invalid(
            "node_pool.config.workload_metadata_config.mode",
            f"GKE_METADATA requires Workload Identity on cluster {cluster.name}; enable it "
            "(workload_identity_config.workload_pool) or use GCE_METADATA",
        )
    _check_disk(config)
    for index, tag in enumerate(config.tags):
        if not _RFC1035_RE.match(tag):
            raise invalid(
                f"node_pool.config.tags[{index}]",
                f"{tag!r} does not comply with RFC1035: lowercase letters, digits and "
                "hyphens, starting with a letter, at most 63 characters",
            )
    image = config.image_type.upper()
    if config.gcfs_config.enabled and image and image != _IMAGE_STREAMING_IMAGE:
        raise invalid(
            "node_pool.config.gcfs_config.enabled",
            f"image streaming needs image type {_IMAGE_STREAMING_IMAGE}, got {config.image_type}",
        )


def _check_disk(config: container_v1.NodeConfig) -> None:
    size = config.disk_size_gb
    if size and size < MIN_DISK_SIZE_GB:
        raise invalid(
            "node_pool.config.disk_size_gb",
            f"the smallest allowed disk size is {MIN_DISK_SIZE_GB}GB, got {size}GB",
        )
    disk = config.disk_type
    if not disk:
        return
    if disk not in BOOT_DISK_TYPES:
        raise invalid(
            "node_pool.config.disk_type",
            f"{disk!r} is not a boot disk type; use one of {', '.join(BOOT_DISK_TYPES)}",
        )
    for prefix, allowed in _TPU_BOOT_DISKS.items():
        if config.machine_type.startswith(prefix) and disk not in allowed:
            raise invalid(
                "node_pool.config.disk_type",
                f"machine type {config.machine_type} does not support boot disk type "
                f"{disk}; use {' or '.join(allowed)}",
            )
