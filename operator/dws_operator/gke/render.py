"""The GKE NodePool for a planned slice: pure, no I/O.

Every field comes from `SlicePlan.node_pool` (GKE's node pool settings for each mode, as
the catalog encodes them); this module only translates that plan into the API's types.
Fields the plan leaves unset stay unset so GKE applies its own defaults. The operator's
node settings (`PoolDefaults`: service account, scopes, metadata mode, extra labels,
tags, boot disk, image streaming) are the same for every pool and come on top.
"""

from __future__ import annotations

from google.cloud import container_v1
from google.protobuf import duration_pb2

from dws_operator.catalog import ReservationAffinity
from dws_operator.catalog.tpu import boot_disk_types
from dws_operator.gke.labels import merge_labels, owned_by, pool_labels
from dws_operator.gke.pool_defaults import PoolDefaults
from dws_operator.planning import NodePoolSettings, SlicePlan

__all__ = ["PoolDefaults", "owned_by", "pool_labels", "render_node_pool"]

NodePool = container_v1.NodePool

_PLACEMENT_TYPES = {"COMPACT": NodePool.PlacementPolicy.Type.COMPACT}
_RESERVATION_TYPES = {
    ReservationAffinity.NO_RESERVATION: container_v1.ReservationAffinity.Type.NO_RESERVATION,
    ReservationAffinity.SPECIFIC_RESERVATION: (
        container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    ),
}
_DRIVER = container_v1.GPUDriverInstallationConfig.GPUDriverVersion
_DRIVER_VERSIONS = {
    "DEFAULT": _DRIVER.DEFAULT,
    "LATEST": _DRIVER.LATEST,
    "INSTALLATION_DISABLED": _DRIVER.INSTALLATION_DISABLED,
}
_METADATA = container_v1.WorkloadMetadataConfig.Mode
_METADATA_MODES = {"GKE_METADATA": _METADATA.GKE_METADATA, "GCE_METADATA": _METADATA.GCE_METADATA}
_LOCATION_POLICIES = {
    "ANY": container_v1.NodePoolAutoscaling.LocationPolicy.ANY,
    "BALANCED": container_v1.NodePoolAutoscaling.LocationPolicy.BALANCED,
}


def render_node_pool(
    plan: SlicePlan,
    *,
    name: str,
    labels: dict[str, str],
    workload_policy: str | None = None,
    defaults: PoolDefaults | None = None,
) -> NodePool:
    """The node pool GKE must create for `plan`, named `name` and carrying `labels`.

    `workload_policy` names the Compute workload policy (policies.py) that places a
    multi-host slice instead of a compact placement: tpu7x slices need one. The pool
    then carries only `placement_policy.policy_name`, as GKE's own tooling sends it
    (`--placement-policy`; xpk): no COMPACT type, which asks for the compact placement
    tpu7x refuses, and no `tpu_topology`, which GKE reads from the policy.

    `defaults` are the operator's node settings; None renders none of them (GKE's
    defaults: the Compute Engine default service account among them). Its extra labels
    join `labels` on both the nodes and the VMs; a key of both is an error.
    """
    settings = plan.node_pool
    pool = NodePool(
        name=name,
        config=_node_config(settings, labels, defaults),
        initial_node_count=settings.initial_node_count,
        autoscaling=_autoscaling(settings),
        locations=list(settings.zones),
    )
    if settings.auto_repair is not None:
        # Auto-upgrade is stated explicitly: a NodeManagement message replaces GKE's
        # defaults wholesale, and release-channel clusters reject pools without it.
        pool.management = container_v1.NodeManagement(
            auto_repair=settings.auto_repair, auto_upgrade=True
        )
    if settings.queued_provisioning:
        pool.queued_provisioning = NodePool.QueuedProvisioning(enabled=True)
    if workload_policy is not None:
        if not workload_policy:
            raise ValueError("workload_policy must be a resource policy name, got ''")
        if settings.placement_policy is None:
            raise ValueError(
                f"workload policy {workload_policy!r} given for a slice without placement "
                "(single-host or not a TPU): GKE refuses a topology for single-host slices"
            )
        pool.placement_policy = NodePool.PlacementPolicy(policy_name=workload_policy)
    elif settings.placement_policy is not None:
        if settings.placement_policy.type == "WORKLOAD_POLICY":
            raise ValueError(
                f"a {settings.placement_policy.tpu_topology} slice of {plan.accelerator} is "
                "placed by a workload policy: pass its name as workload_policy"
            )
        pool.placement_policy = NodePool.PlacementPolicy(
            type_=_PLACEMENT_TYPES[settings.placement_policy.type],
            tpu_topology=settings.placement_policy.tpu_topology,
        )
    return pool


