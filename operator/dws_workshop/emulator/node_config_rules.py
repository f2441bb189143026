"""GKE's checks on a new pool's node identity, boot disk and image streaming.

Called once from `rules.validate_new_pool`, after the placement and GPU checks; the
first broken rule wins. Each refusal is INVALID_ARGUMENT naming the request field.
GKE's own wording was found for none of them: every message is ours (our assumption),
the rule itself is sourced. The pool is kept as sent (GetNodePool returns these fields
as they were created); GKE's own defaults (100 GB pd-balanced disk, COS_CONTAINERD,
the `default` service account) are not filled in.

Each rule's id, wording and source are rows of RULES.md (GKE-NODE-*, GKE-TPU-BOOT-DISK-TYPE).

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
            rule="GKE-NODE-SERVICE-ACCOUNT",
        )
    if config.workload_metadata_config.mode == _GKE_METADATA and not cluster.workload_pool:
        raise invalid(
            "node_pool.config.workload_metadata_config.mode",
            f"GKE_METADATA requires Workload Identity on cluster {cluster.name}; enable it "
            "(workload_identity_config.workload_pool) or use GCE_METADATA",
            rule="GKE-NODE-GKE-METADATA-NEEDS-WI",
        )
    _check_disk(config)
    for index, tag in enumerate(config.tags):
        if not _RFC1035_RE.match(tag):
            raise invalid(
                f"node_pool.config.tags[{index}]",
                f"{tag!r} does not comply with RFC1035: lowercase letters, digits and "
                "hyphens, starting with a letter, at most 63 characters",
                rule="GKE-NODE-TAG-RFC1035",
            )
    image = config.image_type.upper()
    if config.gcfs_config.enabled and image and image != _IMAGE_STREAMING_IMAGE:
        raise invalid(
            "node_pool.config.gcfs_config.enabled",
            f"image streaming needs image type {_IMAGE_STREAMING_IMAGE}, got {config.image_type}",
            rule="GKE-NODE-IMAGE-STREAMING-COS",
        )


def _check_disk(config: container_v1.NodeConfig) -> None:
    size = config.disk_size_gb
    if size and size < MIN_DISK_SIZE_GB:
        raise invalid(
            "node_pool.config.disk_size_gb",
            f"the smallest allowed disk size is {MIN_DISK_SIZE_GB}GB, got {size}GB",
            rule="GKE-NODE-DISK-MIN-SIZE",
        )
    disk = config.disk_type
    if not disk:
        return
    if disk not in BOOT_DISK_TYPES:
        raise invalid(
            "node_pool.config.disk_type",
            f"{disk!r} is not a boot disk type; use one of {', '.join(BOOT_DISK_TYPES)}",
            rule="GKE-NODE-BOOT-DISK-TYPE",
        )
    for prefix, allowed in _TPU_BOOT_DISKS.items():
        if config.machine_type.startswith(prefix) and disk not in allowed:
            raise invalid(
                "node_pool.config.disk_type",
                f"machine type {config.machine_type} does not support boot disk type "
                f"{disk}; use {' or '.join(allowed)}",
                rule="GKE-TPU-BOOT-DISK-TYPE",
            )
