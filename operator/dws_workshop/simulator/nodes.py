"""The Kubernetes Node GKE registers for a VM of a node pool: pure, no I/O.

Labels, taints and resources are the ones GKE sets: the pool name, the accelerator
(`gke-tpu-accelerator` + `gke-tpu-topology`, or `gke-accelerator`), the provisioning
mode (flex-start, spot; queued: the taint `cloud.google.com/gke-queued`, never the
label, which a node has only when its pool's NodeConfig asks for it), zone and machine
type, plus the labels of the pool's NodeConfig. Allocatable is the machine's capacity
minus GKE's kubelet and system reservations. A GPU node offers `nvidia.com/gpu` only
once a driver runs: GKE installs one when the pool asks for DEFAULT or LATEST (and
labels the node `cloud.google.com/gke-gpu-driver-version`); with no driver installation
configured, or INSTALLATION_DISABLED, the node comes up without the resource, as GKE's
do until the user installs a driver. Every node is annotated `kwok.x-k8s.io/node: fake`
so kwok plays its kubelet (see `stages`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from google.cloud import container_v1

from dws_operator import rfc3339
from dws_operator.catalog import (
    GPU_ACCELERATOR_LABEL_KEY,
    GPU_DRIVER_LABEL_KEY,
    GPU_RESOURCE,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    NODE_POOL_LABEL_KEY,
    TPU_ACCELERATOR_LABEL_KEY,
    TPU_RESOURCE,
    TPU_TAINT_KEY,
    TPU_TAINT_VALUE,
    TPU_TOPOLOGY_LABEL_KEY,
    topology_chips,
)
from dws_operator.catalog.modes import FLEX_START_LABEL_KEY, QUEUED_TAINT_KEY, SPOT_LABEL_KEY
from dws_workshop.emulator.ruleids import behaviour
from dws_workshop.emulator.rules import tpu_machine

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
PROVISIONING_LABEL_KEY = "cloud.google.com/gke-provisioning"
MAX_RUN_DURATION_LABEL_KEY = "cloud.google.com/gke-max-run-duration-seconds"
TERMINATION_ANNOTATION = "node.gke.io/machine-termination-datetime"
HOSTNAME_LABEL_KEY = "kubernetes.io/hostname"
ZONE_LABEL_KEY = "topology.kubernetes.io/zone"
REGION_LABEL_KEY = "topology.kubernetes.io/region"
INSTANCE_TYPE_LABEL_KEY = "node.kubernetes.io/instance-type"
#: GKE Standard's default maximum of pods per node.
MAX_PODS = 110

#: vCPUs and GiB of memory of the accelerator machine types (Compute Engine docs).
#: tpu7x figures are uncertain.
MACHINES: dict[str, tuple[int, int]] = {
    "ct6e-standard-1t": (44, 176),
    "ct6e-standard-4t": (180, 720),
    "ct6e-standard-8t": (180, 1440),
    "ct5lp-hightpu-1t": (24, 48),
    "ct5lp-hightpu-4t": (112, 192),
    "ct5lp-hightpu-8t": (224, 384),
    "ct5p-hightpu-4t": (208, 448),
    "ct4p-hightpu-4t": (240, 407),
    "tpu7x-standard-1t": (56, 240),
    "tpu7x-standard-4t": (224, 960),
    "a2-megagpu-16g": (96, 1360),
    "a3-megagpu-8g": (208, 1872),
    "a3-ultragpu-8g": (224, 2952),
    "a4-highgpu-8g": (224, 3968),
    "a4x-highgpu-4g": (140, 884),
}
#: Families whose size grows with the GPU count: (vCPUs, GiB) per GPU.
_PER_GPU = {"a2-highgpu": (12, 85), "a2-ultragpu": (12, 170), "a3-highgpu": (26, 234)}
#: General-purpose shapes: GiB per vCPU.
_GIB_PER_CPU = {"standard": 4, "highmem": 8, "highcpu": 1}
_GPU_MACHINE_RE = re.compile(r"^([a-z0-9]+-[a-z]+)-(\d+)g$")
_GENERAL_RE = re.compile(r"^[a-z0-9]+-([a-z]+)-(\d+)$")
_DEFAULT_MACHINE = (4, 16)


def machine_size(machine_type: str) -> tuple[int, int]:
    """(vCPUs, GiB of memory) of a machine type; 4 vCPUs and 16 GiB when unknown."""
    if machine_type in MACHINES:
        return MACHINES[machine_type]
    gpu = _GPU_MACHINE_RE.match(machine_type)
    if gpu and gpu.group(1) in _PER_GPU:
        cpus, gib = _PER_GPU[gpu.group(1)]
        count = int(gpu.group(2))
        return cpus * count, gib * count
    general = _GENERAL_RE.match(machine_type)
    if general and general.group(1) in _GIB_PER_CPU:
        cpus = int(general.group(2))
        return cpus, cpus * _GIB_PER_CPU[general.group(1)]
    return _DEFAULT_MACHINE


def _tiered(amount: float, tiers: list[tuple[float, float]], rest: float) -> float:
    """Sum of `share * slice` over (slice size, share) tiers, `rest` for what is left."""
    reserved = 0.0
    for size, share in tiers:
        part = min(amount, size)
        reserved += part * share
        amount -= part
        if amount <= 0:
            return reserved
    return reserved + amount * rest


def allocatable_cpu_millis(cpus: int) -> int:
    """GKE reserves 6% of the first core, 1% of the next, 0.5% of the next 2, 0.25% above."""
    reserved = _tiered(cpus * 1000, [(1000, 0.06), (1000, 0.01), (2000, 0.005)], 0.0025)
    return cpus * 1000 - math.ceil(reserved)


def allocatable_memory_mib(gib: int) -> int:
    """GKE reserves 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8,
    6% of the next 112 and 2% above 128 GiB, plus a 100 MiB eviction threshold."""
    mib = gib * 1024
    reserved = _tiered(
        mib, [(4 * 1024, 0.25), (4 * 1024, 0.20), (8 * 1024, 0.10), (112 * 1024, 0.06)], 0.02
    )
    return mib - math.ceil(reserved) - 100


@dataclass(frozen=True)
class Taint:
    key: str
    value: str
    effect: str = "NoSchedule"

    def manifest(self) -> dict[str, str]:
        return {"key": self.key, "value": self.value, "effect": self.effect}


@dataclass(frozen=True)
class PoolShape:
    """What every node of a pool looks like, read from the NodePool."""

    pool: str
    machine_type: str
    #: Accelerator label key and value, the extended resource and its count per VM.
    accelerator: tuple[str, str] | None = None
    resource: tuple[str, int] | None = None
    tpu_topology: str | None = None
    #: VMs in one TPU slice; 1 for single-host TPUs, GPUs and plain VMs.
    slice_nodes: int = 1
    flex_start: bool = False
    spot: bool = False
    queued: bool = False
    max_run_duration_seconds: int | None = None
    config_labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    #: The GPU driver GKE installs (`default` or `latest`, the node label's value).
    gpu_driver: str | None = None
    #: A GPU pool whose nodes get no driver from GKE: they offer no `nvidia.com/gpu`.
    driverless: bool = False
    #: Its VMs come from one specific reservation.
    reserved: bool = False
    #: That reservation's name (the last part of a `projects/P/reservations/NAME` value).
    reservation: str | None = None

    @property
    def multi_host(self) -> bool:
        return self.slice_nodes > 1

    @property
    def mode(self) -> str:
        """How the pool gets its VMs, named as a TrainingRequest's provisioning mode."""
        if self.queued:
            return "QueuedProvisioning"
        if self.flex_start:
            return "FlexStart"
        if self.spot:
            return "Spot"
        return "Reservation" if self.reserved else "OnDemand"

    @property
    @behaviour("SIM-NODE-LABELS")
    def labels(self) -> dict[str, str]:
        """Labels every node of the pool carries (not the per-node ones)."""
        labels = dict(self.config_labels)
        labels[NODE_POOL_LABEL_KEY] = self.pool
        labels[INSTANCE_TYPE_LABEL_KEY] = self.machine_type
        labels["cloud.google.com/machine-family"] = self.machine_type.split("-", 1)[0]
        labels["cloud.google.com/gke-os-distribution"] = "cos"
        labels["cloud.google.com/gke-container-runtime"] = "containerd"
        labels["kubernetes.io/arch"] = "amd64"
        labels["kubernetes.io/os"] = "linux"
        # Deprecated, but GKE still sets them (and the node controller adds them anyway).
        labels["beta.kubernetes.io/arch"] = "amd64"
        labels["beta.kubernetes.io/os"] = "linux"
        if self.accelerator is not None:
            key, value = self.accelerator
            labels[key] = value
        if self.tpu_topology is not None:
            labels[TPU_TOPOLOGY_LABEL_KEY] = self.tpu_topology
        if self.gpu_driver is not None:
            labels[GPU_DRIVER_LABEL_KEY] = self.gpu_driver
        if self.flex_start:
            labels[FLEX_START_LABEL_KEY] = "true"
            labels[PROVISIONING_LABEL_KEY] = "flex-start"
        if self.spot:
            labels[SPOT_LABEL_KEY] = "true"
            labels[PROVISIONING_LABEL_KEY] = "spot"
        # No `cloud.google.com/gke-queued` label for queued nodes: GKE applies the taint
        # only ("while GKE automatically applies the taint, the label is required for
        # workloads using nodeSelectors", Cluster Toolkit's gke-node-pool module, which
        # therefore adds the label to the pool's node labels; read 2026-11-27).
        if self.max_run_duration_seconds:
            labels[MAX_RUN_DURATION_LABEL_KEY] = str(self.max_run_duration_seconds)
        return labels