def _node_config(
    settings: NodePoolSettings, labels: dict[str, str], defaults: PoolDefaults | None
) -> container_v1.NodeConfig:
    merged = merge_labels(labels, defaults.label_map if defaults else {})
    config = container_v1.NodeConfig(
        machine_type=settings.machine_type,
        labels=dict(merged),
        resource_labels=dict(merged),
    )
    if defaults is not None:
        _apply_defaults(config, defaults)
    if settings.flex_start:
        config.flex_start = True
    if settings.spot:
        config.spot = True
    if settings.max_run_duration_seconds is not None:
        config.max_run_duration = duration_pb2.Duration(seconds=settings.max_run_duration_seconds)
    if settings.accelerator_type is not None:
        accelerator = container_v1.AcceleratorConfig(
            accelerator_count=settings.accelerator_count or 0,
            accelerator_type=settings.accelerator_type,
        )
        if settings.gpu_driver_version is not None:
            # Left unset, GKE installs no driver and the nodes never offer nvidia.com/gpu.
            accelerator.gpu_driver_installation_config = container_v1.GPUDriverInstallationConfig(
                gpu_driver_version=_DRIVER_VERSIONS[settings.gpu_driver_version]
            )
        config.accelerators = [accelerator]
    affinity = settings.reservation_affinity
    if affinity is not None:
        config.reservation_affinity = container_v1.ReservationAffinity(
            consume_reservation_type=_RESERVATION_TYPES[affinity.consume_reservation_type],
            key=affinity.key or "",
            values=list(affinity.values),
        )
    return config


def _apply_defaults(config: container_v1.NodeConfig, defaults: PoolDefaults) -> None:
    if defaults.service_account is not None:
        config.service_account = defaults.service_account
    if defaults.scopes:
        config.oauth_scopes = list(defaults.scopes)
    config.workload_metadata_config = container_v1.WorkloadMetadataConfig(
        mode=_METADATA_MODES[defaults.workload_metadata]
    )
    config.tags = list(defaults.tags)
    allowed = boot_disk_types(config.machine_type)
    if defaults.disk_type is not None and (not allowed or defaults.disk_type in allowed):
        # A TPU machine series boots from one disk type only (v6e: hyperdisk-balanced;
        # v4, v5e, v5p: pd-balanced): the operator-wide type is left out where GKE would
        # refuse it, so GKE's default for that series applies.
        config.disk_type = defaults.disk_type
    if defaults.disk_size_gb is not None:
        config.disk_size_gb = defaults.disk_size_gb
    if defaults.image_streaming:
        config.gcfs_config = container_v1.GcfsConfig(enabled=True)


def _autoscaling(settings: NodePoolSettings) -> container_v1.NodePoolAutoscaling:
    plan = settings.autoscaling
    policy = container_v1.NodePoolAutoscaling.LocationPolicy
    autoscaling = container_v1.NodePoolAutoscaling(
        enabled=plan.enabled,
        # Unspecified leaves GKE's default (BALANCED).
        location_policy=_LOCATION_POLICIES.get(
            plan.location_policy or "", policy.LOCATION_POLICY_UNSPECIFIED
        ),
    )
    if plan.total:
        # GKE takes either the per-zone or the total limits, never both.
        autoscaling.total_min_node_count = plan.min_node_count
        autoscaling.total_max_node_count = plan.max_node_count
    else:
        autoscaling.min_node_count = plan.min_node_count
        autoscaling.max_node_count = plan.max_node_count
    return autoscaling