_DRIVER = container_v1.GPUDriverInstallationConfig.GPUDriverVersion
#: Driver versions GKE installs itself; any other setting leaves the node without one.
_INSTALLED_DRIVERS = {_DRIVER.DEFAULT: "default", _DRIVER.LATEST: "latest"}

_EFFECTS = {
    container_v1.NodeTaint.Effect.NO_SCHEDULE: "NoSchedule",
    container_v1.NodeTaint.Effect.PREFER_NO_SCHEDULE: "PreferNoSchedule",
    container_v1.NodeTaint.Effect.NO_EXECUTE: "NoExecute",
}


def _single_host_topology(topologies: dict[str, tuple[str, ...]], machine: str, chips: int) -> str:
    for topology, machines in topologies.items():
        if machine in machines and topology_chips(topology) == chips:
            return topology
    return "1x1"


@behaviour("SIM-GPU-DRIVER")
def pool_shape(pool: container_v1.NodePool) -> PoolShape:
    """The shape of `pool`'s nodes."""
    config = pool.config
    machine_type = config.machine_type
    accelerator: tuple[str, str] | None = None
    resource: tuple[str, int] | None = None
    topology: str | None = None
    slice_nodes = 1
    taints: list[Taint] = []
    driver: str | None = None
    tpu = tpu_machine(machine_type)
    if tpu is not None:
        generation, machine = tpu
        accelerator = (TPU_ACCELERATOR_LABEL_KEY, generation.accelerator_label)
        resource = (TPU_RESOURCE, machine.chips)
        topology = pool.placement_policy.tpu_topology or _single_host_topology(
            generation.topologies, machine.name, machine.chips
        )
        slice_nodes = max(1, topology_chips(topology) // machine.chips)
        taints.append(Taint(TPU_TAINT_KEY, TPU_TAINT_VALUE))
    elif config.accelerators:
        gpu = config.accelerators[0]
        accelerator = (GPU_ACCELERATOR_LABEL_KEY, gpu.accelerator_type)
        resource = (GPU_RESOURCE, gpu.accelerator_count)
        taints.append(Taint(GPU_TAINT_KEY, GPU_TAINT_VALUE))
        driver = _INSTALLED_DRIVERS.get(gpu.gpu_driver_installation_config.gpu_driver_version)
    queued = bool(pool.queued_provisioning.enabled)
    if queued:
        taints.append(Taint(QUEUED_TAINT_KEY, "true"))
    taints.extend(
        Taint(t.key, t.value, _EFFECTS.get(t.effect, "NoSchedule")) for t in config.taints
    )
    reserved = (
        config.reservation_affinity.consume_reservation_type
        == container_v1.ReservationAffinity.Type.SPECIFIC_RESERVATION
    )
    # The raw protobuf: proto-plus would hand back a timedelta the stubs don't know.
    max_run = int(container_v1.NodeConfig.pb(config).max_run_duration.seconds)
    return PoolShape(
        pool=pool.name,
        machine_type=machine_type,
        accelerator=accelerator,
        resource=resource,
        tpu_topology=topology,
        slice_nodes=slice_nodes,
        flex_start=bool(config.flex_start),
        reserved=reserved,
        reservation=config.reservation_affinity.values[0].split("/reservations/")[-1].split("/")[0]
        if reserved and config.reservation_affinity.values
        else None,
        spot=bool(config.spot),
        queued=queued,
        max_run_duration_seconds=max_run or None,
        config_labels=dict(config.labels),
        taints=tuple(taints),
        gpu_driver=driver,
        driverless=bool(config.accelerators) and tpu is None and driver is None,
    )


def node_name(cluster: str, pool: str, index: int) -> str:
    """`gke-<cluster>-<pool>-<n>` (GKE adds an instance-group hash; the emulator counts)."""
    return f"gke-{cluster}-{pool}-{index}"


#: Ephemeral storage lives on the boot disk: GKE's figures for a node with its default
#: 100 GB boot disk (capacity, allocatable; GKE docs, concepts/plan-node-sizes). Without
#: them no pod requesting `ephemeral-storage` would ever be scheduled.
EPHEMERAL_STORAGE = ("98831908Ki", "47060071478")


def node_resources(shape: PoolShape) -> tuple[dict[str, str], dict[str, str]]:
    """(capacity, allocatable) of one node of `shape`; no GPUs without a driver."""
    cpus, gib = machine_size(shape.machine_type)
    capacity = {
        "cpu": str(cpus),
        "memory": f"{gib}Gi",
        "ephemeral-storage": EPHEMERAL_STORAGE[0],
        "pods": str(MAX_PODS),
    }
    allocatable = {
        "cpu": f"{allocatable_cpu_millis(cpus)}m",
        "memory": f"{allocatable_memory_mib(gib)}Mi",
        "ephemeral-storage": EPHEMERAL_STORAGE[1],
        "pods": str(MAX_PODS),
    }
    if shape.resource is not None and not shape.driverless:
        name, count = shape.resource
        capacity[name] = allocatable[name] = str(count)
    return capacity, allocatable


def render_node(
    shape: PoolShape,
    *,
    name: str,
    zone: str,
    project: str = "dws-sandbox",
    terminates_at: datetime | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The Node manifest for one VM of the pool in `zone`, status included.

    `terminates_at` is when a flex-start VM ends (its max run duration), written to
    `node.gke.io/machine-termination-datetime`; ignored for other pools.
    """
    labels = shape.labels
    labels[HOSTNAME_LABEL_KEY] = name
    labels[ZONE_LABEL_KEY] = zone
    labels[REGION_LABEL_KEY] = zone.rsplit("-", 1)[0]
    notes = {KWOK_ANNOTATION: "fake", **(annotations or {})}
    if shape.flex_start and terminates_at is not None:
        notes[TERMINATION_ANNOTATION] = rfc3339.seconds(terminates_at)
    capacity, allocatable = node_resources(shape)
    spec: dict[str, Any] = {"providerID": f"gce://{project}/{zone}/{name}"}
    if shape.taints:
        spec["taints"] = [t.manifest() for t in shape.taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": notes},
        "spec": spec,
        "status": {"capacity": capacity, "allocatable": allocatable},
    }


def _tolerates(toleration: dict[str, Any], taint: Taint) -> bool:
    """Kubernetes' toleration rule, on a toleration as in a pod manifest."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    if key and key != taint.key:
        return False
    if toleration.get("operator") == "Exists":
        return True
    # Equal (the default) needs a key and the taint's value.
    return bool(key) and (toleration.get("value") or "") == taint.value


def accepts(
    shape: PoolShape,
    node_selector: dict[str, str],
    tolerations: list[dict[str, Any]],
    resources: set[str],
) -> bool:
    """Would a pod with this node selector, these tolerations and requesting these
    extended resources fit a node of `shape`?

    Taints GKE tolerates on the pod's behalf are ignored: the accelerator taint when
    the pod requests the accelerator (the ExtendedResourceToleration admission
    plugin) and `cloud.google.com/gke-queued` (the ProvisioningRequest is the pod's
    ticket to a queued pool).
    """
    labels = shape.labels
    if any(labels.get(key) != value for key, value in node_selector.items()):
        return False
    provided = shape.resource[0] if shape.resource else None
    if any(r != provided for r in resources):
        return False
    for taint in shape.taints:
        if taint.key == QUEUED_TAINT_KEY or (
            provided and taint.key in (TPU_TAINT_KEY, GPU_TAINT_KEY) and provided in resources
        ):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return False
    return True
